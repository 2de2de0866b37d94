"""Benchmark: trained associative recall on both sides of the state-size bound, pairs N against features r.

Run from the repository root::

    python benchmarks/recall_bound_sweep.py --jobs 2 --out runs.jsonl            # the shipped grid
    python benchmarks/recall_bound_sweep.py --cells 4:8 --kinds softmax linear --seeds 0 --steps 100 --out t.jsonl
    python benchmarks/recall_bound_sweep.py --collect runs.jsonl --json companion/data/recall_bound_sweep.json

A cell ``r:N`` trains, for every kind and seed, a two-layer GPT with **one head per layer** (d = 64, feed-forward
width 128, rotary positions, ReLU, an untied output layer, PyTorch's default initialisation) on the recall task
of :mod:`companion.data.recall_task` with ``N`` pairs, ``--keys`` keys and ``--values`` values. Every attention
of the model reads queries and keys of **r coordinates** (the first r of the head's 64, as if W_Q and W_K had r
outputs; values keep 64), so that for the linear kinds r is the number of features of the state, and h·r = r
per layer with h = 1 head:

- ``softmax``: exact causal softmax attention on r-dimensional queries and keys (no state bound: its cache grows);
- ``linear``: causal linear attention with elu + 1 features, φ: ℝ^r → ℝ^r (r features);
- ``performer``: causal linear attention with m = r positive orthogonal random features of the r-dimensional
  queries and keys (FAVOR+), drawn once per layer from the seed and fixed;
- ``band``: softmax within a causal band of ``--band`` keys (3); its state is the window, not r;
- ``fmmformer``: the band plus two linear attentions (elu(x) + 1, elu(−x) + 1: 2r far-field features);
- ``softmax+linear``: layer 1 softmax, layer 2 elu + 1 linear attention (r features), the diagnostic that
  separates the lookup (layer 2) from the previous-token step of layer 1.

Every run trains for ``--steps`` (1,000) at ``--lr`` (3e-3), except in ``--low-lr-cells`` (r = 8 with 16 and
32 pairs), which train at ``--low-lr`` (1e-3) for every kind: at 3e-3 softmax attention stayed in the
no-lookup band at 16 pairs for 1,000 and for 3,000 steps, and at 1e-3 it learned them by step 1,000. The
``--long-cells`` (r = 8 with 32 pairs) train for ``--long-steps`` (3,000), every kind: at 1e-3 softmax attention
was still in the no-lookup band there after 1,000 steps, and answered every test sequence from step 2,000 on
in a 4,000-step trial. The trials are in the record, as ``other_budgets``. Each run records its ``steps`` and
``lr``.

Each run appends one JSON line to ``--out`` as soon as it ends (a killed sweep loses only the runs in flight;
runs of the same kind, cell, seed, steps and learning rate already in the file are skipped when the same
command is run again). ``--collect FILE`` reads such a file
and writes the record ``--json`` with the cells' no-lookup bands
(:func:`companion.data.recall_task.no_lookup_accuracy` on the test set), ``--command``, the commands that made
the runs, and ``--note``. A cell with more pairs than ``--keys`` uses N keys (the keys of a sequence differ):
16 keys everywhere but N = 32, which has 32; each run records its ``n_keys``. The shipped record
``companion/data/recall_bound_sweep.json`` holds the whole default grid, seeds 0, 1 and 2 of every kind; its
``command`` gives the commands that made it, and its runs' ``cpu_seconds`` their cost (120 CPU minutes, and 29
more for the trials and the runs of other budgets in ``other_budgets``, on a 2-core x86-64 machine shared with
other work, one thread per run).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from companion import linear_attention as la
from companion.attention import scaled_dot_product_attention
from companion.data import recall_task
from companion.gpt import GPT
from companion.training import recall_recipe

_spec = importlib.util.spec_from_file_location(
    "recall_sweep", Path(__file__).with_name("recall_sweep.py")
)
recall_sweep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recall_sweep)

KINDS = ("softmax", "linear", "softmax+linear", "performer", "fmmformer", "band")
#: (r, N) cells: N from r to 4r at r = 2, r from 2 to 8 at N = 4, and N from r/2 to 4r at r = 8 (N / r from
#: 1/2 to 4). r = 1 is left out on purpose: one coordinate cannot single out a key even for softmax (q·k is
#: largest at an extreme k).
GRID = ((2, 2), (2, 4), (2, 8), (4, 4), (8, 4), (8, 8), (8, 16), (8, 32))
#: band attention's state is its window, whatever r: it runs at r = 2 (N = 2, 4) and along r = 8.
BAND_CELLS = ((2, 2), (2, 4), (8, 4), (8, 8), (8, 16), (8, 32))
#: cells that train at ``--low-lr`` instead of ``--lr`` (every kind): along r = 8, 16 and 32 pairs, where
#: softmax attention did not learn the lookup at 3e-3 (0.18 at 16 pairs after 1,000 and after 3,000 steps).
LOW_LR_CELLS = ((8, 16), (8, 32))
#: cells that train for ``--long-steps`` instead of ``--steps`` (every kind): r = 8 with 32 pairs, where softmax
#: attention at 1e-3 was still in the no-lookup band after 1,000 steps and answered every test sequence from
#: step 2,000 on (a 4,000-step trial, in the record's ``other_budgets``).
LONG_CELLS = ((8, 32),)


def cell_keys(n_pairs: int, keys: int) -> int:
    """The keys of a cell: ``--keys``, or N where N is larger (the N keys of a sequence must differ)."""
    return max(keys, n_pairs)


def cell_lr(r: int, n_pairs: int, args: argparse.Namespace) -> float:
    """The learning rate of a cell: ``--low-lr`` in the ``--low-lr-cells``, else ``--lr``."""
    low_cells = {tuple(int(x) for x in cell.split(":")) for cell in args.low_lr_cells}
    return args.low_lr if (r, n_pairs) in low_cells else args.lr


def run_budget(run_: dict) -> tuple[int, float]:
    """The steps and learning rate of a recorded run (runs from before they were recorded: the history's last
    step, and 3e-3)."""
    return run_.get("steps", run_["history"][-1][0]), run_.get("lr", 3e-3)


def cell_budget(r: int, n_pairs: int, args: argparse.Namespace) -> tuple[int, float]:
    """The steps and learning rate a run of the cell trains with: ``--long-steps`` in the ``--long-cells``, else
    ``--steps``."""
    long_cells = {tuple(int(x) for x in cell.split(":")) for cell in args.long_cells}
    steps = args.long_steps if (r, n_pairs) in long_cells else args.steps
    return steps, cell_lr(r, n_pairs, args)


def planned_cells(kind: str, args: argparse.Namespace) -> list[tuple[int, int]]:
    """The (r, N) cells of a kind: ``--cells``, and for band attention only BAND_CELLS of the default grid."""
    cells = [tuple(int(x) for x in cell.split(":")) for cell in args.cells]
    if kind == "band" and cells == list(GRID):
        return list(BAND_CELLS)
    return cells


class Narrow(nn.Module):
    """An attention function that reads the last r coordinates of each query and key (values unchanged).

    The last coordinates are the ones that rotary positions turn slowest (by 10000^(-2i/d_k) radians a
    position, i the pair): they can carry what a key is, where the first ones turn by about a radian a position.
    """

    def __init__(self, attention, r: int) -> None:
        super().__init__()
        self.attention, self.r = attention, r

    def forward(self, q, k, v, mask=None, causal=False):
        return self.attention(
            q[..., -self.r :], k[..., -self.r :], v, mask, causal=causal
        )


def layer_attention(kind: str, layer: int, d_k: int, seed: int, band: int):
    """The attention function of one layer (0 or 1) of a kind, on d_k-dimensional queries and keys."""
    if kind == "softmax+linear":
        return scaled_dot_product_attention if layer == 0 else la.linear_attention
    # the Performer: m = d_k positive features
    return recall_sweep.make_attention(
        kind, band=band, d_k=d_k, features=d_k, seed=1000 * seed + layer
    )


def make_model(
    kind: str, task: recall_task.RecallTask, r: int, seed: int, args: argparse.Namespace
) -> GPT:
    model = recall_sweep.build_gpt(
        task.vocab_size, task.seq_len, seed, d_model=args.d_model, heads=args.heads
    )
    # layer 1 reads all d_k = d coordinates, the lookup layer r of them
    first, second = model.blocks
    first.self_attn.attention = layer_attention(
        kind, 0, args.d_model // args.heads, seed, args.band
    )
    lookup = layer_attention(kind, 1, r, seed, args.band)
    second.self_attn.attention = Narrow(lookup, r)
    return model


def run(job: tuple[str, int, int, int], args: argparse.Namespace) -> dict:
    kind, r, n_pairs, seed = job
    torch.set_num_threads(1)
    task = recall_task.RecallTask(
        n_pairs=n_pairs, n_keys=cell_keys(n_pairs, args.keys), n_values=args.values
    )
    model = make_model(kind, task, r, seed, args)
    steps, lr = cell_budget(r, n_pairs, args)
    history = recall_recipe.train_recall(
        model, task, steps=steps, every=args.every, seed=seed, lr=lr
    )
    return {
        "kind": kind,
        "r": r,
        "heads": args.heads,
        "n_pairs": n_pairs,
        "n_keys": task.n_keys,
        "seed": seed,
        "steps": steps,
        "lr": lr,
        "accuracy": history[-1][2],
        "cpu_seconds": history[-1][1],
        "history": history,
    }


def collect(runs_file: Path, args: argparse.Namespace) -> dict:
    """The record: the runs of ``runs_file`` in the cells that a kind's seed 0 ran, and each cell's no-lookup band.

    Only runs of the cell's steps and learning rate (:func:`cell_budget`) count; the file's runs of a planned
    cell with another budget are kept apart, as ``other_budgets`` (the trials the budget was chosen from). A
    cell keeps every seed that ran in it, so cells may hold different seeds (a sweep stopped before its last
    seeds keeps the cells it finished)."""
    runs = [
        json.loads(line) for line in runs_file.read_text().splitlines() if line.strip()
    ]
    runs = [
        run_ | dict(zip(("steps", "lr"), run_budget(run_), strict=True))
        for run_ in runs
    ]
    planned = {(kind, *cell) for kind in KINDS for cell in planned_cells(kind, args)}
    other = [
        run_
        for run_ in runs
        if (run_["kind"], run_["r"], run_["n_pairs"]) in planned
        and (run_["steps"], run_["lr"]) != cell_budget(run_["r"], run_["n_pairs"], args)
    ]
    runs = [
        run_
        for run_ in runs
        if (run_["steps"], run_["lr"]) == cell_budget(run_["r"], run_["n_pairs"], args)
    ]
    cells = {
        kind: {
            (run["r"], run["n_pairs"])
            for run in runs
            if run["kind"] == kind and run["seed"] == 0
        }
        & set(planned_cells(kind, args))
        for kind in KINDS
    }
    runs = [run for run in runs if (run["r"], run["n_pairs"]) in cells[run["kind"]]]
    no_lookup = {}
    for n_pairs in sorted({n for kind_cells in cells.values() for _, n in kind_cells}):
        task = recall_task.RecallTask(
            n_pairs=n_pairs, n_keys=cell_keys(n_pairs, args.keys), n_values=args.values
        )
        tokens, _ = recall_task.make_recall_batch(
            2000, task, seed=recall_task.TEST_SEED
        )
        no_lookup[str(n_pairs)] = recall_task.no_lookup_accuracy(tokens, task)
    settings = {
        k: getattr(args, k)
        for k in ("keys", "values", "steps", "every", "lr", "low_lr", "d_model", "band")
    }
    settings["low_lr_cells"] = sorted(
        [int(x) for x in cell.split(":")] for cell in args.low_lr_cells
    )
    settings["long_steps"] = args.long_steps
    settings["long_cells"] = sorted(
        [int(x) for x in cell.split(":")] for cell in args.long_cells
    )
    return {
        "command": args.command,
        "note": args.note,
        "torch": torch.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, one thread per run",
        "settings": settings
        | {"heads": args.heads, "layers": 2, "batch_size": 64, "test_size": 2000},
        "no_lookup": no_lookup,
        "cells": {kind: sorted(cells[kind]) for kind in KINDS},
        "seeds": {
            kind: sorted({r["seed"] for r in runs if r["kind"] == kind})
            for kind in KINDS
        },
        "runs": sorted(
            runs, key=lambda r: (r["kind"], r["r"], r["n_pairs"], r["seed"])
        ),
        "other_budgets": sorted(
            other,
            key=lambda r: (
                r["kind"],
                r["r"],
                r["n_pairs"],
                r["seed"],
                r["steps"],
                -r["lr"],
            ),
        ),
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--cells", nargs="+", default=[f"{r}:{n}" for r, n in GRID], help="r:N cells"
    )
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument(
        "--low-lr-cells",
        nargs="*",
        default=[f"{r}:{n}" for r, n in LOW_LR_CELLS],
        help="r:N cells that train at --low-lr",
    )
    parser.add_argument("--low-lr", type=float, default=1e-3)
    parser.add_argument(
        "--long-cells",
        nargs="*",
        default=[f"{r}:{n}" for r, n in LONG_CELLS],
        help="r:N cells that train for --long-steps",
    )
    parser.add_argument("--long-steps", type=int, default=3000)
    parser.add_argument("--keys", type=int, default=16)
    parser.add_argument("--values", type=int, default=16)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--heads", type=int, default=1)
    parser.add_argument("--band", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--out", type=Path, default=None, help="JSON lines, one per run, appended"
    )
    parser.add_argument(
        "--collect", type=Path, default=None, help="a runs file to turn into the record"
    )
    parser.add_argument(
        "--json", type=Path, default=None, help="the record written by --collect"
    )
    parser.add_argument(
        "--command", default="", help="the command that made the runs (for --collect)"
    )
    parser.add_argument(
        "--note",
        default="",
        help="what the record's reader should know (for --collect)",
    )
    args = parser.parse_args(argv)
    if args.collect is not None:
        record = collect(args.collect, args)
        if args.json is not None:
            args.json.write_text(json.dumps(record))
        return record["runs"]
    done = set()
    if args.out is not None and args.out.exists():
        for line in args.out.read_text().splitlines():
            run_ = json.loads(line)
            key = (run_["kind"], run_["r"], run_["n_pairs"], run_["seed"])
            done.add((*key, *run_budget(run_)))
    jobs = [
        (kind, r, n, seed)
        for kind in args.kinds
        for r, n in planned_cells(kind, args)
        for seed in args.seeds
    ]
    jobs = [job for job in jobs if (*job, *cell_budget(*job[1:3], args)) not in done]
    # seed by seed, three kinds first, the longest runs first
    jobs.sort(key=lambda job: (job[3], KINDS.index(job[0]) > 2, -job[2]))
    print(
        f"{platform.machine()}, torch {torch.__version__}, {len(jobs)} runs on {args.jobs} processes",
        flush=True,
    )
    started, results = time.perf_counter(), []

    def keep(result: dict) -> None:
        results.append(result)
        if args.out is not None:
            with args.out.open("a") as f:
                f.write(json.dumps(result) + "\n")
        print(
            f"{result['kind']:>15} r={result['r']:<2} N={result['n_pairs']:<2} seed {result['seed']}: "
            f"{result['accuracy']:.3f} ({result['cpu_seconds']:.0f} CPU s)",
            flush=True,
        )

    if args.jobs == 1:
        for job in jobs:
            keep(run(job, args))
    else:
        with ProcessPoolExecutor(args.jobs) as pool:
            for future in as_completed([pool.submit(run, job, args) for job in jobs]):
                keep(future.result())
    print(
        f"{len(results)} runs in {time.perf_counter() - started:.0f} s",
        flush=True,
    )
    return results


if __name__ == "__main__":
    main()
