"""word2vec: skip-gram and CBOW with negative sampling, vectorised in plain PyTorch.

Notation: a vocabulary of ``V`` words with counts ``c_w`` (total ``T = sum_w c_w``), vectors of width ``D``,
two ``(V, D)`` tables: the *input* vectors ``v_w`` (the ones kept as "the word vectors") and the *output*
vectors ``u_w``; ``σ`` is the logistic sigmoid. (Chapter 3 writes these in the book's notation: ``|V|`` for ``V``,
``d`` for ``D``, ``n_neg`` for ``K``, ``e_w`` for ``v_w``, ``n_w`` and ``n`` for ``c_w`` and ``T``.)

**Skip-gram with negative sampling** (SGNS, Mikolov et al. 2013b). For a word pair ``(a, b)`` that occurs
within a window of each other, and ``K`` *negative* words ``n_1..n_K`` drawn from a noise distribution,
the loss is::

    ℓ = -log σ(u_b · v_a) - sum_k log σ(-u_{n_k} · v_a)                        (negative_sampling_loss)

With ``s = u · v`` and label ``y`` (1 for the true pair, 0 for a negative), ``∂ℓ/∂s = σ(s) - y``, so the
gradients are ``∂ℓ/∂v_a = sum_j (σ(s_j) - y_j) u_j`` and ``∂ℓ/∂u_j = (σ(s_j) - y_j) v_a``. The fast
trainer applies exactly these, by hand, with ``index_add_`` (no autograd), like the reference C code.
Like the C code and gensim, the *input* word of a pair is the context word and the *output* (the word
the negatives replace) is the centre word; windows are symmetric, so a pair and its reverse are equally
likely, and this is the paper's "predict the context from the centre" up to which table plays which role.

**CBOW** (continuous bag of words): the input is the mean ``h`` of the context words' input vectors and
the output is the centre word: ``ℓ = -log σ(u_c · h) - sum_k log σ(-u_{n_k} · h)``. As in the C code
and gensim (``cbow_mean=1``), the error ``∂ℓ/∂h`` is added to every context word's vector undivided.

**The ingredients**, each a function of its own:

- vocabulary with ``min_count`` (:func:`build_vocab`), words sorted by decreasing count;
- subsampling of frequent words (:func:`keep_probabilities`). We use the reference C code's formula, which
  gensim also uses: a word with count ``c`` is kept with probability
  ``min(1, (sqrt(c / (s T)) + 1) · s T / c)``, i.e. ``(sqrt(f/s) + 1) s/f`` for its frequency
  ``f = c/T`` and the threshold ``s`` (``sample``, 1e-3). The paper's formula, keep with probability
  ``sqrt(s/f)``, is available with ``formula="paper"``. Subsampling removes tokens *before* the windows
  are formed, so windows reach further in the text;
- negatives from the unigram distribution raised to 3/4, ``P_n(w) ∝ c_w^{3/4}`` (:func:`noise_distribution`);
- context windows with the reference code's *dynamic window*: for each centre an effective half-width
  ``b`` is drawn uniformly from ``1..window`` (:func:`reduced_windows`), so near words count more; windows
  never cross a sentence boundary;
- pairs (:func:`skipgram_pairs`, vectorised, and :func:`skipgram_pairs_loop`, the plain loop it equals).

**Batching.** :func:`train_word2vec` draws, per epoch, the subsampled text and the dynamic windows, and
groups centres with the same ``b`` into batches of about ``batch_pairs`` pairs, visited in random order.
One batch is a ``(G, 2b)`` matrix of context ids and a ``(G, 1 + K)`` matrix of outputs (the centre and
its negatives), so all scores are one batched matrix product. By default the ``K`` negatives of a centre
are shared by its ``2b`` context words, as in the "HogBatch" scheme of Ji, Satish, Li & Dubey,
"Parallelizing Word2Vec in Shared and Distributed Memory" (arXiv:1604.04661): each pair still meets ``K``
negatives drawn from ``P_n``, but the work per pair drops about threefold. ``shared_negatives=False``
draws ``K`` fresh negatives for every pair, exactly as the C code. The learning rate falls linearly from
``alpha`` to ``min_alpha`` over training, as in the C code.

**Threads.** Each batch's gradients are computed in ``slices`` slices (2 by default); with ``threads > 1``
(default: ``torch.get_num_threads()``) Python threads compute them in parallel (PyTorch releases the GIL
inside operators), then one thread updates the input table while another updates the output table.
Updates are applied in a fixed order, so a run is reproducible for a given seed, whatever ``threads``.
The operators are too small to gain from PyTorch's intra-op threads, so those are set to 1 during
training (and restored after): ``threads`` is the total number of threads used.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from .text import Vocabulary
from .validation import (
    check_negative_sampling,
    check_windowed_stream,
    describe,
    require_choice,
    require_entries,
    require_ids,
    require_int,
    require_ndim,
    require_number,
    require_positive_ints,
    require_tensor,
)

__all__ = [
    "build_vocab",
    "encode_sentences",
    "keep_probabilities",
    "subsample",
    "noise_distribution",
    "sample_negatives",
    "reduced_windows",
    "skipgram_pairs_loop",
    "skipgram_pairs",
    "context_windows",
    "negative_sampling_loss",
    "SkipGramNegativeSampling",
    "skipgram_window_gradients",
    "Word2VecConfig",
    "CHAPTER_CONFIG",
    "Word2VecModel",
    "train_word2vec",
    "to_keyed_vectors",
]


# ----------------------------------------------------------------------------------------------------------
# Vocabulary and encoding


def _check_sentences(sentences: object) -> list[Sequence[str]]:
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of token lists, got one str")
    try:
        out = list(sentences)
    except TypeError:
        raise TypeError(
            f"sentences must be an iterable of token lists, got {describe(sentences)}"
        ) from None
    for s in out[:1]:
        if isinstance(s, str) or not isinstance(s, Sequence):
            raise TypeError(
                f"each sentence must be a list of str tokens, got {describe(s)}"
            )
    return out


def build_vocab(sentences: Iterable[Sequence[str]], min_count: int = 5) -> Vocabulary:
    """Count the words of ``sentences`` and keep those occurring at least ``min_count`` times, in a
    :class:`~companion.text.Vocabulary` without special tokens (``vocab.words``, ``vocab.counts``, ``vocab[w]``).

    Words are ordered by decreasing count, ties by first appearance. gensim keeps the same words with the
    same counts but orders ties the other way round (its ``sort_by_descending_frequency`` puts the word that
    appeared last first), so the rows of two models can differ among words of equal count.

    Raises:
        ValueError: if the corpus has no tokens, or ``min_count`` removes every word (the message gives the
            largest count).
    """
    sents = _check_sentences(sentences)
    require_int(min_count, "min_count", low=1)
    counts: Counter[str] = Counter()
    for s in sents:
        counts.update(s)
    if not counts:
        raise ValueError(f"the corpus is empty: {len(sents)} sentences and no tokens")
    if max(counts.values()) < min_count:
        raise ValueError(
            f"min_count={min_count} removes every word: the most frequent word occurs "
            f"{max(counts.values())} times (corpus of {sum(counts.values())} tokens)"
        )
    return Vocabulary(
        (w for s in sents for w in s),
        min_count,
        specials=(),
        order="frequency",
        ties="appearance",
    )


def encode_sentences(
    sentences: Iterable[Sequence[str]], vocab: Vocabulary
) -> tuple[torch.Tensor, torch.Tensor]:
    """The corpus as one stream of ids, dropping words outside the vocabulary (as gensim does).

    Returns:
        ``(ids, sentence_ids)``, both ``(N,)`` ``torch.long``: token ids and the index of the sentence each
        token came from (windows never cross sentences).
    """
    sents = _check_sentences(sentences)
    if not isinstance(vocab, Vocabulary):
        raise TypeError(
            f"vocab must be a companion.text.Vocabulary, got {describe(vocab)}"
        )
    index = vocab.stoi
    ids: list[int] = []
    lengths: list[int] = []
    for s in sents:
        before = len(ids)
        ids.extend(index[w] for w in s if w in index)
        lengths.append(len(ids) - before)
    if not ids:
        raise ValueError("no token of the corpus is in the vocabulary")
    sentence_ids = torch.repeat_interleave(
        torch.arange(len(sents)), torch.tensor(lengths, dtype=torch.long)
    )
    return torch.tensor(ids, dtype=torch.long), sentence_ids


# ----------------------------------------------------------------------------------------------------------
# Subsampling, noise distribution, windows, pairs


def _check_counts(counts: object) -> torch.Tensor:
    require_entries(
        require_tensor(counts, "counts"),
        "counts",
        low=0,
        low_open=True,
        why="positive counts",
    )
    if require_ndim(counts, "counts", 1, "(V,)").numel() == 0:
        raise ValueError("counts must not be empty (V >= 1)")
    return counts.to(torch.float64)


def _check_keep(sample: object, formula: object) -> float:
    require_choice(formula, "formula", ("reference", "paper"))
    return require_number(sample, "sample", low=0, high=1, high_open=True)


def keep_probabilities(counts: Tensor, sample=1e-3, formula="reference") -> Tensor:
    """P(keep) of each word (V,) from counts (V,): f = counts / Σ counts, s = sample."""
    c, sample = _check_counts(counts), _check_keep(sample, formula)
    if sample == 0:
        return torch.ones_like(c)
    f = c / c.sum()
    if formula == "reference":  # the C code and gensim
        keep = ((f / sample).sqrt() + 1) * sample / f
    else:  # the paper (Mikolov et al. 2013b) discards with probability 1 - sqrt(s/f)
        keep = (sample / f).sqrt()
    return keep.clamp(max=1.0)  # min(1, ·); float64, in (0, 1]


def subsample(
    ids: torch.Tensor, keep: torch.Tensor, generator: torch.Generator | None = None
) -> torch.Tensor:
    """A ``(N,)`` bool mask keeping token ``t`` with probability ``keep[ids[t]]``, independently."""
    require_tensor(ids, "ids", "int")
    require_tensor(keep, "keep", "float")
    require_ids(ids, "ids", keep.numel(), None)
    return (
        torch.rand(ids.shape, generator=generator, dtype=torch.float64)
        < keep.to(torch.float64)[ids]
    )


def noise_distribution(counts: torch.Tensor, power: float = 0.75) -> torch.Tensor:
    """The negative-sampling distribution ``P_n(w) = c_w^power / sum_v c_v^power`` (float64, ``(V,)``)."""
    c = _check_counts(counts)
    require_number(power, "power")
    p = c.pow(power)
    return p / p.sum()


def sample_negatives(
    noise: torch.Tensor,
    shape: tuple[int, ...] | int,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Draw word ids from the distribution ``noise`` (``(V,)``, summing to 1) by inverting its CDF.

    Returns:
        ``torch.long`` ids of the given ``shape``.
    """
    require_tensor(noise, "noise", "float")
    require_ndim(noise, "noise", 1, "(V,)")
    require_entries(noise, "noise", low=0, why="a distribution")
    if not math.isclose(float(noise.sum()), 1.0, rel_tol=1e-6):
        raise ValueError(
            f"noise must sum to 1 (a distribution), got a sum of {float(noise.sum())!r}"
        )
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    cdf = noise.to(torch.float64).cumsum(0)
    u = torch.rand(shape, generator=generator, dtype=torch.float64) * cdf[-1]
    return torch.searchsorted(cdf, u, right=True).clamp_(max=noise.numel() - 1)


