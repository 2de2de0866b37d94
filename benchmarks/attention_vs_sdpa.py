"""Benchmark: the companion's matrix-form attention against PyTorch's fused scaled_dot_product_attention.

Run from the repository root::

    python benchmarks/attention_vs_sdpa.py                  # n = 256 … 4096, d = 64, 2 threads
    python benchmarks/attention_vs_sdpa.py --ns 256 1024 --threads 4 --rounds 5

For each sequence length n it times three implementations on random q, k, v of shape (batch, heads, n, d)
with ``torch.utils.benchmark`` (interleaved rounds, the best median kept) and measures their peak memory:

- ``companion``: :func:`companion.attention.scaled_dot_product_attention`, the plain matrix form (two matrix
  products and a softmax), which stores the n × n scores of every head;
- ``blocked``: :func:`companion.attention.blocked_attention`, the same arithmetic one head and one block of
  queries at a time, so that the scores stay in the cache;
- ``pytorch``: ``torch.nn.functional.scaled_dot_product_attention``, a fused kernel that never stores them.

It prints a table with the time ratios to PyTorch. The measuring code is
:func:`companion.benchmarking.measure_attention`, the same that draws chapter 4's O(n²) figure. The goal is a
ratio of at most 1.2 at n = 1024.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from companion.benchmarking import (
    default_attention_implementations,
    format_table,
    measure_attention,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--ns",
        type=int,
        nargs="+",
        default=[256, 512, 1024, 2048, 4096],
        help="sequence lengths",
    )
    parser.add_argument("--d", type=int, default=64, help="head width d_k")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument(
        "--min-run-time", type=float, default=1.0, help="seconds per timing"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="interleaved rounds; the best is kept"
    )
    parser.add_argument(
        "--no-memory", action="store_true", help="skip the peak-memory measurement"
    )
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    )
    print(
        f"q, k, v of shape (batch={args.batch}, heads={args.heads}, n, d={args.d}), float32, CPU\n"
    )
    start = time.perf_counter()
    rows = measure_attention(
        args.ns,
        d=args.d,
        batch=args.batch,
        heads=args.heads,
        min_run_time=args.min_run_time,
        rounds=args.rounds,
        memory=not args.no_memory,
        implementations=default_attention_implementations(blocked=True),
        progress=True,
    )
    print()
    print(format_table(rows))
    by = {(r.name, r.n): r for r in rows}
    if ("pytorch", 1024) in by:
        print()
        for name in ("companion", "blocked"):
            ratio = by[name, 1024].seconds / by["pytorch", 1024].seconds
            verdict = "met" if ratio <= 1.2 else "not met"
            print(
                f"{name} / pytorch at n = 1024: {ratio:.2f}x (goal <= 1.2x: {verdict})"
            )
    print(f"total {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
