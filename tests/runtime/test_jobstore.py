"""The signed view of the job's c10d store, over a real torch TCPStore on loopback."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from jupyter_disttrain.runtime import jobkey, jobstore
from jupyter_disttrain.runtime.jobstore import SignedStore

KEY = bytes(range(32))
OTHER = bytes(range(1, 33))


pytestmark = pytest.mark.usefixtures("fresh_refusals")


def test_signed_values_round_trip_and_are_bound_to_their_name(tcp_store: Any) -> None:
    store = SignedStore(tcp_store, KEY, "scope/")
    store.set("cell/1", b"print(1)")
    store.set("note", "text")
    assert store.get("cell/1") == b"print(1)" and store.get("note") == b"text"
    tcp_store.set("cell/2", tcp_store.get("cell/1"))  # an old value replayed under a new name
    with pytest.raises(jobkey.BadSignature, match="another key than cell/2"):
        store.get("cell/2")
    with pytest.raises(jobkey.BadSignature):  # the same name in another scope (a restart)
        SignedStore(tcp_store, KEY, "other/").get("cell/1")
    with pytest.raises(jobkey.BadSignature, match="does not match"):
        SignedStore(tcp_store, OTHER, "scope/").get("cell/1")  # another job's key
    tcp_store.set("cell/3", b"\x00" * 40 + b"forged")
    with pytest.raises(jobkey.BadSignature):
        store.get("cell/3")


def test_sealed_values_are_unreadable_in_the_store_and_checked(tcp_store: Any) -> None:
    store = SignedStore(tcp_store, KEY, "s/")
    secret = b"captured-secret-4711" * 3
    store.set_sealed("cell/1", secret)
    assert secret not in tcp_store.get("cell/1") and b"captured" not in tcp_store.get("cell/1")
    assert store.get_sealed("cell/1") == secret
    tcp_store.set("cell/2", tcp_store.get("cell/1"))
    with pytest.raises(jobkey.BadSignature, match="another key than cell/2"):
        store.get_sealed("cell/2")
    store.set("cell/4", secret)  # signed is not sealed
    with pytest.raises(jobkey.BadSignature):
        store.get_sealed("cell/4")


def test_get_if_is_none_for_missing_and_forged_values_and_says_so_once(
    tcp_store: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    store = SignedStore(tcp_store, KEY)
    assert store.get_if("absent") is None
    tcp_store.set("asked", b"7")
    assert store.get_if("asked") is None and store.get_if("asked") is None
    err = capsys.readouterr().err
    assert err.count("refused asked from the job's store") == 1
    assert "without the job key" in err
    store.set("asked", "7")
    assert store.get_if("asked") == b"7"


def test_wait_refuses_a_forged_value_and_takes_the_real_one_that_overwrites_it(
    tcp_store: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    store = SignedStore(tcp_store, KEY, "p/")
    tcp_store.set("cell/5", b"forged" * 10)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(store.wait_sealed("cell/5")))
    reader.start()
    time.sleep(0.3)
    assert not got and reader.is_alive()
    store.set_sealed("cell/5", b"the real cell")
    reader.join(5.0)
    assert got == [b"the real cell"]
    assert "refused p/cell/5 from the job's store" in capsys.readouterr().err


def test_counters_pass_through_unsigned(tcp_store: Any) -> None:
    store = SignedStore(tcp_store, KEY)
    assert store.add("seq", 2) == 2 and store.add("seq", 0) == 2
    assert store.check(["seq"]) and store.delete_key("seq") and not store.check(["seq"])


def test_no_key_file_means_no_signed_store_and_an_unreadable_one_is_said(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(jobkey.ENV_KEY_FILE, raising=False)
    assert jobstore.job_key() is None
    short = tmp_path / "key"
    short.write_bytes(b"short")
    monkeypatch.setenv(jobkey.ENV_KEY_FILE, str(short))
    assert jobstore.job_key() is None
    assert "refused the job key" in capsys.readouterr().err
    good = tmp_path / "good"
    good.write_bytes(KEY)
    monkeypatch.setenv(jobkey.ENV_KEY_FILE, str(good))
    assert jobstore.job_key() == KEY
