"""kube-apiserver's advertised address (the `kubernetes` Service's endpoint) is this host's own, never a gateway."""

from __future__ import annotations

import socket
import subprocess
from types import SimpleNamespace
from typing import Any

import pytest

from testbed.controlplane import apiserver


def default_gateways() -> set[str]:
    shown = subprocess.run(["ip", "-4", "route", "show", "default"], capture_output=True, text=True, check=False)
    return {line.split()[2] for line in shown.stdout.splitlines() if line.startswith("default via ")}


def test_the_advertised_address_is_bound_on_this_host_and_is_no_gateway() -> None:
    address = apiserver.advertise_address()
    assert address not in default_gateways()
    if address == apiserver.FALLBACK_ADVERTISE_ADDRESS:
        pytest.skip("this host has no global IPv4 address: nothing routes anywhere")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind((address, 0))  # only an address of this host's own interfaces can be bound


@pytest.mark.parametrize(
    ("shown", "expected"),
    [
        ("2: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\\       valid_lft forever\n", "192.0.2.2"),
        ("", apiserver.FALLBACK_ADVERTISE_ADDRESS),
    ],
    ids=["global-address", "none"],
)
def test_the_address_is_read_from_ip(monkeypatch: pytest.MonkeyPatch, shown: str, expected: str) -> None:
    def run(*args: Any, **kwargs: Any) -> SimpleNamespace:
        return SimpleNamespace(stdout=shown)

    monkeypatch.setattr(apiserver.subprocess, "run", run)
    assert apiserver.advertise_address() == expected
