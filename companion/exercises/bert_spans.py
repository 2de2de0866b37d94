"""Checkers for chapter 7, *BERT, and using pretrained models*: the two exercises on SQuAD's answer span.

==========================  =========================================================================================
checker                     what the student writes
==========================  =========================================================================================
``check_span_head_loss``    ``span_head_loss(h, W, b, starts, ends, context_mask) -> loss``: the span
                            head's logits, masked outside the context, and their cross-entropy
``check_best_span``         ``best_span(start_logits, end_logits, context_mask, max_len) -> (B, 2)``: the best
                            start ≤ end within the context, at most ``max_len`` tokens long
==========================  =========================================================================================

:mod:`companion.exercises.bert` re-exports both, with the chapter's other checkers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import bert
from .checking import case, compare

__all__ = ["check_span_head_loss", "check_best_span"]


# --- the span head and its loss -----------------------------------------------------------------------------


def _span_loss_variant(h, W, b, starts, ends, context_mask, *, mask="both", fill=float("-inf"), rows=(0, 1),
                       pair="mean", batch="mean", probabilities=False):  # fmt: skip
    """The span head's loss with one rule changed: the typical mistakes of :data:`check_span_head_loss`."""
    logits = h @ W.T + b  # (B, n, 2)
    start, end = logits[..., rows[0]], logits[..., rows[1]]
    outside = ~context_mask
    if mask in ("both", "start"):
        start = start.masked_fill(outside, fill)
    if mask in ("both", "end"):
        end = end.masked_fill(outside, fill)
    if probabilities:
        start, end = torch.softmax(start, dim=-1), torch.softmax(end, dim=-1)
    loss_start = F.cross_entropy(start, starts, reduction=batch)
    loss_end = F.cross_entropy(end, ends, reduction=batch)
    return (loss_start + loss_end) / (2 if pair == "mean" else 1)


def _span_loss_reference(h, W, b, starts, ends, context_mask):
    return _span_loss_variant(h, W, b, starts, ends, context_mask)


def _span_loss_case(
    batch, n_question, n_context, n_pad, d, *, dtype=torch.float32, why=""
):
    """[CLS] question [SEP] context [SEP] padding rows: hidden states, a head, gold spans inside the context."""
    n = n_question + n_context + 3 + n_pad
    h = torch.randn(batch, n, d, dtype=dtype)
    W, b = torch.randn(2, d, dtype=dtype), torch.randn(2, dtype=dtype)
    first = n_question + 2
    mask = torch.zeros(batch, n, dtype=torch.bool)
    mask[:, first : first + n_context] = True
    i, j = (first + torch.randint(n_context, (batch,)) for _ in range(2))
    starts, ends = torch.minimum(i, j), torch.maximum(i, j)
    return case(h, W, b, starts, ends, mask, why=why or f"{batch} row(s): question {n_question} tokens, context "
                f"{n_context}, padding {n_pad}, d = {d}")  # fmt: skip


def _span_loss_cases() -> list:
    h = torch.tensor(
        [[[1.0, 0.0], [0.0, 1.0], [2.0, 0.0], [0.0, 2.0], [1.0, 1.0], [3.0, -1.0]]]
    )
    mask = torch.tensor([[False, False, True, True, True, False]])
    small = case(h, torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.zeros(2), torch.tensor([2]), torch.tensor([3]),
                 mask, why="d = 2: start logit h[:, 0], end logit h[:, 1]; the context is positions 2-4, and the "
                 "largest start logit (3.0, at 5) lies outside it")  # fmt: skip
    return [
        small,
        _span_loss_case(2, 3, 6, 0, 8),
        _span_loss_case(
            3, 4, 5, 4, 6, why="3 rows with padding after the second [SEP]"
        ),
        _span_loss_case(1, 2, 1, 1, 4, why="a context of one token: the loss is 0"),
        _span_loss_case(2, 5, 7, 2, 5, dtype=torch.float64),
    ]


def _random_span_losses() -> list:
    out = []
    for _ in range(3):
        q, c, pad, d = (
            int(torch.randint(low, high, ()))
            for low, high in ((1, 6), (1, 10), (0, 5), (2, 9))
        )
        out.append(_span_loss_case(int(torch.randint(1, 5, ())), q, c, pad, d))
    return out


