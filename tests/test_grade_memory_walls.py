"""A memory check is measured by the kernel, outside the answer's process (issue 29): chapter 8's linear attention
must not form the n × n matrix, and quadratic answers that forge the measurement made in their own process (the
measuring function replaced, the tensor tracker patched, Python's allocation statistics patched around a NumPy
matrix), reset the kernel's count of their own process's peak (``/proc/self/clear_refs``), or hide the matrix
where a count of their process would miss it (a forked child, a thread, memory-mapped files) are not passed,
while right answers in three styles are: the peak is the sandbox's control group's, reset and read by the grader.
One hole is shown as such: a buffer taken when the answer is defined and filled by each call is not counted.
An earlier answer of a notebook leaves nothing for a later one."""

from __future__ import annotations

import json

import pytest
from grading_support import gradebook, run_grader
from test_grade_chapters_8_10 import _answered
from test_grade_walls import _bwrap_runs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_bwrap_runs() is not None, reason=str(_bwrap_runs())),
]

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
import gc, os, types, torch


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
    for path in ("/proc/self/clear_refs", "/proc/thread-self/clear_refs", f"/proc/{os.getpid()}/clear_refs"):
        try:
            with open(path, "w") as f:
                f.write("5")
        except OSError:
            pass
    return out
""",
    # the matrix built in a child process (forked), the result sent back through a pipe
    "forks_child_to_allocate": "import torch, os, io\n"
    + STRIP_HOOK
    + """
def linear_attention(q, k, v):
    strip_hook()
    r, w = os.pipe()
    if os.fork() == 0:
        fq, fk = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
        a = fq @ fk.transpose(-2, -1)  # n × n, in the child
        buffer = io.BytesIO()
        torch.save((a @ v) / (a.sum(-1, keepdim=True) + 1e-6), buffer)
        os.write(w, buffer.getvalue())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 20):
        data += chunk
    os.close(r)
    os.wait()
    return torch.load(io.BytesIO(data))
""",
    # the matrix built in a thread of its own
    "allocates_in_a_thread": "import threading, torch\n"
    + QUADRATIC.replace("def linear_attention", "def quadratic")
    + """
def linear_attention(q, k, v):
    out = []
    thread = threading.Thread(target=lambda: out.append(quadratic(q, k, v)))
    thread.start()
    thread.join()
    return out[0]
""",
    # the matrix in files mapped into memory (the memory file system of the sandbox; each file under the file size
    # limit), removed after
    "maps_files": "import numpy as np, tempfile\n"
    + STRIP_HOOK
    + """
