"""The demo's ports: settable with DEMO_PORTS, and a taken one named before anything starts."""

from __future__ import annotations

import socket

import pytest

from demo import DemoError, demo_ports


def free_ports(count: int) -> list[int]:
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def test_demo_ports_are_read_from_the_variable() -> None:
    ports = free_ports(3)
    assert demo_ports(",".join(map(str, ports))) == tuple(ports)


def test_a_taken_port_is_named_with_the_fix() -> None:
    ports = free_ports(3)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports[1]))
        taken.listen()
        with pytest.raises(
            DemoError, match=rf"port {ports[1]} is taken .*DEMO_PORTS=3101,3102,3103"
        ):
            demo_ports(",".join(map(str, ports)))


def test_a_port_whose_last_connection_is_closing_counts_as_free() -> None:
    # the state a demo's server leaves its port in for a minute: TIME_WAIT
    ports = free_ports(3)
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", ports[0]))
        server.listen()
        with socket.create_connection(("127.0.0.1", ports[0])) as client:
            accepted, _ = server.accept()
            accepted.close()  # the server closes first: its side waits in TIME_WAIT
            client.recv(1)
    assert demo_ports(",".join(map(str, ports))) == tuple(ports)


@pytest.mark.parametrize("value", ["3001,3002", "a,b,c", "3001,3001,3002", "80,81,82"])
def test_anything_but_three_distinct_ports_is_refused_with_the_fix(value: str) -> None:
    with pytest.raises(DemoError, match=r"DEMO_PORTS=.*DEMO_PORTS=3101,3102,3103"):
        demo_ports(value)
