"""GloVe: global vectors from a weighted least-squares fit to log co-occurrence counts.

Pennington, Socher & Manning (2014), "GloVe: Global Vectors for Word Representation", EMNLP.

**Co-occurrence matrix.** ``X[i, j]`` sums, over every occurrence of word ``j`` within ``window`` tokens of
an occurrence of word ``i`` (same sentence), the weight ``1/d`` where ``d`` is their distance, as the
reference code does; the matrix is symmetric. With ``X_i = sum_k X[i, k]`` the co-occurrence
probabilities are ``P(k | i) = X[i, k] / X_i``; the paper's motivating table compares ``P(k | ice)`` with
``P(k | steam)`` (:data:`PAPER_ICE_STEAM`, recomputed on any corpus by :func:`probability_ratio_table`).

**Objective.** With word vectors ``w_i``, context vectors ``w̃_j`` and biases ``b_i``, ``b̃_j`` (the paper's
symbols; chapter 3 writes ``C`` for ``X``, ``e_i`` for ``w_i`` and ``u_j`` for ``w̃_j``)::

    J = sum_{i,j: X_ij > 0} f(X_ij) (w_i · w̃_j + b_i + b̃_j - log X_ij)^2,
    f(x) = (x / x_max)^α if x < x_max else 1,      x_max = 100, α = 3/4.

Training visits the non-zero entries in random mini-batches and updates with AdaGrad, gradients written
by hand and accumulators starting at 1 as in the reference code (which updates after every single entry
with rate 0.05; our batches take fewer, summed steps, so the default rate is 0.2). The word vectors are
``W + W̃``, as the paper recommends.

The co-occurrence matrix of a real corpus is stored sparse (the Wikipedia excerpt: 9,002 words, 2.4
million non-zero entries out of 81 million); small vocabularies get a dense tensor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from .validation import (
    check_token_stream,
    describe,
    require_choice,
    require_entries,
    require_ids,
    require_int,
    require_ndim,
    require_number,
    require_tensor,
)

__all__ = [
    "PAPER_ICE_STEAM",
    "cooccurrence_matrix",
    "cooccurrence_matrix_loop",
    "cooccurrence_rows",
    "probability_ratio_table",
    "glove_weight",
    "glove_loss",
    "GloVe",
    "GloVeConfig",
    "CHAPTER_GLOVE",
    "GloVeResult",
    "train_glove",
]

PAPER_ICE_STEAM: dict[str, dict[str, float]] = {
    "P(k|ice)": {"solid": 1.9e-4, "gas": 6.6e-5, "water": 3.0e-3, "fashion": 1.7e-5},
    "P(k|steam)": {"solid": 2.2e-5, "gas": 7.8e-4, "water": 2.2e-3, "fashion": 1.8e-5},
    "P(k|ice)/P(k|steam)": {
        "solid": 8.9,
        "gas": 8.5e-2,
        "water": 1.36,
        "fashion": 0.96,
    },
}
"""Table 1 of Pennington, Socher & Manning (2014), the co-occurrence probabilities of probe words ``k`` with
"ice" and "steam" in their 6-billion-token corpus, and their ratio. Only the ratio singles out the words
related to one of the two (solid, gas) from those related to both (water) or neither (fashion)."""


def _pairs(
    ids: torch.Tensor, sentence_ids: torch.Tensor, window: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left word, right word and weight ``1/d`` of every pair at distance ``1 <= d <= window`` (one way)."""
    lefts, rights, weights = [], [], []
    for d in range(1, min(window, ids.numel() - 1) + 1):
        same = sentence_ids[:-d] == sentence_ids[d:]
        lefts.append(ids[:-d][same])
        rights.append(ids[d:][same])
        weights.append(torch.full((int(same.sum()),), 1.0 / d, dtype=torch.float64))
    if not lefts:
        empty = torch.zeros(0, dtype=torch.long)
        return empty, empty, torch.zeros(0, dtype=torch.float64)
    return torch.cat(lefts), torch.cat(rights), torch.cat(weights)


