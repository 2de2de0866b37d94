"""Skip-gram with negative sampling: the companion's PyTorch trainer against gensim, same data, same run.

Both train on the Wikipedia excerpt shipped with gensim (106 articles, 452,944 tokens) with the same
settings: skip-gram, 100 dimensions, window 5, min_count 5, 5 negatives, sample 1e-3, linear learning
rate 0.025 → 0.0001, and the same number of threads. Both are scored by the companion's evaluation
(WordSim-353 Spearman, analogy accuracy), which the script first checks against gensim's own
``evaluate_word_pairs`` / ``evaluate_word_analogies`` on the same vectors.

Usage::

    python benchmarks/word2vec_vs_gensim.py                 # the full comparison, 10 epochs
    python benchmarks/word2vec_vs_gensim.py --chapter       # the chapter's faster settings
    python benchmarks/word2vec_vs_gensim.py --repeat 3      # best-of-3 wall times

Wall time is for the whole ``Word2Vec(...)`` / ``train_word2vec(...)`` call (vocabulary included, corpus
loading excluded). On a shared machine both numbers move with the load; the ratio of the two in the
same run is the fair comparison, and CPU time is printed beside it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from companion.data.corpus import (
    corpus_size,
    gensim_data_path,
    load_analogies,
    load_wikipedia,
    load_wordsim353,
)
from companion.evaluation import evaluate_analogies, evaluate_word_pairs
from companion.training.word2vec import (
    CHAPTER_CONFIG,
    Word2VecConfig,
    to_keyed_vectors,
    train_word2vec,
)


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def _score(vectors: torch.Tensor, words) -> tuple[float, float]:
    return evaluate_word_pairs(
        vectors, words, load_wordsim353()
    ).spearman, evaluate_analogies(vectors, words, load_analogies()).accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--epochs", type=int, default=None, help="epochs (default 10, or the chapter's)"
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=None,
        help="initial learning rate (default 0.025)",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run each trainer this many times, keep the best",
    )
    parser.add_argument(
        "--chapter",
        action="store_true",
        help="use the chapter's settings (CHAPTER_CONFIG)",
    )
    parser.add_argument(
        "--per-pair-negatives",
        action="store_true",
        help="draw negatives per pair, as the C code",
    )
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    from gensim.models import Word2Vec

    sentences = load_wikipedia()
    n_sent, n_tok = corpus_size(sentences)
    base = CHAPTER_CONFIG if args.chapter else Word2VecConfig(epochs=10)
    epochs = args.epochs or base.epochs
    cfg = Word2VecConfig(
        **{
            **base.__dict__,
            "epochs": epochs,
            "threads": args.threads,
            "seed": args.seed,
            "shared_negatives": not args.per_pair_negatives,
            "alpha": args.alpha or base.alpha,
        }
    )
    print(
        f"corpus: {n_sent} articles, {n_tok:,} tokens; threads: {args.threads} (os.cpu_count()={os.cpu_count()})"
    )
    print(
        f"settings: skip-gram, D={cfg.vector_size}, window={cfg.window}, min_count={cfg.min_count}, "
        f"negative={cfg.negative}, sample={cfg.sample}, epochs={epochs}, alpha={cfg.alpha}, "
        f"batch_pairs={cfg.batch_pairs}, "
        f"shared_negatives={cfg.shared_negatives}"
    )

    def run_gensim():
        return Word2Vec(
            sentences,
            sg=1,
            negative=cfg.negative,
            vector_size=cfg.vector_size,
            window=cfg.window,
            min_count=cfg.min_count,
            sample=cfg.sample,
            epochs=epochs,
            workers=args.threads,
            seed=args.seed,
            alpha=cfg.alpha,
            min_alpha=cfg.min_alpha,
        )

    def run_companion():
        return train_word2vec(sentences, cfg, progress=False)

    rows = []
    for name, fn in (
        ("gensim Word2Vec", run_gensim),
        ("companion train_word2vec", run_companion),
    ):
        best = None
        for _ in range(args.repeat):
            model, wall, cpu = _timed(fn)
            if best is None or wall < best[1]:
                best = (model, wall, cpu)
        model, wall, cpu = best
        if name.startswith("gensim"):
            words, vectors = (
                list(model.wv.index_to_key),
                torch.from_numpy(model.wv.vectors.copy()),
            )
        else:
            words, vectors = list(model.words), model.vectors
        spearman, accuracy = _score(vectors, words)
        rows.append((name, len(words), spearman, accuracy, wall, cpu))

    # the companion's evaluation is gensim's: check it on the companion's vectors
    kv = to_keyed_vectors(vectors, words)
    g_spearman = kv.evaluate_word_pairs(str(gensim_data_path("wordsim353.tsv")))[1][0]
    g_accuracy = kv.evaluate_word_analogies(
        str(gensim_data_path("questions-words.txt"))
    )[0]
    assert abs(g_spearman - rows[-1][2]) < 1e-9 and g_accuracy == rows[-1][3], (
        g_spearman,
        g_accuracy,
        rows[-1],
    )

    ref_wall = rows[0][4]
    print()
    print(
        f"| {'model':<26} | {'vocab':>5} | {'WordSim-353 Spearman':>20} | {'analogy accuracy':>16} | "
        f"{'wall s':>7} | {'CPU s':>7} | {'time ratio':>10} |"
    )
    print(
        f"|{'-' * 28}|{'-' * 7}|{'-' * 22}|{'-' * 18}|{'-' * 9}|{'-' * 9}|{'-' * 12}|"
    )
    for name, v, sp, acc, wall, cpu in rows:
        print(
            f"| {name:<26} | {v:>5} | {sp:>20.4f} | {acc:>16.4f} | {wall:>7.2f} | {cpu:>7.2f} | "
            f"{wall / ref_wall:>9.2f}x |"
        )


if __name__ == "__main__":
    main()
