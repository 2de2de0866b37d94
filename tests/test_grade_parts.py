"""The grader's parts, one by one and fast: taking an answer out of a notebook, recognising the book's solution,
values as data, the command line's errors, the gradebook's escaping and atomic writes, the container recipe."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from grading_support import run_isolated

from homework_grader import answers, cli, report, wire
from homework_grader.chapters import Chapter, Exercise

ROOT = Path(__file__).resolve().parents[1]

# ----- taking the answer out of the notebook -----------------------------------------------------------------

CELLS = [
    "import torch\nimport math as m\nfrom torch import nn\n%matplotlib inline",
    "x = torch.randn(3)\nSCALE = 2.0\nNAMES = ('a', 'b')\nunused = 5\n",
    "def helper(t):\n    return t * SCALE\n",
    "for i in range(3):\n    print(i)\nW = torch.ones(2)\n",
    "def double(t):\n    return 0\n",
    "def double(t):\n    '''Twice t.'''\n    y = helper(t)\n    return y + m.pi * 0 + len(NAMES) * 0\n",
    "def uses_w(t):\n    return t @ W + x\n",
    "def broken(:\n",
]


def test_extract_takes_the_definition_and_what_it_uses():
    a = answers.extract(CELLS, "double")
    ns: dict = {}
    exec(a.code, ns)
    # the last definition, with its helper
    assert ns["double"](torch.tensor(1.5)).item() == pytest.approx(3.0)
    assert (
        "import math as m" in a.code and "SCALE = 2.0" in a.code and "NAMES" in a.code
    )
    assert (
        "unused" not in a.code
        and "randn" not in a.code
        and "print" not in a.code
        and "nn" not in a.code
    )
    assert a.cell == 5 and a.skipped == [] and a.unparsable == [7]


def test_extract_names_what_it_did_not_run():
    a = answers.extract(CELLS, "uses_w")
    assert a.skipped == ["W", "x"]  # bound only by statements the grader does not run
    assert answers.extract(CELLS, "absent").found is False
    assigned = answers.extract(["f = lambda t: t\n"], "f")
    assert not assigned.found and assigned.assigned


def test_extract_keeps_locals_out_of_the_skipped_names():
    cells = [
        "ids = [1]\ntokens = 2\n",
        "def f(tokens, n=3):\n    ids = [t for t in tokens]\n    return ids, n\n",
    ]
    assert answers.extract(cells, "f").skipped == []


def test_extract_puts_a_later_cells_import_first():
    """The last import of a name wins, as in a notebook run top to bottom; a later cell's comes before the
    definition that uses it when it is defined (a default argument, a class body)."""
    cells = [
        "import torch\n\ndef f(x, eps=torch.tensor(1e-6)):\n    return x + eps\n",
        "import torch\n\ndef g(x):\n    return torch.relu(x)\n",
    ]
    code = answers.extract(cells, "f").code
    assert code.index("import torch") < code.index("def f"), code
    namespace: dict = {}
    exec(code, namespace)
    assert float(namespace["f"](1.0)) > 1.0


def test_stub_and_reference_mentions():
    assert answers.is_stub(
        answers.extract(
            ["def f(x):\n    raise NotImplementedError  # your code\n"], "f"
        )
    )
    assert not answers.is_stub(answers.extract(["def f(x):\n    return x\n"], "f"))
    for code in (
        "import companion.attention as A\ndef f(x):\n    return A.f(x)\n",
        "from companion.attention import f as g\ndef f(x):\n    return g(x)\n",
        "import companion\ndef f(x):\n    return companion.attention.f(x)\n",
    ):
        assert answers.mentions(answers.extract([code], "f"), "f"), code
    own = "from torch import nn\nclass Embedding(nn.Module):\n    def forward(self, x):\n        return nn.Embedding\n"
    assert not answers.mentions(answers.extract([own], "Embedding"), "Embedding")


def test_normalised_ignores_names_of_locals_comments_and_docstrings():
    a = "def f(x: int) -> int:\n    '''Doc.'''\n    y = x + 1  # one more\n    return y * 2\n"
    b = "def f(value):\n    result = value + 1\n    return result * 2\n"
    c = "def f(x):\n    y = x + 2\n    return y * 2\n"
    norm = [answers.normalised(answers.extract([s], "f").definition) for s in (a, b, c)]
    assert norm[0] == norm[1] != norm[2]


def test_book_solutions_are_read_from_the_chapter():
    solutions = answers.book_solutions(ROOT / "book" / "01_words_to_vectors.md")
    assert {"encode", "one_hot", "Embedding", "cosine_similarity"} <= set(solutions)
    assert answers.book_solutions(ROOT / "book" / "no_such_chapter.md") == {}


def test_pen_and_paper_answers_are_collected_under_their_heading():
    nb = {
        "cells": [
            {
                "cell_type": "markdown",
                "source": "### Exercise 1.3 (By hand)\n\nCompute it.",
            },
            {"cell_type": "code", "source": "x = 1"},
            {
                "cell_type": "markdown",
                "source": ["**Your answer:**", " it is 4, because 2 + 2."],
            },
            {"cell_type": "markdown", "source": "**YOUR ANSWER** (exercise 1.4): none"},
            {
                "cell_type": "markdown",
                "source": "Some text mentioning **Your answer:** later on",
            },
        ]
    }
    found = answers.pen_and_paper(nb)
    assert [w["exercise"] for w in found] == ["Exercise 1.3 (By hand)"] * 2
    assert "it is 4" in found[0]["answer"] and "none" in found[1]["answer"]


# ----- values as data ------------------------------------------------------------------------------------------


def _round_trip(value, strict=False):
    read, write = __import__("os").pipe()
    try:
        wire.write(write, {"op": "x", "value": value}, strict=strict)
        return wire.read(read)["value"]
    finally:
        __import__("os").close(read)
        __import__("os").close(write)


def test_values_travel_as_data():
    value = {
        "t": torch.arange(6.0).reshape(2, 3),
        ("a", 1): [1, 2.5, float("nan"), None, True, "s"],
        "n": np.array([1, 2], dtype=np.int16),
        "dtype": torch.long,
        "size": torch.Size([2, 3]),
        "set": {1, 2},
        "scalar": np.float32(1.5),
    }
    got = _round_trip(value)
    assert (
        torch.equal(got["t"], value["t"])
        and got[("a", 1)][:2] == [1, 2.5]
        and np.isnan(got[("a", 1)][2])
    )
    assert (
        got[("a", 1)][3:] == [None, True, "s"]
        and isinstance(got["n"], np.ndarray)
        and got["n"].dtype == np.int16
    )
    assert (
        got["dtype"] is torch.long
        and got["size"] == torch.Size([2, 3])
        and got["set"] == {1, 2}
    )
    assert isinstance(got["scalar"], np.float32)


def test_what_is_not_data_arrives_opaque_or_is_refused():
    class Sneaky(torch.Tensor):
        def __eq__(self, other):
            return True

    got = _round_trip([lambda: 1, Sneaky(torch.zeros(2))])
    assert isinstance(got[0], wire.Opaque) and got[0] != got[0]
    # a plain tensor: the subclass's comparisons stay behind
    assert type(got[1]) is torch.Tensor
    with pytest.raises(wire.Unportable):
        _round_trip(lambda: 1, strict=True)


def test_a_pickle_in_a_message_is_never_loaded():
    import io
    import os
    import struct

    stream = io.BytesIO()
    # an array that needs unpickling
    np.save(stream, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    header = json.dumps({"op": "result", "value": {"N": 0}, "tensors": 1}).encode()
    blob = b"N" + stream.getvalue()
    read, write = os.pipe()
    os.write(
        write,
        struct.pack("<Q", len(header)) + header + struct.pack("<Q", len(blob)) + blob,
    )
    with pytest.raises(wire.WireError, match="pickle"):
        wire.read(read)
    os.close(read)
    os.close(write)


def test_malformed_messages_are_refused():
    import os
    import struct

    read, write = os.pipe()
    os.write(write, struct.pack("<Q", wire.MAX_MESSAGE + 1))
    with pytest.raises(wire.WireError, match="too large"):
        wire.read(read)
    os.write(write, struct.pack("<Q", 3) + b"[1]" + struct.pack("<Q", 0))
    with pytest.raises(wire.WireError):
        wire.read(read)
    os.close(write)
    with pytest.raises(wire.WireError, match="cut short"):
        wire.read(read)
    os.close(read)


# ----- the answer's process ----------------------------------------------------------------------------------

HIDE = """\
import gc, sys, torch
import companion.attention, companion.transformer
from homework_grader import sandbox

