"""The beam-search checker of chapter 5, *The Transformer* (beside :mod:`companion.exercises.transformer`).

==========================  ==========================================================================================
checker                     what the student writes
==========================  ==========================================================================================
``check_beam_search``       ``beam_search(next_logits, ids, b)``, ``b`` a :class:`~companion.decoding.Beam`
                            (``max_new_tokens``, ``beam_size``, ``alpha``, ``eos_id``): ``(1, n)`` →
                            ``(ids (1, n + m), log p)``, the finished hypothesis with the best log p / lp(m)
==========================  ==========================================================================================

The cases are bigram models, :class:`Bigram`: the next token's logits are a row of a ``(V, V)`` table picked by the
last token, plus (in the random ones) a term for the position, so that no two outputs tie (with probability 1); each
case is drawn again until it exercises its rule.
"""

from __future__ import annotations

import math
from functools import partial

import torch

from .. import decoding
from .checking import case, compare

__all__ = ["Bigram", "check_beam_search"]


class Bigram:
    """``next_logits`` of a bigram model, ids ``(k, t)`` → ``table[ids[:, -1]]``, ``(k, V)``, plus ``position[t - 1]``
    if given: without it, two outputs that make the same transitions in another order would tie."""

    def __init__(
        self, table: torch.Tensor, position: torch.Tensor | None = None
    ) -> None:
        self.table, self.position = table, position

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        logits = self.table[ids[:, -1]]
        return (
            logits
            if self.position is None
            else logits + self.position[ids.shape[1] - 1]
        )

    def __eq__(self, other: object) -> bool:
        same = lambda a, b: (
            (a is None and b is None)
            or (a is not None and b is not None and torch.equal(a, b))
        )  # noqa: E731
        return (
            isinstance(other, Bigram)
            and same(self.table, other.table)
            and same(self.position, other.position)
        )

    __hash__ = None

    def __repr__(self) -> str:
        rows = lambda t: repr(t.tolist()).replace("], [", "],\n       [")  # noqa: E731
        return (
            f"Bigram({rows(self.table)}"
            + ("" if self.position is None else f", {rows(self.position)}")
            + ")"
        )


def _beam(next_logits, ids, b, *, mistake=""):
    """The beam search with one of the typical mistakes (``mistake=""``: none, the reference's answer)."""
    max_new_tokens, beam_size, eos_id, alpha = (
        b.max_new_tokens,
        b.beam_size,
        b.eos_id,
        b.alpha,
    )
    beams, scores, finished = ids, torch.zeros(1), []
    for _ in range(max_new_tokens):
        logits = next_logits(beams)
        step = {"probs": torch.softmax(logits, -1), "raw": logits}.get(
            mistake, torch.log_softmax(logits, -1)
        )
        total = scores[:, None] + step  # (live, V)
        if mistake == "one_each":  # the best extension of each live beam
            rows = torch.arange(len(beams))
            if len(beams) == 1:
                rows, tokens = rows.repeat(beam_size), total[0].topk(beam_size).indices
            else:
                tokens = total.argmax(-1)
        elif mistake == "best_beam_only":  # the top k of the first (best) beam alone
            rows, tokens = (
                torch.zeros(beam_size, dtype=torch.long),
                total[0].topk(beam_size).indices,
            )
        else:
            top = total.flatten().topk(min(beam_size, total.numel())).indices
            rows, tokens = top // total.shape[1], top % total.shape[1]
        beams, scores = (
            torch.cat([beams[rows], tokens[:, None]], 1),
            total[rows, tokens],
        )
        ended = tokens == eos_id
        finished += zip(scores[ended].tolist(), beams[ended], strict=True)
        if mistake != "keep_finished":
            beams, scores = beams[~ended], scores[~ended]
        if (
            len(finished) >= (1 if mistake == "first_finished" else beam_size)
            or len(beams) == 0
        ):
            break
    if mistake != "drop_unfinished" or not finished:
        finished += zip(scores.tolist(), beams, strict=True)
    n = 0 if mistake == "prompt_counted" else ids.shape[1]

    def lp(hyp):
        m = len(hyp[1]) - n
        return 1.0 if mistake == "no_penalty" else ((5 + m) / 6) ** alpha

    key = (
        (lambda h: h[0] * lp(h))
        if mistake == "multiplied"
        else (lambda h: h[0] / lp(h))
    )
    score, best = max(finished, key=key)
    return best[None], score


def _model(v: int, *, eos_shift: float = 0.0) -> Bigram:
    """A random bigram model with a position term, of ``v`` tokens (<eos> the last), for up to 12 positions."""
    table = 2 * torch.randn(v, v)
    table[:, -1] += eos_shift  # <eos> is the last token
    return Bigram(table, torch.randn(12, v))


