"""The figures shared by the chapters (re-exported by :mod:`companion.plotting`)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes

from ..validation import describe

__all__ = ["plot_vectors_2d", "heatmap"]


def _as_numpy(
    x: torch.Tensor | np.ndarray | Sequence[Sequence[float]], name: str
) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().to(torch.float64).numpy()
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"{name} must be a tensor or an array of numbers, got {describe(x)}"
        ) from e


def plot_vectors_2d(
    points: torch.Tensor | np.ndarray,
    labels: Sequence[str],
    *,
    ax: Axes | None = None,
    title: str = "Vectors in the plane",
    arrows: bool = False,
    color: str = "C0",
    xlabel: str = "dimension 1",
    ylabel: str = "dimension 2",
) -> Axes:
    """Scatter ``(N, 2)`` points with a text label next to each; optionally draw them as arrows from 0."""
    p = _as_numpy(points, "points")
    if p.ndim != 2 or p.shape[1] != 2:
        raise ValueError(f"points must have shape (N, 2), got {p.shape}")
    if len(labels) != p.shape[0]:
        raise ValueError(
            f"labels must have one entry per point ({p.shape[0]}), got {len(labels)}"
        )
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 5))
    if arrows:
        for x, y in p:
            ax.annotate(
                "",
                xy=(x, y),
                xytext=(0, 0),
                arrowprops={"arrowstyle": "->", "color": color, "lw": 1.2},
            )
        ax.axhline(0, color="0.8", lw=0.8, zorder=0)
        ax.axvline(0, color="0.8", lw=0.8, zorder=0)
    ax.scatter(p[:, 0], p[:, 1], color=color, zorder=3)
    span = max(float(np.ptp(p[:, 0])), float(np.ptp(p[:, 1])), 1e-9)
    for (x, y), label in zip(p, labels, strict=True):
        ax.annotate(
            str(label), (x, y), xytext=(4, 4), textcoords="offset points", fontsize=10
        )
    lo, hi = p.min(axis=0), p.max(axis=0)
    if arrows:
        lo, hi = np.minimum(lo, 0), np.maximum(hi, 0)
    pad = 0.15 * span
    ax.set_xlim(lo[0] - pad, hi[0] + 2 * pad)
    ax.set_ylim(lo[1] - pad, hi[1] + pad)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_aspect("equal", adjustable="box")
    return ax


def heatmap(
    matrix: torch.Tensor | np.ndarray,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    cmap: str = "viridis",
    annotate: bool | None = None,
    fmt: str = "{:.2f}",
    vmin: float | None = None,
    vmax: float | None = None,
    colorbar: bool = True,
) -> Axes:
    """Draw a ``(R, C)`` matrix as a coloured grid with labelled rows and columns.

    ``annotate`` writes each value in its cell (default: when the matrix has at most 16 × 16 entries).
    """
    m = _as_numpy(matrix, "matrix")
    if m.ndim != 2:
        raise ValueError(f"matrix must be 2-D (R, C), got shape {m.shape}")
    rows, cols = m.shape
    for name, labels, n in (
        ("row_labels", row_labels, rows),
        ("col_labels", col_labels, cols),
    ):
        if labels is not None and len(labels) != n:
            raise ValueError(f"{name} must have {n} entries, got {len(labels)}")
    if ax is None:
        _, ax = plt.subplots(
            figsize=(max(3.0, 0.55 * cols + 1.5), max(2.5, 0.45 * rows + 1.0))
        )
    image = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    if row_labels is not None:
        ax.set_yticks(range(rows), labels=[str(t) for t in row_labels])
    if col_labels is not None:
        ax.set_xticks(
            range(cols), labels=[str(t) for t in col_labels], rotation=45, ha="right"
        )
    if annotate is None:
        annotate = rows <= 16 and cols <= 16
    if annotate:
        lo, hi = image.get_clim()
        middle = (lo + hi) / 2
        for i in range(rows):
            for j in range(cols):
                ax.text(
                    j,
                    i,
                    fmt.format(m[i, j]),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if m[i, j] < middle else "black",
                )
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return ax
