"""Checkers for chapter 6 (GPT), generating: top-k and top-p filtering, and one attention step with the key/value
cache."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from .. import gpt as ref
from .checking import Checker, Mismatch, call, case, compare, expect, show

__all__ = ["check_top_k_logits", "check_top_p_logits", "check_kv_attention_step"]


# --- top-k filtering ---------------------------------------------------------------------------------------------


def _top_k_strict(logits, k):
    """Exactly k entries kept even with ties (topk's indices), the others -inf."""
    idx = torch.topk(logits, k, dim=-1).indices
    out = torch.full_like(logits, float("-inf"))
    return out.scatter(-1, idx, logits.gather(-1, idx))


def _zero_filled(logits, k):
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, 0.0)


def _smallest(logits, k):
    kth = torch.topk(logits, k, dim=-1, largest=False).values[..., -1:]
    return logits.masked_fill(logits > kth, float("-inf"))


def _first_dimension(logits, k):
    kth = torch.topk(logits, min(k, logits.shape[0]), dim=0).values[-1:]
    return logits.masked_fill(logits < kth, float("-inf"))


check_top_k_logits = compare(
    "top_k_logits",
    ref.top_k_logits,
    lambda: [
        case(torch.tensor([[2.0, -1.0, 0.5, 3.0]]), 2, why="keep 3.0 and 2.0"),
        case(torch.randn(3, 10), 3, why="a batch of 3 rows: each row keeps its own 3"),
        case(torch.randn(2, 5), 5, why="k = V keeps everything"),
        case(
            torch.randn(4, 6), 1, why="k = 1: only the largest (greedy after sampling)"
        ),
        case(
            torch.tensor([[3.0, 2.0, 2.0, 0.0]]),
            2,
            why="a tie at the k-th largest: keep both 2.0s",
        ),
        case(torch.randn(2, 3, 7), 2, why="(2, 3, 7): filter along the last dimension"),
    ],
    mistakes=[
        (
            _zero_filled,
            "Set the dropped logits to -inf (probability 0 after the softmax), not 0.",
        ),
        (_smallest, "Keep the k largest logits, not the k smallest."),
        (
            _first_dimension,
            "Filter every row over the vocabulary (the last dimension), dim=-1.",
        ),
        (
            _top_k_strict,
            "Keep every logit tied with the k-th largest (compare with the k-th value, not indices).",
        ),
    ],
    hint="kth = torch.topk(logits, k, dim=-1).values[..., -1:]; logits.masked_fill(logits < kth, float('-inf')).",
    what="The filtered logits",
    atol=0,
    rtol=0,
)


# --- top-p (nucleus) filtering -----------------------------------------------------------------------------------


def _nucleus(
    logits,
    p,
    *,
    keep_boundary=True,
    ties=True,
    descending=True,
    on_logits=False,
    fill=float("-inf"),
):
    """Top-p with one rule changed: the typical mistakes of :data:`check_top_p_logits`."""
    values, order = torch.sort(logits, dim=-1, descending=descending)
    mass = values if on_logits else torch.softmax(values, dim=-1)
    # the boundary token's own mass counts or not
    before = mass.cumsum(dim=-1) - (mass if keep_boundary else 0)
    keep_sorted = before < p
    keep_sorted[..., 0] = True
    if ties:  # every token tied with the last one kept
        last = values.masked_fill(
            ~keep_sorted, float("inf") if descending else float("-inf")
        )
        last = (
            last.min(-1, keepdim=True).values
            if descending
            else last.max(-1, keepdim=True).values
        )
        keep = logits >= last if descending else logits <= last
    else:
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, fill)


def _nucleus_unsorted(logits, p):
    """The running sum taken in the vocabulary's order, not from the most likely token down."""
    probs = torch.softmax(logits, dim=-1)
    return logits.masked_fill(probs.cumsum(dim=-1) - probs >= p, float("-inf"))


