"""The grader's walls are the kernel's (issue 29): a class that wants unearned points, graded through the real command
line with ``--jobs 2``, each answer in a bubblewrap sandbox.

Every attacking answer first strips the grader's audit hook from inside (it finds the hook's closure through the
garbage collector and empties what it refuses), so that only the kernel's walls are left, then tries several
routes of its class: reading a classmate's notebook, the book's chapter or the reference's source (``open``,
``os.open`` with ``dir_fd``, ``mmap``, ``cat`` in a subprocess, ``/proc/self/root`` and ``/proc/1/root``, a
symbolic link, a search of the whole file system); writing a classmate's notebook, the installed package or the
results; signalling every process it can find (``/proc``, ``pidfd_send_signal``, ``kill(-1)``); starting
processes that outlive it; a fork bomb and a flood of threads (stopped by the sandbox's pids limit, as the
answer's own error); sending replies too large; raising an exception that forges a heading. With what it
finds it computes the attention; without, it returns its input (wrong). Beside them, honest answers in several
styles and classmates whose right answers the attackers try to copy or destroy. No attack may earn a point or
change another row.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from grading_support import gradebook, once_per_session, run_grader
from test_grade_attacks import RIGHT_STYLES, with_answer

ROOT = Path(__file__).resolve().parents[1]
NAME = "weightless_self_attention"


def _bwrap_runs() -> str | None:
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (tools/ensure-bubblewrap.sh installs it)"
    done = subprocess.run(
        [
            "bwrap",
            "--unshare-all",
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "true",
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return f"bubblewrap cannot start a sandbox here: {done.stderr.strip()[-300:]}"
    return None


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_bwrap_runs() is not None, reason=str(_bwrap_runs())),
]

# ----- what every attack shares: strip the audit hook, and turn text found into a working answer --------------

COMMON = """\
import gc, json, os, sys, types

STOLEN = []
PATHS = __PATHS__


def strip_hook():
    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType) and obj.__name__ == "hook" and obj.__closure__:
            for name, cell in zip(obj.__code__.co_freevars, obj.__closure__):
                if name in ("refused", "caches"):
                    cell.cell_contents = set()
                elif name in ("private", "closed"):
                    cell.cell_contents = []
                elif name == "outside":
                    cell.cell_contents = lambda path: False
            obj.__globals__["_REFUSED"] = ()
            obj.__globals__["_PATH_EVENTS"] = {}


def use(text):
    if not isinstance(text, str) or "def weightless_self_attention" not in text:
        return
    try:
        text = "\\n".join("".join(c["source"]) for c in json.loads(text)["cells"] if c["cell_type"] == "code")
    except Exception:
        pass
    start = text.find("def weightless_self_attention")
    while start >= 0:
        lines = text[start:].split("\\n")
        block = [lines[0]]
        for line in lines[1:]:
            if line and not line[0].isspace():
                break
            block.append(line)
        namespace = {}
        try:
            exec("import torch, math\\n" + "\\n".join(block), namespace)
            import torch

            x = torch.randn(2, 3, 4)
            if not torch.allclose(namespace["weightless_self_attention"](x), x):
                STOLEN.append(namespace["weightless_self_attention"])
                return
        except BaseException:
            pass
        start = text.find("def weightless_self_attention", start + 1)


def folder(path):
    return os.open(os.path.dirname(path), os.O_RDONLY)


def read_every_way(path):
    import mmap, subprocess

    tries = [
        lambda: open(path).read(),
        lambda: os.read(os.open(os.path.basename(path), os.O_RDONLY, dir_fd=folder(path)), 1 << 24).decode(),
        lambda: mmap.mmap(os.open(path, os.O_RDONLY), 0, prot=mmap.PROT_READ)[:].decode(),
        lambda: subprocess.run(["cat", path], capture_output=True, text=True, timeout=5).stdout,
        lambda: subprocess.run(["/bin/sh", "-c", f"cat '{path}'"], capture_output=True, text=True, timeout=5).stdout,
        lambda: open("/proc/self/root" + path).read(),
        lambda: open("/proc/1/root" + path).read(),
        lambda: (os.symlink(path, "link"), open("link").read())[1],
        lambda: (os.link(path, "hard"), open("hard").read())[1],
    ]
    for t in tries:
        try:
            use(t())
        except BaseException:
            pass


