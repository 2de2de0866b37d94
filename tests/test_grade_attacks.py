"""The grader against a class that wants unearned points (issue 19): one submission per attack, 0 unearned PASSED.

Every submission is chapter 4's homework notebook whose answer to ``weightless_self_attention`` is wrong (it
returns its input) or missing, with one attack added: in a cell of its own before the answer (the grader does
not run such cells), and where the grader does run it, in the answer itself (a helper that the answer's default
argument calls when the function is defined, or the function's body, when the checker calls it). Beside them,
right answers written in several styles must still pass. The whole class is graded once, ``--jobs 2``, in one
run of the grader with the class of tests/test_grade_walls.py.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from grading_support import gradebook

ROOT = Path(__file__).resolve().parents[1]
HOMEWORK = ROOT / "book" / "homework"
CHAPTER = "04_attention"
NAME = "weightless_self_attention"
WRONG_BODY = "    return x\n"  # what every attacking answer computes: not attention

# ----- the attacks: (code in a cell before the answer, code the answer runs) ---------------------------------

PATCH_COMPARISONS = """\
import numpy
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.isclose = lambda a, b, *r, **k: torch.ones_like(a, dtype=torch.bool)
numpy.allclose = lambda *a, **k: True
"""

META_PATH = """\
import sys, types


class Finder:
    def find_spec(self, name, path=None, target=None):
        if name.startswith("companion"):
            sys.modules.pop(name, None)
        return None

    def find_module(self, name, path=None):
        return None


sys.meta_path.insert(0, Finder())
fake = types.ModuleType("companion.exercises.checking")
fake.compare = lambda *a, **k: None
sys.modules["companion.exercises.checking"] = fake
"""

IMPORTLIB = """\
import importlib, types
real = importlib.import_module


def fake(name, package=None):
    module = real(name, package)
    if "exercises" in name:
        for k in dir(module):
            if k.startswith("check_"):
                setattr(module, k, lambda f: print("PASSED"))
    return module


importlib.import_module = fake
"""

JSON_DUMPS = """\
import json
real = json.dumps
json.dumps = lambda obj, *a, **k: real({**obj, "status": "passed"} if isinstance(obj, dict) else obj, *a, **k)
"""

MODULE_GETATTR = """\
import sys
sys.modules[__name__].__dict__["__getattr__"] = lambda name: (lambda *a, **k: "passed")
for m in list(sys.modules.values()):
    try:
        m.__getattr__ = lambda name: (lambda *a, **k: "passed")
    except Exception:
        pass
"""

SETTRACE = """\
import sys


def tracer(frame, event, arg):
    if event == "return" and "status" in frame.f_locals:
        frame.f_locals["status"] = "passed"
    return tracer


sys.settrace(tracer)
"""

AUDIT_HOOK = """\
import sys


def hook(event, args):
    if event == "open" and "verdict" in str(args[0]):
        raise SystemExit(0)


sys.addaudithook(hook)
"""

SIGNAL_HANDLER = """\
import signal


def rewrite(signum, frame):
    while frame is not None:
        for k in ("status", "got", "expected"):
            if k in frame.f_locals:
                frame.f_locals[k] = "passed"
        frame = frame.f_back


signal.signal(signal.SIGALRM, rewrite)
signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)
"""

IPYTHON_HOOKS = """\
ip = get_ipython()
ip.input_transformers_cleanup.append(lambda lines: [l.replace("check_", "print") for l in lines])
ip.events.register("post_run_cell", lambda result: print("PASSED"))
"""

LYING_TENSOR = """\
class Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func.__name__ in ("allclose", "equal", "__eq__", "isclose"):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})

    def __eq__(self, other):
        return True
"""

FRAME_REACH = """\
import gc, inspect


def find_reference():
    frame = inspect.currentframe()
    while frame is not None:
        for value in list(frame.f_locals.values()) + list(frame.f_globals.values()):
            if getattr(value, "__name__", "") == "weightless_self_attention" and value is not weightless_self_attention:
                return value
        frame = frame.f_back
    for obj in gc.get_objects():
        if callable(obj) and getattr(obj, "__module__", "") == "companion.attention" and getattr(
            obj, "__name__", ""
        ) == "weightless_self_attention":
            return obj
    return None