def _nucleus_by_probability(logits, p):
    """Keeps every token whose own probability is at least 1 - p."""
    probs = torch.softmax(logits, dim=-1)
    keep = (probs >= 1 - p) | (probs == probs.max(dim=-1, keepdim=True).values)
    return logits.masked_fill(~keep, float("-inf"))


def _nucleus_renormalised(logits, p):
    """Returns the renormalised probabilities of the nucleus instead of the filtered logits."""
    return torch.softmax(ref.top_p_logits(logits, p), dim=-1)


def _nucleus_first_dimension(logits, p):
    return ref.top_p_logits(logits.transpose(0, -1), p).transpose(0, -1)


def _top_p_case(shape, p=None, *, integers=False, why=""):
    """Random logits (small integers: many ties), and a p that lies away from every running sum of the sorted
    probabilities (rounding cannot move the boundary), drawn between two of them."""
    logits = torch.randint(-3, 4, shape).float() if integers else 2 * torch.randn(shape)
    if p is None:
        probs = torch.softmax(
            torch.sort(logits.reshape(-1, shape[-1]), dim=-1, descending=True).values,
            dim=-1,
        )
        sums = (
            torch.cat([torch.zeros(probs.shape[0], 1), probs.cumsum(-1)], dim=-1)
            .flatten()
            .sort()
            .values
        )
        gaps = torch.stack([sums[:-1], sums[1:]], dim=-1)
        wide = gaps[gaps[:, 1] - gaps[:, 0] > 2e-3]
        wide = wide if len(wide) else gaps[(gaps[:, 1] - gaps[:, 0]).argmax()][None]
        lo, hi = wide[int(torch.randint(len(wide), ()))].tolist()
        p = round(lo + (0.25 + 0.5 * float(torch.rand(()))) * (hi - lo), 4)
    return case(
        logits,
        p,
        why=why
        or f"random logits {tuple(shape)}" + (", integers: ties" if integers else ""),
    )


def _top_p_cases() -> list:
    log = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05]).log()[None]
    return [
        case(
            log,
            0.6,
            why="probabilities 0.5, 0.2, 0.15, 0.1, 0.05: 0.5 + 0.2 reaches 0.6, keep 2",
        ),
        case(log, 0.5 - 1e-3, why="the most likely token alone reaches p: keep 1"),
        case(
            log[:, [3, 0, 4, 2, 1]],
            0.8,
            why="the same, shuffled: 0.5 + 0.2 + 0.15 reaches 0.8, keep 3",
        ),
        case(
            torch.tensor([[1.0, 2.0, 2.0, 0.0, 2.0]]),
            0.25,
            why="three tied largest, the first alone reaches p: keep all 3",
        ),
        case(
            torch.tensor([[3.0, 1.0, 1.0, 0.0, -1.0]]),
            0.8,
            why="the token that reaches p is tied: keep both 1.0s",
        ),
        case(log, 1.0, why="p = 1: keep every token"),
        _top_p_case((3, 12), why="3 rows: each row its own nucleus"),
        _top_p_case((2, 3, 9), why="(2, 3, 9): filter along the last dimension"),
        _top_p_case((4, 8), integers=True),
    ]


def _random_top_p() -> list:
    return [_top_p_case((int(torch.randint(1, 4, ())), int(torch.randint(2, 20, ()))), integers=k % 2 == 1)
            for k in range(4)]  # fmt: skip


