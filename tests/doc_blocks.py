"""The ```python blocks of README.md and docs/**/*.md, each with the file and line it stands at.

One extractor serves both checks of the docs: ``doc_typecheck.py`` type-checks every block with
``mypy --strict`` (``make typecheck``), and ``test_docs.py`` runs every block. A block is either

- a **program**: it runs itself (it calls ``asyncio.run`` or has a ``__main__`` part), and is
  checked and run exactly as it stands; or
- a **fragment**, read as a reader reads it: below the fragments above it on its page. It may
  use what they import (a page imports ``MySQLLockStore`` once, at its top), and a few free
  names that stand for the reader's application (``locks``, ``url``, ``export``...), which each
  check supplies, by type or by a real object. It may ``await`` at the top level.

Every statement keeps its markdown line: :meth:`DocBlock.tree` numbers its AST by the page's
lines, so a traceback or a mypy error names the line to edit.

``python tests/doc_blocks.py`` lists the blocks (``<file>:<line>``, program or fragment, free
names).
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CONTEXT", "ROOT", "DocBlock", "Snippet", "context_names", "doc_blocks", "doc_files"]

ROOT = Path(__file__).resolve().parent.parent
# the free names a fragment may use, declared by type: the reader's application
CONTEXT = Path(__file__).resolve().parent / "doc_context.pyi"
# the prose whose python blocks are checked, relative to ROOT
DOC_PATTERNS = ("README.md", "docs/**/*.md")

_OPENING = re.compile(r"^(?P<indent>[ \t]*)```[ \t]*(?P<info>[^`\s]*)[^`]*$")
_CLOSING = re.compile(r"^[ \t]*```[ \t]*$")
_PYTHON = frozenset({"python", "py", "python3"})
_BUILTINS = frozenset(dir(builtins))
# top-level await, async with and async for: asyncio's REPL runs them, and so does test_docs
_TOP_LEVEL_AWAIT = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT


@dataclass(frozen=True)
class Snippet:
    """Python source that starts at ``line`` of a markdown file."""

    line: int
    text: str

    def tree(self, path: str) -> ast.Module:
        """Parse the source, its nodes numbered by the markdown file's lines.

        Raises:
            SyntaxError: the source is not Python; its filename and line are the markdown's.
        """
        tree = compile(
            self.text, path, "exec", flags=ast.PyCF_ONLY_AST | _TOP_LEVEL_AWAIT, dont_inherit=True
        )
        assert isinstance(tree, ast.Module)
        return ast.increment_lineno(tree, self.line - 1)


@dataclass(frozen=True)
class DocBlock:
    """One ```python block, and the imports of the fragments above it on its page.

    Attributes:
        path: the markdown file, relative to the repository root (``docs/stores/redis.md``).
        line: the line of the block's opening fence; its code starts on the next one.
        body: the block's code.
        imports_above: each top-level import statement of the fragments above it on its page.
    """

    path: str
    line: int
    body: Snippet
    imports_above: tuple[Snippet, ...]

    @property
    def name(self) -> str:
        """``<file>:<line>``, the name tests and errors give the block."""
        return f"{self.path}:{self.line}"

    @property
    def module_name(self) -> str:
        """A module name that names the file and line: ``docs_stores_redis_md_22``."""
        return re.sub(r"\W", "_", self.path.lower()) + f"_{self.line}"

    def tree(self) -> ast.Module:
        """The block's code, numbered by the page's lines."""
        return self.body.tree(self.path)

    def is_program(self) -> bool:
        """Whether the block runs itself: it calls ``asyncio.run`` or has a ``__main__`` part."""
        for node in ast.walk(self.tree()):
            if isinstance(node, ast.Constant) and node.value == "__main__":
                return True
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "run"
                and isinstance(node.value, ast.Name)
                and node.value.id == "asyncio"
            ):
                return True
        return False

    def awaits_at_top_level(self) -> bool:
        """Whether the block awaits outside any function (``await``, ``async with``/``for``)."""
        return _awaits_outside_functions(self.tree().body)

    def imports_tree(self) -> ast.Module:
        """The imports above the block, as one module numbered by the page's lines."""
        body = [
            statement
            for snippet in self.imports_above
            for statement in snippet.tree(self.path).body
        ]
        return ast.Module(body=body, type_ignores=[])

    def free_names(self) -> frozenset[str]:
        """The names the block reads that neither it, the imports above, nor builtins bind."""
        tree = self.tree()
        read = {
            node.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
        }
        return frozenset(read - _bound(tree) - _bound(self.imports_tree()) - _BUILTINS)


def context_names() -> frozenset[str]:
    """The public names ``doc_context.pyi`` declares (its imports and ``_`` names aside)."""
    names: set[str] = set()
    for statement in ast.parse(CONTEXT.read_text(encoding="utf-8")).body:
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            names.add(statement.target.id)
        elif isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(statement.name)
    return frozenset(name for name in names if not name.startswith("_"))


def doc_files(root: Path = ROOT) -> list[Path]:
    """The markdown files whose python blocks are checked, in a stable order."""
    found = {path for pattern in DOC_PATTERNS for path in root.glob(pattern)}
    return sorted(found, key=lambda path: path.relative_to(root).as_posix())


def doc_blocks(root: Path = ROOT) -> list[DocBlock]:
    """Every python block of the docs, page by page, top to bottom.

    Raises:
        ValueError: a python fence is never closed (its file and line are named).
    """
    return [block for path in doc_files(root) for block in _page_blocks(root, path)]


def _page_blocks(root: Path, path: Path) -> list[DocBlock]:
    relative = path.relative_to(root).as_posix()
    blocks: list[DocBlock] = []
    imports: list[Snippet] = []
    for line, body in _python_fences(relative, path.read_text(encoding="utf-8")):
        block = DocBlock(relative, line, body, tuple(imports))
        blocks.append(block)
        if not block.is_program():  # a program stands alone: what it imports is its own
            imports.extend(_imports(body, relative))
    return blocks


def _python_fences(relative: str, text: str) -> list[tuple[int, Snippet]]:
    """Each python block's fence line and code, dedented by its fence's indent."""
    found: list[tuple[int, Snippet]] = []
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        opening = _OPENING.match(lines[number])
        number += 1
        if opening is None:
            continue
        fence_line, indent = number, opening["indent"]
        code: list[str] = []
        while number < len(lines) and not _CLOSING.match(lines[number]):
            code.append(lines[number].removeprefix(indent))
            number += 1
        if number == len(lines):
            raise ValueError(f"{relative}:{fence_line}: this ``` block is never closed")
        number += 1  # the closing fence
        if opening["info"].lower() in _PYTHON:
            found.append((fence_line, Snippet(fence_line + 1, "\n".join(code) + "\n")))
    return found


