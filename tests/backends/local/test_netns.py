"""``--network isolated``: local nodes in their own network namespaces, and nothing left after.

Real namespaces, veth pairs and a bridge made with ``ip`` (these machines and
CI run as root), real torchrun agents and gloo across the bridge.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from jupyter_disttrain.backends.base import BackendError
from jupyter_disttrain.backends.local import LocalBackend, LocalRun, jobdir, netns
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.spec import JobSpec
from tests.backends.local.test_backend import Collector, job_logs
from tests.conftest import assert_no_processes
from tests.kernel_harness import Kernel
from tests.test_kernel import wait_for_hello
from tests.test_sessions_kernel import kernel  # noqa: F401 (the fixture: a kernel with the extension)

ISOLATED = (("network", "isolated"),)
#: Each rank's own view: its address towards the master, its host name, MASTER_ADDR.
VIEW = textwrap.dedent(
    """
    import os, socket, torch, torch.distributed as dist
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.connect((os.environ["MASTER_ADDR"], 9))  # no packet: picks the source address
    print("VIEW", dist.get_rank(), probe.getsockname()[0], socket.gethostname(),
          os.environ["MASTER_ADDR"], sorted(n for _, n in socket.if_nameindex()))
    total = torch.ones(1)
    dist.all_reduce(total)
    print("SUM", dist.get_rank(), int(total.item()))
    """
)
SLEEPER = "import time\nreport(step=0, up=1.0)\ntime.sleep(300)"

needs_root = pytest.mark.skipif(netns.unavailable() is not None, reason="needs root and ip")


def run_isolated(
    name: str, cell: str, nodes: int, nproc: int, env: tuple[tuple[str, str], ...] = ()
) -> tuple[Collector, LocalRun, netns.NodeNetwork]:
    """Submit ``cell`` as an isolated job (not waiting for it); its network."""
    spec = JobSpec(name=name, nodes=nodes, nproc=nproc, options=ISOLATED, env=env)
    backend = LocalBackend()
    plan = backend.plan(spec, build_payload(cell, {}, job=name))
    assert plan.network is not None and plan.mode == "exec", str(plan)
    sink = Collector()
    return sink, backend.submit(plan, sink), plan.network


def host_links() -> str:
    """The host namespace's links and the namespace list (a job's names must not be in it)."""
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True)
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return links.stdout + names.stdout


def assert_nothing_left(run: LocalRun, net: netns.NodeNetwork, pids: list[int]) -> None:
    """No namespace, hosts file, lease, link or process of the job remains."""
    assert netns.leftovers(net.run_id) == [], job_logs(run)
    assert net.run_id not in host_links()
    assert net.run_id[:9] not in host_links()  # the veth ends are named by the run id too
    assert_no_processes(Path(run.plan.job_dir), pids, wait=15)


def views(run: LocalRun) -> dict[int, tuple[str, str, str, str]]:
    """Rank -> (address, host name, MASTER_ADDR, interfaces) as the rank printed them."""
    found = {}
    for path in jobdir.rank_logs(Path(run.plan.job_dir)).values():
        for line in path.read_text(errors="replace").splitlines():
            match = re.match(r"VIEW (\d+) (\S+) (\S+) (\S+) (.*)$", line)
            if match:
                found[int(match[1])] = (match[2], match[3], match[4], match[5])
    return found


@needs_root
@pytest.mark.slow
def test_isolated_ranks_have_their_node_address_and_name() -> None:
    """2 nodes x 2: each node's ranks see its own address and host name; gloo on eth0 works."""
    name = "iso-view"
    env = (("GLOO_SOCKET_IFNAME", "eth0"),)
    sink, run, net = run_isolated(name, VIEW, nodes=2, nproc=2, env=env)
    assert run.join(300), f"job did not finish\n{job_logs(run)}"
    final = sink.final()
    assert final.get("state") == "Succeeded", f"{final.fields}\n{job_logs(run)}"
    seen = views(run)
    assert sorted(seen) == [0, 1, 2, 3], job_logs(run)
    for rank, (address, host, master, interfaces) in seen.items():
        node = rank // 2
        assert address == net.address(node) == f"10.245.{address.split('.')[2]}.{node + 1}"
        assert host == f"{name}-node-{node}"
        assert master == net.address(0)
        assert interfaces == "['eth0', 'lo']"
    assert net.address(0) != net.address(1)
    sums = re.findall(r"^SUM \d (\d+)$", job_logs(run), re.M)
    assert sums == ["4"] * 4, job_logs(run)
    assert_nothing_left(run, net, sink.pids())