alias = companion.transformer.EncoderBlock
for name in ("EncoderBlock", "weightless_self_attention"):
    sandbox.hide_reference(name, sandbox.defining_modules(name))
reached = {
    "module": companion.transformer.EncoderBlock,
    "alias": alias,
    "subclass": companion.transformer.CausalBlock.__mro__[1],
    "function": companion.attention.weightless_self_attention,
}
reached |= {f"gc{i}": o for i, o in enumerate(gc.get_objects())
            if callable(o) and getattr(o, "__name__", "") == "weightless_self_attention"}
for how, obj in reached.items():
    try:
        obj(8, 2, 16) if "attention" not in getattr(obj, "__name__", "") else obj(torch.ones(2, 3))
        print(how, "CALLED")
    except Exception as e:
        print(how, type(e).__name__, "write this one yourself" in str(e))
"""


def test_the_reference_cannot_be_reached_in_the_answers_process():
    """Through its module, an alias made before, a subclass's __mro__ or the garbage collector: it raises."""
    run = run_isolated(HIDE)
    lines = run.stdout.splitlines()
    assert run.returncode == 0 and len(lines) >= 4, run.stderr[-2000:]
    assert all(line.endswith("True") for line in lines), lines


ONE_CALLS = """\
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.functional import layer_norm as bare
from homework_grader import sandbox

made_before = nn.LayerNorm(4)
entries = [
    {"name": "torch.nn.functional.layer_norm", "keyword": None, "message": "one call: layer_norm"},
    {"name": "torch.nn.LayerNorm", "keyword": None, "message": "one call: LayerNorm"},
    {"name": "torch.nn.functional.cross_entropy", "keyword": "label_smoothing", "message": "one call: smoothing"},
]
sandbox.hide_one_calls(entries)
x, y = torch.randn(3, 4), torch.tensor([0, 1, 2])
tries = {
    "F.layer_norm": lambda: F.layer_norm(x, (4,)),
    "bare": lambda: bare(x, (4,)),
    "nn.LayerNorm": lambda: nn.LayerNorm(4),
    "subclass": lambda: type("Mine", (nn.LayerNorm,), {})(4),
    "smoothing": lambda: F.cross_entropy(x, y, label_smoothing=0.1),
    "CrossEntropyLoss": lambda: nn.CrossEntropyLoss(label_smoothing=0.1)(x, y),
}
for how, attempt in tries.items():
    try:
        attempt()
        print(how, "CALLED")
    except sandbox.WriteItYourself as e:
        print(how, "one call" in str(e))
print("plain", bool(torch.isfinite(F.cross_entropy(x, y))))
print("subclass of PyTorch's", issubclass(nn.LayerNorm, type(made_before)))
"""