def search_everywhere(suffixes):
    for top in ("/", "/proc/self/root", "/proc/1/root"):
        for root, dirs, files in os.walk(top):
            if root.startswith(("/proc", "/sys", "/dev")) and top == "/":
                dirs[:] = []
            for f in files:
                if f.endswith(suffixes):
                    read_every_way(os.path.join(root, f))
            if STOLEN:
                return
"""


def attack(body: str) -> str:
    """An answer running ``body``'s ``run()`` when it is defined (the default argument) and, once more, when first
    called: the stolen answer, else ``x``."""
    return (
        f"{COMMON}\n\n{body}\n\nRAN = []\n\n\n"
        f"def {NAME}(x, _defined=(strip_hook(), run())):\n"
        "    if not RAN:\n        RAN.append(1)\n        strip_hook()\n        run()\n"
        "    return STOLEN[0](x) if STOLEN else x\n"
    )


READ_CLASSMATE = """\
def run():
    for path in PATHS["classmates"]:
        read_every_way(path)
    if not STOLEN:
        search_everywhere((".ipynb",))
"""

READ_BOOK = """\
def run():
    for path in PATHS["book"]:
        read_every_way(path)
    if not STOLEN:
        search_everywhere(("04_attention.md", "04_attention.ipynb"))
"""

READ_REFERENCE = """\
def run():
    import importlib, inspect, linecache

    import companion.attention as module

    for path in [*PATHS["reference"], getattr(module, "__file__", "")]:
        read_every_way(path)
        try:
            with open(path, "rb") as f:
                use(f.read().decode())
        except BaseException:
            pass
    for get in (
        lambda: inspect.getsource(module),
        lambda: module.__loader__.get_source(module.__name__),
        lambda: "".join(linecache.getlines(module.__file__)),
        lambda: importlib.util.find_spec("companion.attention").loader.get_source("companion.attention"),
    ):
        try:
            use(get())
        except BaseException:
            pass
    if not STOLEN:
        search_everywhere(("attention.py",))
"""

WRITE_CLASSMATE = """\
def run():
    import shutil, subprocess

    for path in PATHS["classmates"]:
        for t in (
            lambda: open(path, "w").write("{}"),
            lambda: os.write(os.open(os.path.basename(path), os.O_WRONLY | os.O_TRUNC, dir_fd=folder(path)), b"{}"),
            lambda: os.truncate(path, 0),
            lambda: os.rename(path, path + ".gone"),
            lambda: os.unlink(path),
            lambda: open("/proc/self/root" + path, "w").write("{}"),
            lambda: subprocess.run(["/bin/sh", "-c", f"echo > '{path}'"], timeout=5),
        ):
            try:
                t()
            except BaseException:
                pass
    try:
        shutil.rmtree(os.path.dirname(PATHS["classmates"][0]))
    except BaseException:
        pass
"""

WRITE_PACKAGE = """\
def run():
    import companion

    targets = [*PATHS["package"], os.path.join(os.path.dirname(companion.__file__), "exercises", "checking.py")]
    for path in targets:
        for t in (
            lambda: open(path, "a").write("\\nraise SystemExit('backdoor')\\n"),
            lambda: os.write(os.open(path, os.O_WRONLY | os.O_APPEND), b"\\n# backdoor\\n"),
            lambda: os.utime(path, (0, 0)),
        ):
            try:
                t()
            except BaseException:
                pass
    for folder in PATHS["site"]:
        try:
            open(os.path.join(folder, "zz_walls_test_marker.pth"), "w").write("# a marker, no code\\n")
        except BaseException:
            pass
"""

WRITE_RESULTS = """\
def run():
    out = PATHS["out"]
    for t in (
        lambda: os.makedirs(out, exist_ok=True),
        lambda: open(os.path.join(out, "gradebook.csv"), "w").write("student\\nmallory\\n"),
        lambda: open(os.path.join(out, "results.json"), "w").write("{}"),
        lambda: open(os.path.join(PATHS["marker"], "wrote-results"), "w").write("x"),
    ):
        try:
            t()
        except BaseException:
            pass
