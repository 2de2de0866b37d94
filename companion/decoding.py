"""Decoding (chapters 5 and 6): one sampler and one generation loop for every autoregressive model.

- :func:`top_k_logits`, :func:`top_p_logits`: keep the k largest logits, or the nucleus of probability p;
- :class:`Sampling`: the options of the loop in one frozen config, checked once when it is made (as Hugging
  Face's ``GenerationConfig``): ``max_new_tokens``, ``temperature``, ``top_k``, ``top_p``, ``eos_id`` and
  ``filler``; e.g. ``Sampling(40, temperature=0.8, top_k=40)``, or ``Sampling(12, temperature=0)``, greedy;
- :func:`sample_next`: the one way to pick the next token, ``sample_next(logits, s, generator=None)``,
  x ~ softmax(logits / s.temperature) after the filters, reproducible with a :class:`torch.Generator`;
  ``temperature=0`` is greedy (the argmax);
- :func:`decode`: the one loop, ``decode(next_logits, ids, s, generator=None)``. It appends
  ``sample_next(next_logits(ids), s, generator)`` to ``ids`` (B, n), one column per step, up to
  ``s.max_new_tokens`` times. ``next_logits`` maps the ids so far, (B, t), to the next token's logits, (B, V).
  With ``s.eos_id``, a sequence that has written it is continued with ``s.filler`` (default: ``eos_id`` again),
  and the loop stops early, with fewer than ``max_new_tokens`` new columns, once every sequence has.
- :class:`Beam`: the beam search's options in one frozen config, as :class:`Sampling` for sampling:
  ``max_new_tokens``, ``beam_size`` (k), ``alpha`` (α of the length penalty) and ``eos_id``; its defaults are
  the paper's k = 4, α = 0.6;
- :func:`beam_search`: the search the paper decodes with, ``beam_search(next_logits, ids, b)``, for one sequence
  ``ids`` (1, n). It keeps the ``b.beam_size`` likeliest continuations (by the sum of their log-probabilities)
  at every step; one that writes ``b.eos_id`` is set aside as finished, and the search ends when ``beam_size``
  have finished or after ``max_new_tokens`` steps. It returns the finished one with the best log p / lp, the
  length penalty :func:`length_penalty` of GNMT, lp = ((5 + m) / 6)^α for m new tokens (``eos_id`` counted),
  and its log p. With ``beam_size=1`` it is greedy decoding.

The models build ``next_logits``, a closure from the ids so far, shape (B, t), to the logits of the next token,
(B, V): the encoder–decoder's :func:`companion.transformer.greedy_decode` closes over the encoder's memory (the
encoder runs once); :func:`companion.gpt.generate` reruns the whole sequence, or, with its key/value cache, feeds
the prompt once and then only the newest token.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Generator, Tensor

from .validation import (
    describe,
    door,
    require_callable,
    require_floats,
    require_ids,
    require_instance,
    require_int,
    require_number,
)

__all__ = [
    "Sampling",
    "top_k_logits",
    "top_p_logits",
    "sample_next",
    "decode",
    "Beam",
    "length_penalty",
    "beam_search",
]

# the ids so far (B, t) → the next token's logits (B, V)
LogitsFn = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class Sampling:
    """The loop's settings: how many tokens, how each is drawn, when a sequence ends."""

    max_new_tokens: int = 32  # at most this many new tokens
    temperature: float = 1.0  # τ in softmax(logits / τ); 0 is greedy, the argmax
    top_k: int | None = None  # keep the k largest logits
    top_p: float | None = None  # keep the nucleus of probability p
    eos_id: int | None = None  # a sequence that writes it has finished
    filler: int | None = None  # what a finished sequence writes next (None: eos_id)

    def __post_init__(self) -> None:
        require_int(self.max_new_tokens, "max_new_tokens", low=1)
        require_number(self.temperature, "temperature", low=0, finite=False)
        if self.top_k is not None:
            require_int(self.top_k, "top_k", low=1)
        if self.top_p is not None:
            require_number(self.top_p, "top_p", low=0, low_open=True, high=1)
        for name in ("eos_id", "filler"):
            if getattr(self, name) is not None:
                require_int(getattr(self, name), name, low=0, why="None or a token id")

    def check_vocabulary(self, vocab_size: int) -> None:
        """top_k and the token ids against the vocabulary of the model that samples."""
        if self.top_k is not None:
            require_int(self.top_k, "top_k", high=vocab_size, why="at most vocab_size")
        for name in ("eos_id", "filler"):
            token = getattr(self, name)
            if token is not None:
                require_int(token, name, low=0, high=vocab_size - 1, why="a token id")


@dataclass(frozen=True)
class Beam:
    """The beam search's settings: how many tokens, how many prefixes, how to rank."""

    max_new_tokens: int = 32  # at most this many new tokens
    beam_size: int = 4  # k, the prefixes kept at every step
    alpha: float = 0.6  # α of the length penalty lp = ((5 + m) / 6)^α; 0: none
    eos_id: int | None = None  # a hypothesis that writes it has finished

    def __post_init__(self) -> None:
        require_int(self.max_new_tokens, "max_new_tokens", low=1)
        require_int(self.beam_size, "beam_size", low=1)
        require_number(self.alpha, "alpha", low=0)
        if self.eos_id is not None:
            require_int(self.eos_id, "eos_id", low=0, why="None or a token id")


def _check_sampling(logits: object, s: object) -> None:
    logits = require_floats(logits, "logits", "(batch, vocab_size)", ndim=2)
    require_instance(s, Sampling, "s")
    if s.top_k is not None:
        require_int(s.top_k, "top_k", high=logits.shape[-1], why="at most vocab_size")


def _check_loop(next_logits: object, ids: object) -> None:
    require_callable(
        next_logits, "next_logits", "a function from ids (B, t) to logits (B, V)"
    )
    require_ids(ids, "ids", None, 2, "(batch, t)", min_length=1)


def _check_decode(next_logits: object, ids: object, s: object) -> None:
    _check_loop(next_logits, ids)
    require_instance(s, Sampling, "s")


def top_k_logits(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep each row's k largest logits (and ties with the k-th), the rest -inf."""
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1): the k-th largest
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_logits(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the fewest likeliest tokens of mass ≥ p, and ties; the rest -inf."""
    sorted_logits = torch.sort(logits, dim=-1, descending=True).values
    probs = torch.softmax(sorted_logits, dim=-1)
    before = probs.cumsum(dim=-1) - probs  # the mass of the more likely tokens
    n_kept = (before < p).sum(dim=-1, keepdim=True)  # (..., 1): up to mass p
    last = sorted_logits.gather(-1, n_kept - 1)  # the smallest logit kept
    return logits.masked_fill(logits < last, float("-inf"))


@door(_check_sampling)
def sample_next(
    logits: Tensor, s: Sampling, generator: Generator | None = None
) -> Tensor:
    """x ~ softmax(logits / temperature), top-k and top-p filtered: (B, V) → (B, 1)."""
    if s.temperature == 0:  # greedy
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits / s.temperature
    if s.top_k is not None:
        logits = top_k_logits(logits, s.top_k)
    if s.top_p is not None:
        logits = top_p_logits(logits, s.top_p)
    # a seeded generator draws the same tokens every time
    return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)


@door(_check_decode)
def decode(
    next_logits: LogitsFn, ids: Tensor, s: Sampling, generator: Generator | None = None
) -> Tensor:
    """x_{t+1} ~ sample_next(next_logits(x_1…x_t)): (B, n) → (B, ≤ n+max_new_tokens)."""
    eos_id, filler = s.eos_id, s.eos_id if s.filler is None else s.filler
    done = torch.zeros_like(ids[:, :1], dtype=torch.bool)  # (B, 1): has written EOS
    for _ in range(s.max_new_tokens):
        nxt = sample_next(next_logits(ids), s, generator)  # (B, 1); new logits checked
        if eos_id is not None:
            nxt = nxt.masked_fill(done, filler)  # a finished sequence only fills
            done = done | (nxt == eos_id)
        ids = torch.cat([ids, nxt], dim=1)  # (B, t + 1)
        if eos_id is not None and bool(done.all()):
            break  # every sequence has finished
    return ids


def _check_beam(next_logits: object, ids: object, b: object) -> None:
    _check_loop(next_logits, ids)
    require_instance(b, Beam, "b")
    if ids.shape[0] != 1:
        raise ValueError(
            f"beam_search decodes one sequence: ids must have shape (1, n), got {describe(ids)}"
        )


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + len(Y)) / 6)^α; 1 for α = 0 (no normalisation)."""
    return ((5 + length) / 6) ** alpha


@door(_check_beam)
def beam_search(next_logits: LogitsFn, ids: Tensor, b: Beam) -> tuple[Tensor, float]:
    """argmax over the beam of log p(y|ids) / lp(len(y)): (1, n) → ((1, n+m), log p)."""
    beams, scores = ids, torch.zeros(1, device=ids.device)  # live: (k, t), log p (k,)
    finished = []  # (log p, ids (t,)) of the hypotheses that wrote EOS
    for _ in range(b.max_new_tokens):
        logp = torch.log_softmax(next_logits(beams), dim=-1)  # (k, V)
        vocab_size = logp.shape[-1]
        total = (scores[:, None] + logp).flatten()  # (k V,): every one-token extension
        top = total.topk(min(b.beam_size, total.numel()))  # the k best
        rows, tokens = top.indices // vocab_size, top.indices % vocab_size
        beams = torch.cat([beams[rows], tokens[:, None]], dim=1)  # (k, t + 1)
        scores = top.values
        if b.eos_id is not None:  # set the finished ones aside
            ended = tokens == b.eos_id
            finished += zip(scores[ended].tolist(), beams[ended], strict=True)
            beams, scores = beams[~ended], scores[~ended]
        if len(finished) >= b.beam_size or len(beams) == 0:
            break
    finished += zip(scores.tolist(), beams, strict=True)  # unfinished at the end
    n = ids.shape[1]
    normalised = lambda hyp: hyp[0] / length_penalty(len(hyp[1]) - n, b.alpha)  # m new
    score, best = max(finished, key=normalised)
    return best[None], score