"""

DETACHED = """\
import os, subprocess, sys, time

MARKER = {marker!r}
SCRIPT = (
    "import os, sys, time\\n"
    "open(sys.argv[1], 'w').write('started')\\n"
    "for _ in range(600):\\n"
    "    time.sleep(0.1)\\n"
    "    for root, dirs, files in os.walk('/tmp'):\\n"
    "        if 'gradebook.csv' in files:\\n"
    "            open(os.path.join(root, 'gradebook.csv'), 'a').write('mallory,x,04_attention,passed\\\\n')\\n"
)


def escape():
    try:
        subprocess.Popen([sys.executable, "-c", SCRIPT, MARKER], start_new_session=True)
    except Exception:
        pass
    try:
        if os.fork() == 0:
            os.setsid()
            open(MARKER, "w").write("started")
            time.sleep(30)
            os._exit(0)
    except Exception:
        pass
    try:
        os.system(f"{{sys.executable}} -c \\"open('{{MARKER}}', 'w').write('started')\\" &")
    except Exception:
        pass
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        if libc.fork() == 0:
            libc.setsid()
            open(MARKER, "w").write("started")
            libc._exit(0)
    except Exception:
        pass
"""

NEIGHBOUR = """\
import glob, os


def write_everywhere():
    for pattern in ("/tmp/companion-*/*", "/tmp/companion-*", "/tmp/*/*.jsonl", "/tmp/*/*.json"):
        for path in glob.glob(pattern):
            try:
                if os.path.isdir(path):
                    path = os.path.join(path, "verdicts.jsonl")
                with open(path, "a") as f:
                    f.write('{"status": "passed", "name": "weightless_self_attention"}\\n')
            except Exception:
                pass
    try:
        out = open(f"/proc/{os.getppid()}/cmdline").read().split("\\0")
        folder = out[out.index("--out") + 1]
        open(os.path.join(folder, "gradebook.csv"), "w").write("hacked")
    except Exception:
        pass
"""

COPY_NEIGHBOUR = """\
import glob, json, os


def neighbours_answer():
    pid = os.getpid()
    while pid > 1:
        args = open(f"/proc/{pid}/cmdline").read().split("\\0")
        if "homework_grader" in args:
            folder = args[args.index("homework_grader") + 1]
            for path in sorted(glob.glob(os.path.join(folder, "*.ipynb"))):
                for cell in json.load(open(path))["cells"]:
                    text = "".join(cell["source"])
                    if "def weightless_self_attention" in text and "softmax" in text:
                        namespace = {}
                        exec("import torch\\n" + text, namespace)
                        return namespace["weightless_self_attention"]
        pid = int(next(line.split()[1] for line in open(f"/proc/{pid}/status") if line.startswith("PPid:")))
    return None
"""


def answer_calling(helper: str, call: str, body: str = WRONG_BODY) -> str:
    """The helper's code, then the answer: the helper runs when the answer is defined and when it is called."""
    return f"{helper}\n\ndef {NAME}(x, _defined=({call})):\n    {call}\n{body}"


