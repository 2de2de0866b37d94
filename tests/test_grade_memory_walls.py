"""A memory check is measured by the kernel, outside the answer's process (issue 29): chapter 8's linear attention
must not form the n × n matrix, and quadratic answers that forge the measurement made in their own process (the
measuring function replaced, the tensor tracker patched, Python's allocation statistics patched around a NumPy
matrix), reset the kernel's count of their own process's peak (``/proc/self/clear_refs``), or hide the matrix
where a count of their process would miss it (a forked child, a thread, memory-mapped files) are not passed,
while right answers in three styles are: the peak is the sandbox's control group's, reset and read by the grader.
What an answer keeps between calls counts too (beyond 8 MiB): quadratic answers that fill a buffer of the
matrix's size taken when they are defined (a default argument, touched or not, a class body, shared memory, a
file of the sandbox) or by an earlier call, or that free a ballast of that size during the call, are not passed;
an answer that kills the processes watching it is named. An answer that stops (SIGSTOP) the sandbox's processes
or its own is named in its row, and the student's next answer is graded in a new sandbox. An earlier answer of a
notebook leaves nothing for a later one."""

from __future__ import annotations

import json

import pytest
from grading_support import gradebook, run_grader
from test_grade_chapters_8_10 import _answered
from test_grade_walls import _bwrap_runs

import companion.exercises.linear_attention as la_ex

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


