"""The student notebooks run top to bottom before anything is attempted, and every checker says so."""

import re

import nbformat
import pytest
from nbclient import NotebookClient

from tools import notebooks

HOMEWORK = [notebooks.homework_path(md) for md in notebooks.chapters() if notebooks.has_exercises(md)]


@pytest.mark.parametrize("path", HOMEWORK, ids=lambda p: p.stem)
def test_unattempted_homework_runs_and_every_checker_says_not_attempted(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    checker_cells = [c for c in nb.cells if c.cell_type == "code" and re.match(r"check_\w+\(\w+\)\s*$", c.source)]
    assert checker_cells, "a homework notebook without checkers"
    for cell in checker_cells:
        text = "".join(o.get("text", "") for o in cell.outputs)
        assert text.startswith("NOT ATTEMPTED YET"), f"{cell.source!r} printed {text!r}"
