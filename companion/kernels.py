"""Shift-invariant kernels and the frequencies Bochner's theorem pairs with them (chapter 10).

Notation. Inputs are rows: ``x`` of shape ``(N, d)`` (or ``(..., d)``), ``y`` of shape ``(M, d)``; their
difference is ``Δ = x − y``. A shift-invariant kernel is written ``k(Δ)``. Frequencies are the columns of
``w`` of shape ``(d, R)``, drawn from the density ``p(w)`` that Bochner's theorem pairs with the kernel;
phases ``b`` of shape ``(R,)`` are uniform on ``[0, 2π)``.

Bochner's theorem: a continuous shift-invariant kernel is positive definite iff ``k(Δ) = E_w[cos(wᵀΔ)]`` for a
probability density ``p(w)`` (up to a scale). The pairs used here (σ is the length scale):

=============  ==================================  ==========================================
kernel         k(Δ)                                p(w), each coordinate independent
=============  ==================================  ==========================================
``gaussian``   exp(−‖Δ‖² / (2σ²))                  normal, mean 0, standard deviation 1/σ
``laplace``    exp(−‖Δ‖₁ / σ)                      Cauchy, location 0, scale 1/σ
``cauchy``     ∏ⱼ 1 / (1 + Δⱼ² / σ²)               Laplace, location 0, scale 1/σ
=============  ==================================  ==========================================

:mod:`companion.random_features` builds random features from these frequencies, and re-exports the names
here.
"""

from __future__ import annotations

import math

import torch

from .validation import (
    check_pair,
    require_choice,
    require_floats,
    require_int,
    require_number,
)

__all__ = [
    "KERNELS",
    "gaussian_kernel",
    "laplace_kernel",
    "cauchy_kernel",
    "shift_invariant_kernel",
    "kernel_at",
    "sample_frequencies",
    "orthogonal_gaussian",
    "sample_phases",
]


KERNELS = ("gaussian", "laplace", "cauchy")
"""The shift-invariant kernels the module samples frequencies for (Bochner's pairs in the table above)."""


# ----------------------------------------------------------------------------------------------------
# Shift-invariant kernels (exact)


def gaussian_kernel(
    x: torch.Tensor, y: torch.Tensor, sigma: float = 1.0
) -> torch.Tensor:
    """k(x, y) = exp(−‖x − y‖² / (2σ²)) for x (N, d), y (M, d) -> (N, M); scikit-learn's γ is 1/(2σ²)."""
    x, y = check_pair(x, y, ndim=2)
    sigma = require_number(sigma, "sigma", low=0, low_open=True)
    # ‖x − y‖², (N, M)
    sq = (x * x).sum(-1)[:, None] + (y * y).sum(-1)[None, :] - 2 * x @ y.T
    return torch.exp(-sq.clamp_min(0) / (2 * sigma**2))


def laplace_kernel(
    x: torch.Tensor, y: torch.Tensor, sigma: float = 1.0
) -> torch.Tensor:
    """k(x, y) = exp(−‖x − y‖₁ / σ) for x (N, d), y (M, d) -> (N, M); scikit-learn's γ is 1/σ."""
    x, y = check_pair(x, y, ndim=2)
    sigma = require_number(sigma, "sigma", low=0, low_open=True)
    return torch.exp(-torch.cdist(x, y, p=1) / sigma)


def cauchy_kernel(x: torch.Tensor, y: torch.Tensor, sigma: float = 1.0) -> torch.Tensor:
    """k(x, y) = ∏ⱼ 1 / (1 + (xⱼ − yⱼ)² / σ²) for x (N, d), y (M, d) -> (N, M)."""
    x, y = check_pair(x, y, ndim=2)
    sigma = require_number(sigma, "sigma", low=0, low_open=True)
    delta = x[:, None, :] - y[None, :, :]  # (N, M, d)
    return torch.exp(-torch.log1p((delta / sigma) ** 2).sum(-1))


_KERNEL_FUNCTIONS = {
    "gaussian": gaussian_kernel,
    "laplace": laplace_kernel,
    "cauchy": cauchy_kernel,
}


