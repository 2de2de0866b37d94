"""What the grader's tests share: run ``python -m companion.grading`` on a folder, read the gradebook it wrote."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_grader(folder: Path, out: Path, *options: str, timeout: float = 900) -> None:
    """Grade ``folder`` into ``out`` in a process of its own (one intra-op thread); fail on a non-zero exit."""
    command = [sys.executable, "-m", "companion.grading", str(folder), "--out", str(out), "--no-progress", *options]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
    assert run.returncode == 0, run.stderr[-3000:]


def gradebook(out: Path) -> dict[str, dict[str, str]]:
    """The rows of ``out/gradebook.csv``, by student."""
    with (out / "gradebook.csv").open(newline="", encoding="utf-8-sig") as f:
        return {r["student"]: r for r in csv.DictReader(f)}