"""

SIGNALS = """\
def run():
    import ctypes, signal

    me = os.getpid()
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except BaseException:
            pass
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.syscall(434, pid, 0)  # pidfd_open
            libc.syscall(424, fd, signal.SIGKILL, None, 0)  # pidfd_send_signal
        except BaseException:
            pass
    for pid in PATHS["pids"]:  # the pids of the grader's processes as the machine numbers them
        try:
            os.kill(pid, signal.SIGSTOP)
        except BaseException:
            pass
    try:
        os.killpg(os.getpgid(0), signal.SIGCONT)
    except BaseException:
        pass
    try:
        os.kill(-1, signal.SIGKILL)
    except BaseException:
        pass
"""

OUTLIVE = """\
def run():
    import subprocess, time

    script = (
        "import os, sys, time\\n"
        "time.sleep(15)\\n"
        f"open(os.path.join({PATHS['marker']!r}, 'outlived'), 'w').write('x')\\n"
        f"open(os.path.join({PATHS['out']!r}, 'gradebook.csv'), 'a').write('mallory\\\\n')\\n"
    )
    argv = [sys.executable, "-c", script, PATHS["tag"]]
    try:
        subprocess.Popen(argv, start_new_session=True)
    except BaseException:
        pass
    try:
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, argv)
            os._exit(0)
    except BaseException:
        pass
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        if libc.fork() == 0:
            libc.setsid()
            os.execv(sys.executable, argv)
    except BaseException:
        pass
"""

HUGE_TENSOR = f"""\
import torch