def shift_invariant_kernel(
    x: torch.Tensor, y: torch.Tensor, kernel: str = "gaussian", sigma: float = 1.0
) -> torch.Tensor:
    """The kernel matrix K[i, j] = k(x_i − y_j) of one of :data:`KERNELS` for x (N, d), y (M, d) -> (N, M)."""
    return _KERNEL_FUNCTIONS[require_choice(kernel, "kernel", KERNELS)](x, y, sigma)


def _check_features_in(x: object, name: str) -> torch.Tensor:
    """``x (..., d)`` floating, with ``d >= 1``."""
    x = require_floats(x, name, "(..., d)", min_ndim=1)
    require_int(x.shape[-1], f"d (the last dimension of {name})", low=1)
    return x


def kernel_at(
    delta: torch.Tensor, kernel: str = "gaussian", sigma: float = 1.0
) -> torch.Tensor:
    """k(Δ) for differences Δ of shape (..., d) -> (...), for one of :data:`KERNELS`."""
    delta = _check_features_in(delta, "delta")
    kernel, sigma = (
        require_choice(kernel, "kernel", KERNELS),
        require_number(sigma, "sigma", low=0, low_open=True),
    )
    u = delta / sigma
    if kernel == "gaussian":
        return torch.exp(-(u * u).sum(-1) / 2)
    if kernel == "laplace":
        return torch.exp(-u.abs().sum(-1))
    return torch.exp(-torch.log1p(u * u).sum(-1))


# ----------------------------------------------------------------------------------------------------
# Sampling p(w) (Bochner) and the phases b


def orthogonal_gaussian(
    d: int,
    R: int,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """W (d, R) in blocks of d orthogonal columns, each with the norm of a N(0, I_d) vector (χ_d): w_r ~ N(0, I)."""
    d, R = require_int(d, "d", low=1), require_int(R, "R", low=1)
    n_blocks = math.ceil(R / d)
    q, r = torch.linalg.qr(
        torch.randn(n_blocks, d, d, generator=generator, dtype=torch.float64)
    )
    # sign fix: each q is uniform (Haar)
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))[:, None, :]
    # χ_d per column
    norms = torch.randn(n_blocks, d, d, generator=generator, dtype=torch.float64).norm(
        dim=1
    )
    # (n_blocks, d, d): orthogonal columns of χ_d lengths
    blocks = q * norms[:, None, :]
    return blocks.transpose(0, 1).reshape(d, n_blocks * d)[:, :R].to(dtype)


def sample_frequencies(
    d: int,
    R: int,
    kernel: str = "gaussian",
    sigma: float = 1.0,
    orthogonal: bool = False,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """R frequencies w_r ~ p(w) as the columns of W (d, R): N(0, σ⁻²I), Cauchy(0, 1/σ) or Laplace(0, 1/σ)."""
    d, R = require_int(d, "d", low=1), require_int(R, "R", low=1)
    kernel, sigma = (
        require_choice(kernel, "kernel", KERNELS),
        require_number(sigma, "sigma", low=0, low_open=True),
    )
    if orthogonal and kernel != "gaussian":
        raise ValueError(
            f"orthogonal frequencies are implemented for the gaussian kernel only, got kernel={kernel!r}"
        )
    if orthogonal:
        return orthogonal_gaussian(d, R, generator, dtype) / sigma
    if kernel == "gaussian":
        w = torch.randn(d, R, generator=generator, dtype=torch.float64)
    elif kernel == "laplace":  # standard Cauchy: tan(π(u − 1/2)), u ~ U(0, 1)
        w = torch.tan(
            math.pi * (torch.rand(d, R, generator=generator, dtype=torch.float64) - 0.5)
        )
    else:  # standard Laplace: the difference of two independent Exp(1) variables
        e = torch.empty(2, d, R, dtype=torch.float64).exponential_(generator=generator)
        w = e[0] - e[1]
    return (w / sigma).to(dtype)


def sample_phases(
    R: int, generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32
):
    """R phases b_r ~ U(0, 2π) -> (R,)."""
    R = require_int(R, "R", low=1)
    return (2 * math.pi * torch.rand(R, generator=generator, dtype=torch.float64)).to(
        dtype
    )