# The matrix's memory taken before the measured call (when the answer is defined, or by an earlier call) and filled
# by it: counted, as memory the answer holds (beyond what a right answer's process keeps), from outside.
FILLS = """
    fq, fk = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
    n, m = q.shape[-2], k.shape[-2]
    if q.dim() == 2 and q.dtype == buffer.dtype and not q.requires_grad and n * m <= buffer.numel():
        a = torch.matmul(fq, fk.transpose(-2, -1), out=buffer[: n * m].view(n, m))
    else:
        a = fq @ fk.transpose(-2, -1)
    return (a @ v) / (a.sum(-1, keepdim=True) + 1e-6)
"""
HELD = {
    # in a default argument, every page written when the answer is defined
    "keeps_a_buffer": "import torch\n\n\n"
    "def linear_attention(q, k, v, buffer=torch.ones(2048 * 2048)):" + FILLS,
    # in a default argument, allocated but not written (its pages are the kernel's until the call writes them)
    "keeps_an_untouched_buffer": "import torch\n\n\n"
    "def linear_attention(q, k, v, buffer=torch.empty(2048 * 2048)):" + FILLS,
    # in the body of a helper class, run when the answer is defined
    "keeps_it_in_a_class_body": "import torch\n\n\nclass Scratch:\n"
    "    matrix = torch.ones(2048 * 2048)\n\n\n"
    "def linear_attention(q, k, v):\n    buffer = Scratch.matrix" + FILLS,
    # in the answer's module globals, taken by its first call (an earlier, unmeasured one)
    "caches_it_at_the_first_call": "import torch\n\n\ndef linear_attention(q, k, v):\n"
    "    global CACHE\n    if 'CACHE' not in globals():\n"
    "        CACHE = torch.ones(2048 * 2048)\n    buffer = CACHE" + FILLS,
    # anonymous shared memory mapped when the answer is defined, written, and seen as a tensor
    "maps_anonymous_memory": "import mmap, numpy as np, torch\n\n\ndef scratch():\n"
    "    block = mmap.mmap(-1, 2048 * 2048 * 4)\n    block.write(b'\\1' * len(block))\n"
    "    return torch.from_numpy(np.frombuffer(block, dtype=np.float32))\n\n\n"
    "def linear_attention(q, k, v, buffer=scratch()):" + FILLS,
    # two files (each under the file size limit) holding the matrix's rows, written in the sandbox's memory file
    # system when the answer is defined, mapped by each call, which fills them half by half
    "keeps_files": """\
import os, tempfile
import numpy as np
import torch


def scratch():
    paths = [os.path.join(tempfile.gettempdir(), f"half{i}") for i in range(2)]
    for path in paths:
        with open(path, "wb") as f:
            f.write(b"\\1" * (1024 * 2048 * 4))
    return paths


def linear_attention(q, k, v, paths=scratch()):
    fq, fk = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
    if q.dim() != 2 or q.dtype != torch.float32 or q.requires_grad or k.shape[-2] > 2048:
        a = fq @ fk.transpose(-2, -1)
        return (a @ v) / (a.sum(-1, keepdim=True) + 1e-6)
    rows, outs = (q.shape[-2] + 1) // 2, []
    for i, path in enumerate(paths):
        block = fq[i * rows : (i + 1) * rows]
        if len(block) == 0 or len(block) * k.shape[-2] > 1024 * 2048:
            continue
        mapped = np.memmap(path, dtype=np.float32, mode="r+", shape=(len(block) * k.shape[-2],))
        a = torch.from_numpy(mapped).view(len(block), -1)
        torch.matmul(block, fk.transpose(-2, -1), out=a)
        outs.append((a @ v) / (a.sum(-1, keepdim=True) + 1e-6))
    return torch.cat(outs)
""",
    # a ballast of the matrix's size taken when the answer is defined and freed at the start of each call, so
    # that the matrix takes its place and the memory does not rise during the call
    "frees_a_ballast": "import torch\n\n\n"
    "def linear_attention(q, k, v, ballast=[torch.ones(2048 * 2048)]):\n"
    "    ballast.clear()\n    buffer = torch.empty(0)" + FILLS,
}
# The same for the memory checks whose forbidden form is smaller: chapter 8's RNN (the states of every position; the
# masked t × t form of a batch of short sequences) and chunked form (the masked n × n matrix at chunk_size=512,
# in a buffer taken by the first call that asks for blocks that large). Each answer is right on every case and
# cheats in one memory check only, with a buffer of that check's size (read from the checker, as an attacker
# would): the check's forbidden form must need more than the 8 MiB a grader leaves uncounted plus its limit.
RECURRENCE = """
    ys = []
    for i in range(q.shape[-2]):
        s = s + fk[..., i, :, None] * v[..., i, None, :]
        z = z + fk[..., i, :]
        y = (fq[..., i, None, :] @ s)[..., 0, :]
        ys.append(y / ((fq[..., i, :] * z).sum(-1, keepdim=True) + 1e-6))
    return torch.stack(ys, -2), s, z
"""
SMALLER = {
    # the states of all RNN_N positions, written in a buffer taken when the answer is defined
    "rnn_every_state": f"""\
import torch
import torch.nn.functional as F


def linear_attention_rnn(q, k, v, s, z, buffer=torch.ones({la_ex.RNN_N * la_ex.RNN_D**2})):
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    n, d = k.shape[-2], k.shape[-1]
    if q.dim() == 2 and not q.requires_grad and n * d * v.shape[-1] == buffer.numel():
        states = torch.mul(fk[:, :, None], v[:, None, :], out=buffer.view(n, d, -1))
        states[0] += s
        states.cumsum_(0)
        norms = z + fk.cumsum(0)
        y = (fq[:, None, :] @ states)[:, 0, :] / ((fq * norms).sum(-1, keepdim=True) + 1e-6)
        return y, states[-1].clone(), norms[-1]
"""
    + RECURRENCE,
    # the masked t × t scores of MASK_B sequences, in a buffer taken by the first call with that many (an
    # unmeasured one: a buffer taken when the answer is defined would count in the first memory check already)
    "rnn_masked_scores": f"""\
import torch
import torch.nn.functional as F


def linear_attention_rnn(q, k, v, s, z):
    global CACHE
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    b, t = q.shape[0], q.shape[-2]
    if q.dim() == 3 and not q.requires_grad and b == {la_ex.MASK_B} and t == {la_ex.MASK_T}:
        if "CACHE" not in globals():
            CACHE = torch.ones(b * t * t)
        a = torch.matmul(fq, fk.transpose(-2, -1), out=CACHE.view(b, t, t)).tril_()
        y = (a @ v + fq @ s) / (a.sum(-1, keepdim=True) + fq @ z[..., None] + 1e-6)
        return y, s + fk.transpose(-2, -1) @ v, z + fk.sum(-2)
"""
    + RECURRENCE,
    # blocks of chunk_size, except for blocks of 512 or more: the masked n × n matrix there, in a buffer taken by
    # the first such call (an unmeasured one)
    "chunked_square": """\
import torch
import torch.nn.functional as F


def causal_linear_attention_chunked(q, k, v, chunk_size):
    global CACHE
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    n = q.shape[-2]
    if chunk_size >= 512 and q.dim() == 2 and not q.requires_grad:
        if "CACHE" not in globals() or CACHE.numel() < n * n:
            CACHE = torch.ones(n * n)
        a = torch.matmul(fq, fk.T, out=CACHE[: n * n].view(n, n)).tril_()
        return (a @ v) / (a.sum(-1, keepdim=True) + 1e-6)
    s = fk.new_zeros(*fk.shape[:-2], fk.shape[-1], v.shape[-1])
    z = fk.new_zeros(*fk.shape[:-2], fk.shape[-1])
    out = []
    for i in range(0, n, chunk_size):
        qc, kc, vc = (x[..., i : i + chunk_size, :] for x in (fq, fk, v))
        a = (qc @ kc.transpose(-2, -1)).tril()
        out.append((a @ vc + qc @ s) / (a.sum(-1, keepdim=True) + qc @ z[..., None] + 1e-6))
        s, z = s + kc.transpose(-2, -1) @ vc, z + kc.sum(-2)
    return torch.cat(out, -2)
""",
}
# where each is graded (student, exercise: two notebooks) and what its feedback must say
SMALLER_ROWS = {
    "rnn_every_state": (
        "holds_every_state",
        "linear_attention_rnn",
        "the states of all",
    ),
    "rnn_masked_scores": (
        "holds_the_scores",
        "linear_attention_rnn",
        "masked t × t form",
    ),
    "chunked_square": (
        "holds_every_state",
        "causal_linear_attention_chunked",
        "a matrix of the size of the whole n × n one",
    ),
}

