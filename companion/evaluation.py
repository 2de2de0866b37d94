"""Measuring word vectors: nearest neighbours, word-pair similarity (WordSim-353) and analogies.

Everything here takes a ``(V, D)`` tensor of vectors and the ``V`` words of its rows, so it works the same
for the companion's word2vec, its GloVe, or vectors taken out of gensim.

The two benchmarks follow gensim's ``KeyedVectors.evaluate_word_pairs`` and ``evaluate_word_analogies``
with their defaults, and give the same numbers on the same vectors (the tests check it):

- only the first ``restrict_vocab = 300000`` words are used (the vocabulary is sorted by frequency);
- ``case_insensitive=True``: words are compared upper-cased; when several rows upper-case to the same
  word, the first (most frequent) one stands for it;
- a pair or question with a word outside those rows is left out (gensim's ``dummy4unknown=False``), and
  we report how many and which, rather than dropping them silently;
- an analogy ``a : b :: c : ?`` is answered by 3CosAdd: the row whose cosine with
  ``b̂ + ĉ - â`` (unit vectors) is largest, never ``a``, ``b`` or ``c`` themselves; as gensim, we look at
  the 5 best rows and take the first whose upper-cased word is not one of the three.

Similarities are computed in float64, so ties closer than float32 rounding could in principle be ordered
differently from gensim's float32 arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .validation import (
    check_labels,
    require_floats,
    require_int,
    require_tensor,
)

__all__ = [
    "AnalogyQuestion",
    "unit_rows",
    "most_similar",
    "analogy",
    "WordPairsResult",
    "evaluate_word_pairs",
    "AnalogyResult",
    "evaluate_analogies",
]


def unit_rows(vectors: torch.Tensor) -> torch.Tensor:
    """``vectors`` (``(V, D)``) with every row divided by its length, in float64 (a zero row stays zero)."""
    require_tensor(vectors, "vectors", "float")
    v = vectors.detach().to(torch.float64)
    norms = v.norm(dim=-1, keepdim=True)
    return torch.where(norms > 0, v / norms.clamp_min(1e-300), v)


def most_similar(
    vectors: torch.Tensor, words: Sequence[str], query: str | torch.Tensor, k: int = 10
) -> list[tuple[str, float]]:
    """The ``k`` words whose vectors have the largest cosine with ``query``'s, best first.

    ``cos(x, y) = x·y / (|x| |y|)``. ``query`` is a word (then it is left out of the answer) or a ``(D,)``
    vector.

    Returns:
        ``[(word, cosine), ...]`` of length ``k``.
    """
    require_floats(vectors, "vectors", "(V, D)", ndim=2)
    check_labels(words, "words", vectors.shape[0], "(one word per row of vectors)")
    require_int(k, "k", low=1)
    unit = unit_rows(vectors)
    exclude = None
    if isinstance(query, str):
        index = {w: i for i, w in enumerate(words)}
        if query not in index:
            raise KeyError(f"{query!r} is not among the {len(words)} words")
        exclude = index[query]
        q = unit[exclude]
    else:
        require_tensor(query, "query", "float")
        if tuple(query.shape) != (vectors.shape[1],):
            raise ValueError(
                f"query vector must have shape ({vectors.shape[1]},), got {tuple(query.shape)}"
            )
        q = unit_rows(query.unsqueeze(0))[0]
    sims = unit @ q
    if exclude is not None:
        sims[exclude] = -torch.inf
    available = len(words) - (exclude is not None)
    if k > available:
        raise ValueError(f"k must be at most {available}, got {k}")
    top = sims.topk(k)
    return [
        (words[i], float(s))
        for i, s in zip(top.indices.tolist(), top.values.tolist(), strict=True)
    ]


def analogy(
    vectors: torch.Tensor, words: Sequence[str], a: str, b: str, c: str, k: int = 1
) -> list[tuple[str, float]]:
    """3CosAdd: the ``k`` words ``d`` that best complete ``a : b :: c : d``, excluding ``a``, ``b``, ``c``.

    ``d = argmax_w cos(w, b̂ + ĉ - â)`` with ``x̂ = x / |x|`` ("man : king :: woman : ?" → "queen").
    """
    require_floats(vectors, "vectors", "(V, D)", ndim=2)
    check_labels(words, "words", vectors.shape[0], "(one word per row of vectors)")
    require_int(k, "k", low=1)
    index = {w: i for i, w in enumerate(words)}
    missing = [w for w in (a, b, c) if w not in index]
    if missing:
        raise KeyError(f"not among the words: {missing}")
    unit = unit_rows(vectors)
    q = unit[index[b]] + unit[index[c]] - unit[index[a]]
    sims = unit @ (q / q.norm().clamp_min(1e-300))
    sims[[index[a], index[b], index[c]]] = -torch.inf
    top = sims.topk(min(k, len(words) - 3))
    return [
        (words[i], float(s))
        for i, s in zip(top.indices.tolist(), top.values.tolist(), strict=True)
    ]


def _ok_vocab(
    words: Sequence[str], restrict_vocab: int, case_insensitive: bool
) -> dict[str, int]:
    """gensim's map from (upper-cased) word to row, among the first ``restrict_vocab`` rows; first wins."""
    ok: dict[str, int] = {}
    for i, w in enumerate(words[:restrict_vocab]):
        key = w.upper() if case_insensitive else w
        ok.setdefault(key, i)
    return ok


