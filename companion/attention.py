"""Attention (chapter 4): weightless self-attention, scaled dot-product attention (loops, matrices, blocks),
multi-head attention and the key/value cache of incremental decoding.

Notation: queries ``q (..., n_q, d_k)``, keys ``k (..., n_k, d_k)``, values ``v (..., n_k, d_v)``;
``A = softmax(q kᵀ / √d_k)`` (softmax along each row, over the keys) and ``out = A v``.

Masks follow :mod:`companion.masks`: boolean, ``True`` = may attend, broadcasting against the scores
``(..., n_q, n_k)``. ``causal=True`` lets query ``i`` see the keys ``j <= i + (n_k - n_q)`` (aligned at the end,
so that ``n_q`` new queries attend to ``n_k - n_q`` cached keys and to themselves; the same as
``mask=companion.masks.causal_mask(n_q, n_k)``). A query that may see no
key at all gets zero weights and a zero output (as ``torch.nn.functional.scaled_dot_product_attention`` on
CPU; :class:`torch.nn.MultiheadAttention` returns NaN there). Every softmax subtracts the row maximum, so
``exp`` never overflows.

The batched attention functions here (not the one-query-at-a-time :func:`attention_loop`, whose ``mask``
says causality too) can be handed to :class:`MultiHeadAttention` (``attention=``): it calls them as
``attention(q, k, v, mask=None, causal=False)`` on ``(batch, heads, n, d_head)`` tensors, ``causal`` the
layer's option.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .masks import Mask
from .validation import (
    check_attention_inputs,
    require_floats,
    require_heads,
    require_int,
    require_ndim,
    require_number,
)

__all__ = [
    "AttentionFn",
    "weightless_self_attention",
    "attention_loop",
    "scaled_dot_product_attention",
    "blocked_attention",
    "split_heads",
    "merge_heads",
    "KVCache",
    "MultiHeadAttention",
]

AttentionFn = Callable[..., Tensor]
"""An attention function ``(q, k, v, mask=None, **options) -> output``, as :class:`MultiHeadAttention` calls it."""


def weightless_self_attention(
    x: Tensor, *, return_weights: bool = False
) -> Tensor | tuple[Tensor, Tensor]:
    """y_i = Σ_j softmax_j(x_i·x_j) x_j: x, y (..., n, d); weights (..., n, n)."""
    require_floats(x, "x", "(..., n, d)", min_ndim=2)
    weights = torch.softmax(x @ x.transpose(-2, -1), dim=-1)
    y = weights @ x
    return (y, weights) if return_weights else y


def attention_loop(q: Tensor, k: Tensor, v: Tensor, mask: Mask = None) -> Tensor:
    """new_i = Σ_j a_ij v_j, a_i = softmax(q_i·k/√d_k): q (n_q, d), k, v (n_k, d)."""
    check_attention_inputs(q, k, v, mask, unbatched=True)
    (n_q, d_k), n_k = q.shape, k.shape[0]
    new = v.new_zeros(n_q, v.shape[1])
    for i in range(n_q):
        seen = [j for j in range(n_k) if mask is None or mask[i, j]]
        if not seen:
            continue  # a query that may see no key keeps a zero output
        scores = torch.stack([torch.dot(q[i], k[j]) / math.sqrt(d_k) for j in seen])
        e = torch.exp(scores - scores.max())  # minus the max: same softmax, no overflow
        for j, a_ij in zip(seen, e / e.sum(), strict=True):
            new[i] = new[i] + a_ij * v[j]
    return new


def _allowed(
    mask: torch.Tensor | None, causal: bool, n_q: int, n_k: int, device: torch.device
) -> torch.Tensor | None:
    """The mask, and with ``causal`` the keys ``j <= i + n_k - n_q`` of each query ``i``."""
    if not causal:
        return mask
    ends = torch.ones(n_q, n_k, dtype=torch.bool, device=device).tril(n_k - n_q)
    return ends if mask is None else mask & ends


def _attention_weights(
    q: torch.Tensor,
    k: torch.Tensor,
    mask: torch.Tensor | None,
    causal: bool,
    scale: float | None = None,
) -> torch.Tensor:
    """A = softmax(q kᵀ · scale), forbidden keys 0: q (..., n_q, d_k), k (..., n_k, d_k) → A (..., n_q, n_k)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    # scaling q (n_q·d_k numbers) is cheaper than the scores
    scores = (q * scale) @ k.transpose(-2, -1)
    mask = _allowed(mask, causal, q.shape[-2], k.shape[-2], q.device)
    if mask is None:
        return torch.softmax(scores, dim=-1)
    # exp(min - row max) is exactly 0
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    # fully masked rows
    return torch.softmax(scores, dim=-1).masked_fill(
        ~mask.any(dim=-1, keepdim=True), 0.0
    )


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: Mask = None,
    *,
    causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """out = softmax(q kᵀ / √d_k) v: q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v) → (..., n_q, d_v).

    ``scale`` replaces ``1/√d_k``; ``dropout_p`` drops attention weights (training only); ``return_weights``
    also returns the weights ``(..., n_q, n_k)``. Same numbers as :func:`attention_loop` and as
    ``torch.nn.functional.scaled_dot_product_attention``.
    """
    check_attention_inputs(q, k, v, mask)
    weights = _attention_weights(q, k, mask, causal, scale)
    if dropout_p > 0.0:
        weights = F.dropout(
            weights,
            p=require_number(dropout_p, "dropout_p", low=0, high=1, high_open=True),
        )
    out = weights @ v
    return (out, weights) if return_weights else out