# killing the processes that watch it (its monitor and the fork server) during the call frees what they hold (the
# pages its process copied from them): its row names it
KILLS_WATCHERS = (
    "import signal, torch\n"
    + STRIP_HOOK
    + """

def linear_attention(q, k, v):
    strip_hook()
    monitor = os.getppid()
    with open(f"/proc/{monitor}/stat") as f:
        server = int(f.read().rsplit(")", 1)[1].split()[1])
    for pid in (monitor, server):
        os.kill(pid, signal.SIGKILL)
"""
    + QUADRATIC.split("\n", 2)[2]
)

# Chapter 8's memory_keys, right (its pseudo-inverse), after a SIGSTOP: to the fork server (its grandparent), to
# every process it may signal, to its monitor, or to its own process group. Each student's later answer,
# linear_attention_step (right), is graded in a new sandbox.
STOPS = {
    "stops_the_fork_server": """\
    with open(f"/proc/{os.getppid()}/stat") as f:
        os.kill(int(f.read().rsplit(")", 1)[1].split()[1]), signal.SIGSTOP)""",
    "stops_everyone": "    os.kill(-1, signal.SIGSTOP)",
    "stops_its_monitor": "    os.kill(os.getppid(), signal.SIGSTOP)",
    "stops_itself": "    os.killpg(0, signal.SIGSTOP)",
}
# (torch imported where it is used: the grader places an import of a later cell after the answer's definition)
STOPPING = (
    "import signal\n"
    + STRIP_HOOK.replace("types, torch", "types")
    + """

def memory_keys(x):
    import torch

    strip_hook()
__STOP__
    return torch.linalg.pinv(x).T
"""
)
STEP = """\
import torch


def linear_attention_step(q, k, v, s, z):
    fq, fk = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
    s = s + fk.unsqueeze(-1) * v.unsqueeze(-2)
    z = z + fk
    y = (fq.unsqueeze(-2) @ s).squeeze(-2) / ((fq * z).sum(-1, keepdim=True) + 1e-6)
    return y, s, z
"""
# After the fork server was stopped, the student's next answer (in a new sandbox) tries to read the memory of its
# fork server and of its monitor (/proc/PID/mem, process_vm_readv) and to trace them (ptrace): it is right only when
# every try was refused.
PEEKS = (
    "import ctypes\n"
    + STRIP_HOOK
    + """

def peeked():
    strip_hook()
    with open(f"/proc/{os.getppid()}/stat") as f:
        server = int(f.read().rsplit(")", 1)[1].split()[1])
    read = []
    for pid in (server, os.getppid()):
        try:
            with open(f"/proc/{pid}/maps") as f:
                start = int(f.readline().split("-")[0], 16)
        except (OSError, ValueError):
            start = 0x400000
        try:
            with open(f"/proc/{pid}/mem", "rb") as f:
                f.seek(start)
                read.append(f.read(16))
        except OSError:
            pass
        libc = ctypes.CDLL(None, use_errno=True)
        got = ctypes.create_string_buffer(16)
        local = (ctypes.c_void_p * 2)(ctypes.addressof(got), 16)
        remote = (ctypes.c_void_p * 2)(start, 16)
        if libc.process_vm_readv(pid, local, 1, remote, 1, 0) > 0:
            read.append(got.raw)
        if libc.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
            read.append(b"traced")
            libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
    return read

"""
    + STEP.split("\n", 2)[2].replace(
        "s, z):", "s, z, read=peeked()):\n    if read:\n        return v, s, z"
    )
)
# the held buffers go with the stopping answers, in pairs (one notebook each)
PAIRED = dict(zip(STOPS, list(HELD)[1:], strict=False))