def cooccurrence_matrix(
    ids: torch.Tensor,
    vocab_size: int,
    window: int = 10,
    sentence_ids: torch.Tensor | None = None,
    *,
    dense: bool | None = None,
) -> torch.Tensor:
    """The symmetric, distance-weighted co-occurrence matrix ``X`` (float64, ``(V, V)``).

    ``X[i, j] = sum over positions p < q in one sentence with q - p <= window and {ids[p], ids[q]} = {i, j}
    of 1/(q - p)`` (each pair adds to both ``X[i, j]`` and ``X[j, i]``; a word next to itself adds twice to
    the diagonal).

    Args:
        ids: ``(N,)`` token ids in ``[0, V)``.
        vocab_size: ``V``.
        window: the largest distance counted.
        sentence_ids: ``(N,)`` sentence of each token; pairs never cross sentences (default: one sentence).
        dense: return a dense tensor (default: dense if ``V <= 2000``, else a coalesced sparse COO tensor).
    """
    sentence_ids = check_token_stream(
        ids, window, sentence_ids, vocab_size, nonempty=True
    )
    left, right, weight = _pairs(ids, sentence_ids, window)
    keys = left * vocab_size + right
    unique, inverse = torch.unique(keys, return_inverse=True)
    sums = torch.zeros(unique.numel(), dtype=torch.float64).index_add_(
        0, inverse, weight
    )
    rows, cols = unique // vocab_size, unique % vocab_size
    index = torch.stack([torch.cat([rows, cols]), torch.cat([cols, rows])])
    x = torch.sparse_coo_tensor(
        index, torch.cat([sums, sums]), (vocab_size, vocab_size), check_invariants=True
    )
    x = x.coalesce()
    if dense is None:
        dense = vocab_size <= 2000
    return x.to_dense() if dense else x


def cooccurrence_matrix_loop(
    ids: Tensor, vocab_size: int, window: int = 10, sentence_ids: Tensor | None = None
) -> Tensor:
    """:func:`cooccurrence_matrix` as plain loops, dense ``(V, V)``: the definition."""
    sent = check_token_stream(ids, window, sentence_ids, vocab_size, nonempty=True)
    tokens, sent = ids.tolist(), sent.tolist()
    x = torch.zeros(vocab_size, vocab_size, dtype=torch.float64)
    for p in range(len(tokens)):
        for q in range(p + 1, min(p + window, len(tokens) - 1) + 1):
            if sent[q] == sent[p]:
                x[tokens[p], tokens[q]] += 1.0 / (q - p)
                x[tokens[q], tokens[p]] += 1.0 / (q - p)
    return x


