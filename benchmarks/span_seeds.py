"""Benchmark: chapter 7's span task, fine-tuned from three seeds, to measure how much the seed moves the score.

Run from the repository root::

    python benchmarks/span_seeds.py                      # seeds 0 1 2, prints a table
    python benchmarks/span_seeds.py --json companion/data/span_seeds.json

Each run is the fine-tuning of chapter 7's section "Fine-tuning the head and MiniLM's top two blocks", step for
step: the 480 training and 200 held-out examples of :mod:`companion.data.span_task` (data seed 0), MiniLM's
lower four blocks frozen and computed once, a copy of its top two blocks and a new
:class:`companion.bert.SpanHead` trained for 3 epochs of AdamW (learning rate 3e-4) in batches of 8, answers
decoded with :func:`companion.bert.best_span` (at most 10 tokens) and scored with SQuAD's exact match and F1.
Only the training seed (``torch.manual_seed``: the head's initial weights, dropout and the order of the
batches) differs between runs. One run takes 20 to 40 seconds of CPU, which is why the chapter trains one seed
and reads the others from the record this script writes.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from companion import bert
from companion.bert import encoder_inputs
from companion.data import metrics, span_task
from companion.interop.hf_bert import load_pretrained, minilm_path

TUNED, MAX_LEN, EPOCHS, BATCH, LR = 2, 10, 3, 8, 3e-4


def lower_blocks(minilm, tokenizer, examples):
    """The inputs, and the output of MiniLM's frozen lower blocks (computed once)."""
    batch = span_task.span_inputs(examples, tokenizer)
    with torch.no_grad():
        token_types, attention = encoder_inputs(
            minilm.config,
            batch["input_ids"],
            batch["token_type_ids"],
            batch["attention_mask"],
        )
        x = minilm.embeddings(batch["input_ids"], token_types)
        for block in minilm.blocks[:-TUNED]:
            x = block(x, attention)
    return batch, x, attention


def span_logits(top, head, x, attention):
    for block in top:
        x = block(x, attention)
    return head(x)


def evaluate(top, head, data, examples):
    """Mean exact match and F1 of the predicted answers on `examples`."""
    batch, x, attention = data
    top.eval()
    with torch.no_grad():
        start_logits, end_logits = span_logits(top, head, x, attention)
    spans = bert.best_span(start_logits, end_logits, batch["context_mask"], MAX_LEN)
    answers = []
    for ex, (i, j), word in zip(
        examples, spans.tolist(), batch["word_of"], strict=True
    ):
        answers.append(" ".join(ex.words[word[i] : word[j] + 1]))
    em = np.mean(
        [
            metrics.squad_exact_match(a, [ex.answer])
            for a, ex in zip(answers, examples, strict=True)
        ]
    )
    f1 = np.mean(
        [
            metrics.squad_f1(a, [ex.answer])
            for a, ex in zip(answers, examples, strict=True)
        ]
    )
    return float(em), float(f1)


def run(minilm, train, test, test_examples, seed):
    """One fine-tuning from `seed`: exact match and F1 before and after, and the seconds it took."""
    start = time.perf_counter()
    torch.manual_seed(seed)
    top, head = (
        copy.deepcopy(minilm.blocks[-TUNED:]),
        bert.SpanHead(minilm.config.d_model),
    )
    em_before, f1_before = evaluate(top, head, test, test_examples)
    optimizer = torch.optim.AdamW([*top.parameters(), *head.parameters()], lr=LR)
    batch, x, attention = train
    top.train()
    for _ in range(EPOCHS):
        order = torch.randperm(len(x))
        for k in range(0, len(order), BATCH):
            rows = order[k : k + BATCH]
            start_logits, end_logits = span_logits(top, head, x[rows], attention[rows])
            loss = bert.span_loss(
                start_logits, end_logits, batch["starts"][rows], batch["ends"][rows]
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    em, f1 = evaluate(top, head, test, test_examples)
    return {
        "seed": seed,
        "exact_match": em,
        "f1": f1,
        "exact_match_untrained": em_before,
        "f1_untrained": f1_before,
        "seconds": round(time.perf_counter() - start, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--json", type=Path, help="write the record to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    minilm, tokenizer = load_pretrained(minilm_path())
    train_examples = span_task.make_span_examples(480, seed=0, split="train")
    test_examples = span_task.make_span_examples(200, seed=0, split="test")
    train = lower_blocks(minilm, tokenizer, train_examples)
    test = lower_blocks(minilm, tokenizer, test_examples)
    runs = []
    print(
        f"{'seed':>4} {'exact match':>12} {'F1':>6} {'untrained EM':>13} {'seconds':>8}"
    )
    for seed in args.seeds:
        r = run(minilm, train, test, test_examples, seed)
        runs.append(r)
        print(
            f"{seed:4d} {r['exact_match']:12.3f} {r['f1']:6.3f} {r['exact_match_untrained']:13.3f} {r['seconds']:8.1f}"
        )
    if args.json:
        about = (
            f"Measured by benchmarks/span_seeds.py on {platform.machine()} ({platform.processor() or 'CPU'}), "
            f"torch {torch.__version__}, {args.threads} thread(s), {time.strftime('%Y-%m-%d')}: "
            f"python benchmarks/span_seeds.py --seeds {' '.join(map(str, args.seeds))} "
            f"--threads {args.threads} --json FILE. 200 held-out questions; only the training seed varies."
        )
        record = {
            "about": about,
            "epochs": EPOCHS,
            "train": len(train_examples),
            "test": len(test_examples),
            "runs": runs,
        }
        args.json.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
