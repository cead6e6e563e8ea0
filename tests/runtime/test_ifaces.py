"""A rank's GLOO_SOCKET_IFNAME checked against the interfaces it has."""

from __future__ import annotations

import socket

import pytest

from jupyter_disttrain.runtime.ifaces import InterfaceError, check_gloo_ifname, interfaces


def test_the_interfaces_are_this_namespaces_own() -> None:
    names = interfaces()
    assert "lo" in names and names == sorted(names)


def test_a_setting_naming_present_interfaces_or_none_passes() -> None:
    check_gloo_ifname({}, ["eth0", "lo"])
    check_gloo_ifname({"GLOO_SOCKET_IFNAME": ""}, ["eth0", "lo"])
    check_gloo_ifname({"GLOO_SOCKET_IFNAME": "eth0,lo"}, ["eth0", "lo"])


def test_a_missing_interface_is_named_with_the_ones_there_are() -> None:
    with pytest.raises(InterfaceError) as raised:
        check_gloo_ifname({"GLOO_SOCKET_IFNAME": "eth0,eth1"}, ["eth0", "lo"])
    assert str(raised.value) == (
        f"GLOO_SOCKET_IFNAME=eth0,eth1: no such interface eth1 on {socket.gethostname()} (it "
        "has eth0, lo); set GLOO_SOCKET_IFNAME to the interface the nodes share, or leave it unset"
    )
