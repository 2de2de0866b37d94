"""Byte-level BPE: the companion's readable trainer against Hugging Face ``tokenizers``, same text, same run.

Both learn a GPT-2-style byte-level BPE (GPT-2's pre-tokenisation pattern, no prefix space, the 256 bytes plus
``<|endoftext|>`` and the merges) on Python's own documentation, the help topics of Python 3.11.7 shipped with the
companion (about 465k characters of English): the first 90 % (whole topics, in alphabetical order) for
training, the rest held out. The table
gives the training time, the time to encode the held-out text, the compression (UTF-8 bytes per token) on the
training and held-out text, how many of the first merges the two trainers learn identically, and how many
merges the two lists share in any order. The lists part at the first tie between pairs that the two trainers
order differently (``tokenizers`` numbers the bytes in GPT-2's order, which puts the space after the printable
characters; see ``companion.bpe``).

Usage::

    python benchmarks/bpe_vs_tokenizers.py                     # vocabulary sizes 1000, 2000, 5000; 1 thread
    python benchmarks/bpe_vs_tokenizers.py --vocab-sizes 2000 --threads 2 --repeat 3

``tokenizers`` is written in Rust and trains in parallel (``--threads`` sets ``RAYON_NUM_THREADS``); the
companion is one-threaded pure Python. Times move with the machine's load; compare within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _gpt2_byte_to_unicode() -> dict[int, str]:
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    others = [b for b in range(256) if b not in printable]
    return {
        **{b: chr(b) for b in printable},
        **{b: chr(256 + n) for n, b in enumerate(others)},
    }


def _best_of(repeat: int, fn):
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return out, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--vocab-sizes", type=int, nargs="+", default=[1000, 2000, 5000]
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="threads for tokenizers (RAYON_NUM_THREADS)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="time each step this many times, keep the best",
    )
    parser.add_argument(
        "--naive-chars",
        type=int,
        default=20_000,
        help="text length for the naive trainer",
    )
    parser.add_argument(
        "--naive-vocab-size",
        type=int,
        default=512,
        help="vocabulary for the naive trainer",
    )
    args = parser.parse_args()
    # read when tokenizers starts its thread pool
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from companion.bpe import ENDOFTEXT, BPETokenizer, train_bpe, train_bpe_naive
    from companion.data import python_docs

    topics = list(python_docs.topics().values())  # sorted by name
    text = "".join(topics)
    split = text.index(
        topics[
            next(
                i
                for i in range(len(topics))
                if len("".join(topics[: i + 1])) > 0.9 * len(text)
            )
        ]
    )
    # the last topics (about 10 %) are held out
    train_text, held_out = text[:split], text[split:]
    n_train, n_held = len(train_text.encode()), len(held_out.encode())
    to_byte = {c: b for b, c in _gpt2_byte_to_unicode().items()}

    print(
        f"Training text: {len(train_text):,} characters ({n_train:,} bytes); held out: {len(held_out):,} characters"
        f" ({n_held:,} bytes). tokenizers threads: {args.threads}; companion: 1 (pure Python). Best of {args.repeat}."
    )
    print()
    print(
        "| vocabulary | tokeniser | train (s) | encode held-out (s) | bytes/token train | bytes/token held-out"
        " | same first merges | same merges, any order |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for vocab_size in args.vocab_sizes:
        ours, t_ours = _best_of(
            args.repeat, lambda v=vocab_size: BPETokenizer.train(train_text, v)
        )

        def train_hf(v=vocab_size):
            tok = Tokenizer(models.BPE())
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            tok.decoder = decoders.ByteLevel()
            trainer = trainers.BpeTrainer(
                vocab_size=v,
                special_tokens=[ENDOFTEXT],
                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                show_progress=False,
            )
            tok.train_from_iterator([train_text], trainer)
            return tok

        hf, t_hf = _best_of(args.repeat, train_hf)

        def encode_ours(text, tok=ours):
            tok._cache.clear()  # time the merges, not the cache
            return tok.encode(text)

        ids_ours, e_ours = _best_of(args.repeat, lambda: encode_ours(held_out))
        ids_hf, e_hf = _best_of(args.repeat, lambda tok=hf: tok.encode(held_out).ids)
        assert ours.decode(ids_ours) == held_out and hf.decode(ids_hf) == held_out
        train_ours, train_hf_ids = (
            len(encode_ours(train_text)),
            len(hf.encode(train_text).ids),
        )

        hf_merges = [
            tuple(bytes(to_byte[c] for c in piece) for piece in pair)
            for pair in json.loads(hf.to_str())["model"]["merges"]
        ]
        our_merges = [(ours.vocab[a], ours.vocab[b]) for a, b in ours.merges]
        shared = len(set(our_merges) & set(hf_merges))
        same = next(
            (
                i
                for i, (x, y) in enumerate(zip(our_merges, hf_merges, strict=False))
                if x != y
            ),
            len(our_merges),
        )

        rows = [
            ("companion", ours.vocab_size, t_ours, e_ours, train_ours, len(ids_ours)),
            ("tokenizers", hf.get_vocab_size(), t_hf, e_hf, train_hf_ids, len(ids_hf)),
        ]
        for name, size, t_train, t_encode, n_tok_train, n_tok_held in rows:
            print(
                f"| {size} | {name} | {t_train:.2f} | {t_encode:.3f} | {n_train / n_tok_train:.3f}"
                f" | {n_held / n_tok_held:.3f} | {same} of {len(our_merges)} | {shared} of {len(our_merges)} |"
            )
        print(
            f"| | ratio companion / tokenizers | {t_ours / t_hf:.1f}x | {e_ours / e_hf:.1f}x | | | | |"
        )

    # The definition (recount every pair after each merge) against the incremental trainer, on a smaller text.
    text, size = train_text[: args.naive_chars], args.naive_vocab_size
    naive, t_naive = _best_of(1, lambda: train_bpe_naive(text, size))
    fast, t_fast = _best_of(args.repeat, lambda: train_bpe(text, size))
    assert naive == fast
    print()
    print(
        f"{size - 256} merges on {len(text):,} characters: train_bpe_naive {t_naive:.2f} s, train_bpe {t_fast:.3f} s"
        f" ({t_naive / t_fast:.0f}x faster, same merges)."
    )


if __name__ == "__main__":
    main()
