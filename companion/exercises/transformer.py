"""Checkers for chapter 5, *The Transformer*.

==========================================  =================================================================
checker                                     what the student writes
==========================================  =================================================================
``check_sinusoidal_positional_encoding``    ``sinusoidal_positional_encoding(n_positions, d_model) -> (n, d)``
``check_rope``                              ``rope(x) -> x rotated``: ``(..., n, d)``, positions 0 … n-1,
                                            adjacent pairs ``(x_2i, x_2i+1)``
``check_layer_norm``                        ``layer_norm(x, weight, bias, eps=1e-5)`` over the last axis
``check_layer_norm_module``                 ``class LayerNorm(nn.Module)``: ``LayerNorm(d_model, eps=1e-5)``
                                            with parameters ``weight`` (γ) and ``bias`` (β)
``check_label_smoothed_cross_entropy``      ``label_smoothed_cross_entropy(logits, y, epsilon, ignore_index=-100)``:
                                            ``(N, V)``, ``(N,)`` → the mean over the kept rows
==========================================  =================================================================

Layer normalisation and the encoder block (``check_layer_norm``, ``check_layer_norm_module``,
``check_encoder_block``) are checked in ``companion.exercises.transformer_layers`` and re-exported here.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F

from .. import positional as ref
from .. import transformer as companion_transformer
from .checking import OneCall, case, compare
from .transformer_layers import (
    check_encoder_block,
    check_layer_norm,
    check_layer_norm_module,
)

__all__ = [
    "check_sinusoidal_positional_encoding",
    "check_rope",
    "check_layer_norm",
    "check_layer_norm_module",
    "check_encoder_block",
    "check_label_smoothed_cross_entropy",
]


# --- sinusoidal positional encoding -------------------------------------------------------------------------


def _sinusoid(
    n: int,
    d: int,
    *,
    exponent: str = "2i",
    swap: bool = False,
    start: int = 0,
    layout: str = "pairs",
):
    """The encoding and some typical mistakes in it (float64)."""
    pos = torch.arange(start, start + n, dtype=torch.float64)[:, None]
    col = torch.arange(d, dtype=torch.float64)
    if exponent == "2i":
        power = 2 * (col // 2) / d
    elif exponent == "i":
        power = (col // 2) / d
    else:  # the column index itself: column 2i+1 uses (2i+1)/d
        power = col / d
    angle = pos / 10000.0**power
    sin, cos = (torch.cos, torch.sin) if swap else (torch.sin, torch.cos)
    if layout == "halves":
        half = angle[:, 0::2]
        return torch.cat([sin(half), cos(half)], dim=1)[:, :d]
    out = torch.empty(n, d, dtype=torch.float64)
    out[:, 0::2] = sin(angle[:, 0::2])
    out[:, 1::2] = cos(angle[:, 1::2])
    return out


def _sinusoidal_reference(n_positions: int, d_model: int) -> torch.Tensor:
    return ref.sinusoidal_positional_encoding(n_positions, d_model)


check_sinusoidal_positional_encoding = compare(
    "sinusoidal_positional_encoding",
    _sinusoidal_reference,
    [case(4, 6), case(50, 16), case(1, 2), case(10, 128)],
    mistakes=[
        (
            lambda n, d: _sinusoid(n, d, swap=True),
            "sin and cos are swapped: even columns 2i hold the sine, odd columns 2i+1 the cosine.",
        ),
        (
            lambda n, d: _sinusoid(n, d, exponent="col"),
            "Both columns of a pair share one frequency: column 2i+1 uses the exponent of its even neighbour 2i.",
        ),
        (
            lambda n, d: _sinusoid(n, d, exponent="i"),
            "The exponent is 2i/d_model, where i numbers the pairs of columns.",
        ),
        (
            lambda n, d: _sinusoid(n, d, layout="halves"),
            "Interleave: sine in the even columns and cosine in the odd ones, rather than all sines then all cosines.",
        ),
        (
            lambda n, d: _sinusoid(n, d, start=1),
            "Positions start at 0: the first row is sin(0) = 0, cos(0) = 1.",
        ),
    ],
    hint="PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)); "
    "shape (n_positions, d_model).",
    what="The encoding",
    hidden=lambda: [
        case(int(torch.randint(1, 60, ())), 2 * int(torch.randint(1, 40, ())))
        for _ in range(3)
    ],
    withhold=["companion.positional.sinusoidal_positional_encoding"],
)


# --- RoPE ---------------------------------------------------------------------------------------------------


def _rope_variant(
    x: torch.Tensor,
    *,
    sign: float = 1.0,
    start: int = 0,
    exponent: str = "2i",
    halves: bool = False,
):
    n, d = x.shape[-2], x.shape[-1]
    i = torch.arange(d // 2, dtype=torch.float64)
    theta = 10000.0 ** (-(2 * i if exponent == "2i" else i) / d)
    angle = torch.arange(start, start + n, dtype=torch.float64)[:, None] * theta
    cos, sin = angle.cos().to(x.dtype), (sign * angle.sin()).to(x.dtype)
    if halves:
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)


def _rope_reference(x: torch.Tensor) -> torch.Tensor:
    return ref.apply_rope(x)


check_rope = compare(
    "rope",
    _rope_reference,
    lambda: [
        case(torch.randn(4, 2), why="one pair at 4 positions"),
        case(torch.randn(6, 8), why="6 positions of width 8"),
        case(
            torch.randn(2, 3, 5, 4),
            why="a batch of shape (2, 3) of 5 positions of width 4",
        ),
        case(torch.randn(1, 6), why="one position (position 0 is not rotated)"),
        case(torch.randn(20, 16), why="20 positions of width 16"),
    ],
    mistakes=[
        (
            lambda x: _rope_variant(x, sign=-1.0),
            "Wrong direction: rotate by +φ, i.e. y_2i = x_2i cos φ - x_2i+1 sin φ.",
        ),
        (
            lambda x: _rope_variant(x, halves=True),
            "This exercise rotates adjacent pairs (x_2i, x_2i+1), not feature i with feature i + d/2.",
        ),
        (
            lambda x: _rope_variant(x, start=1),
            "Positions start at 0: the first row is not rotated.",
        ),
        (
            lambda x: _rope_variant(x, exponent="i"),
            "The angle of pair i at position p is p · 10000^(-2i/d), with 2i in the exponent.",
        ),
    ],
    hint="For position p and pair i, φ = p · 10000^(-2i/d): y_2i = x_2i cos φ - x_2i+1 sin φ, "
    "y_2i+1 = x_2i sin φ + x_2i+1 cos φ; the shape stays the same.",
    what="The rotated x",
    # apply_rope itself is listed in the chapter before the exercise; its rotation, withheld, stops a call to it
    withhold=[
        "companion.positional._rotate",
        "companion.positional.RotaryEmbedding.forward",
    ],
)


# --- label smoothing ----------------------------------------------------------------------------------------


def _smoothed(
    logits,
    y,
    epsilon,
    ignore_index=-100,
    *,
    others=False,
    count_all=False,
    log=True,
    uniform=True,
):
    """The label-smoothed cross-entropy and some typical mistakes in it."""
    kept = y != ignore_index
    n, v = logits.shape
    one_hot = F.one_hot(y.clamp(min=0) * kept, v).to(logits.dtype)
    if others:  # ε over the V - 1 wrong classes, 1 - ε on the right one
        q = (1 - epsilon) * one_hot + epsilon / (v - 1) * (1 - one_hot)
    else:
        q = (1 - epsilon) * one_hot + (epsilon / v if uniform else 0.0)
    scores = F.log_softmax(logits, dim=-1) if log else logits
    per_row = -(q * scores).sum(dim=-1) * kept
    return per_row.sum() / (n if count_all else kept.sum())


def _label_smoothing_cases():
    logits, y = 2 * torch.randn(12, 5), torch.randint(1, 5, (12,))
    y[[2, 7]] = 0
    return [
        case(
            torch.randn(4, 6),
            torch.tensor([0, 5, 2, 2]),
            0.1,
            why="4 rows, V = 6, ε = 0.1, nothing ignored",
        ),
        case(
            logits,
            y,
            0.2,
            ignore_index=0,
            why="ε = 0.2; rows 2 and 7 are <pad> (id 0), left out",
        ),
        case(
            torch.randn(3, 15),
            torch.tensor([3, -100, 14]),
            0.1,
            why="the default ignore_index = -100",
        ),
        case(
            3 * torch.randn(8, 4),
            torch.randint(0, 4, (8,)),
            0.0,
            why="ε = 0: the plain cross-entropy",
        ),
    ]


check_label_smoothed_cross_entropy = compare(
    "label_smoothed_cross_entropy",
    companion_transformer.label_smoothed_cross_entropy,
    _label_smoothing_cases,
    mistakes=[
        (
            partial(_smoothed, others=True),
            "Spread ε over all V classes, the right one included (PyTorch's label_smoothing): "
            "q = 1 - ε + ε/V on the right class and ε/V on each other.",
        ),
        (
            lambda logits, y, epsilon, ignore_index=-100: _smoothed(
                logits, y, 0.0, ignore_index
            ),
            "No smoothing: the target must be q = (1 - ε) one_hot(y) + ε/V, not the one-hot vector.",
        ),
        (
            partial(_smoothed, uniform=False),
            "Add ε/V to every class: (1 - ε) one_hot(y) alone does not sum to 1.",
        ),
        (
            partial(_smoothed, count_all=True),
            "Average over the kept rows only: the ignored (padding) rows count neither in the sum nor in the "
            "number of rows.",
        ),
        (
            partial(_smoothed, log=False),
            "Take the log-probabilities, log_softmax(logits), not the raw logits.",
        ),
        (
            lambda logits, y, epsilon, ignore_index=-100: (
                _smoothed(logits, y, epsilon, ignore_index) * (y != ignore_index).sum()
            ),
            "Average over the rows (F.cross_entropy's default), do not sum.",
        ),
    ],
    hint="loss = mean over the rows with y != ignore_index of -Σ_v q_v log softmax(logits)_v, "
    "q = (1 - ε) one_hot(y) + ε/V.",
    what="The loss",
    one_call=[
        OneCall(
            "torch.nn.functional.cross_entropy",
            keyword="label_smoothing",
            instead="log_softmax, one_hot, a weighted sum and a mean; F.cross_entropy without label_smoothing "
            "is fine",
        )
    ],
)