def _imports(body: Snippet, path: str) -> list[Snippet]:
    """The block's top-level import statements, each with its own line (``__future__`` aside)."""
    lines = body.text.splitlines()
    imports: list[Snippet] = []
    for statement in body.tree(path).body:
        if not isinstance(statement, ast.Import | ast.ImportFrom):
            continue
        if isinstance(statement, ast.ImportFrom) and statement.module == "__future__":
            continue
        assert statement.end_lineno is not None
        first, last = statement.lineno - body.line, statement.end_lineno - body.line
        imports.append(Snippet(statement.lineno, "\n".join(lines[first : last + 1]) + "\n"))
    return imports


def _bound(tree: ast.AST) -> set[str]:
    """Every name the tree binds anywhere (scopes aside: a doc block is small)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound


def _awaits_outside_functions(statements: list[ast.stmt]) -> bool:
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    pending: list[ast.AST] = list(statements)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Await | ast.AsyncWith | ast.AsyncFor):
            return True
        if not isinstance(node, scopes):
            pending.extend(ast.iter_child_nodes(node))
    return False


def main() -> None:
    """Print every block: ``<file>:<line>``, its kind, and the free names of a fragment."""
    for block in doc_blocks():
        if block.is_program():
            print(f"{block.name}  program")  # noqa: T201 -- the listing is the output
        else:
            names = ", ".join(sorted(block.free_names())) or "-"
            print(f"{block.name}  fragment  free: {names}")  # noqa: T201


if __name__ == "__main__":
    main()
