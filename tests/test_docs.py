"""Every python block of README.md and docs/**/*.md runs, each test named after its file and line.

``doc_blocks.py`` finds the blocks and ``doc_runs.py`` runs them: programs as they stand, in a
subprocess; fragments against real objects and the suite's servers. ``make typecheck`` checks the
same blocks with ``mypy --strict`` (``doc_typecheck.py``).
"""

import ast

import pytest

from doc_blocks import DocBlock, context_names, doc_blocks
from doc_runs import (
    CONTRACT_CASES,
    NAMES,
    call_gunicorn_hooks,
    run_contract_classes,
    run_fragment,
    run_program,
    run_test_module,
)
from doc_servers import SERVER_MARKS, servers_of
from leaselock import LocksConfigurationError

BLOCKS = doc_blocks()
PROGRAMS = [block for block in BLOCKS if block.is_program()]
FRAGMENTS = [block for block in BLOCKS if not block.is_program()]


def imports_pytest(block: DocBlock) -> bool:
    return any(
        isinstance(node, ast.Import) and any(alias.name == "pytest" for alias in node.names)
        for node in ast.walk(block.tree())
    )


def defines_a_contract_test_class(block: DocBlock) -> bool:
    return any(
        isinstance(node, ast.ClassDef)
        and any(
            isinstance(base, ast.Name) and base.id == "LockStoreContractTests"
            for base in node.bases
        )
        for node in ast.walk(block.tree())
    )


def defines(block: DocBlock, function: str) -> bool:
    return any(
        isinstance(node, ast.FunctionDef) and node.name == function
        for node in ast.walk(block.tree())
    )


def prints(block: DocBlock) -> bool:
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
        for node in ast.walk(block.tree())
    )


def on_its_servers(blocks: list[DocBlock]) -> list[object]:
    """Each block as a parameter named ``<file>:<line>``, marked with the servers it runs on."""
    return [
        pytest.param(
            block,
            id=block.name,
            marks=[
                getattr(pytest.mark, SERVER_MARKS[server]) for server in sorted(servers_of(block))
            ],
        )
        for block in blocks
    ]


def servers(request: pytest.FixtureRequest, block: DocBlock) -> dict[str, str]:
    return {name: request.getfixturevalue(name) for name in sorted(servers_of(block))}


def test_the_readme_and_the_docs_pages_have_python_blocks():
    pages = {block.path for block in BLOCKS}
    assert "README.md" in pages
    assert "docs/stores/postgres.md" in pages


def test_fragments_are_given_exactly_the_names_doc_context_declares():
    assert context_names() == NAMES


def test_every_free_name_of_a_fragment_is_one_it_can_be_given():
    unknown = {block.name: sorted(block.free_names() - NAMES) for block in FRAGMENTS}
    assert {name: names for name, names in unknown.items() if names} == {}


@pytest.mark.parametrize("block", on_its_servers(PROGRAMS))
def test_a_program_runs_to_its_end_and_prints(block, tmp_path):
    finished = run_program(block, tmp_path)
    assert finished.returncode == 0, (
        f"{block.name} (line numbers are the page's)\n{finished.stderr}"
    )
    assert finished.stdout.strip(), f"{block.name} prints what it did"


@pytest.mark.parametrize("block", on_its_servers(FRAGMENTS))
def test_a_fragment_runs_to_its_end(block, request, tmp_path, capsys):
    run = run_fragment(block, servers(request, block), tmp_path)
    assert run.ended
    assert run.unbound() == []
    names = block.free_names()
    if "export" in names:
        assert run.application.exported, "export ran under the lock"
        assert min(run.application.exported) > 0
    if "reconcile" in names:
        assert run.application.reconciled == 1
    if "warehouse" in names:
        assert run.application.warehouse.asked
    if run.takes_a_lock_on_its_store:
        assert run.token_on_its_store is not None, "the store it made took a lock"
        assert run.token_on_its_store > 0
    if prints(block):
        assert capsys.readouterr().out.strip()


@pytest.mark.parametrize(
    "block",
    on_its_servers(
        [b for b in FRAGMENTS if defines_a_contract_test_class(b) and not imports_pytest(b)]
    ),
)
def test_a_contract_test_class_passes_its_cases(block, request, tmp_path):
    run = run_fragment(block, servers(request, block), tmp_path)
    ran = run_contract_classes(run.namespace)
    assert [name.split(".")[1] for name in ran] == list(CONTRACT_CASES)


@pytest.mark.parametrize("block", on_its_servers([b for b in FRAGMENTS if imports_pytest(b)]))
def test_a_test_module_passes_under_pytest(block, tmp_path):
    finished = run_test_module(block, tmp_path)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert f"{len(CONTRACT_CASES)} passed" in finished.stdout


@pytest.mark.parametrize(
    "block",
    on_its_servers([b for b in FRAGMENTS if defines(b, "post_fork") and defines(b, "worker_exit")]),
)
def test_gunicorn_hooks_start_a_workers_locks_and_close_them(block, tmp_path):
    run = run_fragment(block, {}, tmp_path)
    locks = call_gunicorn_hooks(run.namespace, tmp_path)
    with pytest.raises(LocksConfigurationError, match="not started"):
        locks.read_lock("docs:gunicorn")