@dataclass(frozen=True)
class AnalogyQuestion:
    """One analogy ``a : b :: c : d`` ("a is to b as c is to d") of a named section."""

    section: str
    a: str
    b: str
    c: str
    d: str


@dataclass(frozen=True)
class WordPairsResult:
    """The outcome of :func:`evaluate_word_pairs`.

    Attributes:
        spearman: Spearman's rank correlation between human scores and cosines, over the pairs used.
        pearson: Pearson's correlation, same pairs.
        pairs_used: how many pairs had both words in the vocabulary.
        oov_pairs: the pairs left out, as ``(word1, word2)`` in file order.
        oov_ratio: percentage of pairs left out (gensim's third return value).
        gold, model: the human scores and the cosines of the pairs used.
    """

    spearman: float
    pearson: float
    pairs_used: int
    oov_pairs: list[tuple[str, str]]
    oov_ratio: float
    gold: list[float] = field(repr=False)
    model: list[float] = field(repr=False)

    @property
    def oov_count(self) -> int:
        return len(self.oov_pairs)


def evaluate_word_pairs(
    vectors: torch.Tensor,
    words: Sequence[str],
    pairs: Sequence[tuple[str, str, float]],
    *,
    restrict_vocab: int = 300_000,
    case_insensitive: bool = True,
) -> WordPairsResult:
    """Correlation of cosine similarity with human similarity judgements (the book uses WordSim-353).

    Args:
        vectors: ``(V, D)``; row ``i`` is the vector of ``words[i]``, most frequent words first.
        words: the ``V`` words.
        pairs: ``(word1, word2, score)`` triples (WordSim-353: :func:`companion.data.corpus.load_wordsim353`).
        restrict_vocab, case_insensitive: as gensim's (see the module docstring).
    """
    require_floats(vectors, "vectors", "(V, D)", ndim=2)
    check_labels(words, "words", vectors.shape[0], "(one word per row of vectors)")
    require_int(restrict_vocab, "restrict_vocab", low=1)
    from scipy import stats

    ok = _ok_vocab(words, restrict_vocab, case_insensitive)
    unit = unit_rows(vectors)
    gold, model, oov = [], [], []
    for a, b, score in pairs:
        ka, kb = (a.upper(), b.upper()) if case_insensitive else (a, b)
        if ka not in ok or kb not in ok:
            oov.append((a, b))
            continue
        gold.append(float(score))
        model.append(float(unit[ok[ka]] @ unit[ok[kb]]))
    if not gold:
        raise ValueError(
            f"every one of the {len(pairs)} pairs has a word outside the vocabulary"
        )
    spearman = float(stats.spearmanr(gold, model)[0])
    pearson = float(stats.pearsonr(gold, model)[0])
    return WordPairsResult(
        spearman,
        pearson,
        len(gold),
        oov,
        100.0 * len(oov) / (len(gold) + len(oov)),
        gold,
        model,
    )