# An earlier answer of the notebook (chapter 8's memory_keys) takes the companion's LinearAttention.step, which is
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

    found = m.LinearAttention.step
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
    alone = {s: c for s, c in HELD.items() if s not in PAIRED.values()}
    for student, code in {**HONEST, **FORGED, **alone}.items():
        (folder / f"{student}.ipynb").write_text(
            json.dumps(_answered("08_linear_attention", {NAME: code}))
        )
    (folder / "kills_its_watchers.ipynb").write_text(
        json.dumps(_answered("08_linear_attention", {NAME: KILLS_WATCHERS}))
    )
    for student, held in PAIRED.items():
        answers = {
            NAME: HELD[held],
            "memory_keys": STOPPING.replace("__STOP__", STOPS[student]),
            "linear_attention_step": PEEKS
            if student == "stops_the_fork_server"
            else STEP,
        }
        (folder / f"{student}.ipynb").write_text(
            json.dumps(_answered("08_linear_attention", answers))
        )
    smaller = {}
    for key, (student, name, _) in SMALLER_ROWS.items():
        smaller.setdefault(student, {})[name] = SMALLER[key]
    for student, answers in smaller.items():
        (folder / f"{student}.ipynb").write_text(
            json.dumps(_answered("08_linear_attention", answers))
        )
    stash = _answered(
        "08_linear_attention",
        {"memory_keys": STASHES, "linear_attention_step": USES_STASH},
    )
    (folder / "stashes_for_later.ipynb").write_text(json.dumps(stash))
    run_grader(folder, out, "--jobs", "2", "--timeout", "40")
    return {**gradebook(out), "feedback": out / "feedback"}


@pytest.mark.parametrize("student", HONEST)
def test_linear_memory_answers_pass(book, student):
    assert book[student][NAME] == "passed", book[student]


def _row(book, held: str) -> dict[str, str]:
    """The gradebook row that holds the answer ``held`` of :data:`HELD` (or of :data:`FORGED`)."""
    return book[next((s for s, h in PAIRED.items() if h == held), held)]


@pytest.mark.parametrize("student", [*FORGED, *HELD])
def test_forged_measurement_earns_nothing(book, student):
    """Each is right on every case and forms the matrix: the memory check is what fails it."""
    row = _row(book, student)
    assert row[NAME] == "wrong", row
    text = (book["feedback"] / f"{row['student']}.md").read_text()
    text = text.split(f"## `{NAME}`")[1].split("\n## ")[0]
    assert "Your function allocated" in text and "n × n matrix" in text, text


@pytest.mark.parametrize("key", SMALLER)
def test_a_buffer_held_in_advance_fails_the_smaller_memory_checks(book, key):
    """Each answer is right on every case and holds its check's forbidden form in a buffer taken before the
    measured call: the check's size leaves it more than the 8 MiB that go uncounted plus the limit."""
    student, name, problem = SMALLER_ROWS[key]
    assert book[student][name] == "wrong", book[student]
    text = (book["feedback"] / f"{student}.md").read_text()
    text = text.split(f"## `{name}`")[1].split("\n## ")[0]
    assert "Your function allocated" in text and problem in text, text


def test_killing_the_watchers_is_named(book):
    """An answer that kills its monitor and the fork server during a call (freeing the pages they held) gets an
    error that says so, whatever its call returned."""
    row = book["kills_its_watchers"]
    assert row[NAME] == "error" and "processes that watched it" in row["problems"], row


@pytest.mark.parametrize("student", STOPS)
def test_a_stopping_answer_is_named_and_the_next_is_graded(book, student):
    """A SIGSTOP to the fork server, to every process, to the monitor or to its own process group: that answer's
    row says so (an error, or a timeout that names the stop), and the student's next answer is graded in a new
    sandbox (where, after the fork server was stopped, it could neither read the memory of its fork server or its
    monitor nor trace them); the classmates graded beside it pass (above)."""
    from homework_grader.remote import HALTED, LOST

    row = book[student]
    why = {"stops_the_fork_server": HALTED, "stops_itself": "was stopped (SIGSTOP)"}
    assert row["memory_keys"] == ("timeout" if student == "stops_itself" else "error")
    assert why.get(student, LOST) in row["problems"].split("memory_keys: ")[1], row
    assert row["linear_attention_step"] == "passed", row


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
