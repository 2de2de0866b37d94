"""Benchmark: linear attention (each form) against PyTorch's fused softmax attention, time and memory against N.

Run from the repository root::

    python benchmarks/linear_attention_vs_sdpa.py                 # N = 2^9 … 2^15, d = 64, 4 heads
    python benchmarks/linear_attention_vs_sdpa.py --ns 512 4096 --threads 1 --rounds 1
    python benchmarks/linear_attention_vs_sdpa.py --chunk-sweep   # only the chunk-size measurement

On random float32 q, k, v of shape (batch, heads, N, d) it times, in one run,

- causal: ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)`` ("sdpa") and the four causal
  forms of :mod:`companion.linear_attention`: chunked, cumsum (stores N·d² numbers per head), recurrent (a
  Python loop over positions) and quadratic (the masked N × N kernel matrix);
- non-causal: sdpa, linear attention by associativity ("linear") and the quadratic form.

The slow forms stop at the lengths of :data:`companion.benchmarking.linear_attention.DEFAULT_MAX_N`. Time is the median
of ``torch.utils.benchmark`` repetitions, the implementations timed in turn ``--rounds`` times and the best
kept (a loaded machine slows them alike): :func:`companion.benchmarking.measure_attention`, the harness of
chapters 4 and 8-10. Peak memory is :func:`companion.benchmarking.measured_call`'s: the bytes of the tensors
PyTorch creates during one call (inputs excluded), counted through a ``TorchDispatchMode``, and of what
Python allocates; the private scratch blocks of the fused sdpa kernel (a few per thread, independent
of N) are not seen, so sdpa's figure is its output and log-sum-exp. RSS deltas were not used: the allocator
keeps freed pages, so they measure history, not the call.

The script prints the measurements as a markdown table, the crossover N (the smallest N from which linear
attention stays faster than sdpa), the speed ratios at N = 16,384 with the goals (causal chunked ≥ 5×
faster than sdpa and ≥ 5× faster than cumsum) and the fitted log–log slopes of time and memory.
``--plot FILE`` also saves the chapter's figure.
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
from companion.benchmarking.linear_attention import (
    DEFAULT_MAX_N,
    linear_attention_implementations,
)
from companion.linear_attention import LinearAttention


def choose_threads(n: int, d: int, heads: int, min_run_time: float) -> int:
    """Time sdpa and the chunked form (causal, length n) on 1 and 2 threads; return the faster count."""
    q, k, v = (torch.randn(1, heads, n, d) for _ in range(3))
    impls = linear_attention_implementations(causal=True)
    totals = {}
    for threads in (1, 2):
        times = {
            name: time_call(
                impls[name], q, k, v, min_run_time=min_run_time, num_threads=threads
            )
            for name in ("sdpa", "chunked")
        }
        totals[threads] = sum(times.values())
        print(
            f"threads={threads}: "
            + ", ".join(f"{name} {1e3 * t:.1f} ms" for name, t in times.items())
        )
    best = min(totals, key=totals.__getitem__)
    print(f"-> {best} thread(s) (the smaller total)\n")
    return best


def chunk_sweep(ns: list[int], d: int, heads: int, min_run_time: float) -> None:
    print("| N | " + " | ".join(f"C = {c}" for c in (16, 32, 64, 128, 256)) + " |")
    print("|---:|" + "---:|" * 5)
    for n in ns:
        q, k, v = (torch.randn(1, heads, n, d) for _ in range(3))
        cells = []
        for c in (16, 32, 64, 128, 256):
            seconds = time_call(
                lambda q, k, v, c=c: LinearAttention(chunk_size=c).chunked(q, k, v),
                q,
                k,
                v,
                min_run_time=min_run_time,
            )
            cells.append(f"{1e3 * seconds:.1f} ms")
        print(f"| {n} | " + " | ".join(cells) + " |", flush=True)


def markdown_table(rows: list[AttentionMeasurement], label: str) -> str:
    names = list(dict.fromkeys(r.name for r in rows))
    by = {(r.name, r.n): r for r in rows}
    head = (
        "| N | "
        + " | ".join(f"{label} {name} ms" for name in names)
        + " | "
        + " | ".join(f"{name} MiB" for name in names)
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


def crossover(
    rows: list[AttentionMeasurement], fast: str, baseline: str = "sdpa"
) -> int | None:
    """The smallest N from which ``fast`` is faster than ``baseline`` at every measured N."""
    by = {(r.name, r.n): r.seconds for r in rows}
    ns = sorted(
        n for n in {r.n for r in rows} if (fast, n) in by and (baseline, n) in by
    )
    for i, n in enumerate(ns):
        if all(by[fast, m] < by[baseline, m] for m in ns[i:]):
            return n
    return None


def slopes(rows: list[AttentionMeasurement], n_min: int) -> list[str]:
    lines = []
    for name in dict.fromkeys(r.name for r in rows):
        mine = sorted(
            (r for r in rows if r.name == name and r.n >= n_min), key=lambda r: r.n
        )
        if len(mine) < 2:
            continue
        ns = [r.n for r in mine]
        time_slope = fit_loglog_slope(ns, [r.seconds for r in mine]).slope
        mem = [r.peak_bytes for r in mine]
        mem_slope = (
            f"{fit_loglog_slope(ns, mem).slope:.2f}" if all(m > 0 for m in mem) else "–"
        )
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
        "--slope-from", type=int, default=2048, help="fit log-log slopes over N >= this"
    )
    parser.add_argument(
        "--chunk-sweep",
        action="store_true",
        help="only time the chunked form for several chunk sizes",
    )
    parser.add_argument("--plot", type=Path, help="save the log-log figure here")
    args = parser.parse_args(argv)

    cpu = platform.processor() or platform.machine()
    print(
        f"torch {torch.__version__}, {cpu}, {torch.get_num_threads()} threads available"
    )
    print(f"q, k, v of shape (1, heads={args.heads}, N, d={args.d}), float32, CPU\n")
    start = time.perf_counter()
    threads = (
        choose_threads(4096, args.d, args.heads, args.min_run_time)
        if args.threads == "auto"
        else int(args.threads)
    )
    torch.set_num_threads(threads)
    if args.chunk_sweep:
        chunk_sweep(
            [n for n in args.ns if n >= 1024], args.d, args.heads, args.min_run_time
        )
        return 0
    kw = dict(
        d=args.d,
        heads=args.heads,
        max_n=DEFAULT_MAX_N,
        min_run_time=args.min_run_time,
        rounds=args.rounds,
        progress=True,
    )
    causal = measure_attention(
        args.ns, implementations=linear_attention_implementations(causal=True), **kw
    )
    non_causal = measure_attention(
        args.ns, implementations=linear_attention_implementations(causal=False), **kw
    )

    print(f"\n{threads} thread(s); time per call, peak memory of the tensors created\n")
    print(markdown_table(causal, "causal"))
    print()
    print(markdown_table(non_causal, "non-causal"))
    print()
    print(
        f"crossover N (causal chunked faster than sdpa from here on): {crossover(causal, 'chunked')}"
    )
    print(
        f"crossover N (non-causal linear faster than sdpa from here on): {crossover(non_causal, 'linear')}"
    )
    by = {(r.name, r.n): r.seconds for r in causal}
    by_nc = {(r.name, r.n): r.seconds for r in non_causal}
    n = 16384
    for label, table, slow, fast in (
        ("causal: sdpa / chunked", by, "sdpa", "chunked"),
        ("causal: cumsum / chunked", by, "cumsum", "chunked"),
        ("non-causal: sdpa / linear", by_nc, "sdpa", "linear"),
    ):
        if (slow, n) in table and (fast, n) in table:
            ratio = table[slow, n] / table[fast, n]
            goal = (
                ""
                if label.startswith("non")
                else f" (goal >= 5x: {'met' if ratio >= 5 else 'not met'})"
            )
            print(f"at N = {n}, {label} = {ratio:.1f}x{goal}")
    print(
        f"\nfitted log-log slopes over N >= {args.slope_from} (1 = linear, 2 = quadratic)\n"
    )
    print("| implementation | N | time slope | memory slope |\n|---|---|---:|---:|")
    print("\n".join(f"| causal {line[2:]}" for line in slopes(causal, args.slope_from)))
    print(
        "\n".join(
            f"| non-causal {line[2:]}" for line in slopes(non_causal, args.slope_from)
        )
    )
    if args.plot:
        from companion.plotting.attention import plot_attention_cost

        axes = plot_attention_cost(
            causal, title=f"causal attention, float32, CPU, {threads} thread(s)"
        )
        axes[0].figure.savefig(args.plot, dpi=120)
        print(f"\nfigure saved to {args.plot}")
    print(f"\ntotal {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