def cooccurrence_rows(
    ids: torch.Tensor,
    rows: Sequence[int],
    vocab_size: int,
    window: int = 10,
    sentence_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Only the rows ``X[rows]`` of :func:`cooccurrence_matrix`, dense ``(len(rows), V)``, without building X.

    Cheap even for a vocabulary of every word (``min_count=1``), which rare probe words need.
    """
    sentence_ids = check_token_stream(
        ids, window, sentence_ids, vocab_size, nonempty=True
    )
    rows = [int(r) for r in rows]
    if not rows:
        raise ValueError("rows must name at least one word id")
    require_ids(torch.tensor(rows), "rows", vocab_size, None)
    out = torch.zeros(len(rows), vocab_size, dtype=torch.float64)
    n = ids.numel()
    for r_pos, r in enumerate(rows):
        where = (ids == r).nonzero().squeeze(1)
        for d in range(1, window + 1):
            for other in (where - d, where + d):
                ok = (other >= 0) & (other < n)
                p, q = where[ok], other[ok]
                q = q[sentence_ids[q] == sentence_ids[p]]
                out[r_pos].index_add_(
                    0, ids[q], torch.full((q.numel(),), 1.0 / d, dtype=torch.float64)
                )
    return out


def probability_ratio_table(
    sentences: Sequence[Sequence[str]],
    word_i: str = "ice",
    word_j: str = "steam",
    probes: Sequence[str] = ("solid", "gas", "water", "fashion"),
    window: int = 10,
) -> dict[str, dict[str, float]]:
    """The paper's Table 1 recomputed on ``sentences``: ``P(k | i)``, ``P(k | j)`` and their ratio.

    ``P(k | i) = X[i, k] / sum_m X[i, m]`` with ``X`` from :func:`cooccurrence_matrix` over every word of the
    corpus. Returns a dict shaped like :data:`PAPER_ICE_STEAM` (a ratio is ``inf`` or ``nan`` when
    ``P(k | j) = 0``).

    Raises:
        KeyError: naming the words that never occur in ``sentences``.
    """
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of token lists, got one str")
    words = [word_i, word_j, *probes]
    index: dict[str, int] = {}
    ids_list: list[int] = []
    sent_list: list[int] = []
    for s_id, s in enumerate(sentences):
        for w in s:
            ids_list.append(index.setdefault(w, len(index)))
            sent_list.append(s_id)
    missing = [w for w in words if w not in index]
    if missing:
        raise KeyError(f"these words never occur in the corpus: {missing}")
    ids, sent = torch.tensor(ids_list), torch.tensor(sent_list)
    x = cooccurrence_rows(ids, [index[word_i], index[word_j]], len(index), window, sent)
    p = x / x.sum(dim=1, keepdim=True)
    pi = {k: float(p[0, index[k]]) for k in probes}
    pj = {k: float(p[1, index[k]]) for k in probes}
    ratio = {
        k: (pi[k] / pj[k]) if pj[k] > 0 else (math.inf if pi[k] > 0 else math.nan)
        for k in probes
    }
    return {
        f"P(k|{word_i})": pi,
        f"P(k|{word_j})": pj,
        f"P(k|{word_i})/P(k|{word_j})": ratio,
    }


def glove_weight(
    x: torch.Tensor, x_max: float = 100.0, alpha: float = 0.75
) -> torch.Tensor:
    """GloVe's weighting ``f(x) = (x / x_max)^alpha`` for ``x < x_max``, else 1 (elementwise).

    ``f(0) = 0``, so pairs that never co-occur carry no weight; frequent pairs are capped at 1.
    """
    require_tensor(x, "x", "float")
    require_number(x_max, "x_max", low=0, low_open=True)
    require_number(alpha, "alpha", low=0, low_open=True)
    require_entries(x, "x", low=0, why="co-occurrence values")
    return torch.where(x < x_max, (x / x_max).pow(alpha), torch.ones_like(x))


def glove_loss(
    w: torch.Tensor,
    w_tilde: torch.Tensor,
    b: torch.Tensor,
    b_tilde: torch.Tensor,
    x: torch.Tensor,
    *,
    x_max: float = 100.0,
    alpha: float = 0.75,
    reduction: str = "sum",
) -> torch.Tensor:
    """The weighted least-squares loss ``sum_n f(x_n) (w_n · w̃_n + b_n + b̃_n - log x_n)^2``.

    Args:
        w, w_tilde: ``(B, D)`` word and context vectors of the ``B`` pairs.
        b, b_tilde: ``(B,)`` their biases.
        x: ``(B,)`` positive co-occurrence values.
        reduction: ``"sum"`` (the paper's ``J`` over these pairs), ``"mean"`` or ``"none"`` (``(B,)``).
    """
    for t, name in (
        (w, "w"),
        (w_tilde, "w_tilde"),
        (b, "b"),
        (b_tilde, "b_tilde"),
        (x, "x"),
    ):
        require_tensor(t, name, "float")
    require_ndim(w, "w", 2, "(B, D)")
    if w_tilde.shape != w.shape:
        raise ValueError(
            f"w_tilde must have the shape of w {tuple(w.shape)}, got {tuple(w_tilde.shape)}"
        )
    for t, name in ((b, "b"), (b_tilde, "b_tilde"), (x, "x")):
        if tuple(t.shape) != (w.shape[0],):
            raise ValueError(
                f"{name} must have shape ({w.shape[0]},), got {tuple(t.shape)}"
            )
    require_entries(
        x, "x", low=0, low_open=True, why="only non-zero co-occurrences enter the loss"
    )
    require_choice(reduction, "reduction", ("sum", "mean", "none"))
    diff = (w * w_tilde).sum(-1) + b + b_tilde - x.log()
    loss = glove_weight(x, x_max, alpha) * diff.pow(2)
    return (
        loss.sum()
        if reduction == "sum"
        else loss.mean()
        if reduction == "mean"
        else loss
    )


class GloVe(nn.Module):
    """GloVe's parameters: word and context vectors ``W``, ``W̃`` (``(V, D)``), biases ``b``, ``b̃`` (``(V,)``).

    Initialised uniformly in ``[-0.5/D, 0.5/D]`` as in the reference code.
    """

    def __init__(self, vocab_size: int, dim: int, *, seed: int = 0) -> None:
        super().__init__()
        require_int(vocab_size, "vocab_size", low=1)
        require_int(dim, "dim", low=1)
        g = torch.Generator().manual_seed(seed)

        def init(*shape: int) -> nn.Parameter:
            return nn.Parameter((torch.rand(*shape, generator=g) - 0.5) / dim)

        self.w, self.w_tilde = init(vocab_size, dim), init(vocab_size, dim)
        self.b, self.b_tilde = init(vocab_size), init(vocab_size)

    def forward(
        self,
        i: torch.Tensor,
        j: torch.Tensor,
        x: torch.Tensor,
        x_max: float = 100.0,
        alpha: float = 0.75,
    ) -> torch.Tensor:
        """``J`` summed over the pairs ``(i[n], j[n])`` (``(B,)`` ids) with values ``x`` (``(B,)``)."""
        require_tensor(i, "i", "int")
        require_tensor(j, "j", "int")
        return glove_loss(
            self.w[i],
            self.w_tilde[j],
            self.b[i],
            self.b_tilde[j],
            x,
            x_max=x_max,
            alpha=alpha,
        )

    def vectors(self) -> torch.Tensor:
        """The ``(V, D)`` word vectors ``W + W̃``."""
        return (self.w + self.w_tilde).detach().clone()


@dataclass(frozen=True)
class GloVeConfig:
    """GloVe training settings: the paper's ``D``, ``x_max``, ``α`` and epochs, with mini-batches.

    Attributes:
        vector_size: ``D``.
        x_max, alpha: the weighting function's parameters.
        epochs: passes over the non-zero entries of ``X``.
        lr: AdaGrad's learning rate. The reference code uses 0.05 with one update per entry; a batch sums
            many entries into one update per row, so fewer, larger steps need a larger rate.
        batch_size: non-zero entries per AdaGrad step.
        seed: initialisation and order.
    """

    vector_size: int = 100
    x_max: float = 100.0
    alpha: float = 0.75
    epochs: int = 25
    lr: float = 0.2
    batch_size: int = 16384
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("vector_size", "epochs", "batch_size"):
            require_int(getattr(self, name), name, low=1)
        if not self.lr > 0 or not self.x_max > 0 or not self.alpha > 0:
            raise ValueError(
                f"lr, x_max and alpha must be > 0, got {self.lr}, {self.x_max}, {self.alpha}"
            )


CHAPTER_GLOVE = GloVeConfig(vector_size=50, x_max=10.0, epochs=15)
"""The chapter's GloVe settings for the 450k-token Wikipedia excerpt, ``x_max = 10`` (the reference code's
demo uses 10 for its small corpus; with 100 nearly every pair of this corpus gets a tiny weight), 50
dimensions and 15 epochs to fit the time budget."""


@dataclass
class GloVeResult:
    """A trained GloVe: ``vectors = W + W̃`` (``(V, D)``), the module, the loss per epoch (``J / nnz``)."""

    vectors: torch.Tensor
    model: GloVe
    loss_history: list[float]
    config: GloVeConfig


def train_glove(
    x: torch.Tensor, config: GloVeConfig | None = None, *, progress: bool = True
) -> GloVeResult:
    """Fit GloVe to a co-occurrence matrix by AdaGrad over shuffled mini-batches of its non-zero entries.

    For a batch of entries ``n = (i, j)`` with ``e_n = w_i · w̃_j + b_i + b̃_j - log X_ij``, the gradient of
    ``J / 2`` (the reference code's cost) is ``f(X_ij) e_n w̃_j`` for ``w_i``, ``f(X_ij) e_n w_i`` for
    ``w̃_j`` and ``f(X_ij) e_n`` for both biases; the batch's gradients are summed per row with
    ``index_add_`` (by hand, no autograd), then AdaGrad updates every parameter ``θ`` with gradient ``g``:
    ``G ← G + g²``, ``θ ← θ - lr · g / sqrt(G)``, with ``G`` starting at 1 (rows with ``g = 0`` do not move).

    Args:
        x: ``(V, V)`` co-occurrence matrix, dense or sparse COO (from :func:`cooccurrence_matrix`).
        config: settings (default :class:`GloVeConfig()`).
        progress: show a tqdm progress bar over epochs.

    Returns:
        A :class:`GloVeResult`; ``loss_history[e]`` is epoch ``e``'s ``J`` divided by the number of non-zero
        entries, accumulated over the epoch's batches.
    """
    cfg = config or GloVeConfig()
    if not isinstance(cfg, GloVeConfig):
        raise TypeError(f"config must be a GloVeConfig, got {describe(cfg)}")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {describe(x)}")
    if x.ndim != 2 or x.shape[0] != x.shape[1]:
        raise ValueError(
            f"x must be a square (V, V) matrix, got shape {tuple(x.shape)}"
        )
    if x.is_sparse:
        x = x.coalesce()
        (rows, cols), vals = x.indices(), x.values()
        keep = vals > 0
        rows, cols, vals = rows[keep], cols[keep], vals[keep]
    else:
        rows, cols = (x > 0).nonzero(as_tuple=True)
        vals = x[rows, cols]
    if vals.numel() == 0:
        raise ValueError("x has no positive entry to fit")
    log_x = vals.log().to(torch.float32)
    weight = glove_weight(vals.to(torch.float64), cfg.x_max, cfg.alpha).to(
        torch.float32
    )
    g = torch.Generator().manual_seed(cfg.seed)
    model = GloVe(x.shape[0], cfg.vector_size, seed=cfg.seed)
    params = [model.w, model.w_tilde, model.b, model.b_tilde]
    accum = [torch.ones_like(p) for p in params]
    history: list[float] = []
    nnz = vals.numel()
    threads = torch.get_num_threads()
    # Each step's operators are small (a batch of rows, two (V, D) tables): on 2 cores intra-op threads
    # cost more in hand-offs than they save, and far more when the cores are shared. Restored below.
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            for _ in tqdm(
                range(cfg.epochs), desc="GloVe", unit="epoch", disable=not progress
            ):
                order = torch.randperm(nnz, generator=g)
                total = 0.0
                for start in range(0, nnz, cfg.batch_size):
                    sl = order[start : start + cfg.batch_size]
                    i, j = rows[sl], cols[sl]
                    wi, wj = (
                        model.w.index_select(0, i),
                        model.w_tilde.index_select(0, j),
                    )
                    err = torch.bmm(wi.unsqueeze(1), wj.unsqueeze(2)).view(-1)
                    err += (
                        model.b.index_select(0, i)
                        + model.b_tilde.index_select(0, j)
                        - log_x[sl]
                    )
                    # f(X_ij) e_n: the gradient of J/2 with respect to e_n
                    f_err = weight[sl] * err
                    total += float(f_err @ err)
                    grads = [torch.zeros_like(p) for p in params]
                    grads[0].index_add_(0, i, wj.mul_(f_err.unsqueeze(1)))
                    grads[1].index_add_(0, j, wi.mul_(f_err.unsqueeze(1)))
                    grads[2].index_add_(0, i, f_err)
                    grads[3].index_add_(0, j, f_err)
                    for p, acc, grad in zip(params, accum, grads, strict=True):
                        acc.addcmul_(grad, grad)
                        p.addcdiv_(grad, acc.sqrt(), value=-cfg.lr)
                history.append(total / nnz)
    finally:
        torch.set_num_threads(threads)
    return GloVeResult(model.vectors(), model, history, cfg)
