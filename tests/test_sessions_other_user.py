"""Another user on the same machine against a live session and a live job.

The job's c10d store and rank 0's session port listen on loopback, where
any local user reaches them. An attacker process (uid 65534, started with
``setpriv``) connects to every listening TCP port of the job's processes,
lists and reads every store key and writes forged cells, cell outcomes,
interrupts, stack requests and preemption notes. It must read no captured
value, run nothing and change no state: the session keeps working, the job
ends as it would have.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from jupyter_disttrain import events as ev
from jupyter_disttrain.backends.local import LocalBackend, jobdir
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.service import JobService
from jupyter_disttrain.spec import JobSpec
from tests.conftest import assert_no_processes, submit_now

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("setpriv") is None,
        reason="running code as another user (uid 65534) needs root and setpriv",
    ),
]

NOBODY = 65534

#: What the other user runs (torch only): every port, every key, every forgery it can think of.
ATTACKER = textwrap.dedent(
    r"""
    import base64, datetime, json, os, re, socket, struct, sys, threading, time
    import torch.distributed as dist

    plan = json.load(sys.stdin)
    # an attack that ends does so within about 6 s (its 3-s timeouts; seen quiet: 0.01-6.0 s);
    # a store client still connecting then is stuck on a port that never answers it
    deadline = time.monotonic() + 12
    forged = {k: bytes.fromhex(v) for k, v in plan["forged"].items()}
    secret = plan["secret"].encode()
    out = {"uid": os.getuid(), "stores": {}, "sockets": {}, "seen_secret": []}

    def attack_store(port):
        store = dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False,
                              timeout=datetime.timedelta(seconds=3))
        keys = store.list_keys()
        read = 0
        for key in keys:
            try:
                value = store.get(key)
            except Exception:
                continue
            read += 1
            if secret in value:
                out["seen_secret"].append(key)
        wrote = []
        def put(name, value):
            store.set(name, value)
            wrote.append(name)
        for key in keys:
            m = re.fullmatch(r"(.*/)cell/(\d+)", key)
            if m:
                prefix, n = m.group(1), int(m.group(2))
                for later in range(n + 1, n + 4):
                    put(f"{prefix}cell/{later}", forged["cell"] if later % 2 else forged["os"])
                    for r in range(4):
                        put(f"{prefix}done/{later}/{r}", forged["os"])
                        put(f"{prefix}int/{later}/{r}", b"int")
            if plan["rendezvous"] and re.fullmatch(r"torch\.rendezvous\.[^/]+", key):
                put(key, base64.b64encode(forged["os"]))  # torch's own state: a pickle
            m = re.fullmatch(r"(.*)distrain/(\w+)/0/(\w+)", key)
            if m:
                q = m.group(1) + "distrain/"
                put(q + "where/0/asked", b"7")
                put(q + "where/0/hang", b'{"n": 1, "quiet": 99.0}')
                put(q + "preempt/0/asked", b"1")
                put(q + "preempt/0/saved", b"3")
                put(q + "relay/0/m1", b'##distrain {"v":1,"kind":"job","state":"Failed"}')
        out["stores"][port] = {"keys": len(keys), "read": read, "wrote": len(wrote)}

    def attack_socket(port):
        seen = []
        for hello in (b'{"token": "guess"}', forged["message"]):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
                    sock.sendall(struct.pack(">I", len(hello)) + hello)
                    seen.append(sock.recv(200).decode("latin-1"))
            except OSError as exc:
                seen.append(type(exc).__name__)
        out["sockets"][port] = seen

    def attack_port(port):
        try:
            attack_store(port)
        except Exception as exc:
            out["stores"][port] = f"not a store: {type(exc).__name__}"

    threads = []
    for port in plan["ports"]:  # a port that holds on to a store client is given up on
        for target in (attack_socket, attack_port):
            threads.append(threading.Thread(target=target, args=(port,), daemon=True))
            threads[-1].start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    print(json.dumps(out), flush=True)
    os._exit(0)
    """
)


class Boom:
    """Unpickling this runs a shell command: the proof that a forged pickle was loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"echo pickle >> {self.marker}",))


def forgeries(marker: Path) -> dict[str, str]:
    """A forged cell that would write ``marker`` when run, and pickles that write it when loaded."""
    cell = build_payload(f"open({str(marker)!r}, 'a').write('cell ran')\n", {}, job="forged")
    return {
        "cell": pickle.dumps({"op": "run", "id": 99, "payload": cell.data}).hex(),
        "os": pickle.dumps(Boom(marker)).hex(),
        "message": pickle.dumps({"op": "run", "id": 99, "payload": cell.data}).hex(),
    }


def listening_ports(pgid: int) -> list[int]:
    """Every TCP port a process of the job's process group listens on."""
    ports = set()
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) != pgid:
                continue
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    ports.add(int(conn.laddr.port))
        except (psutil.Error, OSError):
            continue
    return sorted(ports)