def _differs(model, ids, b, *, mistake="") -> bool:
    run = partial(_beam, model, ids, b)
    (right, right_p), (wrong, wrong_p) = run(), run(mistake=mistake)
    return not torch.equal(right, wrong) or not math.isclose(
        right_p, wrong_p, abs_tol=1e-3
    )


_TOY = [
    [0.0, 0.5, 0.4, 0.1],
    [0.0, 0.3, 0.3, 0.4],
    [0.0, 0.05, 0.05, 0.9],
    [0.0, 0.0, 0.0, 1.0],
]
_PROMPT = [[0, 2]]
# (v, eos_shift, ids, max_new_tokens, beam_size, alpha, the mistakes it must catch, why)
_RANDOM = [
    (6, 0.0, _PROMPT, 5, 3, 0.0, (), "raw logits, a prompt of 2 tokens, α = 0: the plain sum of log-probabilities"),
    (6, 0.0, [[0, 2, 1, 3]], 6, 3, 1.0, ("no_penalty", "prompt_counted"),
     "α = 1: the length penalty changes the winner; lp counts the m new tokens, <eos> included"),
    (5, -3.0, _PROMPT, 5, 2, 0.0, ("drop_unfinished",),
     "<eos> unlikely: some beams are still unfinished after max_new_tokens, and compete too"),
    (5, 0.0, [[0]], 5, 3, 0.0, ("keep_finished",),
     "a finished hypothesis leaves the beam: the live beams fill its place"),
]  # fmt: skip


def _drawn(v, shift, ids, max_new_tokens, k, alpha, musts, why):
    """A case of a random bigram model, drawn again until it tells the mistakes ``musts`` from the answer."""
    for _ in range(2000):
        b = decoding.Beam(max_new_tokens, beam_size=k, alpha=alpha, eos_id=v - 1)
        c = case(_model(v, eos_shift=shift), torch.tensor(ids), b, why=why)
        if all(_differs(*c.args, **c.kwargs, mistake=m) for m in musts):
            return c
    raise RuntimeError("no table met the case's condition")  # pragma: no cover


def _cases():
    """The toy model of the chapter and four random bigram models, drawn (again) until, together, they tell
    every named mistake from the right answer, and each shows what its description says."""
    toy = case(Bigram(torch.tensor(_TOY).log()), torch.tensor([[0]]),
               decoding.Beam(3, beam_size=2, alpha=0.0, eos_id=3),
               why="the chapter's toy model: greedy writes A <eos>, the beam B <eos>")  # fmt: skip
    for _ in range(100):
        cases = [toy] + [_drawn(*spec) for spec in _RANDOM]
        if all(
            any(_differs(*c.args, **c.kwargs, mistake=m) for c in cases)
            for m, _ in _MISTAKES
        ):
            return cases
    raise RuntimeError("no tables met the cases' conditions")  # pragma: no cover


_MISTAKES = [
    ("raw", "Turn the logits into log-probabilities (log_softmax) before adding them: next_logits returns "
            "unnormalised logits."),
    ("probs", "Add log-probabilities, not probabilities: log p(y_1 … y_m) is the sum of the log p(y_t | …)."),
    ("one_each", "Rank all k·V extensions together (flatten the (k, V) scores, then topk): the k best may come "
                 "several from one beam and none from another, not one from each beam."),
    ("best_beam_only", "Rank all k·V extensions together (flatten the (k, V) scores, then topk), not the V "
                       "extensions of the first beam alone."),
    ("keep_finished", "A hypothesis that writes <eos> is finished: set it aside and take it out of the beam, "
                      "so that it is not extended further and the live beams fill its place."),
    ("first_finished", "Stop when beam_size hypotheses have finished (or after max_new_tokens steps), not at "
                       "the first one."),
    ("no_penalty", "Choose the hypothesis with the best log p / lp(m): divide by lp(m) = ((5 + m)/6)^α, with m the "
                   "new tokens (<eos> included, the prompt not); without the penalty short outputs win."),
    ("prompt_counted", "Count in lp only the m new tokens (<eos> included), not the prompt ids."),
    ("multiplied", "Divide log p by lp(m), do not multiply: lp grows with the length and log p is negative."),
    ("drop_unfinished", "After the last step, the beams that have not written <eos> compete too: add them to "
                        "the finished ones before choosing."),
]  # fmt: skip


check_beam_search = compare(
    "beam_search",
    decoding.beam_search,
    _cases,
    mistakes=[(partial(_beam, mistake=m), hint) for m, hint in _MISTAKES],
    hint="Each step: total = scores[:, None] + log_softmax(next_logits(beams)), the k best of total.flatten(), "
    "those ending in <eos> set aside; at the end, the best log p / ((5 + m)/6)^α among finished and live ones.",
    what="The beam search's answer",
    ids=True,
    withhold=["companion.decoding.beam_search"],
)
