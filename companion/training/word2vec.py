"""Training word2vec: the fast trainer of :mod:`companion.word2vec`'s skip-gram and CBOW (chapter 3).

:func:`train_word2vec` takes sentences and a :class:`Word2VecConfig` (gensim's defaults, except skip-gram) and
returns a :class:`Word2VecModel` (the two tables, the vocabulary, the loss history); :func:`to_keyed_vectors`
hands the vectors to gensim. The mathematics (the vocabulary, subsampling, negatives, windows, the loss and
its hand-derived gradients) is in :mod:`companion.word2vec`.

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

import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from ..text import Vocabulary
from ..validation import (
    describe,
    require_int,
    require_ndim,
    require_tensor,
)
from ..word2vec import (
    _check_sentences,
    _sgns_error,
    build_vocab,
    encode_sentences,
    keep_probabilities,
    noise_distribution,
    reduced_windows,
    sample_negatives,
    subsample,
)

__all__ = [
    "Word2VecConfig",
    "CHAPTER_CONFIG",
    "Word2VecModel",
    "train_word2vec",
    "to_keyed_vectors",
]


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