def blocked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: Mask = None,
    *,
    causal: bool = False,
    scale: float | None = None,
    block_size: int | None = None,
) -> torch.Tensor:
    """out[rows] = softmax(q[rows] kᵀ / √d_k) v, one block of query rows at a time; shapes as
    :func:`scaled_dot_product_attention`, whose numbers it reproduces.

    Only ``block_size × n_k`` scores per head exist at any moment instead of ``n_q × n_k``: a few MiB that the
    allocator reuses and the CPU keeps in its cache (FlashAttention also splits the keys, with a running
    maximum and sum). The default ``block_size`` makes about 16 MiB of float32 scores for all heads together.
    """
    check_attention_inputs(q, k, v, mask)
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    (n_q, d_k), n_k, d_v = q.shape[-2:], k.shape[-2], v.shape[-1]
    if block_size is None:
        # 2^22 float32 scores = 16 MiB
        block_size = max(1, 2**22 // max(1, math.prod(lead) * n_k))
    require_int(block_size, "block_size", low=1)
    mask = _allowed(mask, causal, n_q, n_k, q.device)
    scale = 1.0 / math.sqrt(d_k) if scale is None else scale
    # One batch dimension for all the leading ones: q (B, n_q, d_k), k_t (B, d_k, n_k), v (B, n_k, d_v).
    q = (q * scale).expand(*lead, n_q, d_k).reshape(-1, n_q, d_k)
    k_t = k.expand(*lead, n_k, d_k).reshape(-1, n_k, d_k).transpose(1, 2)
    v = v.expand(*lead, n_k, d_v).reshape(-1, n_k, d_v)
    if mask is not None:
        mask = mask.expand(*lead, n_q, n_k).reshape(-1, n_q, n_k)
    # Without autograd, one buffer holds the scores of every block and the softmax overwrites them in place.
    track_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k_t, v))
    buffer = None if track_grad else q.new_empty(q.shape[0], min(block_size, n_q), n_k)
    out = q.new_empty(q.shape[0], n_q, d_v)
    for start in range(0, n_q, block_size):
        rows = slice(start, min(n_q, start + block_size))
        full = buffer is not None and rows.stop - rows.start == buffer.shape[1]
        # (B, block, n_k)
        scores = (
            torch.bmm(q[:, rows], k_t, out=buffer)
            if full
            else torch.bmm(q[:, rows], k_t)
        )
        allowed = None if mask is None else mask[:, rows]
        if allowed is not None:
            scores.masked_fill_(~allowed, torch.finfo(scores.dtype).min)
        weights = (
            torch.softmax(scores, dim=-1)
            if track_grad
            else torch.softmax(scores, -1, out=scores)
        )
        if allowed is not None:
            # fully masked rows
            weights = weights.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)
        out[:, rows] = torch.bmm(weights, v)
    return out.reshape(*lead, n_q, d_v)


def _check_split(x: object, n_heads: object) -> None:
    x = require_ndim(x, "x", 2, "(..., n, d_model)", at_least=True)
    require_heads(x.shape[-1], n_heads)


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(..., n, d_model) → (..., n_heads, n, d_head), d_model = n_heads·d_head."""
    _check_split(x, n_heads)
    x = x.unflatten(-1, (n_heads, x.shape[-1] // n_heads))  # (..., n, n_heads, d_head)
    return x.transpose(-3, -2)  # (..., n_heads, n, d_head)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(..., n_heads, n, d_head) → (..., n, n_heads·d_head), the inverse of :func:`split_heads`."""
    require_ndim(x, "x", 3, "(..., n_heads, n, d_head)", at_least=True)
    return x.transpose(-3, -2).flatten(-2)


class KVCache:
    """The keys and values one attention layer has seen so far, each ``(batch, n_heads, n_seen, d_head)``."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def __len__(self) -> int:
        """n_seen: how many positions are cached, i.e. the position of the next token."""
        return 0 if self.k is None else self.k.shape[-2]

    def append(
        self, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new positions' keys and values ``(batch, n_heads, n_new, d)``; return all of them."""
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        return self.k, self.v