check_span_head_loss = compare(
    "span_head_loss",
    _span_loss_reference,
    _span_loss_cases,
    hidden=_random_span_losses,
    differentiable=True,
    withhold=["companion.bert.span_loss", "companion.bert.SpanHead.forward"],
    mistakes=[
        (
            lambda *a: _span_loss_variant(*a, mask="none"),
            "Set the logits outside the context (question, [CLS], [SEP], padding) to -inf before the softmax: the "
            "answer can only lie in the paragraph.",
        ),
        (
            lambda *a: _span_loss_variant(*a, fill=0.0),
            "Outside the context the logits must be -inf (probability 0), not 0: a logit of 0 still has probability.",
        ),
        (
            lambda *a: _span_loss_variant(*a, mask="start"),
            "Mask the end logits outside the context too, not only the start logits.",
        ),
        (
            lambda *a: _span_loss_variant(*a, mask="end"),
            "Mask the start logits outside the context too, not only the end logits.",
        ),
        (
            lambda *a: _span_loss_variant(*a, rows=(1, 0)),
            "Row 0 of W (and b[0]) gives the start logits, row 1 the end logits.",
        ),
        (
            lambda *a: _span_loss_variant(*a, pair="sum"),
            "Average the two cross-entropies, (L_start + L_end) / 2.",
        ),
        (
            lambda *a: _span_loss_variant(*a, batch="sum"),
            "Average over the batch (F.cross_entropy's default), do not sum.",
        ),
        (
            lambda *a: _span_loss_variant(*a, probabilities=True),
            "F.cross_entropy takes the logits (it applies log-softmax itself), not probabilities.",
        ),
    ],
    hint="logits = h @ W.T + b, (B, n, 2); start = logits[..., 0], end = logits[..., 1], each "
    "masked_fill(~context_mask, float('-inf')); "
    "loss = (F.cross_entropy(start, starts) + F.cross_entropy(end, ends)) / 2.",
    what="The loss",
)


# --- SQuAD's span decoding ----------------------------------------------------------------------------------


def _best_span_reference(start_logits, end_logits, context_mask, max_len):
    return bert.best_span(start_logits, end_logits, context_mask, max_len)


def _span_variant(start_logits, end_logits, context_mask, max_len, *, reverse=False, mask="both", length="<",
                  separate=False, relative=False, last_tie=False, swapped=False):  # fmt: skip
    """Loops over every (i, j), with one rule changed: the named mistakes of the exercise."""
    out = []
    for s, e, m in zip(
        start_logits.tolist(), end_logits.tolist(), context_mask.tolist(), strict=True
    ):
        n, context = len(s), [t for t, inside in enumerate(m) if inside]
        if separate:  # the best start and the best end, each on its own
            i = max(context, key=lambda t: (s[t], -t))
            j = max(context, key=lambda t: (e[t], -t))
        else:
            best, i, j = None, 0, 0
            for a in range(n):
                for b in range(n):
                    if not reverse and b < a:
                        continue
                    gap = abs(b - a)
                    if (
                        length == "<"
                        and gap >= max_len
                        or length == "<="
                        and gap > max_len
                    ):
                        continue
                    if (
                        mask == "both"
                        and not (m[a] and m[b])
                        or mask == "start"
                        and not m[a]
                    ):
                        continue
                    score = s[a] + e[b]
                    if best is None or score > best or last_tie and score == best:
                        best, i, j = score, a, b
        if relative:
            i, j = i - context[0], j - context[0]
        out.append([j, i] if swapped else [i, j])
    return torch.tensor(out, dtype=torch.long)


def _span_case(
    n_question, n_context, n_pad, max_len, *, integers=False, batch=1, why=""
):
    """A batch of [CLS] question [SEP] context [SEP] padding rows, with random logits everywhere."""
    n = n_question + n_context + 3 + n_pad
    if integers:  # small integers: many ties, summed exactly in any floating dtype
        start, end = (torch.randint(-3, 4, (batch, n)).float() for _ in range(2))
    else:
        start, end = torch.randn(batch, n), torch.randn(batch, n)
    mask = torch.zeros(batch, n, dtype=torch.bool)
    mask[:, n_question + 2 : n_question + 2 + n_context] = True
    return case(start, end, mask, max_len, why=why or f"{batch} row(s): question {n_question} tokens, context "
                f"{n_context}, padding {n_pad}, max_len {max_len}")  # fmt: skip


