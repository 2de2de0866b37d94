"""The student notebooks: each checker cell carries the verdict it must print before anything is attempted.

nbval (``make test`` runs it on every homework notebook with ``--nbval-lax``) executes the notebooks top to
bottom and compares the output of the cells tagged ``nbval-check-output``: the checker cells. So CI fails if
an unattempted homework notebook raises anywhere, or if a checker says anything but NOT ATTEMPTED YET.
"""

import ast

import nbformat
import pytest

from companion.exercises.checking import NOT_ATTEMPTED
from tools import notebooks

HOMEWORK = [
    notebooks.homework_path(md)
    for md in notebooks.chapters()
    if notebooks.has_exercises(md)
]


@pytest.mark.parametrize("path", HOMEWORK, ids=lambda p: p.stem)
def test_every_checker_cell_expects_not_attempted(path):
    nb = nbformat.read(path, as_version=4)
    checker_cells = [
        c
        for c in nb.cells
        if c.cell_type == "code" and notebooks.checker_call(c.source)
    ]
    assert checker_cells, "a homework notebook without checkers"
    for cell in checker_cells:
        assert notebooks.NBVAL_CHECK_OUTPUT in cell.metadata["tags"]
        (output,) = cell.outputs
        assert output.text.startswith("NOT ATTEMPTED YET  ")
    for cell in (
        c for c in nb.cells if c.cell_type == "code" and c not in checker_cells
    ):
        assert not cell.outputs and cell.execution_count is None
        assert notebooks.NBVAL_CHECK_OUTPUT not in cell.metadata.get("tags", [])


def _stub(*args, **kwargs):
    raise NotImplementedError


def _student_stub(stub_cell_source: str, name: str, imports: dict):
    """The object called ``name`` that the homework's stub cell defines, as a student who has not started has it."""
    namespace = dict(imports)
    exec(stub_cell_source, namespace)
    return namespace[name]


def _run_imports(source: str, namespace: dict) -> None:
    """Run only the import statements of a notebook cell (what a stub needs: ``torch``, ``nn``, module aliases)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    imports = [
        node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)
    ]
    exec(
        compile(ast.Module(body=imports, type_ignores=[]), "<imports>", "exec"),
        namespace,
    )


@pytest.mark.parametrize("path", HOMEWORK, ids=lambda p: p.stem)
def test_the_stored_verdict_is_what_running_a_stub_prints(path):
    """The output stored in each checker cell is what the checker prints when it runs the notebook's own stub (as
    nbval will), so the generator's ``not_attempted_message`` cannot drift from what the check itself says."""
    nb = nbformat.read(path, as_version=4)
    stub_source, imports = None, {}
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        _run_imports(cell.source, imports)
        if notebooks.STUB_TAG in cell.metadata.get("tags", []):
            stub_source = cell.source
        name = notebooks.checker_call(cell.source)
        if name is None:
            continue
        checker = notebooks._checker(name)
        argument = cell.source.strip().removeprefix(f"{name}(").removesuffix(")")
        (output,) = cell.outputs
        assert stub_source is not None, f"{cell.source}: no stub cell before it"
        assert (
            output.text
            == str(checker.verdict(_student_stub(stub_source, argument, imports)))
            + "\n"
        ), cell.source


def test_a_stub_gets_not_attempted_in_these_words():
    from companion.exercises.words_to_vectors import check_encode

    verdict = check_encode.verdict(_stub)
    assert verdict.status == NOT_ATTEMPTED
    assert str(verdict) == (
        "NOT ATTEMPTED YET  encode: your code still raises NotImplementedError. "
        "Replace the stub with your implementation and run the cell again."
    )