def linear_attention(q, k, v):
    strip_hook()
    fq, fk = (torch.nn.functional.elu(x) + 1 for x in (q, k))
    n, rows, blocks, outs = q.shape[-2], max(1, q.shape[-2] // 8), [], []
    for start in range(0, n, rows):
        path = os.path.join(tempfile.gettempdir(), f"matrix{start}")
        part = fq[..., start : start + rows, :] @ fk.transpose(-2, -1)
        block = np.memmap(path, dtype=np.float32, mode="w+", shape=tuple(part.shape))
        block[:] = part.numpy()  # a block of rows of the n × n matrix, kept mapped until the end
        del part
        blocks.append((path, block))
        outs.append((block @ v.numpy()) / (block.sum(-1, keepdims=True) + 1e-6))
    for path, block in blocks:
        os.unlink(path)
    del blocks, block
    return torch.from_numpy(np.ascontiguousarray(np.concatenate(outs, -2), dtype=np.float32))
""",
}


# the matrix's memory taken before the measurement (when the answer is defined) and reused by every call
KEEPS_A_BUFFER = """\
import torch


def linear_attention(q, k, v, _buffer=torch.ones(2048 * 2048)):
    fq, fk = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
    n, m = q.shape[-2], k.shape[-2]
    if q.dim() == 2 and q.dtype == _buffer.dtype and not q.requires_grad and n * m <= _buffer.numel():
        a = torch.matmul(fq, fk.transpose(-2, -1), out=_buffer[: n * m].view(n, m))
    else:
        a = fq @ fk.transpose(-2, -1)
    return (a @ v) / (a.sum(-1, keepdim=True) + 1e-6)
"""
KNOWN_HOLE = pytest.mark.xfail(
    strict=True,
    reason="the measurement counts what a call adds to the sandbox's memory: a buffer taken when the answer is "
    "defined, already resident at the reset, is not counted when a call fills it with the n × n matrix",
)


# An earlier answer of the notebook (chapter 8's memory_keys) takes the companion's linear_attention_step, which is
# withheld only while its own exercise is graded, and leaves it for the later answer: in torch, in builtins, in
# files of the sandbox's writable folders and in a process that writes them again for a minute. It earns its own
# exercise only when it found the reference (so that the test shows the stash was made).
STASHES = (
    "import builtins, marshal, time\n"
    + STRIP_HOOK
    + """

def stash():
    strip_hook()
    import companion.linear_attention as m

    found = m.linear_attention_step
    if "_grading_stand_in" in vars(found):
        return False
    code = marshal.dumps(found.__code__)
    torch.stashed = builtins.stashed = found
    write(code)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            end = time.time() + 60
            while time.time() < end:
                write(code)
                time.sleep(0.05)
        os._exit(0)
    return True


def write(code):
    for folder in ("/tmp", "/dev/shm", os.getcwd()):
        try:
            with open(os.path.join(folder, "stash"), "wb") as f:
                f.write(code)
        except OSError:
            pass


def memory_keys(x, _stashed=stash()):
    return torch.linalg.pinv(x).T if _stashed else x
"""
)

USES_STASH = """\
import builtins, marshal, os, types, torch
import companion.linear_attention as m


def linear_attention_step(q, k, v, s, z):
    found = getattr(torch, "stashed", None) or getattr(builtins, "stashed", None)
    for folder in ("/tmp", "/dev/shm", os.getcwd()):
        try:
            with open(os.path.join(folder, "stash"), "rb") as f:
                found = found or types.FunctionType(marshal.loads(f.read()), vars(m))
        except (OSError, ValueError, EOFError):
            pass
    if found is None:
        return v, s, z
    y, state = found(q, k, v, m.LinearAttentionState(s, z))
    return y, state.s, state.z
"""


@pytest.fixture(scope="module")
def book(tmp_path_factory):
    base = tmp_path_factory.mktemp("memory")
    folder, out = base / "class", base / "out"
    folder.mkdir()
    for student, code in {**HONEST, **FORGED, "keeps_a_buffer": KEEPS_A_BUFFER}.items():
        (folder / f"{student}.ipynb").write_text(
            json.dumps(_answered("08_linear_attention", {NAME: code}))
        )
    stash = _answered(
        "08_linear_attention",
        {"memory_keys": STASHES, "linear_attention_step": USES_STASH},
    )
    (folder / "stashes_for_later.ipynb").write_text(json.dumps(stash))
    run_grader(folder, out, "--jobs", "2")
    return {**gradebook(out), "feedback": out / "feedback"}


@pytest.mark.parametrize("student", HONEST)
def test_linear_memory_answers_pass(book, student):
    assert book[student][NAME] == "passed", book[student]


@pytest.mark.parametrize(
    "student", [*FORGED, pytest.param("keeps_a_buffer", marks=KNOWN_HOLE)]
)
def test_forged_measurement_earns_nothing(book, student):
    """Each is right on every case and forms the matrix: the memory check is what fails it."""
    assert book[student][NAME] == "wrong", book[student]
    text = (book["feedback"] / f"{student}.md").read_text()
    assert "Your function allocated" in text and "n × n matrix" in text, text


def test_an_earlier_answer_leaves_nothing_for_a_later_one(book):
    """Each answer's process is a fresh fork of a fork server that never runs an answer, and after each answer its
    sandbox's processes are ended and its writable folders emptied: a reference taken while another exercise was
    graded (its own exercise passed, so it was found) reaches the later answer neither in memory, nor in a file,
    nor through a process left behind."""
    assert book["stashes_for_later"]["memory_keys"] == "passed", book[
        "stashes_for_later"
    ]
    assert book["stashes_for_later"]["linear_attention_step"] == "wrong", book[
        "stashes_for_later"
    ]


CHILD_AND_FORKS = """\
import os, time

if os.fork() == 0:
    block = bytearray(64 * 2**20)
    for i in range(0, len(block), 4096):
        block[i] = 1  # resident, in a child
    os._exit(0)
os.wait()
made = 0
try:
    for _ in range(100):
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
        made += 1
except OSError:
    pass
print(made)
"""


def test_the_control_group_counts_a_child_and_limits_tasks():
    """The group's peak, reset and read from outside, counts 64 MiB written by a forked child of the process that
    joined it; its pids limit stops a loop of forks."""
    import subprocess
    import sys

    from homework_grader import cgroup

    group, why = cgroup.create(2**30, pids=16)
    if group is None:
        pytest.skip(why)
    try:
        base = group.reset()
        argv = cgroup.wrap(group, [sys.executable, "-I", "-c", CHILD_AND_FORKS])
        run = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert group.peak() - base >= 64 * 2**20, (base, group.peak())
        assert 0 < int(run.stdout) < 16, run
    finally:
        group.remove()
    assert not any(folder.exists() for folder in group.dirs.values())


def build_copies(folder, count: int) -> None:
    """``count`` solved chapter-8 notebooks: the book's solutions, except ``linear_attention`` (each right style
    above, or quadratic) and ``linear_attention_rnn`` (right, every state, right, off by one), in turn."""
    import test_grade_models
    from test_grade_chapters_8_10 import RNN, RNN_EVERY_STATE, RNN_OFF_BY_ONE

    test_grade_models.STYLES = {
        NAME: [*HONEST.values(), "import torch\n" + QUADRATIC],
        "linear_attention_rnn": [RNN, RNN_EVERY_STATE, RNN, RNN_OFF_BY_ONE],
    }
    test_grade_models.build_copies(folder, "08", count)


# python tests/test_grade_memory_walls.py FOLDER COUNT: a chapter-8 class to grade by hand
if __name__ == "__main__":
    import sys
    from pathlib import Path

    build_copies(Path(sys.argv[1]), int(sys.argv[2]))
    print(f"{sys.argv[2]} notebooks of chapter 08 in {sys.argv[1]}")
