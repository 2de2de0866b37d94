"""What the grader's tests share: run ``python -m homework_grader`` on a folder, read the gradebook it wrote."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_grader(folder: Path, out: Path, *options: str, timeout: float = 900) -> None:
    """Grade ``folder`` into ``out`` in a process of its own (one intra-op thread); fail on a non-zero exit."""
    command = [
        sys.executable,
        "-m",
        "homework_grader",
        str(folder),
        "--out",
        str(out),
        "--no-progress",
        *options,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env
    )
    assert run.returncode == 0, run.stderr[-3000:]


def run_isolated(script: str) -> subprocess.CompletedProcess:
    """``python -I -c script`` as an answer's process starts (no PYTHONPATH, no user site, not the current
    folder), with this checkout's grader and companion first on its path."""
    setup = f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
    return subprocess.run(
        [sys.executable, "-I", "-c", setup + script],
        capture_output=True,
        text=True,
        timeout=120,
    )


def gradebook(out: Path) -> dict[str, dict[str, str]]:
    """The rows of ``out/gradebook.csv``, by student."""
    with (out / "gradebook.csv").open(newline="", encoding="utf-8-sig") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


def once_per_session(tmp_path_factory, key: str, build: Callable[[Path], dict]) -> dict:
    """``build(folder)`` once per test session, by whichever process asks first (pytest-xdist's workers share the
    session's temporary root), the others waiting for it: what it returned, through JSON. A class graded once
    serves every test module that reads it, on either worker."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    record = root / f"{key}.json"
    with FileLock(str(record) + ".lock"):
        if not record.is_file():
            folder = root / key
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            record.write_text(json.dumps(build(folder)))
    return json.loads(record.read_text())
