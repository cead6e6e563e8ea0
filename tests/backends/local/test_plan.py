"""The local plan's environment: the interface defaults and a user's ``--env``."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from jupyter_disttrain.backends.local import build_plan, plan
from jupyter_disttrain.backends.local.netns import NodeNetwork
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.spec import JobSpec


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


def test_a_jobs_ports_are_free_distinct_and_below_the_ephemeral_range() -> None:
    """A port an outgoing connection can take (the ephemeral range) is given to a job only
    when nothing below that range is left: a TensorFlow worker binds its port ~10 s later."""
    low, _ = plan.ephemeral_range()
    ports = plan.free_ports(8)
    assert len(set(ports)) == 8 and all(plan.PORT_FLOOR <= p < low for p in ports), ports
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))  # free: nothing holds it


def test_without_room_below_the_ephemeral_range_the_kernel_chooses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    squeezed = tmp_path / "ip_local_port_range"
    squeezed.write_text(f"{plan.PORT_FLOOR + 10}\t60999\n")
    monkeypatch.setattr(plan, "EPHEMERAL_RANGE_FILE", squeezed)
    ports = plan.free_ports(2)
    assert len(set(ports)) == 2 and all(p >= plan.PORT_FLOOR + 10 for p in ports), ports
