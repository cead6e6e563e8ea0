"""Checkpoint formats: the built-ins, one a framework registers, and records of unknown layouts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jupyter_disttrain.runtime.checkpoint import format as fmt


@pytest.fixture
def toy() -> Iterator[fmt.CheckpointFormat]:
    """A framework's own folder format, registered for the test only."""
    yield fmt.register_format(fmt.CheckpointFormat("toytree", "toyt", folder=True))
    fmt.unregister_format("toytree")


def test_builtin_formats_name_their_data() -> None:
    assert fmt.payload_name(40, "1a2b3c", fmt.FULL) == "step-000000040-1a2b3c.pt"
    assert fmt.payload_name(40, "1a2b3c", fmt.SHARDED).endswith(".dcp")
    assert fmt.is_folder({"layout": fmt.SHARDED}) and not fmt.is_folder({"layout": fmt.FULL})
    assert fmt.is_payload_name("step-000000040-1a2b3c.keras")


def test_a_registered_format_names_and_recognises_its_data(toy: fmt.CheckpointFormat) -> None:
    assert fmt.format_of("toytree") is toy and toy.kind == toy.layout == "toytree"
    assert fmt.payload_name(7, "abcdef", "toytree") == "step-000000007-abcdef.toyt"
    assert fmt.is_payload_name("step-000000007-abcdef.toyt") and fmt.is_folder(
        {"layout": "toytree"}
    )
    fmt.register_format(toy)  # twice is harmless
    with pytest.raises(ValueError, match="suffix 'toyt' of layout 'other' is layout 'toytree'"):
        fmt.register_format(fmt.CheckpointFormat("other", "toyt"))
    with pytest.raises(ValueError, match=r"checkpoint suffix 'a\.b': use 1-16 of a-z and 0-9"):
        fmt.register_format(fmt.CheckpointFormat("dotted", "a.b"))


def test_an_unknown_layout_is_listed_by_its_record_but_not_written() -> None:
    assert not fmt.is_payload_name("step-000000007-abcdef.toyt")
    assert fmt.is_folder({"layout": "toytree", "files": {"a": [1, "00"]}})
    assert not fmt.is_folder({"layout": "toytree"})
    with pytest.raises(fmt.CheckpointError, match="layout 'toytree' has no registered format"):
        fmt.payload_name(7, "abcdef", "toytree")
