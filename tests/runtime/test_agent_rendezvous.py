"""Local agents' rendezvous: short polls, no skew, and torch's record names without inspect."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_fast_rendezvous_polls_keep_torchs_names_and_shorten_the_waits() -> None:
    # In a fresh interpreter: the patch changes torch's module for the rest of the process.
    code = textwrap.dedent(
        """
        import time
        from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr
        original = dr.get_method_name

        class Handler:
            def _record(self, name_of):
                return name_of()
            def next_rendezvous(self, name_of):
                return self._record(name_of)

        before = Handler().next_rendezvous(original)
        from jupyter_disttrain.runtime.agent import RDZV_POLL_SECONDS, fast_rendezvous_polls
        fast_rendezvous_polls()
        fast_rendezvous_polls()  # idempotent
        after = Handler().next_rendezvous(dr.get_method_name)
        assert before == after == "next_rendezvous", (before, after)
        holder = dr._BackendRendezvousStateHolder(None, None)
        assert holder._cache_duration == RDZV_POLL_SECONDS
        t0 = time.perf_counter()
        dr._delay(seconds=1)          # a poll while waiting for the other nodes
        dr._delay(seconds=(0, 0.3))   # the first round's random skew
        assert time.perf_counter() - t0 < 0.5
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr
