"""A word-embedding language model: predict the next token from the previous one with two tables.

The model (chapter 2) keeps two ``(|V|, d)`` tables for a vocabulary of ``|V|`` tokens: ``E`` holds the
vector ``e_i`` of a token when it is the *previous* token (the embedding), ``U`` its vector ``u_j`` when it
is the *next* token (the unembedding). (The lecture notes call the first table ``V`` and the width ``K``;
the book keeps ``V`` for the value matrix of attention.) For a previous token ``i`` the scores of every
candidate next token are the dot products ``s = U e_i`` (shape ``(|V|,)``), and the model's prediction is
their softmax::

    p(w_{t+1} = j | w_t = i) = exp(u_j · e_i / τ) / sum_k exp(u_k · e_i / τ),     τ = temperature = 1.

With ``tied=True`` the two tables are one parameter (``U is E``), as GPT-2 ties its input and output
tables; the scores ``E E^T`` are then symmetric, ``s_ij = s_ji``, with ``s_ii = |e_i|^2 >= 0``.

This is a Markov chain of order 1: the prediction depends on the previous token only. The best such chain
for a corpus is the table of bigram counts normalised per row (:func:`bigram_probabilities`); the model
can at most reach it, and :func:`optimum_gap` measures how far it is.

**The toy corpus.** The lecture notes this chapter follows (seed 004) train on a tiny corpus whose text
survived only as OCR fragments ("The cat ate the dog! the zoo."). What did survive fixes it well enough:
the vocabulary is exactly the 8 tokens ``! . ate cat dog ran the zoo``; the trained model's probabilities
after "the" are 0.250 (cat), 0.496 (dog), 0.245 (zoo), i.e. the counts 1 : 2 : 1; and the trained model
generates "the dog ate . the dog ! the zoo . the dog ran the zoo .", which uses the transitions
dog→ate, ate→., dog→!, dog→ran, ran→the, zoo→. . :data:`TOY_TEXT` is the smallest text of short
sentences we found that has exactly those 8 tokens, every one of those transitions, and after "the" the
counts cat 2, dog 4, zoo 2. It is our reconstruction, not the notes' original text. The corpus is read
as one stream of tokens (a sentence's final "." or "!" is followed by the next sentence's "the"), which
gives 25 tokens and 24 bigrams.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from . import decoding
from .text import Vocabulary, tokenize
from .validation import (
    describe,
    door,
    require_ids,
    require_instance,
    require_int,
    require_ndim,
    require_number,
    require_positive_ints,
    require_tensor,
    skip_checks,
)

__all__ = [
    "TOY_TEXT",
    "toy_tokens",
    "toy_vocabulary",
    "encode",
    "decode",
    "WordEmbeddingLM",
    "next_token_probabilities",
    "bigram_pairs",
    "Training",
    "train_embedding_lm",
    "generate",
    "bigram_counts",
    "bigram_probabilities",
    "cross_entropy",
    "GapReport",
    "optimum_gap",
]

TOY_TEXT = "The cat ate the dog! The dog ran the zoo. The dog ate. The zoo. The cat ran the dog!"
"""Our reconstruction of the seed's toy corpus (see the module docstring), 5 sentences and 25 tokens."""


def toy_tokens() -> list[str]:
    """The toy corpus as a list of 25 lower-case tokens (words and the punctuation marks "." and "!")."""
    return tokenize(TOY_TEXT)


def toy_vocabulary() -> Vocabulary:
    """The 8 tokens of the toy corpus, sorted: ``! . ate cat dog ran the zoo``, ids 0 to 7, no special tokens.

    A :class:`~companion.text.Vocabulary` is also the list of its tokens: ``vocab[i]`` is the token of id ``i``,
    ``vocab.index(token)`` its id, and iterating gives the tokens in id order.
    """
    return Vocabulary(sorted(set(toy_tokens())), specials=(), order="appearance")


def encode(tokens: Sequence[str], vocabulary: Sequence[str]) -> torch.Tensor:
    """Ids of ``tokens`` in ``vocabulary``, a ``(len(tokens),)`` ``torch.long`` tensor.

    Raises ``ValueError`` naming a token that is not in the vocabulary (this model has no unknown token).
    """
    if isinstance(tokens, str):
        raise TypeError(
            "tokens must be a list of str tokens, got one str (split it first)"
        )
    index = {t: i for i, t in enumerate(vocabulary)}
    ids = []
    for t in tokens:
        if t not in index:
            raise ValueError(f"token {t!r} is not in the vocabulary {list(vocabulary)}")
        ids.append(index[t])
    return torch.tensor(ids, dtype=torch.long)


def decode(ids: torch.Tensor | Sequence[int], vocabulary: Sequence[str]) -> list[str]:
    """The tokens of ``ids`` (a 1-D tensor or a list of ints)."""
    if isinstance(ids, torch.Tensor):
        require_tensor(ids, "ids", "int")
        ids = ids.flatten().tolist()
    out = []
    for i in ids:
        out.append(vocabulary[require_int(i, "ids", low=0, high=len(vocabulary) - 1)])
    return out


def _check_lm(vocab_size: object, dim: object, tied: object) -> None:
    require_positive_ints(vocab_size=vocab_size, dim=dim)
    require_instance(tied, bool, "tied")


def _check_prev(self: WordEmbeddingLM, prev: object) -> None:
    require_ids(prev, "prev", self.vocab_size, 1, "(B,)")


class WordEmbeddingLM(nn.Module):
    """``p(next | prev = i) = softmax(U e_i)``: tables E, U ``(|V|, d)``, e_i = E[i]."""

    @door(_check_lm)
    def __init__(
        self, vocab_size: int, dim: int = 2, *, seed: int = 0, tied: bool = False
    ) -> None:
        super().__init__()
        self.vocab_size, self.tied = vocab_size, tied
        V, d = vocab_size, dim
        g = torch.Generator().manual_seed(seed)  # N(0, 1) entries, as in the figure
        self.E = nn.Parameter(torch.randn(V, d, generator=g))  # row i: e_i
        # tied: one table in both roles (U is E), so the scores E Eᵀ are symmetric
        self.U = self.E if tied else nn.Parameter(torch.randn(V, d, generator=g))

    @door(_check_prev)
    def forward(self, prev: Tensor) -> Tensor:
        return self.E[prev] @ self.U.T  # (B,) → (B, |V|): the logits U e_prev

    def transition_matrix(self, temperature: float = 1.0) -> Tensor:
        with torch.no_grad():  # P[i, j] = p(next = j | prev = i) at temperature
            return next_token_probabilities(self.E @ self.U.T, temperature)


def next_token_probabilities(
    scores: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Softmax of ``scores / temperature`` over the last dimension.

    ``p_j = exp(s_j / T) / sum_k exp(s_k / T)``. As ``T → 0`` this tends to all mass on the argmax; ``T = 0``
    is accepted and returns exactly that (a one-hot row; the first maximum wins ties). Large ``T`` flattens
    the distribution towards uniform.

    Args:
        scores: ``(..., N)`` floating tensor.
        temperature: ``T >= 0``.

    Returns:
        ``(..., N)`` probabilities, each row summing to 1.
    """
    require_tensor(scores, "scores", "float")
    if scores.ndim == 0:
        raise ValueError(
            "scores must have at least 1 dimension (..., N), got a 0-d tensor"
        )
    require_number(temperature, "temperature", low=0)
    if temperature == 0:
        best = scores.argmax(dim=-1, keepdim=True)
        return torch.zeros_like(scores).scatter_(-1, best, 1.0)
    return torch.softmax(scores / temperature, dim=-1)


def bigram_pairs(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``(previous, next)`` pairs of a token stream: ``(ids[:-1], ids[1:])``, each ``(n - 1,)``."""
    require_tensor(ids, "ids", "int")
    require_ndim(ids, "ids", 1, "(n,)")
    if ids.numel() < 2:
        raise ValueError(
            f"ids must hold at least 2 tokens to form a bigram, got {ids.numel()}"
        )
    return ids[:-1], ids[1:]


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Run the block on one thread, then restore PyTorch's thread count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@dataclass(frozen=True)
class Training:
    """The training run's settings: full-batch Adam for ``steps`` steps at rate ``lr``."""

    steps: int = 2000  # optimizer steps, each on every bigram
    lr: float = 0.05  # Adam's learning rate
    progress: bool = True  # show a progress bar

    def __post_init__(self) -> None:
        require_int(self.steps, "steps", low=1)
        require_number(self.lr, "lr", low=0, low_open=True)
        require_instance(self.progress, bool, "progress")


def _check_training(model: object, ids: object, c: object) -> None:
    model = require_instance(model, WordEmbeddingLM, "model")
    require_ids(ids, "ids", model.vocab_size, 1, "(n,)")
    require_instance(c, Training, "c")


@door(_check_training)
def train_embedding_lm(model: WordEmbeddingLM, ids: Tensor, c: Training) -> list[float]:
    """Full-batch Adam on L = -1/(n-1) Σ_t log p(w_{t+1} | w_t): ids (n,), a stream."""
    prev, nxt = bigram_pairs(ids)  # all bigrams, every step: deterministic
    opt = torch.optim.Adam(model.parameters(), lr=c.lr)
    history: list[float] = []  # the loss before each step
    with _one_thread():  # (24, 2) @ (2, 8) products only lose time to thread hand-offs
        for _ in tqdm(range(c.steps), desc="training", disable=not c.progress):
            loss = nn.functional.cross_entropy(model(prev), nxt)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            history.append(loss.item())
    return history


def generate(
    model: WordEmbeddingLM,
    start: torch.Tensor,
    n_tokens: int,
    *,
    temperature: float = 1.0,
    seed: int | None = 0,
) -> torch.Tensor:
    """Sample ``n_tokens`` new tokens after the context ``start``.

    Each new token is drawn from ``next_token_probabilities(U v_prev, temperature)`` where ``prev`` is the
    last token so far (only the last token of ``start`` matters: the model has order 1). ``temperature=0``
    always takes the most likely token.

    Args:
        model: a :class:`WordEmbeddingLM`.
        start: ``(m,)`` ids of the context, ``m >= 1``.
        n_tokens: how many tokens to add.
        temperature: ``T >= 0``.
        seed: seed of the sampling generator (``None``: use the global random state).

    Returns:
        ``(m + n_tokens,)`` ids: the context followed by the sampled tokens.
    """
    if not isinstance(model, WordEmbeddingLM):
        raise TypeError(f"model must be a WordEmbeddingLM, got {describe(model)}")
    require_ids(start, "start", model.vocab_size, 1, "(m,)", min_length=1)
    require_int(n_tokens, "n_tokens", low=0)
    require_number(temperature, "temperature", low=0, finite=False)
    if n_tokens == 0:
        return start.long().clone()
    s = decoding.Sampling(n_tokens, temperature)
    g = None if seed is None else torch.Generator().manual_seed(seed)
    # (1, t) → (1, V): order 1, the last token only
    next_logits = lambda ids: model(ids[0, -1:])
    # the shared loop, its sampler and the model: checked above, not again at each step
    with torch.no_grad(), skip_checks():
        ids = decoding.decode(next_logits, start.long()[None], s, g)
    return ids[0]


def bigram_counts(ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The ``(N, N)`` table ``C[i, j]`` = number of times token ``j`` follows token ``i`` in ``ids``.

    Args:
        ids: ``(n,)`` integer ids in ``[0, N)``, ``n >= 2``.
        vocab_size: ``N``.

    Returns:
        ``(N, N)`` ``torch.long`` counts, summing to ``n - 1``.
    """
    require_int(vocab_size, "vocab_size", low=1)
    prev, nxt = bigram_pairs(ids)
    require_ids(ids, "ids", vocab_size, None)
    flat = torch.bincount(
        prev.long() * vocab_size + nxt.long(), minlength=vocab_size * vocab_size
    )
    return flat.view(vocab_size, vocab_size)


def bigram_probabilities(ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The count-based bigram model ``P*[i, j] = C[i, j] / sum_k C[i, k]`` (float64, ``(N, N)``).

    This is the maximum-likelihood order-1 Markov chain: no model that predicts from the previous token
    alone has a lower cross-entropy on ``ids``. A row whose token is never followed by anything (it only
    occurs last) is all zeros.
    """
    c = bigram_counts(ids, vocab_size).to(torch.float64)
    totals = c.sum(dim=1, keepdim=True)
    return torch.where(totals > 0, c / totals.clamp_min(1), torch.zeros_like(c))


def cross_entropy(transition: torch.Tensor, ids: torch.Tensor) -> float:
    """Mean negative log-likelihood (nats per token) of the bigrams of ``ids`` under a transition table.

    ``H = -(1/(n-1)) sum_t log P[x_t, x_{t+1}]``.

    Args:
        transition: ``(N, N)`` probabilities, row ``i`` the distribution of the token after ``i``.
        ids: ``(n,)`` ids.
    """
    require_tensor(transition, "transition", "float")
    require_ndim(transition, "transition", 2, "(N, N)")
    n = transition.shape[0]
    if transition.shape[1] != n:
        raise ValueError(
            f"transition must be square (N, N), got shape {tuple(transition.shape)}"
        )
    prev, nxt = bigram_pairs(ids)
    require_ids(ids, "ids", n, None)
    p = transition.detach().to(torch.float64)[prev, nxt]
    return float(-(p.log()).mean())


@dataclass(frozen=True)
class GapReport:
    """How far a model is from the count-based optimum on a corpus (all in nats per token).

    Attributes:
        model_cross_entropy: ``H(model) = -(1/(n-1)) sum_t log p_model(x_{t+1} | x_t)``.
        optimum_cross_entropy: the same with the bigram-count table ``P*`` (the lowest possible).
        gap: ``H(model) - H(P*) >= 0``.
        kl_per_token: ``(N,)``, ``KL(P*[i] || P_model[i])`` for each previous token ``i``.
        prev_frequency: ``(N,)``, the fraction of bigrams whose previous token is ``i``; the gap equals
            ``sum_i prev_frequency[i] * kl_per_token[i]``.
    """

    model_cross_entropy: float
    optimum_cross_entropy: float
    gap: float
    kl_per_token: torch.Tensor
    prev_frequency: torch.Tensor


def optimum_gap(model: WordEmbeddingLM | torch.Tensor, ids: torch.Tensor) -> GapReport:
    """Compare a model (or its ``(N, N)`` transition table) with the bigram-count optimum on ``ids``.

    ``H(model) - H(P*) = sum_i f_i KL(P*[i] || P_model[i])`` where ``f_i`` is the share of bigrams starting
    with token ``i``: the cross-entropy gap is the frequency-weighted KL divergence per previous token.
    """
    table = model.transition_matrix() if isinstance(model, WordEmbeddingLM) else model
    require_tensor(table, "model", "float")
    n = table.shape[0] if table.ndim == 2 else -1
    if table.ndim != 2 or table.shape[1] != n:
        raise ValueError(
            f"the transition table must have shape (N, N), got {tuple(table.shape)}"
        )
    opt = bigram_probabilities(ids, n)
    q = table.detach().to(torch.float64)
    terms = torch.where(
        opt > 0, opt * (opt.clamp_min(1e-300).log() - q.log()), torch.zeros_like(opt)
    )
    kl = terms.sum(dim=1)
    counts = bigram_counts(ids, n).sum(dim=1).to(torch.float64)
    freq = counts / counts.sum()
    model_ce = cross_entropy(q, ids)
    opt_ce = cross_entropy(opt, ids)
    return GapReport(model_ce, opt_ce, model_ce - opt_ce, kl, freq)
