"""Chapter 9's figures: the H-matrix partition, singular values that fall (or not), an attention matrix's spectrum.

The cost figure (time and memory against n) is :func:`companion.plotting.attention.plot_attention_cost`, given
the rows of :func:`companion.benchmarking.measure_attention` with :func:`companion.fmmformer.fmmformer_implementations`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.patches import Rectangle

from ..fmmformer import AttentionSpectrum
from ..nbody import HBlock
from ..validation import require_number

__all__ = [
    "NEAR_COLOUR",
    "FAR_COLOUR",
    "plot_hmatrix_partition",
    "plot_singular_values",
    "plot_attention_spectrum",
]

NEAR_COLOUR = "#d62728"
"""Near blocks (computed directly, dense)."""
FAR_COLOUR = "#aec7e8"
"""Far blocks (well-separated, low rank)."""


def _axes(ax: Axes | None, size: tuple[float, float]) -> Axes:
    if ax is None:
        _, ax = plt.subplots(figsize=size)
    return ax


def plot_hmatrix_partition(
    blocks: Sequence[HBlock],
    ranks: Sequence[int] | None = None,
    *,
    ax: Axes | None = None,
    title: str = "H-matrix partition: near blocks dense, far blocks low rank",
) -> Axes:
    """Draw the blocks of :func:`companion.nbody.hmatrix_partition` as the matrix they tile (row 0 at the top).

    Near blocks are red, far blocks light blue; with ``ranks`` (e.g. :func:`companion.nbody.hmatrix_ranks`) each far
    block large enough to hold text shows its rank.
    """
    if not blocks or not all(isinstance(b, HBlock) for b in blocks):
        raise TypeError(
            "blocks must be a non-empty list of HBlock (from companion.nbody.hmatrix_partition)"
        )
    if ranks is not None and len(ranks) != len(blocks):
        raise ValueError(
            f"ranks must give one rank per block ({len(blocks)}), got {len(ranks)}"
        )
    ax = _axes(ax, (5.2, 5.2))
    n = max(max(b.r1, b.c1) for b in blocks)
    for i, b in enumerate(blocks):
        colour = NEAR_COLOUR if b.kind == "near" else FAR_COLOUR
        ax.add_patch(
            Rectangle(
                (b.c0, b.r0),
                b.c1 - b.c0,
                b.r1 - b.r0,
                facecolor=colour,
                edgecolor="k",
                linewidth=0.5,
            )
        )
        if ranks is not None and b.kind == "far" and min(b.shape) >= n / 16:
            ax.text(
                (b.c0 + b.c1) / 2,
                (b.r0 + b.r1) / 2,
                str(ranks[i]),
                ha="center",
                va="center",
                fontsize=8,
            )
    ax.set_xlim(0, n)
    ax.set_ylim(n, 0)
    ax.set_aspect("equal")
    ax.set_xlabel("column j (key / source)")
    ax.set_ylabel("row i (query / target)")
    ax.set_title(title)
    ax.legend(
        handles=[
            Rectangle((0, 0), 1, 1, color=NEAR_COLOUR),
            Rectangle((0, 0), 1, 1, color=FAR_COLOUR),
        ],
        labels=[
            "near (dense)",
            "far (low rank)" + (", rank shown" if ranks is not None else ""),
        ],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12),
        ncol=2,
        fontsize=8,
    )
    return ax


def plot_singular_values(
    spectra: Mapping[str, torch.Tensor],
    *,
    ax: Axes | None = None,
    eps: float | None = None,
    title: str = "Singular values",
    ylabel: str = "σ_i / σ_1",
    floor: float | None = None,
) -> Axes:
    """One curve per name: the singular values (largest first) against their index i, on a log scale.

    ``eps`` draws a horizontal line at that tolerance: the numerical rank is where a curve crosses it.
    ``floor`` draws values below it at the floor and starts the axis just under it, so that a few exact zeros
    (rounding noise of order 1e-300) do not squeeze the informative range into the top of the plot.
    """
    if not spectra or not all(
        isinstance(s, torch.Tensor) and s.ndim == 1 for s in spectra.values()
    ):
        raise TypeError("spectra must map names to 1-D tensors of singular values")
    ax = _axes(ax, (6.0, 4.0))
    floor = (
        None
        if floor is None
        else require_number(floor, "floor", low=0, low_open=True, finite=False)
    )
    lowest = torch.finfo(torch.float64).tiny if floor is None else float(floor)
    for name, sigma in spectra.items():
        # exact zeros cannot be drawn on a log scale
        sigma = sigma.detach().double().cpu().clamp_min(lowest)
        ax.semilogy(torch.arange(1, len(sigma) + 1).numpy(), sigma.numpy(), label=name)
    if floor is not None:
        ax.set_ylim(bottom=lowest / 2)
    if eps is not None:
        ax.axhline(eps, color="k", linestyle=":", linewidth=1, label=f"ε = {eps:g}")
    ax.set_xlabel("index i")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return ax


def plot_attention_spectrum(
    spectrum: AttentionSpectrum,
    *,
    ax: Axes | None = None,
    eps: float | None = 1e-2,
    title: str | None = None,
    floor: float | None = 1e-6,
) -> Axes:
    """The spectrum of A and of A − band_b(A) (:func:`companion.fmmformer.attention_spectrum`) on one axis,
    values below ``floor`` drawn at the floor."""
    if not isinstance(spectrum, AttentionSpectrum):
        raise TypeError(
            f"spectrum must be an AttentionSpectrum (from attention_spectrum), got {type(spectrum).__name__}"
        )
    b = spectrum.bandwidth
    return plot_singular_values(
        {"A": spectrum.full, f"A − band_{b}(A)": spectrum.off_band},
        ax=ax,
        eps=eps,
        title=title or f"An attention matrix with and without its band (b = {b})",
        ylabel="σ_i / σ_1(A)",
        floor=floor,
    )
