"""Checkers for chapter 10, *Random features*.

Every random quantity (the frequencies ``w``, the phases ``b``) is an argument, so each verdict is
deterministic: the checker draws them once under its own seed and gives the same ones to the student's function
and to the reference.

=========================================  =============================================================
checker                                    what the student writes
=========================================  =============================================================
``check_monte_carlo_kernel``               ``monte_carlo_kernel(delta, w) -> (...)``: the Monte Carlo
                                           estimate (1/R) Σ_r cos(w_rᵀΔ) for Δ (..., d), w (d, R)
``check_random_fourier_features``          ``random_fourier_features(x, w, b) -> (..., R)``:
                                           z(x) = √(2/R) cos(xw + b)
``check_random_fourier_features_cos_sin``  ``random_fourier_features_cos_sin(x, w) -> (..., 2R')``:
                                           z(x) = [cos(xw), sin(xw)] / √R' for w (d, R')
``check_positive_softmax_features``        ``positive_softmax_features(x, w) -> (..., m)``:
                                           φ(x) = exp(xw − ‖x‖²/2) / √m
=========================================  =============================================================
"""

from __future__ import annotations

import math

import torch

from .. import random_features as ref
from .checking import case, compare

__all__ = [
    "check_monte_carlo_kernel",
    "check_random_fourier_features",
    "check_random_fourier_features_cos_sin",
    "check_positive_softmax_features",
]


def _w(d: int, R: int) -> torch.Tensor:
    return torch.randn(d, R, dtype=torch.float64)


def _b(R: int) -> torch.Tensor:
    return 2 * math.pi * torch.rand(R, dtype=torch.float64)


# ----- the Monte Carlo kernel estimate ------------------------------------------------------------------------

check_monte_carlo_kernel = compare(
    "monte_carlo_kernel",
    ref.monte_carlo_kernel,
    lambda: [
        case(torch.tensor([0.5, -1.0], dtype=torch.float64), _w(2, 8), why="one difference Δ in d = 2, R = 8"),
        case(torch.zeros(3, dtype=torch.float64), _w(3, 5), why="Δ = 0: every cos is 1, so the estimate is 1"),
        case(torch.randn(4, 3, dtype=torch.float64), _w(3, 16), why="a batch of 4 differences, R = 16"),
        case(torch.randn(2, 5, 3, dtype=torch.float64), _w(3, 7), why="a (2, 5) batch of differences"),
    ],
    mistakes=[
        (
            lambda delta, w: torch.cos(delta @ w).sum(-1),
            "Average the R terms (divide by R), do not add them: the estimate of k(0) must be 1.",
        ),
        (
            lambda delta, w: torch.exp(-((delta @ w) ** 2) / 2).mean(-1),
            "The estimate averages cos(w_rᵀΔ), the real part of exp(i w_rᵀΔ); it does not use the kernel itself.",
        ),
        (
            lambda delta, w: torch.sin(delta @ w).mean(-1),
            "Take the real part of exp(i w_rᵀΔ), which is cos(w_rᵀΔ); sin is the imaginary part.",
        ),
        (
            lambda delta, w: 2 * torch.cos(delta @ w).mean(-1),
            "No factor 2 here: E[cos(wᵀΔ)] is already k(Δ); the √2 belongs to the features with a phase b.",
        ),
        (
            lambda delta, w: torch.cos(delta @ w).mean(0),
            "Average over the R frequencies (the last dimension of Δw), not over the differences.",
        ),
    ],
    hint="k(Δ) ≈ (1/R) Σ_r cos(w_rᵀΔ): Δ @ w has shape (..., R); take the cos and the mean over the last axis.",
    what="The estimate",
)


# ----- the cos feature map -------------------------------------------------------------------------------------

check_random_fourier_features = compare(
    "random_fourier_features",
    ref.random_fourier_features,
    lambda: [
        case(torch.tensor([[0.3, -0.2]], dtype=torch.float64), _w(2, 4), _b(4), why="one point, R = 4"),
        case(torch.randn(5, 3, dtype=torch.float64), _w(3, 10), _b(10), why="5 points in d = 3, R = 10"),
        case(torch.randn(2, 4, 3, dtype=torch.float64), _w(3, 6), _b(6), why="a (2, 4) batch of points"),
        case(torch.randn(3, 2, dtype=torch.float64), _w(2, 1), _b(1), why="a single feature, R = 1"),
    ],
    mistakes=[
        (
            lambda x, w, b: torch.cos(x @ w + b) / math.sqrt(w.shape[1]),
            "The factor is √(2/R), not 1/√R: without the 2, z(x)ᵀz(y) estimates k(Δ)/2.",
        ),
        (
            lambda x, w, b: math.sqrt(2) * torch.cos(x @ w + b),
            "Divide by √R: z stacks R features z_w(x)/√R, so that z(x)ᵀz(y) is an average, not a sum.",
        ),
        (
            lambda x, w, b: math.sqrt(2 / w.shape[1]) * torch.cos(x @ w),
            "Add the phase b inside the cos: cos(xw + b). Without it the estimate is biased.",
        ),
        (
            lambda x, w, b: math.sqrt(2 / w.shape[1]) * torch.sin(x @ w + b),
            "The feature is a cos, not a sin (with a uniform phase the two give the same kernel, but the map "
            "asked for is √(2/R) cos(xw + b)).",
        ),
        (
            lambda x, w, b: math.sqrt(2 / w.shape[1]) * torch.cos(x @ w) + b,
            "The phase goes inside the cos: cos(xw + b), not cos(xw) + b.",
        ),
    ],
    hint="z(x) = √(2/R) cos(x @ w + b), with R = w.shape[1] (the number of columns of w).",
    what="The feature matrix",
)