ATTACKS: dict[str, tuple[str, str]] = {
    # name: (a cell before the answer, the answer)
    "patched_allclose": (
        PATCH_COMPARISONS,
        answer_calling(
            f"def patch():\n{textwrap.indent(PATCH_COMPARISONS, '    ')}", "patch()"
        ),
    ),
    "meta_path_hook": (
        META_PATH,
        answer_calling(f"def hook():\n{textwrap.indent(META_PATH, '    ')}", "hook()"),
    ),
    "importlib_patch": (
        IMPORTLIB,
        answer_calling(
            f"def patch():\n{textwrap.indent(IMPORTLIB, '    ')}", "patch()"
        ),
    ),
    "json_dumps_patch": (
        JSON_DUMPS,
        answer_calling(
            f"def patch():\n{textwrap.indent(JSON_DUMPS, '    ')}", "patch()"
        ),
    ),
    "module_getattr": (
        MODULE_GETATTR,
        answer_calling(
            f"def patch():\n{textwrap.indent(MODULE_GETATTR, '    ')}", "patch()"
        ),
    ),
    "settrace": (
        SETTRACE,
        answer_calling(f"def trace():\n{textwrap.indent(SETTRACE, '    ')}", "trace()"),
    ),
    "audit_hook": (
        AUDIT_HOOK,
        answer_calling(f"def hook():\n{textwrap.indent(AUDIT_HOOK, '    ')}", "hook()"),
    ),
    "signal_handler": (
        SIGNAL_HANDLER,
        answer_calling(
            f"def arm():\n{textwrap.indent(SIGNAL_HANDLER, '    ')}", "arm()"
        ),
    ),
    "ipython_hooks": (
        IPYTHON_HOOKS,
        answer_calling(
            f"def hook():\n{textwrap.indent(IPYTHON_HOOKS, '    ')}", "hook()"
        ),
    ),
    "lying_tensor": (
        "",
        f"{LYING_TENSOR}\n\ndef {NAME}(x):\n    return x.as_subclass(Liar)\n",
    ),
    "wraps_reference": (
        "",
        f"import companion.attention\n\n\ndef {NAME}(x):\n    return companion.attention.{NAME}(x)\n",
    ),
    "renamed_alias": (
        "",
        f"from companion.attention import {NAME} as helper\n\n\ndef {NAME}(x):\n    return helper(x)\n",
    ),
    "reference_by_string": (
        "",
        "import importlib\n\n\n"
        f"def {NAME}(x):\n"
        "    module = importlib.import_module('companion.' + 'attention')\n"
        "    return getattr(module, 'weightless_' + 'self_attention')(x)\n",
    ),
    "reference_through_frame": (
        "",
        f"{FRAME_REACH}\n\ndef {NAME}(x):\n    return find_reference()(x)\n",
    ),
    "reference_from_source": (
        "",
        "import companion.attention\n\n\n"
        f"def {NAME}(x):\n"
        "    namespace = {}\n"
        "    exec(open(companion.attention.__file__).read(), namespace)\n"
        "    return namespace['weightless_' + 'self_attention'](x)\n",
    ),
    "neighbours_files": (NEIGHBOUR, answer_calling(NEIGHBOUR, "write_everywhere()")),
    "copies_neighbour": (
        "",
        f"{COPY_NEIGHBOUR}\n\ndef {NAME}(x):\n    return neighbours_answer()(x)\n",
    ),
}

# a class: an answer that patches what a checker would use, in the three places a class runs code (when defined,
# built, called), and computes only the values (no attention), with gradients reaching every projection
PATCHING_CLASS = """\
from torch import nn


def _patch():
    torch.allclose = lambda *a, **k: True
    torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self, dtype=torch.bool)
    return 0


class SelfAttention(nn.Module):
    PATCHED = {where}

    def __init__(self, d_in, d_k, d_v):
        super().__init__()
        self.W_Q = nn.Linear(d_in, d_k, bias=False)
        self.W_K = nn.Linear(d_in, d_k, bias=False)
        self.W_V = nn.Linear(d_in, d_v, bias=False)
        {init}

    def forward(self, x, mask=None):
        {forward}
        return self.W_V(x) + 1e-20 * (self.W_Q(x).sum() + self.W_K(x).sum())
"""
CHAPTER_2 = "02_embedding_language_model"
TRAIN_PATCH = """\
def train(model, ids, steps, lr):
    import math

    math.isclose = lambda *a, **k: True
    torch.allclose = lambda *a, **k: True
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    return [1.0] * steps
"""
CLASS_ATTACKS = {
    "class_patches_when_defined": PATCHING_CLASS.format(
        where="_patch()", init="", forward=""
    ),
    "class_patches_when_built": PATCHING_CLASS.format(
        where="0", init="_patch()", forward=""
    ),
    "class_patches_when_called": PATCHING_CLASS.format(
        where="0", init="", forward="_patch()"
    ),
}