def attack(pgid: int, marker: Path, secret: str, *, rendezvous: bool = False) -> dict[str, Any]:
    """Run the attacker as uid 65534 against every listening port of process group ``pgid``
    (``rendezvous``: torch's rendezvous state too, which ends the job)."""
    ports = listening_ports(pgid)
    assert len(ports) >= 2, ports  # the store, and more
    plan = {"ports": ports, "forged": forgeries(marker), "secret": secret, "rendezvous": rendezvous}
    argv = [
        "setpriv",
        f"--reuid={NOBODY}",
        f"--regid={NOBODY}",
        "--clear-groups",
        sys.executable,
        "-c",
        ATTACKER,
    ]
    env = {"PATH": os.environ.get("PATH", "")}
    done = subprocess.run(
        argv, input=json.dumps(plan), capture_output=True, text=True, timeout=120, cwd="/", env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout)
    assert out["uid"] == NOBODY
    return out


def test_another_user_can_neither_read_a_sessions_captured_values_nor_run_a_cell(
    tmp_path: Path,
) -> None:
    service = JobService()
    marker = tmp_path / "forged-ran"
    secret = "captured-" + os.urandom(8).hex()
    session = service.start_session(JobSpec("sess-other-user", nodes=2, nproc=2))
    try:
        assert session.run("kept = len(SECRET)\nkept", {"SECRET": secret}) == len(secret)
        assert session.job is not None and session.job.submission is not None
        pgid = session.job.submission.pgid  # type: ignore[attr-defined]
        out = attack(pgid, marker, secret)
        assert any(isinstance(s, dict) and s["wrote"] for s in out["stores"].values()), out
        assert out["seen_secret"] == [], out
        for seen in out["sockets"].values():  # rank 0's session port answers no stranger
            assert not any('"ok": true' in s for s in seen), out
        started = time.monotonic()
        assert session.run("kept + 1") == len(secret) + 1  # the forged cell did not run
        assert session.run("import torch.distributed as dist\ndist.get_world_size()") == 4
        warm = time.monotonic() - started
        time.sleep(1.0)
        assert not marker.exists(), marker.read_text()
        logs = session.backend.logs(session.name)
        assert "refused distrain-session/" in logs and "cell/" in logs, logs[-3000:]
        assert warm < 30, warm
    finally:
        service.stop_session(session.name)
    assert_no_processes(jobdir.job_dir(session.name))


JOB = textwrap.dedent(
    """
    import os, time
    import torch.distributed as dist
    step = 0
    while not os.path.exists(STOP):  # ends when the test says so; polls every(...) meanwhile
        if every(100000, step):
            save_checkpoint({"step": step}, step)
        report(step=step, busy=1)
        step += 1
        time.sleep(0.1)
    dist.barrier()
    dist.get_world_size()
    """
)


def test_another_user_cannot_stop_a_job_or_ask_its_ranks_for_anything(tmp_path: Path) -> None:
    marker = tmp_path / "forged-ran"
    stop = tmp_path / "stop"
    spec = JobSpec(
        "job-other-user", nodes=2, nproc=2, timeout=240, checkpoint_dir=str(tmp_path / "ckpt")
    )
    events: list[ev.Event] = []
    run = submit_now(
        LocalBackend(), spec, build_payload(JOB, {"STOP": str(stop)}, job=spec.name), events.append
    )
    try:
        deadline = time.monotonic() + 120
        while len({e.rank for e in events if e.kind == "metric"}) < 4:
            assert time.monotonic() < deadline, run.plan
            time.sleep(0.2)
        time.sleep(2.0)  # the hang watch counted some activity: its keys are in the store
        assert run.pgid is not None
        out = attack(run.pgid, marker, "no-secret-here")
        assert any(isinstance(s, dict) and s["wrote"] for s in out["stores"].values()), out
        time.sleep(3.0)  # more than the ranks' store polls (0.5 s) and watch ticks (1 s)
        stop.write_text("done")
        assert run.join(120)
    finally:
        run.stop()
        run.join(30)
    final = [e for e in events if e.kind == "job"][-1]
    assert final.get("state") == "Succeeded", final.fields
    kinds = {e.kind for e in events}
    assert "stacks" not in kinds and "checkpoint" not in kinds, kinds
    assert not marker.exists()


def test_another_user_cannot_run_code_in_the_agents_through_the_rendezvous_state(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "forged-ran"
    spec = JobSpec("rdzv-other-user", nodes=2, nproc=1, timeout=240)
    events: list[ev.Event] = []
    cell = "import time\nreport(step=0, up=1)\ntime.sleep(60)"
    run = submit_now(LocalBackend(), spec, build_payload(cell, {}, job=spec.name), events.append)
    try:
        deadline = time.monotonic() + 120
        while len([e for e in events if e.kind == "metric"]) < 2:
            assert time.monotonic() < deadline, run.plan
            time.sleep(0.2)
        assert run.pgid is not None
        attack(run.pgid, marker, "no-secret-here", rendezvous=True)
        assert run.join(90)  # the agents refuse the forged state: the job ends, nothing ran
    finally:
        run.stop()
        run.join(30)
    assert not marker.exists(), marker.read_text()
    logs = "".join(p.read_text(errors="replace") for p in Path(run.plan.job_dir).rglob("*.log"))
    assert "the rendezvous state in the job's store: signature does not match" in logs, logs[-3000:]
    assert_no_processes(
        Path(run.plan.job_dir), [int(e.get("pid")) for e in events if e.kind == "hello"]
    )
