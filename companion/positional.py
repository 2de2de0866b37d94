"""Positional information (chapter 5): sinusoidal encodings, learned position embeddings, rotary embeddings.

Attention by itself ignores the order of its inputs (it is permutation equivariant), so a Transformer adds
information about positions:

- **sinusoidal** (Vaswani et al., 2017): a fixed table added to the token embeddings,
  ``PE[pos, 2i] = sin(pos / 10000^(2i/d))``, ``PE[pos, 2i+1] = cos(pos / 10000^(2i/d))``;
- **learned**: a trainable table with one row per position (GPT-2, BERT), added the same way;
- **rotary** (RoPE, Su et al., 2021): rotate each pair of features ``(x_2i, x_2i+1)`` of the queries and keys
  by the angle ``pos · θ_i``, ``θ_i = 10000^(-2i/d)``; the score ``q_mᵀ k_n`` then depends on the positions
  only through ``m - n``.

The modules take an ``offset``: the position of the first row, for tokens that follow cached ones.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .validation import (
    check_sequence,
    require_int,
    require_ndim,
    require_number,
    require_tensor,
)

__all__ = [
    "sinusoidal_positional_encoding",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "rope_angles",
    "apply_rope",
    "RotaryEmbedding",
]


def _require_even(d: int, name: str = "d") -> int:
    if require_int(d, name, low=1) % 2:
        raise ValueError(
            f"RoPE rotates pairs of features, so {name} must be even, got {name} = {d}"
        )
    return d


def _check_table(n_positions: int, d_model: int) -> None:
    require_int(n_positions, "n_positions", low=1)
    require_int(d_model, "d_model", low=1)


def _rope_positions(x: Tensor, positions: Tensor | None) -> Tensor:
    """Check ``x (..., n, d)`` with ``d`` even and ``positions (n,)`` (default ``0 … n-1``); return the positions."""
    x = require_tensor(x, "x", "float")
    _require_even(x.shape[-1] if x.ndim else 0, "d (the last dimension of x)")
    positions = (
        torch.arange(x.shape[-2], device=x.device) if positions is None else positions
    )
    if (
        x.ndim < 2
        or require_tensor(positions, "positions", "int").shape != x.shape[-2:-1]
    ):
        raise ValueError(
            f"positions must have shape ({x.shape[-2]},), one per row of x (shape {tuple(x.shape)}), "
            f"got shape {tuple(positions.shape)}"
        )
    return positions


def sinusoidal_positional_encoding(n_positions: int, d_model: int) -> Tensor:
    """PE[p, 2i] = sin(p/10000^(2i/d)), PE[p, 2i+1] = cos(…): (n_positions, d_model)."""
    _check_table(n_positions, d_model)
    position = torch.arange(n_positions, dtype=torch.float64).unsqueeze(1)  # (n, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # 0, 2, 4, ...
    angle = position / 10000 ** (two_i / d_model)  # (n, ⌈d/2⌉), wavelengths 2π … 2π·10⁴
    pe = torch.empty(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])  # odd d_model: last column a sine
    return pe  # float64; a model casts it to its own dtype


class SinusoidalPositionalEncoding(nn.Module):
    """x + PE[offset : offset + n], the fixed table of :func:`sinusoidal_positional_encoding`: x (..., n, d_model)."""

    pe: Tensor

    def __init__(self, d_model: int, context_length: int = 512) -> None:
        super().__init__()
        self.d_model, self.context_length = d_model, context_length
        table = sinusoidal_positional_encoding(context_length, d_model)
        # float64, cast to the input's dtype on use
        self.register_buffer("pe", table, persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        check_sequence(x, "x", self.d_model, self.context_length, offset)
        return x + self.pe[offset : offset + x.shape[-2]].to(x.dtype)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, context_length={self.context_length}"


class LearnedPositionalEmbedding(nn.Module):
    """x + P[offset : offset + n], P a trained table (T, d_model), initially N(0, std²): x (..., n, d_model), T the
    context length."""

    def __init__(
        self, d_model: int, context_length: int = 512, *, std: float = 0.02
    ) -> None:
        super().__init__()
        self.d_model, self.context_length = d_model, context_length
        self.embedding = nn.Embedding(
            require_int(context_length, "context_length", low=1), d_model
        )
        nn.init.normal_(self.embedding.weight, std=std)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        check_sequence(x, "x", self.d_model, self.context_length, offset)
        return x + self.embedding.weight[offset : offset + x.shape[-2]]

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, context_length={self.context_length}"


def rope_angles(positions: Tensor, d: int, *, base: float = 10000.0) -> Tensor:
    """angle[p, i] = positions[p] · base^(-2i/d): positions (n,) integer → float64 (n, d/2)."""
    _check_table(1, _require_even(d))
    require_number(base, "base", low=1, low_open=True)
    require_ndim(require_tensor(positions, "positions", "int"), "positions", 1, "(n,)")
    # (d/2,)
    theta = base ** (
        -torch.arange(0, d, 2, dtype=torch.float64, device=positions.device) / d
    )
    return positions.to(torch.float64).unsqueeze(1) * theta


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate the pairs ``(x_2i, x_2i+1)`` of ``x (..., n, d)`` by the angles of ``cos, sin`` ``(n, d/2)``."""
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    # (..., n, d/2, 2)
    rotated = torch.stack(
        (x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1
    )
    return rotated.flatten(-2)


def apply_rope(x: Tensor, positions: Tensor | None = None) -> Tensor:
    """Rotate each pair (x_2i, x_2i+1) of x (..., n, d) by φ = pos · 10000^(−2i/d)."""
    positions = _rope_positions(x, positions)  # (n,), default 0 … n-1; x (..., n, d)
    angle = rope_angles(positions, x.shape[-1])
    return _rotate(x, angle.cos().to(x.dtype), angle.sin().to(x.dtype))


class RotaryEmbedding(nn.Module):
    """:func:`apply_rope` at positions offset … offset + n - 1, cosines and sines computed once for the context
    length T: x (..., n, d) → same; give it to :class:`~companion.attention.MultiHeadAttention` as ``rotary=``."""

    cos: Tensor
    sin: Tensor

    def __init__(
        self, d: int, context_length: int = 2048, *, base: float = 10000.0
    ) -> None:
        super().__init__()
        self.d, self.base = _require_even(d), base
        # T
        self.context_length = require_int(context_length, "context_length", low=1)
        angle = rope_angles(torch.arange(context_length), d, base=base)
        # float64: float64 checks are exact
        self.register_buffer("cos", angle.cos(), persistent=False)
        self.register_buffer("sin", angle.sin(), persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        check_sequence(x, "x", self.d, self.context_length, offset)
        rows = slice(offset, offset + x.shape[-2])
        return _rotate(x, self.cos[rows].to(x.dtype), self.sin[rows].to(x.dtype))

    def extra_repr(self) -> str:
        return f"d={self.d}, context_length={self.context_length}, base={self.base}"