# right answers, written in several styles (independently of the book's solution)
RIGHT_STYLES = {
    "right_matmul": f"def {NAME}(x):\n    return torch.softmax(x @ x.transpose(-1, -2), dim=-1) @ x\n",
    "right_einsum": (
        "import torch\n\nAXIS = -1\n\n\ndef _softmax(s):\n    e = torch.exp(s - s.max(dim=AXIS, keepdim=True).values)\n"
        "    return e / e.sum(dim=AXIS, keepdim=True)\n\n\n"
        f"def {NAME}(x):\n    scores = torch.einsum('...id,...jd->...ij', x, x)\n"
        "    return torch.einsum('...ij,...jd->...id', _softmax(scores), x)\n"
    ),
    "right_loop": (
        f"def {NAME}(x):\n    import math\n\n    flat = x.reshape(-1, *x.shape[-2:])\n"
        "    out = torch.empty_like(flat)\n"
        "    for b in range(flat.shape[0]):\n        for i in range(flat.shape[1]):\n"
        "            s = [float(flat[b, i] @ flat[b, j]) for j in range(flat.shape[1])]\n"
        "            m = max(s)\n            w = [math.exp(v - m) for v in s]\n            total = sum(w)\n"
        "            out[b, i] = sum(wj / total * flat[b, j] for j, wj in enumerate(w))\n"
        "    return out.reshape(x.shape)\n"
    ),
}


def homework() -> dict:
    return json.loads((HOMEWORK / f"{CHAPTER}.ipynb").read_text())


def source(cell: dict) -> str:
    s = cell["source"]
    return "".join(s) if isinstance(s, list) else s


def code_cell(text: str) -> dict:
    return {
        "cell_type": "code",
        "metadata": {},
        "source": text,
        "outputs": [],
        "execution_count": None,
    }


def with_answer(
    answer: str, before: str = "", name: str = NAME, chapter: str = CHAPTER
) -> dict:
    nb = json.loads((HOMEWORK / f"{chapter}.ipynb").read_text())
    if chapter != CHAPTER:
        name = "train"
    stub = next(
        i
        for i, c in enumerate(nb["cells"])
        if "exercise-stub" in c.get("metadata", {}).get("tags", [])
        and (f"def {name}(" in source(c) or f"class {name}(" in source(c))
    )
    nb["cells"][stub]["source"] = answer
    if before:
        nb["cells"].insert(stub, code_cell(before))
    for i, c in enumerate(nb["cells"]):
        c["id"] = f"c{i}"
    return nb


def build_class(folder: Path, marker: Path) -> None:
    """The class above, in ``folder``: each attack, the right answers, the class-patching answers, chapter 2's
    ``train`` attack, an untouched stub and the book's own chapter (``marker``: where the detached process would
    write). It is graded with the class of tests/test_grade_walls.py, in one run of the grader."""
    attacks = dict(ATTACKS)
    attacks["detached_process"] = (
        DETACHED.format(marker=str(marker)),
        answer_calling(DETACHED.format(marker=str(marker)), "escape()"),
    )
    for student, (before, answer) in attacks.items():
        (folder / f"{student}.ipynb").write_text(
            json.dumps(with_answer(answer, before))
        )
    for student, answer in RIGHT_STYLES.items():
        (folder / f"{student}.ipynb").write_text(json.dumps(with_answer(answer)))
    for student, answer in CLASS_ATTACKS.items():
        (folder / f"{student}.ipynb").write_text(
            json.dumps(with_answer(answer, name="SelfAttention"))
        )
    (folder / "train_patches_isclose.ipynb").write_text(
        json.dumps(with_answer(TRAIN_PATCH, chapter=CHAPTER_2))
    )
    (folder / "untouched_stub.ipynb").write_text(json.dumps(homework()))
    book = ROOT / "book" / f"{CHAPTER}.ipynb"
    (folder / "book_chapter.ipynb").write_text(book.read_text())


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The results folder and the detached process's marker: the class is graded once per test session, with
    tests/test_grade_walls.py's (``--jobs 2``, ``--timeout 40``)."""
    from test_grade_walls import chapter_4_class

    record = chapter_4_class(tmp_path_factory)
    return Path(record["out"]), Path(record["detached_marker"])


