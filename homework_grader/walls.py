"""The kernel's walls around the answers: each notebook's answers run in a bubblewrap sandbox of their own.

``bwrap`` (Debian's ``bubblewrap``) starts the fork server (:func:`homework_grader.sandbox.zygote`) of one
notebook in new namespaces of every kind (no network, its own process IDs, IPC and host name, ``--unshare-all``),
in a session of its own, with no capabilities (``--cap-drop ALL``: a resource limit, once lowered, stays), dying
with the grading process. Its file system is built from nothing: read-only, the system's libraries and the
Python installation the grader runs on (the prefix and the virtual environment), and :func:`package_copy`, a copy
of the ``companion`` package without its checkers (``companion.exercises``), the grader's modules that the
answer's side needs (no others), and without the source files of the modules that define an exercise's
reference or a function a checker withholds (those are sent to the fork server as text, imported from memory
before any answer runs, and exist nowhere in its file system); a ``/proc`` of its own, a minimal ``/dev``, and
one empty writable ``/tmp`` (a memory file system of bounded size, emptied after each answer). The submissions,
the results, the book's sources and every other file of the machine are absent, not merely refused.

Where the grader may make one, the sandbox runs in a control group of its own (:mod:`homework_grader.cgroup`),
which counts its memory for the memory checks and limits its memory and its number of processes.

:func:`probe` runs one such sandbox once per grading run; where it fails (no ``bwrap``, or a kernel that refuses
the namespaces) the grader refuses to grade unless told the submissions are trusted (``--no-isolation``).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

#: where the sandbox sees the copy of the package (``/opt/grader/companion``)
INSIDE = "/opt/grader"
#: the grader's modules that the answer's side imports (everything else of ``homework_grader`` is left out)
ANSWER_SIDE = ("__init__.py", "sandbox.py", "wire.py", "answers.py")
#: the size of the one writable folder (``/tmp``), in bytes
SCRATCH_BYTES = 256 * 2**20


def package_root() -> Path:
    """The folder of the ``companion`` package the grader runs (the one the answers' side is copied from)."""
    import companion

    return Path(companion.__file__).resolve().parent


def grader_root() -> Path:
    """The folder of this package, ``homework_grader``."""
    return Path(__file__).resolve().parent


def package_copy(
    target: Path, secret_modules: list[str]
) -> dict[str, tuple[str, bool]]:
    """Copy the ``companion`` package into ``target/companion`` for the sandbox, leaving out the checkers, compiled
    files and the sources of ``secret_modules`` (dotted names), and beside it the grader's modules that the
    answer's side imports. Returns those sources, ``{module: (text, is_package)}``, for the fork server to
    import from memory."""
    root = package_root()

    def ignore(folder: str, names: list[str]) -> list[str]:
        left_out = [
            n for n in names if n == "__pycache__" or n.endswith((".pyc", ".pyo"))
        ]
        if Path(folder).resolve() == root:
            left_out.append("exercises")
        return left_out

    copied = target / "companion"
    shutil.copytree(root, copied, ignore=ignore)
    (target / "homework_grader").mkdir()
    for name in ANSWER_SIDE:
        shutil.copyfile(grader_root() / name, target / "homework_grader" / name)
    sources: dict[str, tuple[str, bool]] = {}
    for module in sorted(set(secret_modules)):
        parts = module.split(".")
        if parts[0] != "companion":
            continue
        relative = Path(*parts[1:])
        package = (root / relative / "__init__.py").is_file()
        path = relative / "__init__.py" if package else relative.with_suffix(".py")
        if (root / path).is_file():
            sources[module] = ((root / path).read_text(encoding="utf-8"), package)
            (copied / path).unlink(missing_ok=True)
    return sources


def _bound_prefixes() -> list[str]:
    """The Python installation: its prefix, the virtual environment's, and where the executable really is."""
    found = []
    for p in (
        sys.base_prefix,
        sys.prefix,
        os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))),
    ):
        for q in (p, os.path.realpath(p)):
            if q and q != "/" and os.path.isdir(q) and q not in found:
                found.append(q)
    return found


def command(copy: Path, scratch_bytes: int = SCRATCH_BYTES) -> list[str]:
    """The ``bwrap`` arguments (up to and excluding the command) of one notebook's sandbox."""
    bwrap = shutil.which("bwrap") or "bwrap"
    args = [
        bwrap,
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
    ]
    args += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        top = f"/{name}"
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for f in ("/etc/ld.so.cache", "/etc/ld.so.conf"):
        if os.path.exists(f):
            args += ["--ro-bind", f, f]
    prefixes = [p for p in _bound_prefixes() if not p.startswith("/usr/")]
    for p in prefixes:
        args += ["--ro-bind", p, p]
    hidden = {str(package_root()), str(grader_root())}
    for name in ("companion", "homework_grader"):
        installed = importlib.util.find_spec(name)
        if installed is not None and installed.origin:
            hidden.add(os.path.dirname(installed.origin))
    for folder in sorted(hidden):
        if any(
            folder == p or folder.startswith(p + os.sep) for p in [*prefixes, "/usr"]
        ):
            # the packages, installed inside the environment: their copies only
            args += ["--tmpfs", folder]
    args += ["--ro-bind", str(copy), INSIDE, "--proc", "/proc", "--dev", "/dev"]
    args += [
        "--size",
        str(scratch_bytes),
        "--tmpfs",
        "/tmp",
        "--size",
        str(16 * 2**20),
        "--tmpfs",
        "/dev/shm",
    ]
    args += ["--chdir", "/tmp", "--clearenv"]
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "MPLBACKEND": "Agg",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    # the floating-point path the grader was asked for
    for k in ("ATEN_CPU_CAPABILITY", "MKL_CBWR"):
        if os.environ.get(k):
            env[k] = os.environ[k]
    for k, v in env.items():
        args += ["--setenv", k, v]
    return args


@functools.cache
def probe(copy: str) -> str | None:
    """``None`` when a sandbox starts here and its Python runs; else why not (said once per grading run)."""
    if shutil.which("bwrap") is None:
        return "bubblewrap (`bwrap`) is not installed"
    try:
        done = subprocess.run(
            [
                *command(Path(copy)),
                sys.executable,
                "-I",
                "-c",
                "import os; os.listdir('/tmp')",
            ],
            capture_output=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap could not start a sandbox ({e})"
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()
        return f"bubblewrap could not start a sandbox ({why[-1] if why else f'exit status {done.returncode}'})"
    return None