check_top_p_logits = compare(
    "top_p_logits",
    ref.top_p_logits,
    _top_p_cases,
    hidden=_random_top_p,
    mistakes=[
        (
            lambda x, p: _nucleus(x, p, keep_boundary=False),
            "Keep the token that makes the sum reach p too: a token is kept when the mass of the tokens more "
            "likely than it is still below p (the sum before it, not including it).",
        ),
        (
            lambda x, p: _nucleus(x, p, fill=0.0),
            "Set the dropped logits to -inf (probability 0 after the softmax), not 0.",
        ),
        (
            lambda x, p: _nucleus(x, p, descending=False),
            "Add the probabilities from the most likely token down (sort in descending order), not from the "
            "least likely up.",
        ),
        (
            lambda x, p: _nucleus(x, p, on_logits=True),
            "Sum probabilities (the softmax of the row), not logits.",
        ),
        (
            lambda x, p: _nucleus(x, p, ties=False),
            "Keep every token tied with the last one kept (compare logits with its value, not sorted positions).",
        ),
        (
            _nucleus_unsorted,
            "Sort first: the running sum goes from the most likely token to the least likely.",
        ),
        (
            _nucleus_by_probability,
            "Top-p keeps the most likely tokens until their probabilities add up to p; "
            "a token's own probability alone does not decide.",
        ),
        (
            _nucleus_renormalised,
            "Return the filtered logits (-inf where dropped), not probabilities.",
        ),
        (
            _nucleus_first_dimension,
            "Filter every row over the vocabulary (the last dimension), dim=-1.",
        ),
    ],
    hint="Sort each row in descending order, probs = softmax of the sorted row, before = probs.cumsum(-1) - probs; "
    "keep the sorted positions with before < p; the smallest kept logit is the threshold: "
    "logits.masked_fill(logits < threshold, float('-inf')).",
    what="The filtered logits",
    atol=0,
    rtol=0,
    withhold=["companion.decoding.top_p_logits"],
)


# --- one generation step with the key/value cache ---------------------------------------------------------------


def _kv_step(
    x,
    W_q,
    W_k,
    W_v,
    K,
    V,
    *,
    scale=True,
    append=True,
    query="q",
    value="v",
    returned="new",
    order="end",
):
    """One step of one attention head with the cache, with one rule changed: the mistakes of the exercise."""
    q = x @ (W_k if query == "k" else W_q).T  # (B, d_k)
    k, v = x @ W_k.T, x @ (W_k if value == "k" else W_v).T
    pair = (
        ((K, k[:, None]), (V, v[:, None]))
        if order == "end"
        else ((k[:, None], K), (v[:, None], V))
    )
    # (B, t + 1, d_k), (B, t + 1, d_v)
    K_new, V_new = (torch.cat(p, dim=1) for p in pair)
    keys, values = (K_new, V_new) if append else (K, V)
    scores = (keys @ q[:, :, None])[:, :, 0]  # (B, t + 1)
    if scale:
        scores = scores / math.sqrt(q.shape[-1] if scale is True else x.shape[-1])
    y = (torch.softmax(scores, dim=-1)[:, :, None] * values).sum(dim=1)  # (B, d_v)
    return (y, K_new, V_new) if returned == "new" else (y, K, V)


def _kv_reference(x, W_q, W_k, W_v, K, V):
    return _kv_step(x, W_q, W_k, W_v, K, V)


def _full_attention(X, W_q, W_k, W_v):
    """Every position's output, recomputed from the whole sequence: causal softmax(Q Kᵀ / √d_k) V, (B, n, d_v)."""
    Q, K, V = X @ W_q.T, X @ W_k.T, X @ W_v.T
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    n = X.shape[1]
    scores = scores.masked_fill(
        torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf")
    )
    return torch.softmax(scores, dim=-1) @ V


def _kv_inputs(B, t, d, d_k, d_v, dtype=torch.float32):
    """x (B, d), the weights, and the cache of t earlier positions (their keys and values)."""
    X = torch.randn(B, t + 1, d, dtype=dtype)
    W_q, W_k, W_v = (
        torch.randn(m, d, dtype=dtype) / math.sqrt(d) for m in (d_k, d_k, d_v)
    )
    return X[:, -1], W_q, W_k, W_v, X[:, :-1] @ W_k.T, X[:, :-1] @ W_v.T


def _kv_cases() -> list:
    return [
        case(
            *_kv_inputs(1, 0, 4, 3, 2),
            why="the first token: an empty cache (t = 0), d = 4, d_k = 3, d_v = 2",
        ),
        case(
            *_kv_inputs(2, 5, 6, 4, 5),
            why="a batch of 2, 5 cached positions, d = 6, d_k = 4, d_v = 5",
        ),
        case(
            *_kv_inputs(3, 1, 8, 2, 3),
            why="3 rows, one cached position, d = 8, d_k = 2, d_v = 3",
        ),
        case(
            *_kv_inputs(1, 9, 5, 5, 5, torch.float64),
            why="float64, 9 cached positions, d = d_k = d_v = 5",
        ),
    ]


