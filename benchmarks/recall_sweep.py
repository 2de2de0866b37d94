"""Benchmark: associative recall against the number of key–value pairs, for five kinds of attention and 3 seeds.

Run from the repository root::

    python benchmarks/recall_sweep.py                        # pairs 4 … 64, 5 kinds, seeds 0 1 2, 2,000 steps
    python benchmarks/recall_sweep.py --pairs 4 8 --kinds softmax linear --seeds 0 --steps 40 --every 20

Every run trains the model of chapters 8–10, chapter 6's :class:`companion.gpt.GPT` configured as chapter 9
configures it (2 layers of 4 heads, d = 64, d_k = 16, feed-forward width 128, rotary positions, an untied output
layer, ReLU, PyTorch's default initialisation) from the seed's initial weights on the recall task of
:mod:`companion.data.recall_task` (``n_pairs`` pairs, 64 keys, 16 values, so a sequence has 2·n_pairs + 2 tokens)
with :func:`companion.data.recall_recipe.train_recall`; the kinds differ only in the attention function:

- ``softmax``: exact causal softmax attention;
- ``linear``: causal linear attention with elu + 1 features (r = d_k = 16 features per head);
- ``band``: softmax within a causal band of ``--band`` keys (3: the query, the value and the key before it);
- ``fmmformer``: the band plus two linear attentions (elu(x) + 1, elu(−x) + 1), blended by learned weights;
- ``performer``: linear attention with ``--features`` positive orthogonal random features (FAVOR+), drawn once
  per layer from the seed and fixed during training, stabilised without reading the future
  (:class:`companion.random_features.PerformerAttention`).

A run has *reached a plateau* when its test accuracy rose by less than ``--plateau`` (0.02) over the last
quarter of its steps. The script prints, for every kind and number of pairs, the final test accuracy as
mean ± half the range over the seeds (the spread), the smallest of the seeds, how many seeds reached a plateau,
and the accuracy of answering with a value of the sequence while ignoring the query (the no-lookup baseline,
:func:`companion.data.recall_task.no_lookup_accuracy`). Runs go to ``--jobs`` processes of one thread each;
``--json FILE`` saves every history.

With the default 64 keys, 600 steps did not teach softmax attention the lookup on two seeds of three even at
4 pairs. The sweep across the state-size bound that chapters 8-10 read is ``benchmarks/recall_bound_sweep.py``.

With ``--text-steps N`` (0: none) the same five models, with a causal band of ``--text-band`` (8) keys, are
also trained for N steps on next-character prediction of the Python documentation, chapter 9's harness
(windows of 64 characters, batches of 32 drawn from the seed, AdamW at 3e-3), and the held-out loss in nats
per character (4 held-out batches of 64 windows) is printed as mean ± spread over the seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from companion import banded_attention as ba
from companion import fmmformer as fmm
from companion import linear_attention as la
from companion import random_features as rf
from companion import training
from companion.attention import scaled_dot_product_attention
from companion.data import python_docs, recall_task
from companion.gpt import GPT, GPTConfig
from companion.training import recall_recipe

KINDS = ("softmax", "linear", "band", "fmmformer", "performer")


def make_attention(kind: str, *, band: int, d_k: int, features: int, seed: int):
    if kind == "softmax":
        return scaled_dot_product_attention
    if kind == "linear":
        return la.linear_attention
    if kind == "band":
        return ba.BandedAttention(band)
    if kind == "fmmformer":
        return fmm.FMMAttention(fmm.FMMConfig(bandwidth=band))
    if kind == "performer":
        return rf.PerformerAttention(d_k, features, seed=seed)
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def build_gpt(
    vocab_size: int, context_length: int, seed: int, *, d_model: int, heads: int
) -> GPT:
    """The recall benchmarks' model, softmax attention in place, from the seed's initial weights: 2 layers,
    feed-forward width 2·d_model, rotary positions, ReLU, an untied output layer, PyTorch's initialisation."""
    torch.manual_seed(seed)
    config = GPTConfig(
        vocab_size=vocab_size,
        context_length=context_length,
        n_layers=2,
        n_heads=heads,
        d_model=d_model,
        d_ff=2 * d_model,
        positional="rope",
        activation="relu",
        tie_weights=False,
        init="pytorch",
    )
    return GPT(config)


def make_model(
    kind: str,
    vocab_size: int,
    context_length: int,
    seed: int,
    band: int,
    args: argparse.Namespace,
) -> GPT:
    d_k = args.d_model // args.heads
    model = build_gpt(
        vocab_size, context_length, seed, d_model=args.d_model, heads=args.heads
    )
    # one attention module per layer (FMMformer and Performer hold state)
    for layer, block in enumerate(model.blocks):
        block.self_attn.attention = make_attention(
            kind, band=band, d_k=d_k, features=args.features, seed=1000 * seed + layer
        )
    return model


CONTEXT = 64


