"""Benchmark: FMMformer attention against PyTorch's fused softmax attention, and the banded kernel against dense.

Run from the repository root::

    python benchmarks/fmmformer_vs_sdpa.py                       # N = 2^9 … 2^15, causal, d = 64, 4 heads
    python benchmarks/fmmformer_vs_sdpa.py --ns 512 4096 --threads 1 --rounds 1

On random float32 q, k, v of shape (1, heads, N, d) it times, in one run and causal,

- ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``;
- ``fmmformer``: :func:`companion.fmmformer.fixed_fmm_attention`, band k = 32 and two far-field feature maps
  (elu(x) + 1, elu(−x) + 1), i.e. the banded near field plus two causal linear attentions;
- ``band``: :class:`companion.banded_attention.BandedAttention` alone (O(N·k));
- ``band dense``: the same band the N × N way, :func:`companion.banded_attention.banded_attention_dense`
  (scores, mask, softmax as N × N tensors), and ``band sdpa``: the fused kernel given the band as an N × N
  boolean mask. Both stop at ``--dense-max`` (default 8,192: the N × N float32 scores of 4 heads are 1 GiB).

Time is the median of ``torch.utils.benchmark`` repetitions (:func:`companion.benchmarking.time_call`), the
implementations timed in turn ``--rounds`` times and the best kept; peak memory is
:func:`companion.benchmarking.measured_call`'s (the tensors created during one call, inputs excluded; the fused
sdpa kernel's private scratch buffers are not seen). Both come from
:func:`companion.benchmarking.measure_attention`, the harness of chapters 4 and 8-10. The script
prints a markdown table, the ratios at N = 16,384 (goal: fmmformer ≥ 4× faster than sdpa) and the fitted
log–log slopes of time and memory (1 = linear, 2 = quadratic). ``--plot FILE`` saves the log–log figure.
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
    AttentionMeasurement,
    fit_loglog_slope,
    measure_attention,
    time_call,
)
from companion.fmmformer import fmmformer_implementations

NAMES = ("sdpa", "fmmformer", "band", "band dense", "band sdpa")


def choose_threads(
    n: int, d: int, heads: int, bandwidth: int, min_run_time: float
) -> int:
    """Time sdpa and fmmformer (causal, length n) on 1 and 2 threads; return the count with the smaller total."""
    q, k, v = (torch.randn(1, heads, n, d) for _ in range(3))
    impls = fmmformer_implementations(causal=True, bandwidth=bandwidth, dense=False)
    totals = {}
    for threads in (1, 2):
        times = {
            name: time_call(
                impls[name], q, k, v, min_run_time=min_run_time, num_threads=threads
            )
            for name in ("sdpa", "fmmformer")
        }
        totals[threads] = sum(times.values())
        print(
            f"threads={threads}: "
            + ", ".join(f"{name} {1e3 * t:.1f} ms" for name, t in times.items())
        )
    best = min(totals, key=totals.__getitem__)
    print(f"-> {best} thread(s) (the smaller total)\n")
    return best


def markdown_table(rows: list[AttentionMeasurement]) -> str:
    names = [name for name in NAMES if any(r.name == name for r in rows)]
    by = {(r.name, r.n): r for r in rows}
    head = (
        "| N | "
        + " | ".join(f"{n} ms" for n in names)
        + " | "
        + " | ".join(f"{n} MiB" for n in names)
        + " |"
    )
    lines = [head, "|---:" * (1 + 2 * len(names)) + "|"]
    for n in sorted({r.n for r in rows}):
        times = [
            f"{by[name, n].milliseconds:.1f}" if (name, n) in by else "–"
            for name in names
        ]
        mems = [
            f"{by[name, n].peak_mib:.1f}" if (name, n) in by else "–" for name in names
        ]
        lines.append(f"| {n} | " + " | ".join(times) + " | " + " | ".join(mems) + " |")
    return "\n".join(lines)


def ratio_lines(rows: list[AttentionMeasurement], n: int) -> list[str]:
    by = {(r.name, r.n): r for r in rows}
    lines = []
    for slow, fast, goal in (
        ("sdpa", "fmmformer", 4.0),
        ("band dense", "band", None),
        ("band sdpa", "band", None),
    ):
        m = (
            n
            if (slow, n) in by and (fast, n) in by
            else max((r.n for r in rows if r.name == slow), default=None)
        )
        if m is None or (fast, m) not in by:
            continue
        speed = by[slow, m].seconds / by[fast, m].seconds
        memory = (
            by[slow, m].peak_bytes / by[fast, m].peak_bytes
            if by[fast, m].peak_bytes
            else float("nan")
        )
        note = (
            f" (goal >= {goal:g}x: {'met' if speed >= goal else 'not met'})"
            if goal
            else ""
        )
        lines.append(
            f"at N = {m}: {slow} / {fast}: time {speed:.1f}x{note}, memory {memory:.1f}x"
        )
    return lines


def slope_lines(rows: list[AttentionMeasurement], n_min: int) -> list[str]:
    lines = []
    for name in NAMES:
        mine = sorted(
            (r for r in rows if r.name == name and r.n >= n_min), key=lambda r: r.n
        )
        if len(mine) < 2:
            continue
        ns = [r.n for r in mine]
        mem = [r.peak_bytes for r in mine]
        mem_slope = (
            f"{fit_loglog_slope(ns, mem).slope:.2f}" if all(m > 0 for m in mem) else "–"
        )
        time_slope = fit_loglog_slope(ns, [r.seconds for r in mine]).slope
        lines.append(f"| {name} | {ns[0]}–{ns[-1]} | {time_slope:.2f} | {mem_slope} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--ns",
        type=int,
        nargs="+",
        default=[2**p for p in range(9, 16)],
        help="sequence lengths",
    )
    parser.add_argument("--d", type=int, default=64, help="head width d_k = d_v")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument(
        "--bandwidth", type=int, default=32, help="k: keys in the causal band"
    )
    parser.add_argument(
        "--threads",
        default="auto",
        help="1, 2, … or auto (time 1 and 2 threads, keep the faster)",
    )
    parser.add_argument(
        "--min-run-time", type=float, default=0.5, help="seconds per timing"
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="interleaved rounds; the best is kept"
    )
    parser.add_argument(
        "--dense-max", type=int, default=8192, help="longest N for the dense band forms"
    )
    parser.add_argument(
        "--slope-from", type=int, default=2048, help="fit log-log slopes over N >= this"
    )
    parser.add_argument("--plot", type=Path, help="save the log-log figure here")
    args = parser.parse_args(argv)

    cpu = platform.processor() or platform.machine()
    print(
        f"torch {torch.__version__}, {cpu}, {torch.get_num_threads()} threads available"
    )
    print(
        f"q, k, v of shape (1, heads={args.heads}, N, d={args.d}), float32, CPU, causal, band k = {args.bandwidth}\n"
    )
    start = time.perf_counter()
    threads = (
        choose_threads(4096, args.d, args.heads, args.bandwidth, args.min_run_time)
        if args.threads == "auto"
        else int(args.threads)
    )
    torch.set_num_threads(threads)
    impls = fmmformer_implementations(causal=True, bandwidth=args.bandwidth)
    impls = {name: impls[name] for name in NAMES}
    rows = measure_attention(
        args.ns,
        d=args.d,
        heads=args.heads,
        implementations=impls,
        max_n={"band dense": args.dense_max, "band sdpa": args.dense_max},
        min_run_time=args.min_run_time,
        rounds=args.rounds,
        progress=True,
    )
    print(f"\n{threads} thread(s); time per call, peak memory of the tensors created\n")
    print(markdown_table(rows))
    print()
    print("\n".join(ratio_lines(rows, 16384)))
    print(
        f"\nfitted log-log slopes over N >= {args.slope_from} (1 = linear, 2 = quadratic)\n"
    )
    print("| implementation | N | time slope | memory slope |\n|---|---|---:|---:|")
    print("\n".join(slope_lines(rows, args.slope_from)))
    if args.plot:
        from companion.plotting.attention import plot_attention_cost

        title = f"causal attention, float32, CPU, {threads} thread(s), band k = {args.bandwidth}"
        axes = plot_attention_cost(rows, title=title)
        axes[0].figure.savefig(args.plot, dpi=120)
        print(f"\nfigure saved to {args.plot}")
    print(f"\ntotal {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
