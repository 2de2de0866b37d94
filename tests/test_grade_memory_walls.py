"""A memory check is measured by the kernel, outside the answer's process (issue 29): chapter 8's linear attention
must not form the n × n matrix, and quadratic answers that forge the measurement made in their own process (the
measuring function replaced, the tensor tracker patched, Python's allocation statistics patched around a NumPy
matrix) are not passed, while right answers in three styles are. One hole is shown as such: an answer's
process that resets the kernel's count of its own peak (``/proc/self/clear_refs``) after freeing the matrix
passes."""

from __future__ import annotations

import json

import pytest
from grading_support import gradebook, run_grader
from test_grade_chapters_8_10 import _answered
from test_grade_walls import _bwrap_runs

pytestmark = [pytest.mark.slow, pytest.mark.skipif(_bwrap_runs() is not None, reason=str(_bwrap_runs()))]

NAME = "linear_attention"

HONEST = {
    "right_matmul": """\
import torch


def linear_attention(q, k, v):
    fq, fk = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
    s = fk.transpose(-2, -1) @ v
    z = fk.sum(-2)
    return (fq @ s) / ((fq @ z.unsqueeze(-1)) + 1e-6)
""",
    "right_einsum": """\
import torch


def linear_attention(q, k, v):
    phi = lambda x: torch.where(x > 0, x + 1, torch.exp(x.clamp(max=0)))
    fq, fk = phi(q), phi(k)
    s = torch.einsum("...nd,...ne->...de", fk, v)
    y = torch.einsum("...nd,...de->...ne", fq, s)
    return y / (torch.einsum("...nd,...d->...n", fq, fk.sum(-2)).unsqueeze(-1) + 1e-6)
""",
    "right_blocks": """\
import torch
import torch.nn.functional as F


def linear_attention(q, k, v):
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    s = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1])
    z = torch.zeros(*q.shape[:-2], q.shape[-1])
    for start in range(0, k.shape[-2], 256):
        s = s + fk[..., start : start + 256, :].transpose(-2, -1) @ v[..., start : start + 256, :]
        z = z + fk[..., start : start + 256, :].sum(-2)
    rows = [
        (fq[..., i : i + 256, :] @ s) / (fq[..., i : i + 256, :] @ z.unsqueeze(-1) + 1e-6)
        for i in range(0, q.shape[-2], 256)
    ]
    return torch.cat(rows, -2)
""",
}

QUADRATIC = """
def linear_attention(q, k, v):
    fq, fk = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
    a = fq @ fk.transpose(-2, -1)  # n × n
    return (a @ v) / (a.sum(-1, keepdim=True) + 1e-6)
"""

STRIP_HOOK = """
import gc, types


def strip_hook():
    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType) and obj.__name__ == "hook" and obj.__closure__:
            for name, cell in zip(obj.__code__.co_freevars, obj.__closure__):
                if name == "outside":
                    cell.cell_contents = lambda path: False
            obj.__globals__["_REFUSED"] = ()
            obj.__globals__["_PATH_EVENTS"] = {}
"""

FORGED = {
    # the function that measured the call in the answer's process, replaced: it reports nothing allocated
    "replaces_measure": "import torch\nimport companion.benchmarking as b\n"
    "b.measured_call = lambda fn, *a, **kw: (fn(*a, **kw), 0)\n" + QUADRATIC,
    # the tensor tracker counts nothing, and Python's allocation statistics say nothing was allocated
    "patches_tracker": "import torch, tracemalloc\nimport companion.benchmarking as b\n"
    "b.MemoryTracker.__torch_dispatch__ = (\n"
    "    lambda self, func, types, args=(), kwargs=None: func(*args, **(kwargs or {}))\n"
    ")\n"
    "tracemalloc.get_traced_memory = lambda: (0, 0)\n" + QUADRATIC,
    # the n × n matrix in NumPy, and the allocation statistics that would count it patched
    "patches_allocator_stats": """\
import numpy as np
import torch
import tracemalloc

tracemalloc.get_traced_memory = lambda: (0, 0)
tracemalloc.reset_peak = lambda: None
tracemalloc.is_tracing = lambda: False


def linear_attention(q, k, v):
    fq, fk = (torch.nn.functional.elu(x) + 1 for x in (q, k))
    a = fq.numpy() @ fk.numpy().swapaxes(-1, -2)  # n × n, in NumPy
    out = (a @ v.numpy()) / (a.sum(-1, keepdims=True) + 1e-6)
    return torch.from_numpy(out.astype(np.float32))
""",
    # the matrix freed, then the kernel's peak of its own process reset from inside (the audit hook stripped first)
    "resets_kernel_peak": "import torch\n"
    + STRIP_HOOK
    + """
def linear_attention(q, k, v):
    strip_hook()
    fq, fk = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
    a = fq @ fk.transpose(-2, -1)  # n × n
    out = (a @ v) / (a.sum(-1, keepdim=True) + 1e-6)
    del a
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return out
""",
}


@pytest.fixture(scope="module")
def book(tmp_path_factory):
    base = tmp_path_factory.mktemp("memory")
    folder, out = base / "class", base / "out"
    folder.mkdir()
    for student, code in {**HONEST, **FORGED}.items():
        (folder / f"{student}.ipynb").write_text(json.dumps(_answered("08_linear_attention", {NAME: code})))
    run_grader(folder, out, "--jobs", "2")
    return gradebook(out)


@pytest.mark.parametrize("student", HONEST)
def test_linear_memory_answers_pass(book, student):
    assert book[student][NAME] == "passed", book[student]


KNOWN_HOLE = pytest.mark.xfail(
    strict=True,
    reason="an answer's process may write its own /proc/self/clear_refs (as the grader's user, root here): "
    "the kernel's peak, reset from inside after the matrix is freed, misses it",
)


@pytest.mark.parametrize(
    "student", [s if s != "resets_kernel_peak" else pytest.param(s, marks=KNOWN_HOLE) for s in FORGED]
)
def test_forged_measurement_earns_nothing(book, student):
    assert book[student][NAME] in ("wrong", "error"), book[student]
