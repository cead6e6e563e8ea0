"""CommsReader alone: every line read once, the summary cached until the next line."""

from __future__ import annotations

from jupyter_disttrain.monitor.comms import CommsReader

REFUSED = (
    "host-13:941227:943077 [0] include/socket.h:390 NCCL WARN Connect to 10.38.10.112<21724> "
    "failed : Connection refused"
)
GAI = (
    "[W1128 10:03:02.095512018 socket.cpp:764] [c10d] The IPv6 network addresses of "
    "(hid-node-0-0.hid, 29500) cannot be retrieved (gai error: -3 - Temporary failure in name "
    "resolution)."
)


def test_the_summary_is_read_again_only_after_a_new_line() -> None:
    comms = CommsReader()
    empty = comms.summary()
    assert comms.summary() is empty and empty.failure == "none"
    comms.feed(REFUSED, 0)
    refused = comms.summary()
    assert refused is not empty and refused.failure != "none", refused
    assert comms.summary() is refused and comms.lines == 1


def test_an_unresolved_master_is_named_until_a_rank_starts() -> None:
    comms = CommsReader()
    assert comms.unresolved({}) is None
    comms.feed(GAI, None)
    sentence = comms.unresolved({}) or ""
    assert sentence.startswith("the master address hid-node-0-0.hid does not resolve"), sentence