def test_pytorch_one_call_answers_raise_in_the_answers_process():
    """The checker's one_call entries, sent as data: PyTorch's call raises under its name, an alias and through
    the module that calls it; with a keyword, only when that keyword is given; a class's stand-in is a subclass
    of PyTorch's."""
    run = run_isolated(ONE_CALLS)
    lines = run.stdout.splitlines()
    assert run.returncode == 0 and len(lines) == 8, run.stderr[-2000:]
    assert all(line.endswith("True") for line in lines), lines


def test_the_checkers_one_call_entries_travel_as_data():
    import json

    from companion.exercises.transformer import check_label_smoothed_cross_entropy

    (entry,) = [c.data() for c in check_label_smoothed_cross_entropy.one_call]
    assert json.loads(json.dumps(entry)) == entry
    assert entry["keyword"] == "label_smoothing" and "one call" in entry["message"]


# ----- submissions, command line, reports ----------------------------------------------------------------------


def test_two_notebooks_of_one_student_grade_the_newest(tmp_path):
    import os

    (tmp_path / "alice").mkdir()
    old, new = tmp_path / "alice" / "a.ipynb", tmp_path / "alice" / "b.ipynb"
    new.write_text("{}")
    old.write_text("{}")
    os.utime(old, (1_000_000, 1_000_000))
    (tmp_path / "bob.ipynb").write_text("{}")
    found, notes = cli.find_submissions(tmp_path)
    assert found == [("alice", new), ("bob", tmp_path / "bob.ipynb")]
    assert (
        len(notes) == 1
        and "graded the newest, alice/b.ipynb" in notes[0]
        and "alice/a.ipynb" in notes[0]
    )