def run_text(job: tuple[str, int], args: argparse.Namespace) -> dict:
    """Chapter 9's next-character run: the held-out loss after ``args.text_steps`` steps."""
    kind, seed = job
    torch.set_num_threads(1)
    text = python_docs.text("\n")
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([index[c] for c in text])
    train_ids, heldout_ids = ids[: -len(ids) // 10], ids[-len(ids) // 10 :]

    def batch(source: torch.Tensor, size: int, generator: torch.Generator):
        starts = torch.randint(
            len(source) - CONTEXT - 1, (size,), generator=generator
        ).tolist()
        windows = torch.stack([source[s : s + CONTEXT + 1] for s in starts])
        return windows[:, :-1], windows[:, 1:]

    def loss_fn(model, b):
        return nn.functional.cross_entropy(model(b[0]).flatten(0, 1), b[1].flatten())

    heldout = [
        batch(heldout_ids, 64, torch.Generator().manual_seed(i)) for i in range(4)
    ]
    model = make_model(kind, len(chars), CONTEXT, seed, args.text_band, args)
    generator = torch.Generator().manual_seed(seed + 1)
    training.train(
        model,
        lambda step: batch(train_ids, 32, generator),
        loss_fn,
        steps=args.text_steps,
        lr=3e-3,
        progress=False,
    )
    model.eval()
    with torch.no_grad():
        loss = sum(loss_fn(model, b).item() for b in heldout) / len(heldout)
    return {
        "kind": kind,
        "seed": seed,
        "loss": loss,
        "parameters": sum(p.numel() for p in model.parameters()),
    }


def run(job: tuple[str, int, int], args: argparse.Namespace) -> dict:
    kind, n_pairs, seed = job
    torch.set_num_threads(1)
    task = recall_task.RecallTask(
        n_pairs=n_pairs, n_keys=args.keys, n_values=args.values
    )
    model = make_model(kind, task.vocab_size, task.seq_len, seed, args.band, args)
    history = recall_recipe.train_recall(
        model, task, steps=args.steps, every=args.every, seed=seed
    )
    start = next(h for h in history if h[0] >= 0.75 * args.steps)
    return {
        "kind": kind,
        "n_pairs": n_pairs,
        "seed": seed,
        "history": history,
        "parameters": sum(p.numel() for p in model.parameters()),
        "accuracy": history[-1][2],
        "plateau": history[-1][2] - start[2] < args.plateau,
    }


def summarize(results: list[dict], args: argparse.Namespace) -> list[dict]:
    rows = []
    for n_pairs in args.pairs:
        task = recall_task.RecallTask(
            n_pairs=n_pairs, n_keys=args.keys, n_values=args.values
        )
        tokens, _ = recall_task.make_recall_batch(
            2000, task, seed=recall_task.TEST_SEED
        )
        low, high = recall_task.no_lookup_accuracy(tokens, task)
        for kind in args.kinds:
            runs = [r for r in results if r["kind"] == kind and r["n_pairs"] == n_pairs]
            accuracies = [r["accuracy"] for r in runs]
            rows.append(
                {
                    "kind": kind,
                    "n_pairs": n_pairs,
                    "tokens": task.seq_len,
                    "mean": sum(accuracies) / len(accuracies),
                    "spread": (max(accuracies) - min(accuracies)) / 2,
                    "min": min(accuracies),
                    "plateaus": sum(r["plateau"] for r in runs),
                    "seeds": len(runs),
                    "no_lookup": (low, high),
                    "parameters": runs[0]["parameters"],
                }
            )
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--keys", type=int, default=64)
    parser.add_argument("--values", type=int, default=16)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--band", type=int, default=3)
    parser.add_argument(
        "--features", type=int, default=64, help="the Performer's random features m"
    )
    parser.add_argument("--text-steps", type=int, default=0)
    parser.add_argument("--text-band", type=int, default=8)
    parser.add_argument("--plateau", type=float, default=0.02)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if max(args.pairs) > args.keys:
        parser.error(f"--pairs must be at most --keys = {args.keys}")

    print(
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {args.jobs} processes"
    )
    jobs = [
        (kind, n, seed)
        for n in args.pairs
        for kind in args.kinds
        for seed in args.seeds
    ]
    jobs.sort(key=lambda job: -job[1])  # the long sequences first
    started = time.perf_counter()
    text_jobs = (
        [(kind, seed) for kind in args.kinds for seed in args.seeds]
        if args.text_steps
        else []
    )
    if args.jobs == 1:
        text_results = [run_text(job, args) for job in text_jobs]
        results = [run(job, args) for job in jobs]
    else:
        with ProcessPoolExecutor(args.jobs) as pool:
            text_futures = [pool.submit(run_text, job, args) for job in text_jobs]
            results = list(pool.map(partial(run, args=args), jobs))
            text_results = [future.result() for future in text_futures]
    rows = summarize(results, args)
    print(
        f"{len(jobs)} runs of {args.steps} steps in {time.perf_counter() - started:.0f} s\n"
    )
    print(
        "| pairs | tokens | kind | accuracy (mean ± spread) | worst seed | plateau | no lookup |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(
            f"| {row['n_pairs']} | {row['tokens']} | {row['kind']} | {row['mean']:.3f} ± {row['spread']:.3f} "
            f"| {row['min']:.3f} | {row['plateaus']}/{row['seeds']} "
            f"| {row['no_lookup'][0]:.3f}–{row['no_lookup'][1]:.3f} |"
        )
    if text_results:
        print(
            f"\nnext character, {args.text_steps} steps, band {args.text_band}: held-out loss (nats per character)"
        )
        print("| kind | parameters | loss (mean ± spread) | seeds |")
        print("| --- | --- | --- | --- |")
        for kind in args.kinds:
            runs = [r for r in text_results if r["kind"] == kind]
            losses = [r["loss"] for r in runs]
            rows.append(
                {
                    "kind": kind,
                    "task": "text",
                    "mean": sum(losses) / len(losses),
                    "spread": (max(losses) - min(losses)) / 2,
                    "seeds": len(runs),
                }
            )
            print(
                f"| {kind} | {runs[0]['parameters']:,} | {rows[-1]['mean']:.3f} ± {rows[-1]['spread']:.3f} "
                f"| {len(runs)} |"
            )
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "runs": results,
                    "text": text_results,
                }
            )
        )
    return rows


if __name__ == "__main__":
    main()