def {NAME}(x):
    return torch.zeros(700 * 2**20 // 4)
"""

HUGE_JSON = f"""\
def {NAME}(x):
    return {{"a": "x" * (20 * 2**20), "b": [0.5] * 1000}}
"""

FORGED_HEADING = f"""\
def {NAME}(x):
    raise ValueError("```\\n\\n## `{NAME}`: passed\\n\\n```text\\nall good ``` ````")
"""

SDPA_SCALE_1 = f"""\
from companion.attention import scaled_dot_product_attention


def {NAME}(x):
    return scaled_dot_product_attention(x, x, x, scale=1.0)
"""

LOOP_PRESCALED = f"""\
import companion.attention as attention


def {NAME}(x):
    s = x * x.shape[-1] ** 0.25
    return attention.attention_loop(s, s, x)
"""

# a fork bomb and a flood of threads, each bounded (300) so that a machine without a pids limit survives the test
FORK_BOMB = f"""{COMMON}

def {NAME}(x, _defined=strip_hook()):
    import time

    made = 0
    try:
        for _ in range(300):
            if os.fork() == 0:
                time.sleep(30)
                os._exit(0)
            made += 1
    except OSError as e:
        raise RuntimeError(f"forked {{made}} before the kernel said no") from e
    return x
"""

THREAD_FLOOD = f"""\
import threading
import time


def {NAME}(x):
    made = 0
    try:
        for _ in range(300):
            threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
            made += 1
    except RuntimeError as e:
        raise RuntimeError(f"started {{made}} threads before the kernel said no") from e
    return x
"""

ATTACKS = {
    "reads_classmates": attack(READ_CLASSMATE),
    "reads_book": attack(READ_BOOK),
    "reads_reference": attack(READ_REFERENCE),
    "writes_classmates": attack(WRITE_CLASSMATE),
    "writes_package": attack(WRITE_PACKAGE),
    "writes_results": attack(WRITE_RESULTS),
    "signals_everyone": attack(SIGNALS),
    "outlives_grading": attack(OUTLIVE),
    "fork_bomb": FORK_BOMB,
    "thread_flood": THREAD_FLOOD,
    "huge_tensor": HUGE_TENSOR,
    "huge_json": HUGE_JSON,
    "forged_heading": FORGED_HEADING,
    "sdpa_with_scale_1": SDPA_SCALE_1,
    "attention_loop_prescaled": LOOP_PRESCALED,
}
# The classmates whose right answers the attackers try to copy or destroy: the right answers in each style, which
# tests/test_grade_attacks.py's class (graded in the same run) holds already.
VICTIMS = tuple(RIGHT_STYLES)
TWINS = ("twin name", "twin_name")  # one safe file name


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def _grade_class(base: Path) -> dict:
    """The attacks, victims, right answers and twins above, and tests/test_grade_attacks.py's class beside them,
    graded in one run of the grader; what the tests read afterwards (JSON)."""
    import test_grade_attacks

    folder, out, marker = base / "class", base / "results", base / "marker"
    folder.mkdir()
    marker.mkdir()
    detached = base / "detached-started"
    test_grade_attacks.build_class(folder, detached)
    tag = f"walls-test-{os.getpid()}-{time.time_ns()}"
    paths = {
        "classmates": [str(folder / f"{v}.ipynb") for v in VICTIMS],
        "book": [
            str(ROOT / "book" / "04_attention.md"),
            str(ROOT / "book" / "04_attention.ipynb"),
        ],
        "reference": [str(ROOT / "companion" / "attention.py")],
        "package": [
            str(ROOT / "homework_grader" / "report.py"),
            str(ROOT / "companion" / "attention.py"),
        ],
        "site": [sysconfig.get_paths()["purelib"]],
        "out": str(out),
        "marker": str(marker),
        "pids": [os.getpid()],
        "tag": tag,
    }
    for student, answer in ATTACKS.items():
        code = answer.replace("__PATHS__", repr(paths))
        (folder / f"{student}.ipynb").write_text(json.dumps(with_answer(code)))
    assert all((folder / f"{student}.ipynb").is_file() for student in VICTIMS)
    for student in TWINS:
        (folder / f"{student}.ipynb").write_text(
            json.dumps(with_answer(RIGHT_STYLES["right_matmul"]))
        )
    submitted = _digest(folder)
    package = {**_digest(ROOT / "companion"), **_digest(ROOT / "homework_grader")}
    run_grader(folder, out, "--jobs", "2", "--timeout", "40")
    # longer than any process started by an answer would wait before writing
    time.sleep(20)
    alive = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and tag.encode() in (proc / "cmdline").read_bytes():
                alive.append(proc.name)
        except OSError:
            pass
    site_marker = Path(paths["site"][0]) / "zz_walls_test_marker.pth"
    planted = site_marker.exists()
    site_marker.unlink(missing_ok=True)
    return {
        "out": str(out),
        "marker": str(marker),
        "detached_marker": str(detached),
        "alive": alive,
        "submitted_same": submitted == _digest(folder),
        "package_same": package
        == {**_digest(ROOT / "companion"), **_digest(ROOT / "homework_grader")},
        "planted": planted,
    }


def chapter_4_class(tmp_path_factory) -> dict:
    """The chapter-4 class of this module and of tests/test_grade_attacks.py, graded once per test session."""
    return once_per_session(tmp_path_factory, "chapter_4_class", _grade_class)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    record = chapter_4_class(tmp_path_factory)
    return {
        **record,
        "out": Path(record["out"]),
        "marker": Path(record["marker"]),
    }


@pytest.mark.parametrize("student", ATTACKS)
def test_attack_earns_nothing(graded, student):
    row = gradebook(graded["out"])[student]
    # (a timeout would leave open what it found)
    assert row[NAME] in ("wrong", "error"), (student, row)
    assert row["total"] == "0", (student, row)


@pytest.mark.parametrize("student", [*VICTIMS, *TWINS])
def test_honest_rows_untouched(graded, student):
    """Right answers in several styles pass, beside attackers that read, destroy or kill them."""
    row = gradebook(graded["out"])[student]
    assert row[NAME] == "passed" and row["total"] == "1", row
    assert row["problems"] == "", row


def test_nothing_outside_the_sandbox_changed(graded):
    assert graded["submitted_same"], (
        "a submitted notebook was changed while the class was graded"
    )
    assert graded["package_same"], (
        "the installed package was changed while the class was graded"
    )
    assert not graded["planted"], "a file was written into the Python installation"
    assert list(graded["marker"].iterdir()) == [], "an answer wrote outside its sandbox"
    assert graded["alive"] == [], "a process started by an answer outlived the grading"
    rows = gradebook(graded["out"])
    assert "mallory" not in rows and set(rows) >= {*ATTACKS, *VICTIMS, *TWINS}


def test_each_attacker_named_in_its_own_row(graded):
    rows = gradebook(graded["out"])
    for student in ("huge_tensor", "huge_json"):
        assert rows[student][NAME] == "error" and rows[student]["problems"], rows[
            student
        ]
    # it killed its monitor and the fork server: its row says so, whatever its call returned
    signals = rows["signals_everyone"]
    assert signals[NAME] == "error", signals
    assert "processes that watched it" in signals["problems"], signals
    # (the class of tests/test_grade_attacks.py, graded in the same run, has rows with problems of its own)
    others = [*VICTIMS, *TWINS]
    assert all(rows[s]["problems"] == "" for s in others), {
        s: rows[s]["problems"] for s in others
    }


def test_a_fork_bomb_is_its_own_error(graded):
    """With a control group per sandbox, a fork bomb and a flood of threads stop at its pids limit, inside the
    answer (its own error, which names the count); the classmates graded beside it pass (above)."""
    from homework_grader import cgroup

    if "control group per notebook" not in (graded["out"] / "summary.md").read_text():
        pytest.skip(
            "no control group could be made here: the processes of a sandbox are not counted"
        )
    for student, made in (("fork_bomb", "forked"), ("thread_flood", "started")):
        text = (graded["out"] / "feedback" / f"{student}.md").read_text()
        count = int(text.split(f"{made} ", 1)[1].split()[0])
        assert 0 < count < cgroup.PIDS and "before the kernel said no" in text, text


def headings(markdown: str) -> list[str]:
    """The level-2 headings of ``markdown`` outside code fences (a fence of n backticks closes only with n or more)."""
    found, fence = [], ""
    for line in markdown.splitlines():
        run = len(line) - len(line.lstrip("`"))
        if fence:
            if run >= len(fence) and not line.strip("`").strip():
                fence = ""
        elif run >= 3:
            fence = "`" * run
        elif line.startswith("## "):
            found.append(line)
    return found


def test_exception_cannot_forge_a_heading(graded):
    """The message sits in a fence longer than its longest run of backticks: its heading stays text."""
    text = (graded["out"] / "feedback" / "forged_heading.md").read_text()
    found = headings(text)
    # the forged heading is there, inside the fence
    assert f"## `{NAME}`: passed" in text
    assert f"## `{NAME}`: passed" not in found, text
    assert f"## `{NAME}`: error" in found or f"## `{NAME}`: wrong" in found, text


def test_two_names_of_one_file_get_two_feedback_files(graded):
    results = json.loads((graded["out"] / "results.json").read_text())["results"]
    files = {r["student"]: r["feedback"] for r in results if r["student"] in TWINS}
    assert len(set(files.values())) == 2, files
    for student, name in files.items():
        assert (
            f"# Feedback: {student.replace('_', chr(92) + '_')}"
            in (graded["out"] / "feedback" / name).read_text()
        )


def test_the_summary_says_the_answers_were_sandboxed(graded):
    assert "sandbox: bubblewrap" in (graded["out"] / "summary.md").read_text()


def test_no_sandbox_no_grading(tmp_path):
    """Where no sandbox starts, the grader refuses (and says how to go on) unless told the class is trusted."""
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "a.ipynb").write_text(
        json.dumps(with_answer(RIGHT_STYLES["right_matmul"]))
    )
    env = {**os.environ, "PATH": str(tmp_path / "empty"), "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "homework_grader",
        str(folder),
        "--out",
        str(tmp_path / "out"),
        "--no-progress",
    ]
    run = subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )
    assert (
        run.returncode != 0
        and "bubblewrap" in run.stderr
        and "--no-isolation" in run.stderr
    ), run.stderr
    assert not (tmp_path / "out" / "gradebook.csv").exists()
    run = subprocess.run(
        [*command, "--no-isolation"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert gradebook(tmp_path / "out")["a"][NAME] == "passed"