def _cli(capsys, *args: str) -> tuple[int, str]:
    """The exit status and standard error of the command line, run in this process (``python -m homework_grader``
    calls the same ``homework_grader.main``; a process of its own would spend its time importing torch)."""
    import homework_grader

    with pytest.raises(SystemExit) as stopped:
        homework_grader.main(list(args))
    return stopped.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["EMPTY", "--out", "OUT"], "no .ipynb files under"),
        (["MISSING", "--out", "OUT"], "does not exist"),
        (["ONE", "--out", "OUT", "--homework", "EMPTY"], "no homework notebooks"),
        (["ONE", "--out", "FILE"], "is an existing file"),
        (["ONE", "--out", "OUT", "--jobs", "0"], "--jobs: must be at least 1"),
        (["ONE", "--out", "OUT", "--timeout", "-5"], "--timeout: must be positive"),
        (["ONE", "--out", "OUT", "--memory-gb", "0"], "--memory-gb: must be positive"),
        (["ONE", "--out", "OUT", "--output-mb", "-1"], "--output-mb: must be positive"),
        (["ONE", "--out", "OUT", "--chapter", "99"], "no such chapter"),
    ],
)
def test_command_line_errors_are_clear_and_come_before_grading(
    tmp_path, capsys, args, message
):
    (tmp_path / "empty").mkdir()
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "alice.ipynb").write_text(
        (ROOT / "book" / "homework" / "01_words_to_vectors.ipynb").read_text()
    )
    (tmp_path / "file").write_text("not a folder")
    names = {
        "EMPTY": "empty",
        "MISSING": "missing",
        "ONE": "one",
        "OUT": "out",
        "FILE": "file",
    }
    status, stderr = _cli(
        capsys, *[str(tmp_path / names[a]) if a in names else a for a in args]
    )
    assert status == 2, stderr
    assert message in stderr and "Traceback" not in stderr, stderr
    assert not (tmp_path / "out").exists()


def test_formulas_are_escaped_in_the_gradebook(tmp_path):
    assert [
        report.cell(v) for v in ("=HYPERLINK(1)", "+1", "-2", "@x", "alice", 3)
    ] == [
        "'=HYPERLINK(1)",
        "'+1",
        "'-2",
        "'@x",
        "alice",
        3,
    ]
    chapter = Chapter("01_x", 1, "X", (Exercise("f", "check_f", "m"),))
    rows = [
        {
            "student": '=HYPERLINK("http://x","y")',
            "file": "=1+1.ipynb",
            "chapter": "",
            "f": "passed",
        }
    ]
    rows[0] |= {
        "total": 1,
        "out_of": 1,
        "problems": "-oops",
        "flags": "",
        "seconds": "1.0",
    }
    report.write_gradebook(tmp_path / "g.csv", rows, chapter)
    text = (tmp_path / "g.csv").read_text(encoding="utf-8-sig")
    assert "'=HYPERLINK" in text and "'=1+1.ipynb" in text and "'-oops" in text
    # written through a temporary file, renamed
    assert [p.name for p in tmp_path.iterdir()] == ["g.csv"]


