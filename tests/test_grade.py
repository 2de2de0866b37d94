"""``python -m homework_grader`` on a synthetic class built from chapter 1's homework notebook.

Every submission is the real homework notebook with answers written here (independently of the book's
solutions), or broken in one of the ways the grader claims to survive, or tampered with in one of the ways it
claims to see through. The gradebook is asserted cell by cell. (The attacks of issue 19 are in
``test_grade_attacks.py``; the grader's parts one by one in ``test_grade_parts.py``.)
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest
from grading_support import gradebook, run_grader

ROOT = Path(__file__).resolve().parents[1]
HOMEWORK = ROOT / "book" / "homework"
CHAPTER = "01_words_to_vectors"
OTHER = "02_embedding_language_model"
EXERCISES = ["encode", "one_hot", "Embedding", "cosine_similarity"]

# ----- answers, written for this test ----------------------------------------------------------------------

RIGHT = {
    "encode": """\
def encode(tokens, stoi):
    ids = []
    for token in tokens:
        ids.append(stoi[token] if token in stoi else stoi["<unk>"])
    return torch.tensor(ids, dtype=torch.int64)
""",
    "one_hot": """\
def one_hot(ids, vocab_size):
    rows = torch.zeros(len(ids), vocab_size)
    for row, i in enumerate(ids.tolist()):
        rows[row, i] = 1.0
    return rows
""",
    "Embedding": """\
from torch import nn


