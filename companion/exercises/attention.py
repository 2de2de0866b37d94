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

Masks follow the book's convention: boolean, ``True`` = may attend.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from .. import attention as ref
from ..masks import causal_mask as _causal_mask
from .checking import (
    Case,
    Checker,
    Mismatch,
    OneCall,
    call,
    case,
    compare,
    expect,
    show,
)
from .checking.random_state import hidden_inputs

__all__ = [
    "check_weightless_self_attention",
    "check_scaled_dot_product_attention",
    "check_causal_mask",
    "check_split_heads",
    "check_merge_heads",
    "check_multi_head_attention",
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


def _attend(
    q, k, v, mask=None, *, scale=None, dim=-1, fill=float("-inf"), weights_only=False
):
    """softmax(q kᵀ · scale, dim) v with scores at mask == False set to ``fill``: the answer and its variants."""
    scores = (
        q
        @ k.transpose(-2, -1)
        * (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    )
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)
    weights = torch.softmax(scores, dim=dim)
    return weights if weights_only else weights @ v


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


# --- multi-head attention -----------------------------------------------------------------------------------

_MHA_LAYERS = ("q_proj", "k_proj", "v_proj", "out_proj")


def _mha_mistakes(
    reference: ref.MultiHeadAttention,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
) -> list[tuple[Callable[[], torch.Tensor], str]]:
    d_model, n_heads = reference.d_model, reference.n_heads

    def variant(
        scale_by: int | None = None, out_proj: bool = True, head_split: str = "right"
    ) -> torch.Tensor:
        q, k, v = (
            reference.q_proj(query),
            reference.k_proj(key),
            reference.v_proj(value),
        )
        if head_split == "right":
            q, k, v = (ref.split_heads(t, n_heads) for t in (q, k, v))
        else:  # reshape without the transpose
            q, k, v = (
                t.reshape(t.shape[0], n_heads, t.shape[1], -1) for t in (q, k, v)
            )
        scale = None if scale_by is None else 1.0 / math.sqrt(scale_by)
        heads = _attend(q, k, v, mask, scale=scale)
        merged = (
            ref.merge_heads(heads)
            if head_split == "right"
            else heads.reshape(query.shape)
        )
        return reference.out_proj(merged) if out_proj else merged

    return [
        (
            lambda: variant(scale_by=d_model),
            f"Scale by √d_head = √(d_model / n_heads) = √{d_model // n_heads}, not √d_model: each head is an "
            "attention of width d_head.",
        ),
        (
            lambda: variant(scale_by=1),
            "Divide each head's scores by √d_head before the softmax.",
        ),
        (
            lambda: variant(out_proj=False),
            "The concatenated heads still go through the output projection out_proj (W_O).",
        ),
        (
            lambda: variant(head_split="reshape"),
            "Split the heads with .reshape(batch, n, n_heads, d_head).transpose(1, 2), and merge them back with "
            "the inverse; reshaping straight to (batch, n_heads, n, d_head) mixes positions.",
        ),
    ]


def _mha_cases(MultiHeadAttention) -> int:
    d_model, n_heads = 8, 2
    label = f"MultiHeadAttention(d_model={d_model}, n_heads={n_heads})"
    layer = call(MultiHeadAttention, d_model, n_heads, input=label)
    if not isinstance(layer, nn.Module):
        raise Mismatch(
            "MultiHeadAttention(8, 2) should create an nn.Module.",
            input=label,
            got=show(layer),
            hint="Subclass torch.nn.Module and call super().__init__() first.",
        )
    for name in _MHA_LAYERS:
        linear = getattr(layer, name, None)
        if not isinstance(linear, nn.Linear) or tuple(linear.weight.shape) != (
            d_model,
            d_model,
        ):
            raise Mismatch(
                f"The layer needs an attribute `{name}` that is an nn.Linear({d_model}, {d_model}).",
                input=label,
                expected=f"nn.Linear({d_model}, {d_model})",
                got=show(linear),
                hint="Each projection is one d_model × d_model matrix, split into heads afterwards: "
                f"self.{name} = nn.Linear(d_model, d_model).",
            )
    reference = ref.MultiHeadAttention(d_model, n_heads)
    with torch.no_grad():
        for name in _MHA_LAYERS:
            ours, theirs = getattr(reference, name), getattr(layer, name)
            ours.weight.copy_(theirs.weight)
            if theirs.bias is not None:
                ours.bias.copy_(theirs.bias)
            else:
                ours.bias.zero_()
    layer.eval()
    reference.eval()

    x = torch.randn(2, 5, d_model)
    memory = torch.randn(2, 3, d_model)
    cases = [
        ("self-attention: query = key = value = x of shape (2, 5, 8)", x, x, x, None),
        (
            "cross-attention: query of shape (2, 5, 8), key = value of shape (2, 3, 8)",
            x,
            memory,
            memory,
            None,
        ),
        ("causal self-attention, mask = causal_mask(5)", x, x, x, _causal_mask(5)),
    ]
    for description, query, key, value, mask in cases:
        kwargs = {} if mask is None else {"mask": mask.clone()}
        with torch.no_grad():
            got = call(
                layer,
                query.clone(),
                key.clone(),
                value.clone(),
                input=description,
                **kwargs,
            )
            expected = reference(query, key, value, mask=mask)
        if isinstance(got, tuple) and got and isinstance(got[0], torch.Tensor):
            got = got[0]  # (output, weights) is accepted as well

        mistakes = _mha_mistakes(reference, query, key, value, mask)
        with torch.no_grad():
            expect(
                got,
                expected,
                mistakes=mistakes,
                input=description,
                what="The output",
                hint="Project q, k, v; split each into heads (batch, n_heads, n, d_head); attend in "
                "every head with softmax(q kᵀ / √d_head) v (mask == False → -inf); merge the "
                "heads; apply out_proj.",
            )
    return 1 + len(cases)


check_multi_head_attention = Checker("MultiHeadAttention", _mha_cases)


# ============================================================================================================
# --- self-attention module (exercise ex-self-attention-module; added by the ch4to5 work, issue 7 §3) -------
# ============================================================================================================
#
# The student writes ``SelfAttention(d_in, d_k, d_v)``, an ``nn.Module`` with three bias-free projections
# ``W_Q, W_K`` (``nn.Linear(d_in, d_k)``) and ``W_V`` (``nn.Linear(d_in, d_v)``) and
# ``forward(x, mask=None) = softmax(Q Kᵀ / √d_k) V`` with ``Q = x W_Qᵀ`` etc. The checker keeps the student's
# own (random) weights and compares with an independent computation from those weights.

_SELF_ATTENTION_LAYERS = (("W_Q", "d_k"), ("W_K", "d_k"), ("W_V", "d_v"))


def _self_attention_reference(
    wq: torch.Tensor,
    wk: torch.Tensor,
    wv: torch.Tensor,
    x: torch.Tensor,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    q, k, v = x @ wq.T, x @ wk.T, x @ wv.T
    return ref.scaled_dot_product_attention(q, k, v, mask)


def _self_attention_mistakes(
    wq: torch.Tensor,
    wk: torch.Tensor,
    wv: torch.Tensor,
    x: torch.Tensor,
    mask: torch.Tensor | None,
) -> list[tuple[Callable[[], torch.Tensor], str]]:
    q, k, v = x @ wq.T, x @ wk.T, x @ wv.T
    d_in, d_k = x.shape[-1], q.shape[-1]

    def attend(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        scale: float,
        dim: int = -1,
        hide=None,
    ):
        scores = q @ k.transpose(-2, -1) * scale
        hide = None if mask is None else ~mask if hide is None else hide
        if hide is not None:
            scores = scores.masked_fill(hide, float("-inf"))
        return torch.softmax(scores, dim=dim) @ v

    return [
        (lambda: attend(q, k, v, 1.0), "Divide the scores Q Kᵀ by √d_k before the softmax."),
        (lambda: attend(q, k, v, 1 / math.sqrt(d_in)),
         f"Scale by √d_k = √{d_k} (the width of the queries and keys), not by √d_in = √{d_in}."),
        (lambda: attend(q, k, v, 1 / math.sqrt(d_k), dim=-2),
         "The softmax runs over the keys (dim=-1): each query's weights sum to one."),
        (lambda: attend(q, q, v, 1 / math.sqrt(d_k)), "The keys come from W_K: K = x W_Kᵀ, not the queries."),
        (lambda: attend(x, x, x, 1 / math.sqrt(d_in)),
         "Use the projections: Q = self.W_Q(x), K = self.W_K(x), V = self.W_V(x)."),
        (lambda: attend(q, k, x, 1 / math.sqrt(d_k)),
         "The weights multiply the values V = self.W_V(x), not the inputs x."),
        (lambda: _self_attention_reference(wq, wk, wv, x, None),
         "Apply the mask: scores.masked_fill(~mask, float('-inf')) before the softmax."),
        (lambda: attend(q, k, v, 1 / math.sqrt(d_k), hide=mask),
         "The mask is inverted: True means 'may attend', so hide the scores where the mask is False "
         "(masked_fill(~mask, -inf)); hiding where it is True leaves the first query nothing to attend to."),
    ]  # fmt: skip


def _expect_own_matrices(layer: nn.Module, label: str) -> None:
    """W_Q, W_K and W_V are three layers with a weight matrix each (W_K = W_Q shares one matrix for two roles)."""
    seen: dict[int, str] = {}
    for name, _ in _SELF_ATTENTION_LAYERS:
        weight = getattr(layer, name).weight
        key = weight.untyped_storage().data_ptr()
        if key in seen:
            raise Mismatch(
                f"`{name}` and `{seen[key]}` share one weight matrix: each role needs a matrix of its own.",
                input=label,
                expected="three nn.Linear layers with three weight matrices",
                got=f"{name}.weight is {seen[key]}.weight",
                hint="Create three layers, self.W_Q = nn.Linear(d_in, d_k, bias=False), self.W_K = nn.Linear(...), "
                "self.W_V = nn.Linear(...), not self.W_K = self.W_Q: queries and keys learn different things.",
            )
        seen[key] = name


def _built_layer(
    SelfAttention, d_in: int, d_k: int, d_v: int, note: str = ""
) -> tuple[nn.Module, list]:
    """The student's layer of these sizes, its three projections checked, in float64, with its weights."""
    label = f"SelfAttention(d_in={d_in}, d_k={d_k}, d_v={d_v}){note}"
    layer = call(SelfAttention, d_in, d_k, d_v, input=label)
    if not isinstance(layer, nn.Module):
        raise Mismatch(
            f"{label} should create an nn.Module.",
            input=label,
            got=show(layer),
            hint="Subclass torch.nn.Module and call super().__init__() first.",
        )
    widths = {"d_k": d_k, "d_v": d_v}
    for name, width in _SELF_ATTENTION_LAYERS:
        linear = getattr(layer, name, None)
        shape = (widths[width], d_in)
        if (
            not isinstance(linear, nn.Linear)
            or tuple(linear.weight.shape) != shape
            or linear.bias is not None
        ):
            raise Mismatch(
                f"The layer needs an attribute `{name}` that is an nn.Linear(d_in, {width}, bias=False), whose "
                f"weight has shape {shape}.",
                input=label, expected=f"nn.Linear({d_in}, {widths[width]}, bias=False)", got=show(linear),
                hint=f"self.{name} = nn.Linear(d_in, {width}, bias=False)",
            )  # fmt: skip
    _expect_own_matrices(layer, label)
    weights = [
        getattr(layer, name).weight.detach().clone().double()
        for name, _ in _SELF_ATTENTION_LAYERS
    ]
    layer.double()
    return layer, weights


def _expect_attends(
    layer: nn.Module, weights: list, description: str, inputs: torch.Tensor, mask
) -> None:
    args = (inputs.clone(),) + (() if mask is None else (mask.clone(),))
    with torch.no_grad():
        got = call(layer, *args, input=description)
    if isinstance(got, tuple) and got and isinstance(got[0], torch.Tensor):
        got = got[0]  # (output, weights) is accepted as well
    expect(
        got, _self_attention_reference(*weights, inputs, mask),
        mistakes=_self_attention_mistakes(*weights, inputs, mask),
        input=description, what="The output",
        hint="Project x three times (queries, keys, values), score queries against keys scaled by 1/√d_k, "
             "mask before the softmax over the keys, then weight the values.",
    )  # fmt: skip


def _self_attention_cases(SelfAttention) -> tuple[int, int]:
    d_in, d_k, d_v = 6, 4, 3
    layer, weights = _built_layer(SelfAttention, d_in, d_k, d_v)
    x = torch.randn(5, d_in, dtype=torch.float64)
    cases = [
        ("one sequence x of shape (5, 6)", x, None),
        (
            "a batch x of shape (2, 4, 6)",
            torch.randn(2, 4, d_in, dtype=torch.float64),
            None,
        ),
        ("x of shape (5, 6) with mask = causal_mask(5)", x, _causal_mask(5)),
    ]
    for description, inputs, mask in cases:
        _expect_attends(layer, weights, description, inputs, mask)
    with (
        hidden_inputs() as seed
        # new on every run: sizes (d_k not the shown 4), input, a mask leaving each query a key
    ):
        d_in, d_v, n = (
            int(torch.randint(low, high, ())) for low, high in ((2, 9), (1, 6), (2, 8))
        )
        d_k = (1, 2, 3, 5, 6)[int(torch.randint(5, ()))]
        x_hidden = torch.randn(n, d_in, dtype=torch.float64)
        hidden_mask = (torch.rand(n, n) < 0.6) | torch.eye(n, dtype=torch.bool)
    note = f"  (a hidden random case, seed {seed})"
    hidden_layer, hidden_weights = _built_layer(SelfAttention, d_in, d_k, d_v, note)
    description = f"x of shape {tuple(x_hidden.shape)} with a random mask {hidden_mask.int().tolist()}{note}"
    _expect_attends(hidden_layer, hidden_weights, description, x_hidden, hidden_mask)
    # Gradients must reach the three projections, so that training can learn them.
    layer.zero_grad()
    label = "x of shape (5, 6); then out.sum().backward()"
    out = call(layer, x.clone(), input=label)
    if isinstance(out, tuple):
        out = out[0]
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        raise Mismatch(
            "No gradient reached W_Q, W_K and W_V: your output is not connected to them by autograd.",
            input=label,
            hint="Compute the output from the layers themselves (self.W_Q(x), ...), without .detach() or .data.",
        )
    try:
        (out * torch.randn_like(out)).sum().backward()
    except Exception as e:
        raise Mismatch(
            f"Backpropagating through your output raised {type(e).__name__}: {e}",
            input=label,
        ) from e
    for name, _ in _SELF_ATTENTION_LAYERS:
        grad = getattr(layer, name).weight.grad
        if grad is None or not torch.any(grad != 0):
            raise Mismatch(
                f"No gradient reached {name}.weight, so training could not learn it.",
                input=label,
                hint="Compute the output from the layers themselves (self.W_Q(x), ...), not from copies or .data.",
            )
    return 1 + len(cases) + 2, 1


check_self_attention_module = Checker("SelfAttention", _self_attention_cases)
__all__ += ["check_self_attention_module"]