def _random_kv() -> list:
    out = []
    for _ in range(3):
        B, t, d, d_k, d_v = (
            int(torch.randint(low, high, ()))
            for low, high in ((1, 4), (0, 8), (2, 9), (1, 7), (1, 7))
        )
        out.append(
            case(
                *_kv_inputs(B, t, d, d_k, d_v),
                why=f"B = {B}, t = {t}, d = {d}, d_k = {d_k}, d_v = {d_v}",
            )
        )
    return out


_check_kv_one_step = compare(
    "kv_attention_step",
    _kv_reference,
    _kv_cases,
    hidden=_random_kv,
    mistakes=[
        (
            lambda *a: _kv_step(*a, append=False),
            "Append the new key and value first, then attend: the new token attends to itself too (t + 1 keys).",
        ),
        (
            lambda *a: _kv_step(*a, returned="old"),
            "Return the caches with the new position appended, (B, t + 1, d_k) and (B, t + 1, d_v): the next step "
            "needs them.",
        ),
        (lambda *a: _kv_step(*a, scale=False), "Divide the scores q·k_j by √d_k."),
        (
            lambda *a: _kv_step(*a, scale="d"),
            "Divide the scores by √d_k (the keys' width, W_K.shape[0]), not √d.",
        ),
        (
            lambda *a: _kv_step(*a, query="k"),
            "The query is q = W_Q x (x @ W_q.T), not the key.",
        ),
        (
            lambda *a: _kv_step(*a, value="k"),
            "The value is v = W_V x (x @ W_v.T), not the key.",
        ),
        (
            lambda *a: _kv_step(*a, order="start"),
            "Append the new key and value at the end (dim=1): row j of the cache is position j.",
        ),
    ],
    hint="q, k, v = x @ W_q.T, x @ W_k.T, x @ W_v.T; K = torch.cat([K, k[:, None]], dim=1) (V likewise); "
    "w = softmax(K q / √d_k) over the t + 1 positions; y = Σ_j w_j V_j; return y, K, V.",
    what="(y, K, V)",
)


def _kv_steps(student: Callable[..., Any]) -> tuple[int, int]:
    """The student's step fed token after token from an empty cache, each step given the caches the student's own
    previous step returned: every output must be the full recomputation's at that position."""
    checks, hidden = _check_kv_one_step._cases(student)
    for B, n, d, d_k, d_v in ((2, 6, 6, 4, 3), (1, 5, 4, 4, 4)):
        X = torch.randn(B, n, d)
        W_q, W_k, W_v = (torch.randn(m, d) / math.sqrt(d) for m in (d_k, d_k, d_v))
        full = _full_attention(X, W_q, W_k, W_v)
        K, V = torch.zeros(B, 0, d_k), torch.zeros(B, 0, d_v)
        for t in range(n):
            label = (f"step {t + 1} of {n} (B = {B}, d = {d}, d_k = {d_k}, d_v = {d_v}), from an empty cache, each "
                     "step given the K, V your previous step returned")  # fmt: skip
            got = call(student, X[:, t], W_q, W_k, W_v, K, V, input=label)
            if not (isinstance(got, tuple) and len(got) == 3):
                raise Mismatch(
                    "Return a tuple (y, K, V).", input=label, got=show(got, 200)
                )
            y, K, V = got
            expect(y, full[:, t], input=label, what="y, the output at this position,",
                   hint="y must equal the attention output of the full recomputation, causal softmax(Q Kᵀ / √d_k) V "
                   "at this position; the K and V you return are what the next step receives.")  # fmt: skip
            checks += 1
    return checks, hidden


check_kv_attention_step = Checker("kv_attention_step", _kv_steps, kind="function")