# ----- the [cos, sin] variant -----------------------------------------------------------------------------------

check_random_fourier_features_cos_sin = compare(
    "random_fourier_features_cos_sin",
    ref.random_fourier_features_cos_sin,
    lambda: [
        case(torch.tensor([[0.3, -0.2]], dtype=torch.float64), _w(2, 3), why="one point, R' = 3 frequencies"),
        case(torch.randn(5, 3, dtype=torch.float64), _w(3, 8), why="5 points in d = 3, R' = 8"),
        case(torch.randn(2, 4, 3, dtype=torch.float64), _w(3, 5), why="a (2, 4) batch of points"),
    ],
    mistakes=[
        (
            lambda x, w: torch.cat([torch.cos(x @ w), torch.sin(x @ w)], -1) / math.sqrt(2 * w.shape[1]),
            "Divide by √R' (R' = w.shape[1] frequencies), not by √(2R'): each frequency contributes cos² + sin² "
            "terms whose sum estimates k(Δ), so z(x)ᵀz(y) = (1/R') Σ_r cos(w_rᵀΔ).",
        ),
        (
            lambda x, w: torch.cat([torch.cos(x @ w), torch.sin(x @ w)], -1),
            "Divide by √R' so that z(x)ᵀz(y) averages the R' terms instead of adding them.",
        ),
        (
            lambda x, w: torch.stack([torch.cos(x @ w), torch.sin(x @ w)], -1).flatten(-2) / math.sqrt(w.shape[1]),
            "Put all the cosines first, then all the sines: [cos(xw), sin(xw)] (torch.cat on the last axis), "
            "not cos and sin interleaved.",
        ),
        (
            lambda x, w: torch.cos(x @ w) / math.sqrt(w.shape[1]),
            "The map has 2R' features: the sines as well as the cosines, [cos(xw), sin(xw)].",
        ),
    ],
    hint="z(x) = [cos(x @ w), sin(x @ w)] / √R', concatenated on the last axis, with R' = w.shape[1].",
    what="The feature matrix",
)


# ----- positive random features for the softmax kernel --------------------------------------------------------

check_positive_softmax_features = compare(
    "positive_softmax_features",
    ref.positive_softmax_features,
    lambda: [
        case(torch.tensor([[0.3, -0.2]], dtype=torch.float64), _w(2, 4), why="one point, m = 4"),
        case(0.5 * torch.randn(5, 3, dtype=torch.float64), _w(3, 10), why="5 points in d = 3, m = 10"),
        case(0.5 * torch.randn(2, 4, 3, dtype=torch.float64), _w(3, 6), why="a (2, 4) batch of points"),
    ],
    mistakes=[
        (
            lambda x, w: torch.exp(x @ w) / math.sqrt(w.shape[1]),
            "Subtract ‖x‖²/2 in the exponent: E[exp(wᵀx)] = exp(‖x‖²/2), so without it the estimate of exp(xᵀy) "
            "is too large by exp((‖x‖² + ‖y‖²)/2).",
        ),
        (
            lambda x, w: torch.exp(x @ w + (x * x).sum(-1, keepdim=True) / 2) / math.sqrt(w.shape[1]),
            "Subtract ‖x‖²/2, do not add it.",
        ),
        (
            lambda x, w: torch.exp(x @ w - x.norm(dim=-1, keepdim=True) / 2) / math.sqrt(w.shape[1]),
            "The correction is the squared norm: ‖x‖²/2 = (x * x).sum(-1) / 2, not ‖x‖/2.",
        ),
        (
            lambda x, w: torch.exp(x @ w - (x * x).sum(-1, keepdim=True) / 2),
            "Divide by √m so that φ(x)ᵀφ(y) averages the m terms.",
        ),
        (
            lambda x, w: torch.exp(x @ w - (x * x).sum(-1, keepdim=True) / 2) / w.shape[1],
            "Divide each feature by √m, not by m: the product of two features then carries 1/m.",
        ),
        (
            lambda x, w: torch.exp(x @ w - (x * x).sum() / 2) / math.sqrt(w.shape[1]),
            "Each point x has its own ‖x‖²: sum the squares over the last axis only, with keepdim=True.",
        ),
    ],
    hint="φ(x) = exp(x @ w − ‖x‖²/2) / √m, with ‖x‖² = (x * x).sum(-1, keepdim=True) and m = w.shape[1].",
    what="The feature matrix",
)