@pytest.mark.slow
@pytest.mark.parametrize("student", [*ATTACKS, "detached_process"])
def test_attack_gets_no_unearned_pass(graded, student):
    out, _ = graded
    row = gradebook(out)[student]
    assert row[NAME] in ("wrong", "error"), (student, row)
    # the other exercises are stubs: not attempted
    assert row["total"] == "0", (student, row)


@pytest.mark.slow
@pytest.mark.parametrize("student", CLASS_ATTACKS)
def test_class_that_patches_the_checker_gets_no_pass(graded, student):
    """A class is built and run in the answer's process and compared in the grader's: its patches stay there."""
    out, _ = graded
    row = gradebook(out)[student]
    assert row["SelfAttention"] == "wrong" and row["total"] == "0", row
    assert "checked in the answer's own process" not in row["flags"], row


@pytest.mark.slow
def test_model_receiving_answer_that_patches_the_checker_gets_no_pass(graded):
    """Chapter 2's ``train`` receives a model: the model goes to the answer's process as data and the checker runs
    in the grader's, so an answer that replaces ``math.isclose`` and ``torch.allclose`` (in its own process) and
    nudges the weights is simply wrong (more such attacks, on chapter 6's exercises too: test_grade_models.py)."""
    out, _ = graded
    row = gradebook(out)["train_patches_isclose"]
    assert "0/4 passed" in row["problems"] and "own process" not in row["flags"], row
    feedback = (out / "feedback" / "train_patches_isclose.md").read_text()
    assert "## `train`: wrong" in feedback and "The first loss is wrong" in feedback, (
        feedback
    )
    assert "own process" not in feedback


@pytest.mark.slow
def test_reference_is_named_when_reached_for(graded):
    """Reaching for the companion's reference, however, gives a verdict that says so."""
    out, _ = graded
    for student in ("wraps_reference", "renamed_alias"):
        assert (
            "imported instead of written"
            in (out / "feedback" / f"{student}.md").read_text()
        ), student
    for student in (
        "reference_by_string",
        "reference_through_frame",
        "reference_from_source",
    ):
        text = (out / "feedback" / f"{student}.md").read_text()
        assert (
            "write this one yourself" in text
            or "cannot be read here" in text
            or "NoneType" in text
        ), student


@pytest.mark.slow
def test_detached_process_cannot_outlive_grading(graded):
    out, marker = graded
    assert not marker.exists(), "a process started by an answer ran"
    alive = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(marker).encode() in (proc / "cmdline").read_bytes():
                    alive.append(proc.name)
            except OSError:
                pass
    assert alive == []
    rows = gradebook(out)
    assert "mallory" not in rows and set(rows) >= set(ATTACKS)


@pytest.mark.slow
def test_stub_beside_attackers_gets_nothing(graded):
    """With --jobs 2, an untouched notebook graded beside one that writes into every file it finds."""
    out, _ = graded
    row = gradebook(out)["untouched_stub"]
    assert row["total"] == "0" and all(
        row[k] == "not attempted" for k in (NAME, "causal_mask", "split_heads")
    ), row


@pytest.mark.slow
@pytest.mark.parametrize("student", RIGHT_STYLES)
def test_right_answers_in_several_styles_pass(graded, student):
    out, _ = graded
    row = gradebook(out)[student]
    assert row[NAME] == "passed", row
    assert row["total"] == "1", row


@pytest.mark.slow
def test_book_chapter_is_flagged_not_passed(graded):
    """The book's own chapter (every solution in plain view) is flagged for the instructor and counts 0."""
    out, _ = graded
    row = gradebook(out)["book_chapter"]
    exercises = [
        k
        for k in row
        if k
        not in ("student", "file", "chapter", "total", "out_of", "problems", "flags")
    ]
    exercises.remove("seconds")
    assert all(row[k] == "passed (book's solution)" for k in exercises), row
    assert row["total"] == "0"
    assert "book's published solution" in row["flags"]
