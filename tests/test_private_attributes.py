"""No module of the package reads another library's private attributes (issue 35).

A private attribute (one leading underscore) is read here only on ``self`` or ``cls``, or by
a name that the same module defines: a module's privates are its own (CONTRIBUTING: "if another
module needs it, it is not private"), so a private read that no line of its module defines is
another library's, redis-py's ``connection._reader`` or asyncpg's ``pool._connect_kwargs``,
which any release of that library may rename. ``getattr`` and its kin with a private name
count as reads. Read from the source with ``ast``, as ``tests/test_layers.py`` reads imports.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "src" / "leaselock"

# a namedtuple's own methods: public API, underscored so they never clash with a field's name
NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})

# (module, attribute): why it is read anyway. Each must still be read (a stale entry fails).
ALLOWED = {
    ("testing/_settle.py", "_ready"): (
        "asyncio's loop keeps its ready callbacks there and offers no public way to ask; "
        "wait_all_tasks_blocked() reads it with a default, so a loop without it still settles"
    ),
    ("testing/_settle.py", "_fut_waiter"): (
        "asyncio's task keeps the future it waits on there, as anyio reads it; with a default"
    ),
}

ATTRIBUTE_FUNCTIONS = frozenset({"getattr", "hasattr", "setattr", "delattr"})


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def defined_names(tree: ast.Module) -> set[str]:
    """Every name the module defines: functions, classes, assignments, slots, parameters."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__slots__" for target in node.targets
        ):
            names.update(
                element.value
                for element in ast.walk(node.value)
                if isinstance(element, ast.Constant) and isinstance(element.value, str)
            )
    return names


def private_reads(tree: ast.Module) -> Iterator[tuple[int, str, str]]:
    """``(line, attribute, source)`` of each private attribute read on another object."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and is_private(node.attr)
            and not (isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"})
        ):
            yield node.lineno, node.attr, ast.unparse(node)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ATTRIBUTE_FUNCTIONS
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and is_private(node.args[1].value)
        ):
            yield node.lineno, node.args[1].value, ast.unparse(node)


def foreign_reads(source: str) -> list[tuple[int, str, str]]:
    """The private reads of ``source`` that no line of it defines (NamedTuple's API aside)."""
    tree = ast.parse(source)
    own = defined_names(tree)
    return [
        (line, attribute, text)
        for line, attribute, text in private_reads(tree)
        if attribute not in own and attribute not in NAMEDTUPLE_API
    ]


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_reads_a_private_attribute_of_another_library():
    found: list[str] = []
    allowed_and_read: set[tuple[str, str]] = set()
    for path in modules():
        module = path.relative_to(PACKAGE).as_posix()
        for line, attribute, text in foreign_reads(path.read_text(encoding="utf-8")):
            if (module, attribute) in ALLOWED:
                allowed_and_read.add((module, attribute))
            else:
                found.append(f"src/leaselock/{module}:{line}: {text}")
    assert found == [], (
        "these read another library's private attributes; go through its public API (or, for "
        "a private of this package, read it only in the module that defines it):\n"
        + "\n".join(found)
    )
    assert allowed_and_read == set(ALLOWED), "an allowed private read is gone: drop its entry"


@pytest.mark.parametrize(
    ("source", "read"),
    [
        ("def f(connection):\n    return connection._reader\n", "_reader"),
        ("def f(c):\n    return c._parser.parse_error\n", "_parser"),
        ("def f(pool):\n    return getattr(pool, '_connect_kwargs', {})\n", "_connect_kwargs"),
        ("import redis\nX = redis._parsers\n", "_parsers"),
    ],
)
def test_a_private_read_on_another_librarys_object_is_found(source: str, read: str):
    assert [attribute for _, attribute, _ in foreign_reads(source)] == [read]


@pytest.mark.parametrize(
    "source",
    [
        "class A:\n    __slots__ = ('_x',)\n    def f(self, other):\n        return other._x\n",
        "class A:\n    def _hold(self): ...\ndef f(a):\n    return a._hold()\n",
        "def f(self):\n    return self._anything\n",
        "def f(parts):\n    return parts._replace(netloc='')\n",
    ],
)
def test_a_private_of_the_same_module_and_a_namedtuples_api_are_not(source: str):
    assert foreign_reads(source) == []


def test_every_noqa_for_a_private_read_says_why():
    unexplained = [
        f"src/leaselock/{path.relative_to(PACKAGE).as_posix()}:{number}"
        for path in modules()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if re.search(r"noqa:[^#]*SLF001(?!.*--)", line)
    ]
    assert unexplained == [], "say why after `--` on each line: " + ", ".join(unexplained)
