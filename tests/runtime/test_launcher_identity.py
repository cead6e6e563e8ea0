"""Who may share a launcher: the identity and what is said when it differs."""

from __future__ import annotations

from jupyter_disttrain.runtime.launcher_identity import difference, identity


def test_a_launcher_of_another_environment_is_named_with_what_differs() -> None:
    ours = identity({"TORCH_HOME": "/a", "OMP_PLACES": "cores", "HOME": "/h"})
    theirs = identity({"TORCH_HOME": "/b", "LD_PRELOAD": "x.so"})
    said = difference(ours, theirs)
    assert "started with LD_PRELOAD set (unset here)" in said, said
    assert "started without OMP_PLACES (set here)" in said, said
    assert "other values of TORCH_HOME" in said, said
    assert "/a" not in said and "/b" not in said and "HOME" not in said.replace("TORCH_HOME", "")
    assert difference(ours, ours) == ""
    old_launcher = {**ours, "env": "0" * 64}  # an identity of before the names were kept
    assert "does not say which variables" in difference(ours, old_launcher)
