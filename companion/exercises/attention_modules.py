"""Checkers for chapter 4, *Attention*: the two exercises that build attention as an ``nn.Module``.

======================================  =====================================================================
checker                                 what the student writes
======================================  =====================================================================
``check_multi_head_attention``          ``class MultiHeadAttention(nn.Module)`` with ``q_proj, k_proj,
                                        v_proj, out_proj`` and ``forward(query, key, value, mask=None)``
``check_self_attention_module``         ``class SelfAttention(nn.Module)`` with ``W_Q, W_K, W_V`` and
                                        ``forward(x, mask=None)``
======================================  =====================================================================

The functions of the chapter (weightless and scaled dot-product attention, the causal mask, splitting and
merging heads) are checked in :mod:`companion.exercises.attention`, which re-exports these two checkers.
Masks follow the book's convention: boolean, ``True`` = may attend.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from .. import attention as ref
from ..masks import causal_mask as _causal_mask
from .checking import Checker, Mismatch, call, expect, expect_module, show
from .checking.random_state import hidden_inputs

__all__ = ["check_multi_head_attention", "check_self_attention_module"]


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
    expect_module(layer, label)
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
            expected = reference(query, key, mask)
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
    expect_module(layer, label)
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