def test_book_solutions_count_only_when_few():
    """Most of a notebook equal to the book's solutions: flagged and not counted. One short answer that happens to
    be the book's: flagged for the instructor, and counted."""
    chapter = Chapter(
        "01_x", 1, "X", tuple(Exercise(n, f"check_{n}", "m") for n in "fgh")
    )
    book = {"status": "passed", "flag": "the book's published solution"}
    own = {"status": "passed"}
    result = {
        "student": "a",
        "file": "a.ipynb",
        "chapter": "01_x",
        "problems": [],
        "seconds": 1.0,
    }
    copied = report.row(
        {**result, "exercises": {"f": book, "g": book, "h": own}}, chapter
    )
    assert [copied[n] for n in "fgh"] == ["passed (book's solution)"] * 2 + [
        "passed"
    ] and copied["total"] == 1
    once = report.row({**result, "exercises": {"f": book, "g": own, "h": own}}, chapter)
    assert (
        [once[n] for n in "fgh"] == ["passed"] * 3
        and once["total"] == 3
        and "published" in once["flags"]
    )


def test_rerun_clears_stale_feedback_and_writes_atomically(tmp_path):
    chapter = Chapter(
        "01_x", 1, "X", (Exercise("f", "check_f", "m"), Exercise("g", "check_g", "m"))
    )
    result = {
        "path": "a",
        "file": "a.ipynb",
        "chapter": "01_x",
        "problems": [],
        "seconds": 1.0,
    }
    entry = {
        "status": "passed",
        "text": "PASSED  f",
        "flag": "`f` is the book's published solution",
    }
    both = {"f": entry, "g": entry}
    first = [
        {**result, "student": "alice", "exercises": both},
        {**result, "student": "bob", "exercises": {}},
    ]
    first[1]["written"] = [
        {"exercise": "Exercise 1.2", "answer": "**Your answer:** four"}
    ]
    report.write_all(tmp_path, first, [chapter], chapter)
    assert (tmp_path / "feedback" / "bob.md").exists()
    assert "## Written answers" in (tmp_path / "feedback" / "bob.md").read_text()
    book = report.read_gradebook(tmp_path / "gradebook.csv")
    assert (
        book[0]["f"] == "passed (book's solution)"
        and book[0]["total"] == "0"
        and "published" in book[0]["flags"]
    )
    report.write_all(tmp_path, first[:1], [chapter], chapter)
    assert sorted(p.name for p in (tmp_path / "feedback").iterdir()) == ["alice.md"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


# ----- packaging and the container recipe ----------------------------------------------------------------------


def test_console_script_and_grade_extra():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = config["project"]
    assert project["scripts"]["companion-grade"] == "homework_grader:main"
    # two top-level packages in one distribution: the grader ships beside the companion, not inside it
    assert config["tool"]["setuptools"]["packages"]["find"]["include"] == [
        "companion*",
        "homework_grader*",
    ]
    extra = {
        re.split(r"[<>=]", r)[0] for r in project["optional-dependencies"]["grade"]
    }
    assert (
        {"nbformat", "safetensors"} <= extra
        and "transformers" not in extra
        and "nbclient" not in extra
    )


def test_container_recipe_refers_to_what_exists():
    recipe = (ROOT / "tools" / "grader.Dockerfile").read_text()
    lines = [
        line.strip()
        for line in recipe.splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0].startswith("FROM python:3.1")
    for line in lines:
        if line.startswith("COPY"):
            *sources, _ = shlex.split(line)[1:]
            for s in sources:
                assert (ROOT / s).exists(), s
    assert any(line.startswith("USER ") and "root" not in line for line in lines)
    entry = json.loads(
        next(line for line in lines if line.startswith("ENTRYPOINT"))[
            len("ENTRYPOINT") :
        ]
    )
    assert entry == ["companion-grade"]
    assert '".[grade]"' in recipe and "constraints.txt" in recipe
    readme = (ROOT / "README.md").read_text()
    assert "tools/grader.Dockerfile" in readme and "--network=none" in readme


def test_chapter_6_bpe_training_is_graded_through_the_grader(tmp_path):
    """learn_merges, the exercise that builds chapter 6's BPE training, graded as a submitted notebook: a right
    answer (written here, with its own helper) passes, a wrong one (ties to the largest pair) is wrong with its hint,
    and a stub is not attempted."""
    from grading_support import gradebook, run_grader

    right = (
        "from collections import Counter\n\n\n"
        "def merge_pair(ids, pair, new_id):\n"
        "    out, i = [], 0\n"
        "    while i < len(ids):\n"
        "        if tuple(ids[i : i + 2]) == pair:\n"
        "            out.append(new_id)\n"
        "            i += 2\n"
        "        else:\n"
        "            out.append(ids[i])\n"
        "            i += 1\n"
        "    return out\n\n\n"
        "def learn_merges(words, num_merges):\n"
        "    seqs = [list(w.encode('utf-8')) for w in words]\n"
        "    merges = []\n"
        "    for k in range(num_merges):\n"
        "        counts = Counter(p for s in seqs for p in zip(s, s[1:]))\n"
        "        if not counts:\n"
        "            break\n"
        "        top = max(counts.values())\n"
        "        pair = min(p for p in counts if counts[p] == top)\n"
        "        seqs = [merge_pair(s, pair, 256 + k) for s in seqs]\n"
        "        merges.append(pair)\n"
        "    return merges\n"
    )
    wrong = right.replace(
        "pair = min(p for p in counts", "pair = max(p for p in counts"
    )
    homework = json.loads((ROOT / "book" / "homework" / "06_gpt.ipynb").read_text())
    stub = next(
        i
        for i, c in enumerate(homework["cells"])
        if "exercise-stub" in c.get("metadata", {}).get("tags", [])
        and "def learn_merges(" in "".join(c["source"])
    )
    for student, code in (("right", right), ("wrong", wrong), ("stub", None)):
        nb = json.loads(json.dumps(homework))
        if code is not None:
            nb["cells"][stub]["source"] = code
        (tmp_path / "class").mkdir(exist_ok=True)
        (tmp_path / "class" / f"{student}.ipynb").write_text(json.dumps(nb))
    run_grader(tmp_path / "class", tmp_path / "out", "--chapter", "6")
    book = gradebook(tmp_path / "out")
    assert book["right"]["learn_merges"] == "passed", book["right"]
    assert book["wrong"]["learn_merges"] == "wrong", book["wrong"]
    assert book["stub"]["learn_merges"] == "not attempted", book["stub"]
    feedback = (tmp_path / "out" / "feedback" / "wrong.md").read_text()
    assert "Ties go to the smallest pair" in feedback, feedback


@pytest.mark.slow  # two answers through the sandbox
def test_a_pytorch_one_call_answer_is_wrong_through_the_grader():
    from homework_grader.chapters import Exercise
    from homework_grader.remote import Limits, check_exercise

    exercise = Exercise(
        name="layer_norm",
        checker="check_layer_norm",
        module="companion.exercises.transformer",
    )
    one_call = (
        "import torch.nn.functional as F\n"
        "def layer_norm(x, weight, bias, eps=1e-5):\n"
        "    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)\n"
    )
    built = (
        "import torch\n"
        "def layer_norm(x, weight, bias, eps=1e-5):\n"
        "    var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)\n"
        "    return (x - mean) / torch.sqrt(var + eps) * weight + bias\n"
    )
    wrong = check_exercise(exercise, one_call, Limits(seconds=120), [])
    assert wrong["status"] == "wrong", wrong
    assert (
        "`torch.nn.functional.layer_norm` computes this whole exercise" in wrong["text"]
    )
    assert (
        check_exercise(exercise, built, Limits(seconds=120), [])["status"] == "passed"
    )
