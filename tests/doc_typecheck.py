"""Type-check every python block of the docs with ``mypy --strict``; errors name the doc's line.

``make typecheck`` runs ``python tests/doc_typecheck.py``. Each block becomes a module of its
own in ``build/doc_blocks/`` (git-ignored), named after its file and line
(``docs_stores_redis_md_22.py``, headed by ``# Generated from docs/stores/redis.md:22``):

- a fragment's free names (``locks``, ``url``...) are imported from ``tests/doc_context.pyi``,
  by type, and nothing else is: a name the page never defines is an error, as for a reader;
- the imports of the blocks above it on its page come next, at their own lines;
- a fragment that awaits at the top level is the body of an ``async def``, as it would be in
  the reader's code (mypy refuses ``async with`` outside one).

mypy runs once on them all, and every message about a generated line is printed with the
markdown file and line it came from (``docs/stores/redis.md:25: error: ...``).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from dataclasses import dataclass

from mypy import api

from doc_blocks import ROOT, DocBlock, context_names, doc_blocks

__all__ = ["GENERATED", "Generated", "generate", "main"]

GENERATED = ROOT / "build" / "doc_blocks"
# where the generated modules find doc_context (tests/) and the `app` of the gunicorn hooks in
# docs/frameworks.md (examples/gunicorn, the example that section points to)
_MYPYPATH = ("tests", "examples/gunicorn")
# APScheduler 3 and Celery ship no types: a reader's mypy configuration decides what to do about
# that, not the example (import-not-found, a module that is not there at all, stays an error)
_DISABLED = ("import-untyped",)
_INDENT = "    "
_MESSAGE = re.compile(r"^(?P<path>[^:\n]+\.py):(?P<line>\d+):(?P<rest>.*)$")


@dataclass(frozen=True)
class Generated:
    """A block's generated module, and the markdown line of each of its lines (None: ours)."""

    block: DocBlock
    text: str
    origins: tuple[int | None, ...]

    @property
    def path(self) -> str:
        """The module's path, relative to the repository root."""
        return (GENERATED.relative_to(ROOT) / f"{self.block.module_name}.py").as_posix()

    def origin(self, line: int) -> str:
        """``<file>:<line>`` of the markdown that the module's ``line`` came from."""
        markdown_line = self.origins[line - 1] if 0 < line <= len(self.origins) else None
        if markdown_line is None:
            return f"{self.path}:{line}"  # a line of the generated preamble
        return f"{self.block.path}:{markdown_line}"


def generate(block: DocBlock) -> Generated:
    """Build the module that type-checks ``block``."""
    lines: list[tuple[str, int | None]] = [
        (f"# Generated from {block.name} by tests/doc_typecheck.py: edit the markdown.", None),
        (f'# mypy: disable-error-code="{",".join(_DISABLED)}"', None),
    ]
    if not block.is_program():
        # only what doc_context declares: any other free name stays undefined, and mypy says so
        names = sorted(block.free_names() & context_names())
        if names:
            lines.append((f"from doc_context import {', '.join(names)}", None))
        lines.extend(
            (text, snippet.line + offset)
            for snippet in block.imports_above
            for offset, text in enumerate(snippet.text.splitlines())
        )
    body = block.body.text.splitlines()
    indent = ""
    if not block.is_program() and block.awaits_at_top_level():
        lines.append(("async def _doc_block() -> None:", None))
        indent = _INDENT
    lines.extend(
        (indent + text if text.strip() else "", block.body.line + offset)
        for offset, text in enumerate(body)
    )
    return Generated(
        block,
        "".join(text + "\n" for text, _ in lines),
        tuple(origin for _, origin in lines),
    )


def _write(generated: list[Generated]) -> None:
    shutil.rmtree(GENERATED, ignore_errors=True)  # no module of a block that is gone
    GENERATED.mkdir(parents=True)
    for module in generated:
        (ROOT / module.path).write_text(module.text, encoding="utf-8")


def _to_markdown(report: str, generated: list[Generated]) -> str:
    """Rewrite each ``<generated module>:<line>:`` of mypy's report as the markdown's."""
    by_path = {module.path: module for module in generated}
    lines = []
    for line in report.splitlines():
        message = _MESSAGE.match(line)
        module = by_path.get(message["path"]) if message else None
        if message is None or module is None:
            lines.append(line)
        else:
            lines.append(f"{module.origin(int(message['line']))}:{message['rest']}")
    return "\n".join(lines)


def main() -> int:
    """Generate the modules, run mypy on them, and print its report in the docs' lines."""
    started = time.perf_counter()
    generated = [generate(block) for block in doc_blocks()]
    _write(generated)
    os.environ["MYPYPATH"] = os.pathsep.join(str(ROOT / path) for path in _MYPYPATH)
    os.chdir(ROOT)
    stdout, stderr, status = api.run(["--strict", *(module.path for module in generated)])
    print(_to_markdown(stdout, generated))  # noqa: T201 -- mypy's report is the output
    print(stderr, end="", file=sys.stderr)  # noqa: T201
    if status:
        print(  # noqa: T201
            f"Each block is checked as {GENERATED.relative_to(ROOT)}/<file>_<line>.py; a "
            "fragment may use its page's imports above it and the names of "
            "tests/doc_context.pyi (python tests/doc_blocks.py lists each block's free names)"
        )
    files = len({module.block.path for module in generated})
    print(  # noqa: T201
        f"{len(generated)} python blocks of {files} markdown files type-checked "
        f"in {time.perf_counter() - started:.1f} s (generated into {GENERATED.relative_to(ROOT)})"
    )
    return status


if __name__ == "__main__":
    sys.exit(main())
