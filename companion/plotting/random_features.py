"""Figures for chapter 10: the kernel matrix and its random-feature approximations, and the error law."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..benchmarking import fit_loglog_slope
from ..random_features import (
    RandomFourierFeatures,
    kernel_approximation_error,
    shift_invariant_kernel,
)

__all__ = ["plot_kernel_approximations", "plot_error_vs_R"]


def plot_kernel_approximations(
    x: torch.Tensor,
    Rs: Sequence[int] = (10, 100, 1000),
    *,
    kernel: str = "gaussian",
    sigma: float = 1.0,
    variant: str = "cos",
    seed: int = 0,
    cmap: str = "viridis",
) -> Figure:
    """The seed's figure: the N × N kernel matrix K of x (N, d), then Z Zᵀ for each R, one colour scale.

    Each approximation's title gives R and its root-mean-square entry error against K; the colour scale runs
    from −0.2 (estimates can be negative) to 1, so a few entries at small R are clipped.
    """
    if len(Rs) == 0:
        raise ValueError(
            "Rs must list at least one number of features R, got an empty sequence"
        )
    k = shift_invariant_kernel(x, x, kernel, sigma)
    fig, axes = plt.subplots(
        1, len(Rs) + 1, figsize=(2.6 * (len(Rs) + 1), 2.9), constrained_layout=True
    )
    image = axes[0].imshow(k.double().numpy(), vmin=-0.2, vmax=1.0, cmap=cmap)
    axes[0].set_title(f"exact K ({kernel})")
    for ax, R in zip(axes[1:], Rs, strict=True):
        z = RandomFourierFeatures(x.shape[-1], R, kernel, sigma, variant, seed=seed).to(
            x.dtype
        )(x)
        k_hat = z @ z.T
        ax.imshow(k_hat.double().numpy(), vmin=-0.2, vmax=1.0, cmap=cmap)
        ax.set_title(
            f"$ZZ^T$, R = {R}\nRMS error {kernel_approximation_error(k, k_hat):.3f}"
        )
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(image, ax=list(axes), shrink=0.8)
    return fig


def plot_error_vs_R(
    Rs: Sequence[int],
    errors: torch.Tensor,
    *,
    ax: Axes | None = None,
    label: str = "random Fourier features",
    color: str | None = None,
) -> Axes:
    """Error against R on log-log axes: mean ± sd over seeds of errors (len(Rs), seeds), the fitted line and slope."""
    errors = torch.as_tensor(errors, dtype=torch.float64)
    slope, intercept, se = fit_loglog_slope(Rs, errors)
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.6), constrained_layout=True)
    r = np.asarray(Rs, dtype=float)
    mean, sd = (
        errors.mean(-1).numpy(),
        (errors.std(-1) if errors.shape[-1] > 1 else torch.zeros(len(Rs))).numpy(),
    )
    points = ax.errorbar(
        r, mean, yerr=sd, fmt="o", capsize=3, color=color, label=f"{label} (mean ± sd)"
    )
    fit = np.exp(intercept) * r**slope
    ax.plot(
        r,
        fit,
        "-",
        color=points.lines[0].get_color(),
        label=f"fit: slope {slope:.3f} ± {se:.3f}",
    )
    ax.plot(r, fit[0] * (r / r[0]) ** -0.5, ":", color="gray", label="slope −1/2")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of features R")
    ax.set_ylabel("RMS error of $ZZ^T$")
    ax.set_title("Kernel approximation error against R")
    ax.legend(fontsize="small")
    return ax