@dataclass(frozen=True)
class AnalogyResult:
    """The outcome of :func:`evaluate_analogies`.

    Attributes:
        accuracy: ``correct / evaluated`` (0 when nothing could be evaluated).
        correct: questions answered right.
        evaluated: questions whose four words were all in the vocabulary.
        skipped: questions left out because a word was not.
        sections: per section name, ``(correct, evaluated)``.
        predictions: per evaluated question, the predicted word (upper-cased when case-insensitive).
    """

    accuracy: float
    correct: int
    evaluated: int
    skipped: int
    sections: dict[str, tuple[int, int]]
    predictions: list[str | None] = field(repr=False)

    @property
    def total(self) -> int:
        """All questions, evaluated or skipped."""
        return self.evaluated + self.skipped


def evaluate_analogies(
    vectors: torch.Tensor,
    words: Sequence[str],
    questions: Sequence[AnalogyQuestion],
    *,
    restrict_vocab: int = 300_000,
    case_insensitive: bool = True,
    batch_size: int = 512,
) -> AnalogyResult:
    """Accuracy on analogy questions by 3CosAdd (the book uses Google's questions-words,
    :func:`companion.data.corpus.load_analogies`), as gensim computes it.

    Questions with a word outside the first ``restrict_vocab`` rows are skipped and counted. For the others
    the query is ``b̂ + ĉ - â``; the rows of ``a``, ``b``, ``c`` are excluded, the 5 most cosine-similar
    rows are taken in order, and the first whose word is not (case-insensitively) ``a``, ``b`` or ``c`` is
    the prediction (if all 5 are, the 5th stands, as in gensim). It is right if it equals ``d``.
    """
    require_floats(vectors, "vectors", "(V, D)", ndim=2)
    check_labels(words, "words", vectors.shape[0], "(one word per row of vectors)")
    require_int(restrict_vocab, "restrict_vocab", low=1)
    require_int(batch_size, "batch_size", low=1)
    ok = _ok_vocab(words, restrict_vocab, case_insensitive)
    norm = (lambda w: w.upper()) if case_insensitive else (lambda w: w)
    unit = unit_rows(vectors)[: min(restrict_vocab, len(words))]
    keys = [norm(w) for w in words[: unit.shape[0]]]

    usable, skipped = [], 0
    for q in questions:
        a, b, c, d = norm(q.a), norm(q.b), norm(q.c), norm(q.d)
        if a in ok and b in ok and c in ok and d in ok:
            usable.append((q.section, a, b, c, d))
        else:
            skipped += 1
    sections: dict[str, list[int]] = {}
    for q in questions:
        sections.setdefault(q.section, [0, 0])
    predictions: list[str | None] = []
    correct = 0
    topn = min(5, unit.shape[0])
    for start in range(0, len(usable), batch_size):
        chunk = usable[start : start + batch_size]
        ia = torch.tensor([ok[x[1]] for x in chunk])
        ib = torch.tensor([ok[x[2]] for x in chunk])
        ic = torch.tensor([ok[x[3]] for x in chunk])
        query = unit[ib] + unit[ic] - unit[ia]
        query = query / query.norm(dim=1, keepdim=True).clamp_min(1e-300)
        sims = query @ unit.T
        rows = torch.arange(len(chunk))
        for idx in (ia, ib, ic):
            sims[rows, idx] = -torch.inf
        top = sims.topk(topn, dim=1)
        for (section, a, b, c, d), cand, vals in zip(
            chunk, top.indices.tolist(), top.values.tolist(), strict=True
        ):
            predicted = None
            for i, v in zip(cand, vals, strict=True):
                if v == -torch.inf:
                    break
                predicted = keys[i]
                if predicted not in (a, b, c):
                    break
            predictions.append(predicted)
            hit = predicted == d
            correct += hit
            sections[section][0] += hit
            sections[section][1] += 1
    evaluated = len(usable)
    return AnalogyResult(
        correct / evaluated if evaluated else 0.0,
        correct,
        evaluated,
        skipped,
        {k: (v[0], v[1]) for k, v in sections.items()},
        predictions,
    )