class Embedding(nn.Module):
    def __init__(self, num_embeddings, embedding_dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(num_embeddings, embedding_dim))

    def forward(self, ids):
        if ids.is_floating_point():
            raise TypeError(f"ids must be integers, got {ids.dtype}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.weight.shape[0]):
            raise ValueError(f"ids must lie in [0, {self.weight.shape[0]})")
        return self.weight[ids]
""",
    "cosine_similarity": """\
def cosine_similarity(u, v):
    return (u * v).sum() / torch.sqrt((u * u).sum() * (v * v).sum())
""",
}

# a second right set, vectorised differently (the JupyterLab student's)
RIGHT_TOO = {
    "encode": "def encode(tokens, stoi):\n"
    '    return torch.as_tensor([stoi.get(t, stoi["<unk>"]) for t in tokens], dtype=torch.long)\n',
    "one_hot": "def one_hot(ids, vocab_size):\n    return (ids[:, None] == torch.arange(vocab_size)).float()\n",
    "Embedding": RIGHT["Embedding"].replace(
        "self.weight[ids]",
        "self.weight.index_select(0, ids.flatten()).view(*ids.shape, -1)",
    ),
    "cosine_similarity": "def cosine_similarity(u, v):\n    return torch.dot(u, v) / (u.norm() * v.norm())\n",
}

# the typical mistakes the checkers name
NAMED_MISTAKES = {
    "encode": "def encode(tokens, stoi):\n"
    "    return torch.tensor([stoi[t] for t in tokens if t in stoi], dtype=torch.long)\n",
    "one_hot": "def one_hot(ids, vocab_size):\n    return torch.nn.functional.one_hot(ids, vocab_size)\n",
    "Embedding": RIGHT["Embedding"].replace("torch.randn(", "torch.rand("),
    "cosine_similarity": "def cosine_similarity(u, v):\n    return u @ v\n",
}

# other kinds of wrong: code that raises, a mistake no hint names
OTHER_MISTAKES = {
    "encode": "def encode(tokens, stoi):\n    return torch.tensor([stoi[t] for t in tokens], dtype=torch.long)\n",
    "one_hot": NAMED_MISTAKES["one_hot"],
    "Embedding": RIGHT["Embedding"].replace(
        "return self.weight[ids]", "return self.weight[ids].detach()"
    ),
    "cosine_similarity": "def cosine_similarity(u, v):\n    return u @ v / (u.norm() + v.norm())\n",
}

HINTS = {
    "encode": "A token that is not in stoi gets the id of '<unk>'",
    "one_hot": "torch.nn.functional.one_hot returns integers",
    "Embedding": "torch.randn draws from the standard normal",
    "cosine_similarity": "That is the dot product",
}

# ----- building the class ----------------------------------------------------------------------------------


def homework(key: str = CHAPTER) -> dict:
    return json.loads((HOMEWORK / f"{key}.ipynb").read_text())


def source(cell: dict) -> str:
    s = cell["source"]
    return "".join(s) if isinstance(s, list) else s


def stub_index(nb: dict, name: str) -> int:
    """The index of the stub cell where the student writes ``name``."""
    for i, cell in enumerate(nb["cells"]):
        if "exercise-stub" in cell.get("metadata", {}).get("tags", []) and (
            f"def {name}(" in source(cell) or f"class {name}(" in source(cell)
        ):
            return i
    raise AssertionError(f"no stub for {name}")


def answered(answers: dict[str, str], key: str = CHAPTER) -> dict:
    nb = homework(key)
    for name, code in answers.items():
        nb["cells"][stub_index(nb, name)]["source"] = code
    return nb


def checker_cells(nb: dict) -> list[dict]:
    return [
        c
        for c in nb["cells"]
        if c["cell_type"] == "code" and source(c).startswith("check_")
    ]


def colab_saved(nb: dict) -> dict:
    """As Google Colab saves a notebook: nbformat 4.0, no cell ids, Colab's metadata, lists of lines, outputs."""
    nb = copy.deepcopy(nb)
    nb["nbformat_minor"] = 0
    nb["metadata"] = {
        "colab": {
            "provenance": [],
            "name": "01_words_to_vectors.ipynb",
            "toc_visible": True,
        },
        "kernelspec": {"name": "python3", "display_name": "Python 3"},
        "language_info": {"name": "python"},
        "accelerator": "GPU",
        "widgets": {
            "application/vnd.jupyter.widget-state+json": {
                "a1b2": {"model_name": "HBoxModel", "state": {}}
            }
        },
    }
    for k, cell in enumerate(nb["cells"]):
        cell.pop("id", None)
        cell["source"] = source(cell).splitlines(keepends=True)
        cell["metadata"] = {
            "id": f"Xy{k:04d}",
            **({"colab": {"base_uri": "https://localhost:8080/"}}),
        }
        if cell["cell_type"] == "code":
            cell["metadata"]["outputId"] = f"out-{k}"
            cell["execution_count"] = k
            cell["outputs"] = [
                {"output_type": "stream", "name": "stdout", "text": ["some output\n"]}
            ]
    return nb


def lab_saved(nb: dict) -> dict:
    """As JupyterLab 4 saves a notebook: nbformat 4.5, uuid-like ids, language_info, executed outputs."""
    nb = copy.deepcopy(nb)
    nb["nbformat_minor"] = 5
    nb["metadata"] = {
        "kernelspec": {
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
            "name": "python3",
        },
        "language_info": {
            "codemirror_mode": {"name": "ipython", "version": 3},
            "file_extension": ".py",
            "mimetype": "text/x-python",
            "name": "python",
            "nbconvert_exporter": "python",
            "pygments_lexer": "ipython3",
            "version": "3.11.9",
        },
    }
    for k, cell in enumerate(nb["cells"]):
        cell["id"] = f"{k:08x}-4c1e-4d2a-9f3b-{k:012x}"
        if cell["cell_type"] == "code":
            cell["execution_count"] = k + 1
            cell["metadata"]["execution"] = {
                "iopub.status.busy": "2026-11-20T10:00:00.000Z"
            }
            cell["outputs"] = [
                {
                    "output_type": "execute_result",
                    "execution_count": k + 1,
                    "metadata": {},
                    "data": {"text/plain": "1"},
                }
            ]
    return nb


def build_class(folder: Path) -> None:
    """Eighteen submissions, in the layouts an LMS export has: a file per student or a folder per student."""
    folder.mkdir()

    def save(name: str, nb: dict | str) -> None:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(nb if isinstance(nb, str) else json.dumps(nb, indent=1))

    save("alice.ipynb", answered(RIGHT))
    save("bob/01_words_to_vectors.ipynb", homework())  # the stubs, untouched
    save("carol.ipynb", answered(NAMED_MISTAKES))

    # an infinite loop in a function the checker calls
    save(
        "dave.ipynb",
        answered(
            {
                **RIGHT,
                "one_hot": "def one_hot(ids, vocab_size):\n    while True:\n        pass\n",
            }
        ),
    )

    # a cell that would end its process after defining its function (the grader does not run it), and a function
    # that ends its process when the grader calls it (its checker cell deleted, so only the grader calls it)
    dies = "import os\nos._exit(1)\n"
    exits = "def encode(tokens, stoi):\n    import os\n\n    os._exit(1)\n"
    nb = answered(
        {
            **RIGHT,
            "cosine_similarity": RIGHT["cosine_similarity"] + dies,
            "encode": exits,
        }
    )
    nb["cells"] = [c for c in nb["cells"] if source(c) != "check_encode(encode)"]
    save("erin.ipynb", nb)

    # fifty megabytes of output, printed by the function the checker calls
    loud = RIGHT["encode"].replace(
        "    ids = []\n", '    print("x" * 50_000_000)\n    ids = []\n'
    )
    save("frank.ipynb", answered({**RIGHT, "encode": loud}))

    # cells deleted (the Embedding exercise, and chapter cells) and reordered (the cosine exercise moved to the end)
    nb = answered(RIGHT)
    cells = nb["cells"]
    embedding = stub_index(nb, "Embedding")
    # its snapshot, stub, checker and restore cells
    del cells[embedding - 1 : embedding + 3]
    cosine = stub_index(nb, "cosine_similarity")
    moved = cells[cosine - 1 : cosine + 3]
    del cells[cosine - 1 : cosine + 3]
    cells.extend(moved)
    params = next(
        i for i, c in enumerate(cells) if "small = cemb.parameter_count" in source(c)
    )
    assert "assert small ==" in source(cells[params + 1])
    # a chapter cell and the hidden cell that checks its numbers
    del cells[params : params + 2]
    save("grace/submission.ipynb", nb)

    # the notebook of chapter 2, one exercise right
    bigram = "def bigram_counts(ids, vocab_size):\n    c = torch.zeros(vocab_size, vocab_size, dtype=torch.long)\n"
    bigram += "    for a, b in zip(ids.tolist()[:-1], ids.tolist()[1:]):\n        c[a, b] += 1\n    return c\n"
    save("heidi/01_words_to_vectors.ipynb", answered({"bigram_counts": bigram}, OTHER))

    save("ivan.ipynb", "")  # an empty file
    save("judy.ipynb", json.dumps(answered(RIGHT))[:5000])  # cut short: malformed JSON

    # saved by Colab, with a cell that installs a package from the network (the grader's kernel has none)
    nb = answered(RIGHT)
    pip = {
        "cell_type": "code",
        "metadata": {},
        "source": "!pip install -q gensim",
        "outputs": [],
        "execution_count": None,
    }
    nb["cells"].insert(3, {**pip, "id": "pip"})
    save("ken_colab.ipynb", colab_saved(nb))
    save("lena_lab.ipynb", lab_saved(answered(RIGHT_TOO)))

    # tampering 1: the checker cells replaced by prints of PASSED
    nb = homework()
    for cell in checker_cells(nb):
        name = source(cell).split("(")[1].rstrip(")\n")
        cell["source"] = (
            f'print("PASSED  {name}: your code agrees with the reference (4 checks).")'
        )
    nb["cells"][stub_index(nb, "cosine_similarity")]["source"] = (
        "from companion.embeddings import cosine_similarity\n"
    )
    save("mallory.ipynb", nb)

    # tampering 2: the stored outputs of the checker cells edited to say PASSED
    nb = homework()
    for cell in checker_cells(nb):
        cell["outputs"] = [
            {
                "output_type": "stream",
                "name": "stdout",
                "text": "PASSED  it agrees with the reference.\n",
            }
        ]
    save("oscar.ipynb", nb)

    # tampering 3: wrong answers, with check_* redefined and the checkers inside companion replaced
    redefine = """\
import companion.exercises.checking
import companion.exercises.words_to_vectors as exercises


def check_encode(f):
    print("PASSED  encode: your code agrees with the reference (4 checks).")


check_one_hot = check_cosine = check_embedding = check_encode
exercises.check_encode = exercises.check_one_hot = exercises.check_cosine = exercises.check_embedding = check_encode
_checking = companion.exercises.checking
_checking.Checker.verdict = lambda self, student: _checking.Verdict(self.exercise, "passed")
"""
    nb = answered(OTHER_MISTAKES)
    imports = next(
        i for i, c in enumerate(nb["cells"]) if "from companion.exercises" in source(c)
    )
    nb["cells"].insert(
        imports + 1,
        {
            "cell_type": "code",
            "metadata": {},
            "source": redefine,
            "outputs": [],
            "execution_count": None,
            "id": "tamper",
        },
    )
    save("peggy.ipynb", nb)

    # a function asking for far more memory than the grader's limit allows
    greedy = RIGHT["encode"].replace(
        "    ids = []\n",
        "    big = torch.empty(12 * 2**30, dtype=torch.uint8)\n    ids = []\n",
    )
    save("trent.ipynb", answered({**RIGHT, "encode": greedy}))

    # an answer that needs a variable set by a statement the grader does not run
    needs = (
        "EPS = torch.tensor(1e-12)\n\n\n"
        "def cosine_similarity(u, v):\n    return u @ v / (u.norm() * v.norm() + EPS)\n"
    )
    save("uma.ipynb", answered({"cosine_similarity": needs}))

    # JSON, but not a notebook
    save("victor.ipynb", json.dumps({"hello": "world"}))

    # a fresh notebook with only the answers in it: no title, imports or checker cells to recognise
    cells = [
        {
            "cell_type": "code",
            "metadata": {},
            "source": "import torch",
            "outputs": [],
            "execution_count": None,
        }
    ]
    cells += [{**cells[0], "source": RIGHT[name]} for name in EXERCISES]
    save(
        "walter.ipynb",
        {"nbformat": 4, "nbformat_minor": 4, "metadata": {}, "cells": cells},
    )


P, W, N, E, T = "passed", "wrong", "not attempted", "error", "timeout"

# student: (chapter, statuses of encode, one_hot, Embedding, cosine_similarity, words every problem cell must hold)
EXPECTED = {
    "alice": (CHAPTER, [P, P, P, P], []),
    "bob": (CHAPTER, [N, N, N, N], []),
    "carol": (CHAPTER, [W, W, W, W], []),
    "dave": (
        CHAPTER,
        [P, T, P, P],
        ["one_hot: checking `one_hot` did not finish", "ran past the 8 s limit"],
    ),
    "erin": (
        CHAPTER,
        [E, P, P, P],
        ["encode: checking `encode` stopped its process", "exit status 1"],
    ),
    "frank": (
        CHAPTER,
        [E, P, P, P],
        ["encode: checking `encode` stopped its process", "more than the 10 MB output"],
    ),
    "grace": (CHAPTER, [P, P, N, P], []),
    "heidi": (
        OTHER,
        [N, N, N, N],
        ["chapter 02_embedding_language_model", "1/4 passed"],
    ),
    "ivan": ("", [E, E, E, E], ["empty file"]),
    "judy": ("", [E, E, E, E], ["malformed JSON"]),
    "ken_colab": (CHAPTER, [P, P, P, P], []),
    "lena_lab": (CHAPTER, [P, P, P, P], []),
    "mallory": (CHAPTER, [N, N, N, W], []),
    "oscar": (CHAPTER, [N, N, N, N], []),
    "peggy": (CHAPTER, [W, W, W, W], []),
    "trent": (CHAPTER, [W, P, P, P], []),
    "uma": (CHAPTER, [N, N, N, W], []),
    "victor": ("", [E, E, E, E], ["not a Jupyter notebook"]),
    "walter": (
        CHAPTER,
        [P, P, P, P],
        ["no chapter's homework recognised", "graded as chapter 1"],
    ),
}

TIMEOUT = 8


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("grading")
    build_class(base / "class")
    run_grader(
        base / "class",
        base / "results",
        "--jobs",
        "2",
        "--timeout",
        str(TIMEOUT),
        "--memory-gb",
        "3",
    )
    return base / "results"


@pytest.mark.slow
def test_gradebook_cell_by_cell(graded):
    book = gradebook(graded)
    assert set(book) == set(EXPECTED)
    header = list(next(iter(book.values())))
    assert header == [
        "student",
        "file",
        "chapter",
        *EXERCISES,
        "total",
        "out_of",
        "problems",
        "flags",
        "seconds",
    ]
    for student, (chapter, statuses, words) in EXPECTED.items():
        row = book[student]
        got = [row[e] for e in EXERCISES]
        assert (row["chapter"], got) == (chapter, statuses), (student, row)
        assert int(row["total"]) == statuses.count(P), (student, row)
        assert row["out_of"] == "4"
        for word in words:
            assert word in row["problems"], (student, word, row["problems"])
        if not words:
            assert row["problems"] == "", (student, row["problems"])
    assert book["bob"]["file"] == "bob/01_words_to_vectors.ipynb"
    # every exercise of chapter 1 (the class Embedding too) is checked in the grader's process: nothing flagged
    assert all(row["flags"] == "" for row in book.values())
    # the memory limit, in the verdict
    assert "allocate" in (graded / "feedback" / "trent.md").read_text()
    uma = (graded / "feedback" / "uma.md").read_text()
    assert (
        "NameError" in uma
        and "`EPS` is set by other statements of the notebook, which it does not run"
        in uma
    )


@pytest.mark.slow
def test_tampering_does_not_pass(graded):
    """Printed PASSED, edited outputs and redefined checkers leave the verdicts those of the code itself."""
    book = gradebook(graded)
    assert [book["oscar"][e] for e in EXERCISES] == [N] * 4
    # cosine: the companion's, imported
    assert [book["mallory"][e] for e in EXERCISES] == [N, N, N, W]
    assert (
        "imported instead of written"
        in (graded / "feedback" / "mallory.md").read_text()
    )
    assert [book["peggy"][e] for e in EXERCISES] == [W] * 4
    feedback = (graded / "feedback" / "peggy.md").read_text()
    # encode: stoi[t] for an unknown token
    assert "Your code raised KeyError" in feedback
    assert HINTS["one_hot"] in feedback
    assert "does not carry gradients back" in feedback  # Embedding: a detached output
    # cosine: a mistake no hint names, so the general hint
    assert "cos(u, v) = uᵀv / (‖u‖ ‖v‖)" in feedback


@pytest.mark.slow
def test_feedback_and_summary(graded):
    carol = (graded / "feedback" / "carol.md").read_text()
    for name, hint in HINTS.items():
        assert f"## `{name}`: wrong" in carol and hint in carol, name
    assert "4 of 4 exercises passed" in (graded / "feedback" / "alice.md").read_text()
    heidi = (graded / "feedback" / "heidi.md").read_text()
    assert (
        "## `bigram_counts`: passed" in heidi and "## `train`: not attempted" in heidi
    )
    summary = (graded / "summary.md").read_text()
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in summary.splitlines()
        if line.startswith("| `")
    }
    passed = {
        e: sum(EXPECTED[s][1][k] == P for s in EXPECTED)
        for k, e in enumerate(EXERCISES)
    }
    for k, e in enumerate(EXERCISES):
        counts = [
            sum(EXPECTED[s][1][k] == status for s in EXPECTED)
            for status in (P, W, N, E, T)
        ]
        assert rows[f"`{e}`"][:5] == [str(c) for c in counts], e
        assert int(rows[f"`{e}`"][0]) == passed[e]
    # one_hot's mistake is carol's and peggy's: the most common
    assert HINTS["one_hot"] in rows["`one_hot`"][5] and rows["`one_hot`"][5].endswith(
        "(2)"
    )
    png = (graded / "summary.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


@pytest.mark.slow
def test_exercise_time_limit(tmp_path):
    """An answer that sleeps past --timeout is stopped; its row says so, naming the limit. The limit counts from
    when the answer is defined (starting Python and importing torch are not the student's time), and the answer
    sleeps far longer than the limit, so a slow machine gives the same verdict as a fast one."""
    (tmp_path / "class").mkdir()
    sleeper = RIGHT["cosine_similarity"].replace(
        "    return", "    import time\n\n    time.sleep(600)\n    return"
    )
    nb = answered({"cosine_similarity": sleeper})
    (tmp_path / "class" / "alice.ipynb").write_text(json.dumps(nb))
    run_grader(
        tmp_path / "class",
        tmp_path / "out",
        "--chapter",
        "1",
        "--timeout",
        "3",
        timeout=300,
    )
    row = gradebook(tmp_path / "out")["alice"]
    assert [row[e] for e in EXERCISES] == [N, N, N, T], row
    assert (
        "cosine_similarity: checking `cosine_similarity` did not finish: it ran past the 3 s limit"
        in row["problems"]
    )


def build_copies(folder: Path, count: int) -> None:
    """``count`` solved chapter-1 notebooks with small variations (the speed measurement in the README): each
    student takes each answer from one of the right sets or the mistakes, with a comment of their own."""
    folder.mkdir(parents=True)
    sets = [RIGHT, RIGHT_TOO, RIGHT, RIGHT_TOO, NAMED_MISTAKES, OTHER_MISTAKES]
    for k in range(count):
        answers = {
            name: sets[(k + 3 * i) % len(sets)][name]
            for i, name in enumerate(EXERCISES)
        }
        answers = {
            name: f"# written by student {k}\n{code}" for name, code in answers.items()
        }
        if k % 8 == 7:
            del answers["Embedding"]  # not attempted
        (folder / f"student{k:02d}.ipynb").write_text(json.dumps(answered(answers)))


# python tests/test_grade.py FOLDER [COPIES]: a synthetic class to grade by hand
if __name__ == "__main__":
    if len(sys.argv) > 2:
        build_copies(Path(sys.argv[1]), int(sys.argv[2]))
        print(f"{sys.argv[2]} copies in {sys.argv[1]}")
    else:
        build_class(Path(sys.argv[1]))
        print(f"{len(EXPECTED)} submissions in {sys.argv[1]}")
