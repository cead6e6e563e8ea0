from __future__ import annotations

import gc

from jupyter_disttrain.widgets import gc_freeze


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
