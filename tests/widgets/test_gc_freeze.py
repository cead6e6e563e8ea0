from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from jupyter_disttrain.widgets import gc_freeze


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """Nothing frozen during the test (a kernel that never froze its heap); what the test
    process froze after collecting (tests/conftest.py) is frozen again after it."""
    gc.unfreeze()
    yield
    gc.freeze()


@pytest.mark.usefixtures("unfrozen")
def test_freeze_is_held_while_any_dashboard_lives() -> None:
    assert gc_freeze.holders() == 0 and gc.get_freeze_count() == 0
    before = object()
    gc_freeze.hold()
    gc_freeze.hold()
    assert gc.get_freeze_count() > 0 and gc_freeze.holders() == 2
    gc_freeze.release()
    assert gc.get_freeze_count() > 0
    gc_freeze.release()
    assert gc.get_freeze_count() == 0 and gc_freeze.holders() == 0
    gc_freeze.release()  # an extra release is harmless
    assert gc_freeze.holders() == 0
    del before


@pytest.mark.usefixtures("unfrozen")
def test_a_heap_the_user_froze_stays_frozen_after_the_last_dashboard() -> None:
    gc.freeze()  # the user's own, before any dashboard
    assert gc.get_freeze_count() > 0
    gc_freeze.hold()
    gc_freeze.release()
    # still frozen (an unfreeze empties the permanent generation; frozen objects that
    # die leave it, so its count only says frozen or not)
    assert gc.get_freeze_count() > 0 and gc_freeze.holders() == 0
    gc.unfreeze()  # the user's own unfreeze: the next dashboard's end unfreezes again
    gc_freeze.hold()
    gc_freeze.release()
    assert gc.get_freeze_count() == 0
