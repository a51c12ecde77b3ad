"""leaselock serve, in this process: it serves the dashboard of a store, and Ctrl-C stops it."""

from __future__ import annotations

import os
import signal
import socket
import threading
import urllib.request
from pathlib import Path

from leaselock._cli import main

WITHIN_S = 30.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening(port: int) -> None:
    """Return once something listens on ``port``: a bounded poll of a real server starting."""
    give_up = threading.Event()
    timer = threading.Timer(WITHIN_S, give_up.set)
    timer.start()
    try:
        while not give_up.is_set():
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    return
            give_up.wait(0.01)
    finally:
        timer.cancel()
    raise AssertionError(f"nothing listened on {port} within {WITHIN_S} s")


def test_serve_serves_the_dashboard_of_a_store_and_stops_on_ctrl_c(tmp_path: Path):
    path = tmp_path / "locks.db"
    path.touch()
    port = free_port()
    pages: list[str] = []

    def open_the_page_then_press_ctrl_c() -> None:
        try:
            listening(port)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=WITHIN_S) as page:
                pages.append(page.read().decode())
        finally:
            os.kill(os.getpid(), signal.SIGINT)

    status = None
    browser = threading.Thread(target=open_the_page_then_press_ctrl_c)
    browser.start()
    try:
        status = main(["serve", "--url", f"sqlite:///{path}", "--port", str(port)])
    finally:
        browser.join(WITHIN_S)
    assert status == 0
    [page] = pages
    assert "<h1>Locks</h1>" in page
    assert "read-only" in page
