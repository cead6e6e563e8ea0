"""The local plan's environment: the interface defaults and a user's ``--env``."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from jupyter_disttrain.backends.base import BackendError
from jupyter_disttrain.backends.local import build_plan, plan
from jupyter_disttrain.backends.local.netns import NodeNetwork
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.spec import JobSpec
from tests.ports import job_ports


def test_loopback_interfaces_are_defaults_a_users_env_overrides(tmp_path: Path) -> None:
    payload = build_payload("pass", {}, job="plan-env")
    plain = build_plan(JobSpec(name="plan-env", nodes=2), payload, tmp_path, mode="exec", port=1)
    for node in plain.nodes:
        assert node.env["GLOO_SOCKET_IFNAME"] == node.env["NCCL_SOCKET_IFNAME"] == "lo"
    env = (("GLOO_SOCKET_IFNAME", "eth0"), ("NCCL_SOCKET_IFNAME", "ib0"))
    spec = JobSpec(name="plan-env", nodes=2, env=env)
    mine = build_plan(spec, payload, tmp_path, mode="exec", port=1)
    for node in mine.nodes:
        assert node.env["GLOO_SOCKET_IFNAME"] == "eth0"
        assert node.env["NCCL_SOCKET_IFNAME"] == "ib0"
    assert "GLOO_SOCKET_IFNAME=eth0" in str(mine) and "GLOO_SOCKET_IFNAME=lo" not in str(mine)


def test_an_isolated_plan_gives_each_node_its_address_and_namespace(tmp_path: Path) -> None:
    payload = build_payload("pass", {}, job="plan-iso")
    net = NodeNetwork("0123456789ab", "10.245.7.0/24", ("plan-iso-node-0", "plan-iso-node-1"))
    spec = JobSpec(name="plan-iso", nodes=2, nproc=2)
    plan = build_plan(spec, payload, tmp_path, mode="exec", port=2345, network=net)
    assert plan.rdzv_endpoint == "10.245.7.1:2345"
    for node in plan.nodes:
        assert "GLOO_SOCKET_IFNAME" not in node.env  # a node resolves its name, as a pod does
        assert node.env["DISTRAIN_BIND_ADDR"] == f"10.245.7.{node.node + 1}"
        assert ("--local-addr", f"10.245.7.{node.node + 1}") == node.argv[
            node.argv.index("--local-addr") : node.argv.index("--local-addr") + 2
        ]
        prefix = plan.prefix(node.node)
        assert prefix[:4] == ("ip", "netns", "exec", f"distrain-0123456789ab-{node.node}")
        assert prefix[-1] == f"plan-iso-node-{node.node}"
    text = str(plan)
    assert "network: isolated, 10.245.7.0/24 on bridge b0123456789ab" in text
    assert "node 1: ip netns exec distrain-0123456789ab-1 " in text
    assert net.hosts_file().splitlines()[-1] == "10.245.7.2\tplan-iso-node-1"


def test_a_jobs_ports_are_free_distinct_and_below_the_ephemeral_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A port an outgoing connection can take (the ephemeral range) is given to a job only
    when nothing below that range is left: a TensorFlow worker binds its port ~10 s later."""
    monkeypatch.delenv(plan.ENV_PORTS, raising=False)
    low, _ = plan.ephemeral_range()
    ports = plan.free_ports(8)
    assert len(set(ports)) == 8 and all(plan.PORT_FLOOR <= p < low for p in ports), ports
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))  # free: nothing holds it


def test_without_room_below_the_ephemeral_range_the_kernel_chooses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(plan.ENV_PORTS, raising=False)
    squeezed = tmp_path / "ip_local_port_range"
    squeezed.write_text(f"{plan.PORT_FLOOR + 10}\t60999\n")
    monkeypatch.setattr(plan, "EPHEMERAL_RANGE_FILE", squeezed)
    ports = plan.free_ports(2)
    assert len(set(ports)) == 2 and all(p >= plan.PORT_FLOOR + 10 for p in ports), ports


def test_distrain_ports_gives_a_jobs_ports_and_a_full_range_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``DISTRAIN_PORTS=LOW-HIGH``: every port of a job's plan comes from that range; when
    fewer are free than the job needs, planning says so, and no other port is tried."""
    ours = job_ports()[:200]  # this test process's own ports: no other process binds them
    low, high = ours.start, ours.stop - 1
    monkeypatch.setenv(plan.ENV_PORTS, f"{low}-{high}")
    payload = build_payload("pass", {}, job="plan-ports")
    spec = JobSpec(name="plan-ports", nodes=2, framework="tensorflow")
    planned = build_plan(spec, payload, tmp_path, mode="exec", port=plan.free_port())
    ports = [int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", str(planned))]
    assert len(set(ports)) == 2 and all(low <= p <= high for p in ports), str(planned)

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", low))
        monkeypatch.setenv(plan.ENV_PORTS, f"{low}-{low + 1}")
        assert plan.free_ports(1) == [low + 1]
        with pytest.raises(BackendError) as full:
            plan.free_ports(2)
    assert str(full.value) == (
        f"DISTRAIN_PORTS={low}-{low + 1}: 1 of its 2 ports is free, and the job needs 2: "
        "widen the range, or end what listens there"
    )


@pytest.mark.parametrize("value", ["20000", "20000-", "x-y", "30000-20000", "80-90", "1024-70000"])
def test_a_distrain_ports_that_is_no_range_of_ports_is_refused_with_the_fix(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(plan.ENV_PORTS, value)
    with pytest.raises(BackendError) as refused:
        plan.free_port()
    assert str(refused.value) == (
        f"DISTRAIN_PORTS={value!r} is not a range of ports: give the lowest and the highest "
        "port local jobs may listen on, from 1024 to 65535, e.g. DISTRAIN_PORTS=20000-20999, "
        "or unset it"
    )
