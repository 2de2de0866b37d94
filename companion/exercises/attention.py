"""Checkers for chapter 4, *Attention*.

======================================  =====================================================================
checker                                 what the student writes
======================================  =====================================================================
``check_weightless_self_attention``     ``weightless_self_attention(x) -> y``: ``(..., n, d) → (..., n, d)``
``check_scaled_dot_product_attention``  ``scaled_dot_product_attention(q, k, v, mask=None)``, the output
                                        ``(..., n_q, d_v)``
``check_causal_mask``                   ``causal_mask(n) -> (n, n)`` boolean, ``True`` = may attend
``check_split_heads``                   ``split_heads(x, n_heads)``: ``(b, n, d) → (b, n_heads, n, d_head)``
``check_merge_heads``                   ``merge_heads(x)``: ``(b, n_heads, n, d_head) → (b, n, d)``
``check_multi_head_attention``          ``class MultiHeadAttention(nn.Module)`` with ``q_proj, k_proj,
                                        v_proj, out_proj`` and ``forward(query, key, value, mask=None)``
======================================  =====================================================================

The two module checkers (``check_multi_head_attention``, ``check_self_attention_module``) live in
``companion.exercises.attention_modules`` and are re-exported here. Masks follow the book's convention:
boolean, ``True`` = may attend.
"""

from __future__ import annotations

import math

import torch

from .. import attention as ref
from ..masks import causal_mask as _causal_mask
from .attention_modules import (
    _attend,
    check_multi_head_attention,
    check_self_attention_module,
)
from .checking import Case, OneCall, case, compare

__all__ = [
    "check_weightless_self_attention",
    "check_scaled_dot_product_attention",
    "check_causal_mask",
    "check_split_heads",
    "check_merge_heads",
    "check_multi_head_attention",
    "check_self_attention_module",
]


# --- weightless self-attention ------------------------------------------------------------------------------

#: the companion's functions that compute an attention in one call (``scaled_dot_product_attention(x, x, x,
#: scale=1)`` is weightless self-attention, so is ``attention_loop`` on pre-scaled inputs): withheld with the
#: reference while an answer to these two exercises runs
_ATTENTION_FAMILY = (
    "companion.attention.scaled_dot_product_attention",
    "companion.attention.attention_loop",
    "companion.attention._attention_weights",
    "companion.attention.blocked_attention",
)

#: PyTorch's fused attention, one call that computes either of these two exercises whole
_FUSED_ATTENTION = OneCall(
    "torch.nn.functional.scaled_dot_product_attention",
    instead="a matrix product, torch.softmax, masked_fill",
)


def _naive_weightless(x: torch.Tensor) -> torch.Tensor:
    """Weightless self-attention with exp taken of the raw scores (no largest score subtracted)."""
    e = torch.exp(x @ x.transpose(-2, -1))
    return e / e.sum(-1, keepdim=True) @ x


check_weightless_self_attention = compare(
    "weightless_self_attention",
    ref.weightless_self_attention,
    lambda: [
        case(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), why="two orthogonal unit vectors"),
        case(torch.randn(3, 4), why="3 vectors of width 4"),
        case(torch.randn(1, 5), why="one vector: it can only attend to itself"),
        case(
            torch.randn(2, 4, 3), why="a batch of 2 sequences of 4 vectors of width 3"
        ),
        case(
            torch.tensor([[10.0, 0.0], [0.0, 10.0], [7.0, 7.0]]),
            why="scores up to 100: exp(100) overflows float32 unless the largest score is subtracted first",
        ),
        case(
            8 * torch.randn(4, 3),
            why="long vectors: scores far above 88, where exp overflows float32",
        ),
    ],
    mistakes=[
        (
            _naive_weightless,
            "exp of a score above 88 overflows float32 to inf, and inf / inf is NaN: subtract each row's largest "
            "score before exp (softmax is unchanged by a shift), or let torch.softmax do it.",
        ),
        (
            lambda x: _attend(x, x, x, scale=1.0, dim=-2),
            "The softmax runs over j (the last axis, dim=-1), so that each row of weights sums to one.",
        ),
        (
            lambda x: _attend(x, x, x),
            "The weightless version has no scaling: w_ij = softmax_j(x_iᵀ x_j), no division by √d.",
        ),
        (
            lambda x: x @ x.transpose(-2, -1) @ x,
            "The raw scores x_iᵀ x_j go through a softmax before weighting.",
        ),
        (
            lambda x: _attend(x, x, x, scale=1.0, weights_only=True),
            "That is the weight matrix w; the output is y = w x, the weighted sum of the vectors.",
        ),
    ],
    hint="y_i = Σ_j softmax_j(x_iᵀ x_j) x_j; write xᵀ as x.transpose(-2, -1) so that batches work too.",
    what="y",
    withhold=_ATTENTION_FAMILY,
    one_call=[_FUSED_ATTENTION],
)