def reduced_windows(
    n: int, window: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """The reference code's dynamic windows: ``n`` half-widths drawn uniformly from ``1..window``."""
    require_int(n, "n", low=0)
    require_int(window, "window", low=1)
    return torch.randint(1, window + 1, (n,), generator=generator)


def skipgram_pairs_loop(ids: Tensor, window: int, sentence_ids=None, windows=None):
    """(ids[i], ids[j]) for ``0 < |j−i| ≤ b_i`` in a sentence, b_i = windows[i]."""
    sentence_ids, windows = check_windowed_stream(ids, window, sentence_ids, windows)
    tokens, sent, b = ids.tolist(), sentence_ids.tolist(), windows.tolist()
    pairs = []
    for i in range(len(tokens)):
        for j in range(i - b[i], i + b[i] + 1):
            if j != i and 0 <= j < len(tokens) and sent[j] == sent[i]:
                pairs.append((tokens[i], tokens[j]))
    return pairs


def context_windows(
    ids: torch.Tensor,
    window: int,
    sentence_ids: torch.Tensor | None = None,
    windows: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every position's context as a fixed-width row, with a mask.

    Returns:
        ``(contexts, mask)``, both ``(N, 2 * window)``: ``contexts[i]`` holds the ids at offsets
        ``-window .. -1, 1 .. window`` from ``i`` (clamped at the ends), ``mask[i, k]`` says whether that
        offset lies within ``b_i``, inside the stream, and in ``i``'s sentence.
    """
    sentence_ids, windows = check_windowed_stream(ids, window, sentence_ids, windows)
    n = ids.numel()
    offsets = torch.cat([torch.arange(-window, 0), torch.arange(1, window + 1)])
    pos = torch.arange(n).unsqueeze(1) + offsets
    inside = (pos >= 0) & (pos < n)
    pos = pos.clamp(0, max(n - 1, 0))
    mask = (
        inside
        & (offsets.abs() <= windows.unsqueeze(1))
        & (sentence_ids[pos] == sentence_ids.unsqueeze(1))
    )
    return ids[pos], mask


def skipgram_pairs(
    ids: torch.Tensor,
    window: int,
    sentence_ids: torch.Tensor | None = None,
    windows: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The pairs of :func:`skipgram_pairs_loop`, in the same order, without a Python loop.

    Returns:
        ``(centres, contexts)``, two ``(P,)`` ``torch.long`` tensors.
    """
    contexts, mask = context_windows(ids, window, sentence_ids, windows)
    centres = ids.unsqueeze(1).expand_as(contexts)
    return centres[mask], contexts[mask]


# ----------------------------------------------------------------------------------------------------------
# The loss, the teaching model, and the hand-derived gradients


def negative_sampling_loss(v: Tensor, u_pos: Tensor, u_neg: Tensor, reduction="mean"):
    """-log σ(u_pos·v) - Σ_k log σ(-u_neg[k]·v): v, u_pos (B, D), u_neg (B, K, D)."""
    check_negative_sampling(v, u_pos, u_neg, reduction)
    pos = (u_pos * v).sum(-1)  # (B,)
    neg = torch.bmm(u_neg, v.unsqueeze(2)).squeeze(2)  # (B, K)
    loss = -F.logsigmoid(pos) - F.logsigmoid(-neg).sum(-1)  # (B,)
    if reduction == "none":
        return loss
    return loss.mean() if reduction == "mean" else loss.sum()


def _check_batch(centres: object, contexts: object, negatives: object) -> None:
    require_tensor(centres, "centres", "int")
    require_tensor(contexts, "contexts", "int")
    require_ids(negatives, "negatives", None, 2, "(B, K)")


class SkipGramNegativeSampling(nn.Module):
    """negative_sampling_loss(input(centres), output(contexts), output(negatives))."""

    def __init__(self, vocab_size: int, dim: int, *, seed: int = 0) -> None:
        super().__init__()
        require_positive_ints(vocab_size=vocab_size, dim=dim)
        g = torch.Generator().manual_seed(seed)
        self.input = nn.Embedding(vocab_size, dim)
        self.output = nn.Embedding(vocab_size, dim)
        w = torch.rand(vocab_size, dim, generator=g)
        with torch.no_grad():  # as in the reference code:
            self.input.weight.copy_((w - 0.5) / dim)
            self.output.weight.zero_()  # inputs uniform in [-0.5/D, 0.5/D], outputs 0

    def forward(self, centres: Tensor, contexts: Tensor, negatives: Tensor) -> Tensor:
        _check_batch(centres, contexts, negatives)
        v = self.input(centres)  # (B, D); centres, contexts (B,)
        return negative_sampling_loss(v, self.output(contexts), self.output(negatives))


def skipgram_window_gradients(
    v: torch.Tensor,
    u: torch.Tensor,
    context_mask: torch.Tensor,
    output_mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hand-derived gradients of the SGNS loss for ``G`` windows with shared outputs.

    Window ``g`` has ``C`` input (context) vectors ``v[g]`` and ``1 + K`` output vectors ``u[g]``: the
    centre word first, then ``K`` negatives. Its loss sums :func:`negative_sampling_loss` over the valid
    inputs: ``L = sum_{g,i,k} m_gik · softplus(∓ s_gik)`` with ``s = v[g] @ u[g]^T`` and
    ``m_gik = context_mask[g, i] · output_mask[g, k]``. Since ``∂ℓ/∂s = σ(s) - y``::

        E = m · (σ(s) - y),    ∂L/∂v[g] = E[g] @ u[g],    ∂L/∂u[g] = E[g]^T @ v[g].

    Args:
        v: ``(G, C, D)`` input vectors.
        u: ``(G, 1 + K, D)`` output vectors.
        context_mask: ``(G, C)`` bool, which inputs exist.
        output_mask: ``(G, 1 + K)`` bool, which outputs count (a negative equal to the centre does not).

    Returns:
        ``(grad_v (G, C, D), grad_u (G, 1 + K, D), loss)`` with ``loss`` the 0-d sum ``L``.
    """
    require_tensor(v, "v", "float")
    require_tensor(u, "u", "float")
    require_ndim(v, "v", 3, "(G, C, D)")
    require_ndim(u, "u", 3, "(G, 1 + K, D)")
    g, c, d = v.shape
    if u.shape[0] != g or u.shape[2] != d:
        raise ValueError(f"u must have shape ({g}, 1 + K, {d}), got {tuple(u.shape)}")
    if tuple(context_mask.shape) != (g, c):
        raise ValueError(
            f"context_mask must have shape ({g}, {c}), got {tuple(context_mask.shape)}"
        )
    if tuple(output_mask.shape) != (g, u.shape[1]):
        raise ValueError(
            f"output_mask must have shape ({g}, {u.shape[1]}), got {tuple(output_mask.shape)}"
        )
    error, loss = _sgns_error(v, u, context_mask, output_mask)
    return torch.bmm(error, u), torch.bmm(error.transpose(1, 2), v), loss


def _sgns_error(
    v: torch.Tensor, u: torch.Tensor, cmask: torch.Tensor, omask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``E = m (σ(s) - y)``, shape ``(G, C, 1 + K)``, and the summed loss, for windows with shared outputs."""
    s = torch.bmm(v, u.transpose(1, 2))
    m = (cmask.unsqueeze(2) & omask.unsqueeze(1)).to(s.dtype)
    sign = torch.ones(u.shape[1], dtype=s.dtype)
    sign[0] = -1.0
    loss = (nn.functional.softplus(s * sign) * m).sum()
    error = torch.sigmoid(s)
    error[:, :, 0] -= 1.0
    return error.mul_(m), loss


# ----------------------------------------------------------------------------------------------------------
# Configuration, result, training


@dataclass(frozen=True)
class Word2VecConfig:
    """Training settings: gensim's ``Word2Vec`` defaults where both have the setting, except skip-gram (gensim: CBOW).

    Attributes:
        architecture: ``"skipgram"`` or ``"cbow"``.
        vector_size: ``D``.
        window: the largest half-width of the context window.
        min_count: drop words rarer than this.
        negative: ``K``, negatives per positive pair.
        sample: subsampling threshold ``s`` (0 disables subsampling).
        ns_exponent: the power of the noise distribution (3/4).
        epochs: passes over the corpus.
        alpha, min_alpha: the learning rate decays linearly from ``alpha`` to ``min_alpha``.
        batch_pairs: about how many (context, centre) pairs one batch holds. Summed updates get unstable
            for frequent words when this is much larger (at 16,384 the Wikipedia run diverges).
        shared_negatives: share a centre's ``K`` negatives among its context words (fast) or draw them
            per pair (skip-gram only).
        seed: seeds every random draw (initialisation, subsampling, windows, negatives, order).
        threads: worker threads (``None``: ``torch.get_num_threads()``).
        slices: each batch's gradients are computed in this many slices, shared out among the threads.
            The result depends on the seed and ``slices`` but not on ``threads``: the same slices are
            computed whichever thread computes them (floating-point results of vectorised kernels can
            depend on how a tensor is cut, so the cut is fixed).
    """

    architecture: str = "skipgram"
    vector_size: int = 100
    window: int = 5
    min_count: int = 5
    negative: int = 5
    sample: float = 1e-3
    ns_exponent: float = 0.75
    epochs: int = 5
    alpha: float = 0.025
    min_alpha: float = 1e-4
    batch_pairs: int = 4096
    shared_negatives: bool = True
    seed: int = 0
    threads: int | None = None
    slices: int = 2

    def __post_init__(self) -> None:
        if self.architecture not in ("skipgram", "cbow"):
            raise ValueError(
                f"architecture must be 'skipgram' or 'cbow', got {self.architecture!r}"
            )
        for name in (
            "vector_size",
            "window",
            "min_count",
            "negative",
            "epochs",
            "batch_pairs",
            "slices",
        ):
            require_int(getattr(self, name), name, low=1)
        if not 0 <= self.sample < 1:
            raise ValueError(f"sample must lie in [0, 1), got {self.sample}")
        if not 0 < self.min_alpha <= self.alpha:
            raise ValueError(
                f"need 0 < min_alpha <= alpha, got min_alpha={self.min_alpha}, alpha={self.alpha}"
            )
        if self.threads is not None:
            require_int(self.threads, "threads", low=1)
        if self.architecture == "cbow" and not self.shared_negatives:
            raise ValueError(
                "shared_negatives=False applies to skip-gram only (CBOW has one output per window)"
            )


CHAPTER_CONFIG = Word2VecConfig(epochs=5, alpha=0.05)
"""The chapter's settings, gensim's defaults with 5 epochs and a doubled initial learning rate (which makes
up for the halved epochs on this small corpus), so chapter 3, gensim and GloVe included, runs in under
3 minutes on 2 CPU cores. ``Word2VecConfig(epochs=10)`` is the benchmark's full setting."""


@dataclass
class Word2VecModel:
    """A trained word2vec model.

    Attributes:
        vocab: the vocabulary; row ``i`` of the tables is ``vocab.words[i]``.
        vectors: ``(V, D)`` input vectors, the word vectors (gensim's ``wv.vectors``).
        output_vectors: ``(V, D)`` output vectors (gensim's ``syn1neg``).
        loss_history: mean loss per pair (skip-gram) or per window (CBOW), one value per batch.
        epoch_losses: mean loss of each epoch.
        config: the settings.
        pairs_trained: number of (context, centre) pairs (skip-gram) or windows (CBOW) seen.
        seconds: wall time of the training loop.
    """

    vocab: Vocabulary
    vectors: torch.Tensor
    output_vectors: torch.Tensor
    loss_history: list[float]
    epoch_losses: list[float]
    config: Word2VecConfig
    pairs_trained: int = 0
    seconds: float = 0.0

    @property
    def words(self) -> tuple[str, ...]:
        return self.vocab.words

    def __getitem__(self, word: str) -> torch.Tensor:
        """The ``(D,)`` vector of ``word``."""
        return self.vectors[self.vocab[word]]

    def to_keyed_vectors(self) -> Any:
        """The vectors as a gensim ``KeyedVectors`` (same order, with counts)."""
        return to_keyed_vectors(self.vectors, self.vocab.words, self.vocab.counts)


def to_keyed_vectors(
    vectors: torch.Tensor, words: Sequence[str], counts: torch.Tensor | None = None
) -> Any:
    """A gensim ``KeyedVectors`` holding ``vectors`` (``(V, D)``) under the keys ``words``, in this order."""
    require_tensor(vectors, "vectors", "float")
    require_ndim(vectors, "vectors", 2, "(V, D)")
    if len(words) != vectors.shape[0]:
        raise ValueError(
            f"need one word per row: {vectors.shape[0]} rows, got {len(words)} words"
        )
    if len(set(words)) != len(words):
        raise ValueError("words must be distinct")
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vector_size=vectors.shape[1], count=0, dtype="float32")
    kv.add_vectors(list(words), vectors.detach().to(torch.float32).cpu().numpy())
    if counts is not None:
        for w, c in zip(words, counts.tolist(), strict=True):
            kv.set_vecattr(w, "count", int(c))
    return kv


@dataclass
class _Batch:
    contexts: torch.Tensor  # (G, C) ids
    context_mask: torch.Tensor  # (G, C) bool
    outputs: torch.Tensor  # (G, 1 + K) ids: centre, then negatives
    output_mask: torch.Tensor  # (G, 1 + K) bool

    @property
    def pairs(self) -> int:
        return int(self.context_mask.sum())


def _epoch_batches(
    ids: torch.Tensor,
    sentence_ids: torch.Tensor,
    keep: torch.Tensor,
    noise: torch.Tensor,
    cfg: Word2VecConfig,
    g: torch.Generator,
) -> list[_Batch]:
    """One epoch's batches: subsample, draw windows, bucket centres by window, attach negatives, shuffle."""
    kept = subsample(ids, keep, g)
    t, s = ids[kept], sentence_ids[kept]
    n = t.numel()
    b = reduced_windows(n, cfg.window, g)
    k = cfg.negative
    batches: list[_Batch] = []
    for w in range(1, cfg.window + 1):
        centres = (b == w).nonzero().squeeze(1)
        if centres.numel() == 0:
            continue
        centres = centres[torch.randperm(centres.numel(), generator=g)]
        offsets = torch.cat([torch.arange(-w, 0), torch.arange(1, w + 1)])
        pos = centres.unsqueeze(1) + offsets
        inside = (pos >= 0) & (pos < n)
        pos.clamp_(0, n - 1)
        cmask = inside & (s[pos] == s[centres].unsqueeze(1))
        some = cmask.any(1)
        centres, pos, cmask = centres[some], pos[some], cmask[some]
        ctx, c = t[pos], t[centres]
        if cfg.shared_negatives:
            neg = sample_negatives(noise, (c.numel(), k), g)
            out = torch.cat([c.unsqueeze(1), neg], 1)
            omask = torch.cat(
                [
                    torch.ones_like(c, dtype=torch.bool).unsqueeze(1),
                    neg != c.unsqueeze(1),
                ],
                1,
            )
            per_batch = max(1, cfg.batch_pairs // (2 * w))
        else:  # one window per pair: C = 1 context, its own negatives
            c = c.unsqueeze(1).expand_as(ctx)[cmask]
            ctx = ctx[cmask].unsqueeze(1)
            neg = sample_negatives(noise, (c.numel(), k), g)
            out = torch.cat([c.unsqueeze(1), neg], 1)
            omask = torch.cat(
                [
                    torch.ones_like(c, dtype=torch.bool).unsqueeze(1),
                    neg != c.unsqueeze(1),
                ],
                1,
            )
            cmask = torch.ones_like(ctx, dtype=torch.bool)
            per_batch = cfg.batch_pairs
        for start in range(0, ctx.shape[0], per_batch):
            sl = slice(start, start + per_batch)
            batches.append(_Batch(ctx[sl], cmask[sl], out[sl], omask[sl]))
    order = torch.randperm(len(batches), generator=g).tolist()
    return [batches[i] for i in order]


def _skipgram_chunk(
    win: torch.Tensor, wout: torch.Tensor, bt: _Batch, lr: float
) -> tuple:
    gsz, c = bt.contexts.shape
    ci, oi = bt.contexts.reshape(-1), bt.outputs.reshape(-1)
    v = win.index_select(0, ci).view(gsz, c, -1)
    u = wout.index_select(0, oi).view(gsz, bt.outputs.shape[1], -1)
    error, loss = _sgns_error(v, u, bt.context_mask, bt.output_mask)
    error.mul_(-lr)
    dv = torch.bmm(error, u).view(-1, v.shape[2])
    du = torch.bmm(error.transpose(1, 2), v).view(-1, v.shape[2])
    return ci, dv, oi, du, float(loss)


def _cbow_chunk(win: torch.Tensor, wout: torch.Tensor, bt: _Batch, lr: float) -> tuple:
    gsz, c = bt.contexts.shape
    ci, oi = bt.contexts.reshape(-1), bt.outputs.reshape(-1)
    v = win.index_select(0, ci).view(gsz, c, -1)
    u = wout.index_select(0, oi).view(gsz, bt.outputs.shape[1], -1)
    cm = bt.context_mask.to(v.dtype)
    # (G, D) mean of the context
    h = torch.bmm(cm.unsqueeze(1), v).squeeze(1) / cm.sum(1, keepdim=True)
    s = torch.bmm(u, h.unsqueeze(2)).squeeze(2)  # (G, 1 + K)
    om = bt.output_mask.to(v.dtype)
    sign = torch.ones(s.shape[1], dtype=s.dtype)
    sign[0] = -1.0
    loss = (nn.functional.softplus(s * sign) * om).sum()
    error = torch.sigmoid(s)
    error[:, 0] -= 1.0
    error.mul_(om).mul_(-lr)
    dh = torch.bmm(error.unsqueeze(1), u)  # (G, 1, D)
    du = (error.unsqueeze(2) * h.unsqueeze(1)).view(-1, h.shape[1])
    # every context word gets the whole error
    dv = (dh * cm.unsqueeze(2)).view(-1, h.shape[1])
    return ci, dv, oi, du, float(loss)


def _split(bt: _Batch, parts: int) -> list[_Batch]:
    gsz = bt.contexts.shape[0]
    if parts <= 1 or gsz < parts:
        return [bt]
    step = -(-gsz // parts)
    return [
        _Batch(
            bt.contexts[i : i + step],
            bt.context_mask[i : i + step],
            bt.outputs[i : i + step],
            bt.output_mask[i : i + step],
        )
        for i in range(0, gsz, step)
    ]


def _apply(
    table: torch.Tensor, updates: list[tuple[torch.Tensor, torch.Tensor]]
) -> None:
    for index, delta in updates:
        table.index_add_(0, index, delta)


def train_word2vec(
    sentences: Iterable[Sequence[str]],
    config: Word2VecConfig | None = None,
    *,
    vocab: Vocabulary | None = None,
    progress: bool = True,
) -> Word2VecModel:
    """Train skip-gram or CBOW with negative sampling (see the module docstring for the algorithm).

    Args:
        sentences: the corpus, a list of token lists.
        config: the settings (default :class:`Word2VecConfig()`).
        vocab: a vocabulary to use instead of building one with ``config.min_count``.
        progress: show a tqdm progress bar over batches.

    Returns:
        A :class:`Word2VecModel`; ``model.vectors`` is the ``(V, D)`` table.

    Raises:
        ValueError: for an empty corpus or a ``min_count`` that removes every word.
    """
    cfg = config or Word2VecConfig()
    if not isinstance(cfg, Word2VecConfig):
        raise TypeError(f"config must be a Word2VecConfig, got {describe(cfg)}")
    sents = _check_sentences(sentences)
    vocab = vocab or build_vocab(sents, cfg.min_count)
    ids, sentence_ids = encode_sentences(sents, vocab)
    n_vocab, dim = len(vocab), cfg.vector_size
    g = torch.Generator().manual_seed(cfg.seed)
    win = (torch.rand(n_vocab, dim, generator=g) - 0.5) / dim
    wout = torch.zeros(n_vocab, dim)
    keep = keep_probabilities(vocab.counts, cfg.sample)
    noise = noise_distribution(vocab.counts, cfg.ns_exponent)
    chunk = _skipgram_chunk if cfg.architecture == "skipgram" else _cbow_chunk
    threads = cfg.threads or torch.get_num_threads()

    history: list[float] = []
    epoch_losses: list[float] = []
    pairs_total = 0
    intra_op = torch.get_num_threads()
    pool = ThreadPoolExecutor(threads) if threads > 1 else None
    bar = tqdm(
        total=None,
        unit="batch",
        desc=f"word2vec {cfg.architecture}",
        disable=not progress,
    )
    start_time = time.perf_counter()
    try:
        # the operators are too small for intra-op threads; the workers parallelise
        torch.set_num_threads(1)
        for epoch in range(cfg.epochs):
            batches = _epoch_batches(ids, sentence_ids, keep, noise, cfg, g)
            bar.total = bar.n + len(batches) * (cfg.epochs - epoch)
            bar.refresh()
            loss_sum, count_sum = 0.0, 0
            for j, bt in enumerate(batches):
                lr = (
                    cfg.alpha
                    - (cfg.alpha - cfg.min_alpha)
                    * (epoch + j / len(batches))
                    / cfg.epochs
                )
                parts = _split(bt, cfg.slices)
                if pool is None or len(parts) == 1:
                    results = [chunk(win, wout, p, lr) for p in parts]
                    _apply(win, [(r[0], r[1]) for r in results])
                    _apply(wout, [(r[2], r[3]) for r in results])
                else:
                    results = list(pool.map(lambda p: chunk(win, wout, p, lr), parts))  # noqa: B023
                    f_in = pool.submit(_apply, win, [(r[0], r[1]) for r in results])
                    f_out = pool.submit(_apply, wout, [(r[2], r[3]) for r in results])
                    f_in.result()
                    f_out.result()
                n = bt.pairs if cfg.architecture == "skipgram" else bt.contexts.shape[0]
                loss = sum(r[4] for r in results)
                history.append(loss / n)
                loss_sum += loss
                count_sum += n
                bar.update(1)
            pairs_total += count_sum
            epoch_losses.append(loss_sum / max(count_sum, 1))
            bar.set_postfix(loss=f"{epoch_losses[-1]:.3f}")
    finally:
        bar.close()
        if pool is not None:
            pool.shutdown()
        torch.set_num_threads(intra_op)
    seconds = time.perf_counter() - start_time
    return Word2VecModel(
        vocab, win, wout, history, epoch_losses, cfg, pairs_total, seconds
    )
