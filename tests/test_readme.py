"""The README's examples run: a program block is executed as it stands."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).parent.parent / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_programs() -> list[str]:
    """Every python block that runs itself (calls asyncio.run or has a __main__ part)."""
    blocks = BLOCK.findall(README.read_text())
    return [block for block in blocks if "asyncio.run(" in block or "__main__" in block]


def test_the_readme_has_runnable_examples():
    assert python_programs()


@pytest.mark.parametrize("program", python_programs())
def test_a_readme_program_runs_and_exits_cleanly(program: str):
    finished = subprocess.run(  # noqa: S603 -- our own README, run by our own interpreter
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.strip(), "an example prints what it did"