def _best_span_cases() -> list:
    # a large start logit at 4, a large end logit at 2
    big = torch.tensor([[0.0, 0, 0, 0, 9, 0, 0, 0, 0]])
    reverse = case(big.clone(), torch.tensor([[0.0, 0, 9, 0, 0, 1, 0, 0, 0]]),
                   torch.tensor([[False, False, True, True, True, True, True, True, False]]), 4,
                   why="the largest end logit lies before the largest start logit")  # fmt: skip
    question = case(torch.tensor([[0.0, 5, 0, 0, 1, 0, 0]]), torch.tensor([[0.0, 0, 6, 0, 0, 1, 0]]),
                    torch.tensor([[False, False, False, True, True, True, False]]), 3,
                    why="the question (1, 2) scores highest, but the answer lies in the context 3 … 5")  # fmt: skip
    longest = case(torch.tensor([[0.0, 0, 4, 0, 0, 0, 0, 0]]), torch.tensor([[0.0, 0, 0, 0, 0, 2, 3, 0]]),
                   torch.ones(1, 8, dtype=torch.bool), 4,
                   why="max_len = 4: the span (2, 5) has 4 tokens and is allowed, (2, 6) has 5 and is not")  # fmt: skip
    ties = case(torch.tensor([[0.0, 0, 2, 1, 2, 0, 1, 0]]), torch.tensor([[0.0, 0, 1, 2, 0, 2, 1, 0]]),
                torch.tensor([[False, True, True, True, True, True, True, False]]), 8,
                why="ties: (2, 3), (2, 5) and (4, 5) all score 4; the first in row-major order wins")  # fmt: skip
    return [
        reverse, question, longest, ties,
        _span_case(4, 9, 0, 30, batch=3),
        _span_case(6, 12, 5, 3, batch=4),
        _span_case(3, 8, 2, 5, integers=True, batch=4, why="integer logits: ties everywhere"),
    ]  # fmt: skip


def _random_spans() -> list:
    out = []
    for _ in range(4):
        q, c, pad = (
            int(torch.randint(low, high, ())) for low, high in ((1, 8), (1, 15), (0, 6))
        )
        max_len = int(torch.randint(1, c + 2, ()))
        out.append(
            _span_case(q, c, pad, max_len, integers=bool(torch.rand(()) < 0.5), batch=3)
        )
    return out


check_best_span = compare(
    "best_span",
    _best_span_reference,
    _best_span_cases,
    hidden=_random_spans,
    withhold=["companion.bert.best_span"],
    ids=True,
    mistakes=[
        (
            lambda *a: _span_variant(*a, reverse=True),
            "The end cannot come before the start: only spans with i <= j.",
        ),
        (
            lambda *a: _span_variant(*a, mask="none"),
            "The answer lies in the context: both i and j must be positions where context_mask is True (not the "
            "question, [CLS], [SEP] or padding).",
        ),
        (
            lambda *a: _span_variant(*a, mask="start"),
            "The end must be a context token too, not only the start: require context_mask[j] as well.",
        ),
        (
            lambda *a: _span_variant(*a, separate=True),
            "Taking the best start and the best end separately can give j < i or a span longer than max_len: "
            "maximise start_logits[i] + end_logits[j] over the allowed pairs together.",
        ),
        (
            lambda *a: _span_variant(*a, length="<="),
            "Off by one: a span of max_len tokens has j - i = max_len - 1, so require j - i < max_len.",
        ),
        (
            lambda *a: _span_variant(*a, length="none"),
            "A span has at most max_len tokens: require j - i < max_len.",
        ),
        (
            lambda *a: _span_variant(*a, relative=True),
            "Return positions in the whole input (indices into start_logits), not counted from the first context "
            "token.",
        ),
        (
            lambda *a: _span_variant(*a, last_tie=True),
            "On a tie keep the first best pair (smallest i, then smallest j), as argmax does: replace the best only "
            "when a score is strictly larger.",
        ),
        (
            lambda *a: _span_variant(*a, swapped=True),
            "Each row is [start, end], in that order.",
        ),
    ],
    hint="For each row: among the pairs (i, j) with i <= j, j - i < max_len and context_mask True at i and at j, "
    "take the one with the largest start_logits[i] + end_logits[j] (the first in row-major order on a tie); "
    "return a LongTensor of shape (B, 2).",
    what="The spans",
    atol=0,
    rtol=0,
)