# --- scaled dot-product attention ---------------------------------------------------------------------------


def _thinking_machines() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries and keys of width 64 whose scores are q₁·k₁ = 112 and q₁·k₂ = 96, as in the worked example."""
    q, k = torch.zeros(2, 64), torch.zeros(2, 64)
    q[0, :2], q[1, :2] = torch.tensor([8.0, 8.0]), torch.tensor([4.0, 2.0])
    # 8·7 + 8·7 = 112, 8·6 + 8·6 = 96
    k[0, :2], k[1, :2] = torch.tensor([7.0, 7.0]), torch.tensor([6.0, 6.0])
    return q, k, torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, -1.0]])


def _sdpa_cases() -> list[Case]:
    pad = torch.ones(4, 6, dtype=torch.bool)
    pad[:, 4:] = False  # the last two keys are padding
    r = torch.randn
    return [
        case(
            *_thinking_machines(),
            why="the Thinking Machines example: scores 112 and 96, d_k = 64",
        ),
        case(r(3, 4), r(5, 4), r(5, 2), why="3 queries, 5 keys, d_k = 4, d_v = 2"),
        case(
            r(2, 3, 4, 8),
            r(2, 3, 4, 8),
            r(2, 3, 4, 8),
            why="a batch (2, 3) of 4 queries and 4 keys",
        ),
        case(r(4, 8), r(4, 8), r(4, 3), _causal_mask(4), why="a causal mask"),
        case(
            r(4, 8),
            r(6, 8),
            r(6, 3),
            pad,
            why="a padding mask: the last two keys may not be attended",
        ),
        case(
            100 * r(3, 4),
            100 * r(3, 4),
            r(3, 2),
            why="scores as large as 1e4 (exp would overflow)",
        ),
        case(r(2, 4), r(1, 4), r(1, 3), why="a single key"),
    ]


check_scaled_dot_product_attention = compare(
    "scaled_dot_product_attention",
    ref.scaled_dot_product_attention,
    _sdpa_cases,
    mistakes=[
        (
            lambda q, k, v, m=None: _attend(q, k, v, m, scale=1.0),
            "Divide the scores by √d_k before the softmax.",
        ),
        (
            lambda q, k, v, m=None: _attend(q, k, v, m, scale=1 / q.shape[-1]),
            "Divide by √d_k, not by d_k.",
        ),
        (
            lambda q, k, v, m=None: _attend(q, k, v, m, dim=-2),
            "The softmax runs over the keys (dim=-1), so that each query's weights sum to one.",
        ),
        (
            lambda q, k, v, m: _attend(q, k, v, ~m),
            "The mask is inverted: True means 'may attend', so hide the scores where the mask is False.",
        ),
        (
            lambda q, k, v, m: _attend(q, k, v),
            "The mask was ignored: the scores where mask is False must not count.",
        ),
        (
            lambda q, k, v, m: _attend(q, k, v, m, fill=0.0),
            "A score of 0 does not hide a key, since exp(0) = 1: the forbidden scores must become -inf.",
        ),
        (
            lambda q, k, v, m=None: _attend(q, k, v, m, weights_only=True),
            "That is the weight matrix; the output weighs the values v with it.",
        ),
    ],
    hint="out = softmax(q kᵀ / √d_k) v, the softmax over the keys (dim=-1), the scores at mask == False "
    "set to -inf first; k.transpose(-2, -1) makes batches work.",
    what="The attention output",
    withhold=_ATTENTION_FAMILY[1:],
    one_call=[_FUSED_ATTENTION],
)


# --- causal mask --------------------------------------------------------------------------------------------


def _causal(n: int) -> torch.Tensor:
    return _causal_mask(n)


check_causal_mask = compare(
    "causal_mask",
    _causal,
    [case(4), case(1), case(2), case(7)],
    mistakes=[
        (
            lambda n: torch.ones(n, n, dtype=torch.bool).triu(),
            "That is the upper triangle: query i may see keys j <= i (the past), so the mask is lower-triangular.",
        ),
        (
            lambda n: torch.ones(n, n, dtype=torch.bool).triu(1),
            "That marks the future (what must be hidden); the book's masks mark what may be attended.",
        ),
        (
            lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1),
            "The diagonal is missing: every token may attend to itself (j = i).",
        ),
        (
            lambda n: torch.ones(n, n, dtype=torch.bool).tril(1),
            "Off by one: query i may see keys j <= i, not j <= i + 1.",
        ),
        (
            lambda n: torch.ones(n, n).tril(),
            "Masks are boolean tensors (True = may attend), not numbers.",
        ),
    ],
    hidden=lambda: [case(int(torch.randint(3, 40, ()))) for _ in range(3)],
    hint="mask[i, j] is True exactly when j <= i.",
    what="The mask",
    withhold=["companion.masks.causal_mask"],
    atol=0,
    rtol=0,
)


# --- split and merge heads ----------------------------------------------------------------------------------


def _arange(*shape: int) -> torch.Tensor:
    return torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)


def _random_splits() -> list[Case]:
    """Hidden cases: random values, at least 2 positions and 2 heads (where a wrong axis order shows)."""
    out = []
    for _ in range(3):
        b, n, h, d_head = (
            int(torch.randint(low, high, ()))
            for low, high in ((1, 4), (2, 7), (2, 6), (1, 5))
        )
        out.append(
            case(
                torch.randn(b, n, h * d_head),
                h,
                why=f"random values, {h} heads of width {d_head}",
            )
        )
    return out


check_split_heads = compare(
    "split_heads",
    ref.split_heads,
    [
        case(_arange(b, n, d), h)
        for b, n, d, h in [
            (1, 3, 4, 2),
            (2, 3, 8, 2),
            (1, 5, 12, 3),
            (2, 4, 6, 1),
            (1, 2, 4, 4),
        ]
    ],
    mistakes=[
        (
            lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1),
            "Reshaping straight to (batch, n_heads, n, d_head) mixes positions into heads: split the last axis "
            "first, then move the heads axis in front of the positions.",
        ),
        (
            lambda x, h: x.reshape(*x.shape[:2], -1, h).permute(0, 3, 1, 2),
            "Wrong split order: head h takes the d_head consecutive features h·d_head … (h+1)·d_head - 1.",
        ),
        (
            lambda x, h: x.reshape(*x.shape[:2], h, -1),
            "Almost: that is (batch, n, n_heads, d_head); the heads axis comes before the positions.",
        ),
    ],
    hidden=_random_splits,
    hint="Head h holds features h·d_head … (h+1)·d_head - 1 of every position; the result has shape "
    "(batch, n_heads, n, d_head).",
    what="The split tensor",
)

check_merge_heads = compare(
    "merge_heads",
    ref.merge_heads,
    [
        case(_arange(b, h, n, dh))
        for b, h, n, dh in [
            (1, 2, 3, 2),
            (2, 2, 3, 4),
            (1, 3, 5, 4),
            (2, 1, 4, 6),
            (1, 4, 2, 1),
        ]
    ],
    mistakes=[
        (
            lambda x: x.reshape(x.shape[0], x.shape[2], -1),
            "Reshaping straight to (batch, n, n_heads·d_head) mixes heads into positions: bring the positions "
            "axis in front of the heads first (and use .reshape, as a transposed tensor is not contiguous).",
        ),
        (
            lambda x: x.permute(0, 2, 3, 1).reshape(x.shape[0], x.shape[2], -1),
            "Wrong concatenation order: all features of head 0 first, then head 1, …, not interleaved.",
        ),
        (
            lambda x: x.transpose(1, 2),
            "Almost: after swapping the axes, the heads still need concatenating into one axis of width d_model.",
        ),
    ],
    hint="The inverse of split_heads: (batch, n_heads, n, d_head) → (batch, n, n_heads·d_head), head 0's "
    "features first.",
    what="The merged tensor",
)
