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
- context windows that never cross a sentence boundary; the trainer draws the reference code's *dynamic
  window* for each centre, an effective half-width ``b`` uniform in ``1..window`` (:func:`reduced_windows`),
  so near words count more;
- pairs (:func:`skipgram_pairs`, vectorised, and :func:`skipgram_pairs_loop`, the plain loop it equals).

**Training.** The fast trainer, :func:`companion.training.word2vec.train_word2vec`, with its settings
(``Word2VecConfig``) and result (``Word2VecModel``), is machinery and lives in ``companion/training/``; it
applies :func:`skipgram_window_gradients` to batches of windows.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .text import Vocabulary
from .validation import (
    check_negative_sampling,
    check_token_stream,
    describe,
    door,
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


def keep_probabilities(
    counts: Tensor, sample: float = 1e-3, formula: str = "reference"
) -> Tensor:
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


def skipgram_pairs_loop(
    ids: Tensor, window: int, sentence_ids: Tensor | None = None
) -> list[tuple[int, int]]:
    """(ids[i], ids[j]) for ``0 < |j−i| ≤ b`` in one sentence, b = window: ids (N,)."""
    sentence_ids = check_token_stream(ids, window, sentence_ids)
    tokens, sent, b = ids.tolist(), sentence_ids.tolist(), window
    pairs = []
    for i in range(len(tokens)):
        for j in range(i - b, i + b + 1):
            if j != i and 0 <= j < len(tokens) and sent[j] == sent[i]:
                pairs.append((tokens[i], tokens[j]))
    return pairs


def context_windows(
    ids: torch.Tensor, window: int, sentence_ids: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every position's context as a fixed-width row, with a mask.

    Returns:
        ``(contexts, mask)``, both ``(N, 2 * window)``: ``contexts[i]`` holds the ids at offsets
        ``-window .. -1, 1 .. window`` from ``i`` (clamped at the ends), ``mask[i, k]`` says whether that
        offset lies inside the stream and in ``i``'s sentence.
    """
    sentence_ids = check_token_stream(ids, window, sentence_ids)
    n = ids.numel()
    offsets = torch.cat([torch.arange(-window, 0), torch.arange(1, window + 1)])
    pos = torch.arange(n).unsqueeze(1) + offsets
    inside = (pos >= 0) & (pos < n)
    pos = pos.clamp(0, max(n - 1, 0))
    mask = inside & (sentence_ids[pos] == sentence_ids.unsqueeze(1))
    return ids[pos], mask


def skipgram_pairs(
    ids: torch.Tensor, window: int, sentence_ids: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The pairs of :func:`skipgram_pairs_loop`, in the same order, without a Python loop.

    Returns:
        ``(centres, contexts)``, two ``(P,)`` ``torch.long`` tensors.
    """
    contexts, mask = context_windows(ids, window, sentence_ids)
    centres = ids.unsqueeze(1).expand_as(contexts)
    return centres[mask], contexts[mask]


# ----------------------------------------------------------------------------------------------------------
# The loss, the teaching model, and the hand-derived gradients


def negative_sampling_loss(
    v: Tensor, u_pos: Tensor, u_neg: Tensor, reduction: str = "mean"
) -> Tensor:
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

    @door(_check_batch)
    def forward(self, centres: Tensor, contexts: Tensor, negatives: Tensor) -> Tensor:
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