@needs_root
@pytest.mark.slow
def test_a_wrong_interface_is_named_and_the_failed_job_leaves_nothing() -> None:
    """GLOO_SOCKET_IFNAME=eth1 where a node has eth0: the product's sentence, node by name."""
    name = "iso-wrong-if"
    env = (("GLOO_SOCKET_IFNAME", "eth1"),)
    sink, run, net = run_isolated(name, VIEW, nodes=2, nproc=1, env=env)
    assert run.join(300), f"job did not finish\n{job_logs(run)}"
    final = sink.final()
    assert final.get("state") == "Failed", f"{final.fields}\n{job_logs(run)}"
    message = str(final.get("message"))
    assert re.search(
        rf"GLOO_SOCKET_IFNAME=eth1: no such interface eth1 on {name}-node-[01] \(it has eth0, "
        r"lo\); set GLOO_SOCKET_IFNAME to the interface the nodes share",
        message,
    ), f"{message}\n{job_logs(run)}"
    assert_nothing_left(run, net, sink.pids())


@needs_root
@pytest.mark.slow
def test_a_stopped_isolated_job_leaves_nothing() -> None:
    name = "iso-stop"
    sink, run, net = run_isolated(name, SLEEPER, nodes=2, nproc=1)
    deadline = time.monotonic() + 240
    while len(sink.kinds("hello")) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(sink.kinds("hello")) == 2, job_logs(run)
    assert sorted(os.listdir(netns.NETNS_DIR)) >= [net.namespace(0), net.namespace(1)]
    run.stop()
    assert run.join(120), f"job did not stop\n{job_logs(run)}"
    assert sink.final().get("state") == "Stopped", job_logs(run)
    assert_nothing_left(run, net, sink.pids())