def _check_mha_inputs(x: object, memory: object, d_model: int) -> None:
    """Raise unless ``x (B, n_q, d_model)`` and ``memory (B, n_k, d_model)``."""
    q, kv = (
        require_floats(t, name, "(batch, seq, d_model)", ndim=3)
        for name, t in (("x", x), ("memory", memory))
    )
    for name, t in (("x", q), ("memory", kv)):
        if t.shape[-1] != d_model:
            raise ValueError(
                f"{name} must have last dimension d_model = {d_model}, got shape {tuple(t.shape)}"
            )
    if kv.shape[0] != q.shape[0]:
        raise ValueError(
            f"memory must have shape ({q.shape[0]}, n_k, {d_model}), got shape {tuple(kv.shape)} for x of "
            f"shape {tuple(q.shape)}"
        )


class MultiHeadAttention(nn.Module):
    """head_i = attention(x W_Qⁱ, memory W_Kⁱ, memory W_Vⁱ), out = concat(head_1 … head_h) W_O:
    x (B, n_q, d_model), memory (B, n_k, d_model) → (B, n_q, d_model); W_Qⁱ = d_head columns of W_Q.

    The constructor takes the layer's options: ``causal=True`` makes every call causal (query ``i`` sees the
    keys ``j <= i``, aligned at the end as :mod:`companion.masks` says), as a decoder's self-attention is.
    ``forward(x, memory=None, mask=None, cache=None)`` takes the data: self-attention when ``memory`` is None
    (the keys and values come from ``x``), cross-attention otherwise; the boolean ``mask`` (True = may attend)
    broadcasts to ``(B, n_heads, n_q, n_k)``; ``cache``, a :class:`KVCache`, holds the keys and values of
    earlier positions (incremental decoding). While training with ``dropout > 0`` the attention function is also
    given ``dropout_p``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        causal: bool = False,
        rotary: nn.Module | None = None,
        attention: AttentionFn = scaled_dot_product_attention,
    ) -> None:
        super().__init__()
        require_heads(d_model, n_heads)
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.causal = causal  # query i sees the keys j <= i: a decoder's self-attention
        # on the attention weights, while training
        self.dropout = require_number(dropout, "dropout", low=0, high=1, high_open=True)
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        # RoPE on every head's queries and keys (a positional.RotaryEmbedding), or None
        self.rotary = rotary
        self.attention = attention

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        mask: Mask = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """concat(head_1 … head_h) W_O: x (B, n_q, d_model) → (B, n_q, d_model)."""
        memory = x if memory is None else memory  # self-attention by default
        _check_mha_inputs(x, memory, self.d_model)
        q = split_heads(self.q_proj(x), self.n_heads)  # (B, h, n_q, d_head)
        k = split_heads(self.k_proj(memory), self.n_heads)  # (B, h, n_k, d_head)
        v = split_heads(self.v_proj(memory), self.n_heads)  # (B, h, n_k, d_head)
        if self.rotary is not None:  # RoPE (chapter 5), positions after the cached ones
            offset = 0 if cache is None else len(cache)
            q, k = self.rotary(q, offset), self.rotary(k, offset)
        if cache is not None:  # a KVCache (chapter 6) prepends the earlier keys, values
            k, v = cache.append(k, v)
        dropout = {"dropout_p": self.dropout} if self.training and self.dropout else {}
        out = self.attention(q, k, v, mask=mask, causal=self.causal, **dropout)
        return self.out_proj(merge_heads(out))  # (B, n_q, d_model)

    def weights(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        mask: Mask = None,
        *,
        causal: bool | None = None,
    ) -> torch.Tensor:
        """The scaled dot-product attention weights of every head, ``(B, n_heads, n_q, n_k)``, for figures; the
        arguments of :meth:`forward`, and ``causal`` to override the layer's (its unmasked weights)."""
        causal = self.causal if causal is None else causal
        layer_causal, self.causal = self.causal, causal
        seen: list[torch.Tensor] = []

        def record(
            q: Tensor,
            k: Tensor,
            v: Tensor,
            mask: Mask = None,
            causal: bool = False,
            **_: object,
        ):
            seen.append(_attention_weights(q, k, mask, causal))
            return scaled_dot_product_attention(q, k, v, mask=mask, causal=causal)

        attention, self.attention = self.attention, record
        # forward, not self(...): a forward hook that asks for the weights must not run again
        try:
            self.forward(x, memory, mask)
        finally:
            self.attention, self.causal = attention, layer_causal
        return seen[0]

    def extra_repr(self) -> str:
        name = getattr(self.attention, "__name__", type(self.attention).__name__)
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, dropout={self.dropout}, causal={self.causal}, "
            f"attention={name}"
        )
