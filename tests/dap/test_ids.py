"""Rank thread, frame and variables ids: each decodes to what it names, none to the kernel's."""

from __future__ import annotations

import pytest

from jupyter_disttrain.dap import ids
from jupyter_disttrain.dap.ids import RankFrame


def test_each_id_round_trips_and_stays_in_its_range() -> None:
    for slot, rank, frame, stop in [(0, 0, 0, 0), (3, 7, 12, 9), (255, 65535, 1023, 255)]:
        thread = ids.thread_id(slot, rank)
        assert ids.of_thread(thread) == RankFrame(slot, rank)
        number = ids.frame_id(slot, rank, frame, stop)
        assert ids.of_frame(number) == RankFrame(slot, rank, frame, stop=stop)
        for scope in ids.SCOPES:
            number = ids.variables_id(slot, rank, frame, scope, stop)
            assert ids.of_variables(number) == RankFrame(slot, rank, frame, scope, stop)
            assert number < 2**53 and ids.of_frame(number) is None and ids.of_thread(number) is None
        assert ids.of_frame(thread) is None and ids.of_variables(thread) is None


def test_the_kernels_own_small_ids_are_not_ranks() -> None:
    for number in (1, 2, 1000, 2**29, "7", None):
        assert ids.of_thread(number) is None
        assert ids.of_frame(number) is None
        assert ids.of_variables(number) is None


def test_out_of_range_ranks_and_frames_are_refused() -> None:
    with pytest.raises(ValueError, match="out of range"):
        ids.thread_id(0, ids.MAX_RANKS)
    with pytest.raises(ValueError, match="out of range"):
        ids.frame_id(0, 0, ids.MAX_FRAMES)


def test_each_stop_gives_a_frame_new_ids() -> None:
    assert ids.frame_id(1, 2, 3, 4) != ids.frame_id(1, 2, 3, 5)
    assert ids.frame_id(1, 2, 3, ids.MAX_STOPS + 4) == ids.frame_id(1, 2, 3, 4)
    assert ids.variables_id(1, 2, 3, "locals", 4) != ids.variables_id(1, 2, 3, "locals", 5)
