"""The timeline opens in a real headless browser (Debian's chromium) without errors."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import write_timeline_story
from leaselock._cli import main

LEASES_IN_THE_STORY = 7


@pytest.fixture
def chromium(request: pytest.FixtureRequest) -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        unavailable = "no chromium on PATH (Debian: apt-get install chromium)"
        if request.config.getoption("--require-servers"):
            pytest.fail(f"--require-servers: {unavailable}")
        pytest.skip(unavailable)
    return found


def render(chromium: str, page: Path) -> str:
    """The DOM chromium built from ``page``, after loading it headless."""
    finished = subprocess.run(  # noqa: S603 -- the machine's browser on our own file
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr
    return finished.stdout


@pytest.mark.parametrize("suffix", [".html", ".svg"])
def test_the_timeline_renders_in_chromium_with_every_bar_and_no_parse_error(
    chromium: str, tmp_path: Path, suffix: str
):
    logs = [str(path) for path in write_timeline_story(tmp_path)]
    page = tmp_path / f"timeline{suffix}"
    assert main(["timeline", *logs, "--output", str(page)]) == 0

    dom = render(chromium, page)

    assert "parsererror" not in dom, "the browser could not parse the file"
    assert "<svg" in dom
    assert dom.count('class="lease"') == LEASES_IN_THE_STORY
    assert dom.count('class="lane"') == 3
    assert "? expired" in dom