@needs_root
@pytest.mark.slow
def test_a_killed_kernel_leaves_no_network(kernel: Kernel) -> None:  # noqa: F811
    """The kernel dies by SIGKILL while its isolated job runs: the reaper removes it all."""
    name = "iso-kernel-kill"
    kernel.execute(f"%%distrain --nodes 2 --nproc 1 --network isolated --name {name}\n{SLEEPER}")
    pids = wait_for_hello(name, 2, timeout=240)
    state = jobdir.read_state(jobdir.job_dir(name)) or {}
    run_id = str((state.get("network") or {}).get("run_id"))
    assert len(netns.leftovers(run_id)) >= 5, state  # two nodes' namespaces and hosts, bridge
    assert kernel.km.provisioner is not None and kernel.km.provisioner.pid is not None
    os.kill(kernel.km.provisioner.pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while netns.leftovers(run_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert netns.leftovers(run_id) == []
    assert run_id not in host_links()
    assert_no_processes(jobdir.job_dir(name), pids, wait=15)


def dead_pid() -> int:
    """The id of a process that has ended."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@needs_root
def test_the_sweep_removes_what_a_gone_owner_left_and_namespaces_no_lease_names() -> None:
    gone = netns.reserve(os.urandom(6).hex(), ("sweep-node-0", "sweep-node-1"), dead_pid())
    netns.claim(gone)
    netns.setup(gone)
    orphan = f"{netns.PREFIX}{os.urandom(6).hex()}-0"
    subprocess.run(["ip", "netns", "add", orphan], check=True)
    alive = netns.reserve(os.urandom(6).hex(), ("sweep-node-0",), os.getpid())
    netns.claim(alive)
    try:
        assert len(netns.leftovers(gone.run_id)) == 6  # 3 namespaces, 2 hosts folders, lease
        swept = netns.sweep()  # (a job of another test process may sweep them first)
        assert netns.leftovers(gone.run_id) == [], swept
        assert orphan not in os.listdir(netns.NETNS_DIR)
        assert alive.run_id not in swept  # its owner runs: its network stays
        assert netns.leftovers(alive.run_id) != []
    finally:
        netns.teardown(alive)
        subprocess.run(["ip", "netns", "del", orphan], capture_output=True)
    assert netns.leftovers(alive.run_id) == []


def test_unknown_network_and_unsupported_framework_name_the_fix() -> None:
    backend = LocalBackend()
    payload = build_payload("pass", {}, job="iso-bad")
    spec = JobSpec(name="iso-bad", options=(("network", "bridge"),))
    with pytest.raises(BackendError, match=r"--network bridge: .* knows 'isolated' .*"):
        backend.plan(spec, payload)
    tf = JobSpec(name="iso-bad", framework="tensorflow", options=ISOLATED)
    with pytest.raises(BackendError, match=r"one process per rank instead: leave out --network"):
        backend.plan(tf, payload)


NOT_ROOT = textwrap.dedent(
    """
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_disttrain")
    shell.run_cell("%%distrain --nodes 2 --network isolated --dry-run\\nprint(1)")
    """
)


@pytest.mark.skipif(os.geteuid() != 0, reason="switches to an unprivileged user")
def test_not_root_is_a_usage_error_naming_the_fix() -> None:
    """The magic and the CLI run as user 65534 (setpriv): root is named, and the fix."""
    # in /tmp itself: the test process's temporary folder is its own (0700)
    with tempfile.TemporaryDirectory(prefix="distrain-nonroot-", dir="/tmp") as top:
        os.chmod(top, 0o777)  # the unprivileged user's job home and IPython folder
        env = {**os.environ, "DISTRAIN_HOME": top, "HOME": top, "IPYTHONDIR": f"{top}/ipython"}
        setpriv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        magic = subprocess.run(
            [*setpriv, sys.executable, "-c", NOT_ROOT],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        said = magic.stdout + magic.stderr
        assert "UsageError: --network isolated needs root" in said, said
        assert "run as user id 65534" in said or "runs as user id 65534" in said, said
        assert "leave out --network isolated to run the nodes on loopback" in said, said
        script = Path(top) / "train.py"
        script.write_text("print(1)\n")
        disttrain = str(Path(sys.executable).with_name("disttrain"))
        cli = subprocess.run(
            [*setpriv, disttrain, "run", "--network", "isolated", "--dry-run", str(script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert cli.returncode != 0, cli.stdout + cli.stderr
        assert "--network isolated needs root" in cli.stderr, cli.stdout + cli.stderr


@needs_root
@pytest.mark.slow
def test_a_session_reaches_rank_0_inside_its_nodes_namespace() -> None:
    """A warm session on isolated nodes: the notebook's cells reach rank 0 on its own loopback."""
    from jupyter_disttrain.service import JobService

    service = JobService()
    spec = JobSpec("iso-session", nodes=2, nproc=1, options=ISOLATED)
    session = service.start_session(spec)
    state = jobdir.read_state(jobdir.job_dir(session.name)) or {}
    run_id = str((state.get("network") or {}).get("run_id"))
    try:
        cell = textwrap.dedent(
            """
            import socket, torch.distributed as dist
            out = [None, None]
            dist.all_gather_object(out, (dist.get_rank(), socket.gethostname()))
            out
            """
        )
        ranks = session.run(cell)
        assert ranks == [(0, "iso-session-node-0"), (1, "iso-session-node-1")], ranks
    finally:
        assert service.stop_session(session.name) in ("Succeeded", "Stopped")
    deadline = time.monotonic() + 60
    while netns.leftovers(run_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert netns.leftovers(run_id) == []
