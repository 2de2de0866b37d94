"""Figures for chapters 4–5: attention maps; and the cost of attention as the sequence grows (chapters 4, 8–10)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes

from ..benchmarking import AttentionMeasurement, fit_loglog_slope
from ..validation import (
    check_labels,
    describe,
    require_int,
)

__all__ = ["plot_attention", "plot_attention_heads", "plot_attention_cost"]


def _as_matrix(weights: Any, name: str = "weights") -> np.ndarray:
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu().to(torch.float64).numpy()
    if not isinstance(weights, np.ndarray):
        raise TypeError(
            f"{name} must be a torch.Tensor or numpy array, got {describe(weights)}"
        )
    return weights


def plot_attention(
    weights: torch.Tensor | np.ndarray,
    query_tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    title: str = "Attention weights",
    annotate: bool | None = None,
    cmap: str = "Blues",
    colorbar: bool = True,
) -> Axes:
    """Draw an attention map: row ``i`` shows how query ``i`` spreads its attention over the keys.

    Args:
        weights: ``(n_q, n_k)`` attention weights (rows sum to one).
        query_tokens: ``n_q`` labels for the rows (the tokens that attend); default ``0 … n_q - 1``.
        key_tokens: ``n_k`` labels for the columns (the tokens attended to); default ``query_tokens`` when
            the matrix is square, else ``0 … n_k - 1``.
        ax: axes to draw on (default: a new figure).
        title: the title.
        annotate: write each weight in its cell (default: when the matrix is at most 12 × 12).
        cmap: matplotlib colour map.
        colorbar: add a colour bar.

    Returns:
        The :class:`matplotlib.axes.Axes` drawn on.
    """
    w = _as_matrix(weights)
    if w.ndim != 2:
        raise ValueError(
            f"weights must have shape (n_queries, n_keys), got shape {tuple(w.shape)}"
        )
    n_q, n_k = w.shape
    if key_tokens is None and query_tokens is not None and n_q == n_k:
        key_tokens = query_tokens
    for name, labels, size in (
        ("query_tokens", query_tokens, n_q),
        ("key_tokens", key_tokens, n_k),
    ):
        if labels is not None:
            check_labels(labels, name, size, f"to match weights of shape {w.shape}")
    if ax is None:
        _, ax = plt.subplots(
            figsize=(1.0 + 0.5 * max(n_k, 4), 0.8 + 0.45 * max(n_q, 4))
        )
    image = ax.imshow(
        w, cmap=cmap, vmin=0.0, vmax=max(1e-12, float(np.nanmax(w))) if w.size else 1.0
    )
    ax.set_xticks(
        range(n_k),
        labels=[str(t) for t in key_tokens] if key_tokens is not None else range(n_k),
    )
    ax.set_yticks(
        range(n_q),
        labels=[str(t) for t in query_tokens]
        if query_tokens is not None
        else range(n_q),
    )
    ax.tick_params(axis="x", labelrotation=45 if key_tokens is not None else 0)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title(title)
    if annotate is None:
        annotate = n_q <= 12 and n_k <= 12
    if annotate:
        top = float(np.nanmax(w)) if w.size else 1.0
        for i in range(n_q):
            for j in range(n_k):
                color = "white" if w[i, j] > 0.6 * top else "black"
                ax.text(
                    j,
                    i,
                    f"{w[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color=color,
                )
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="weight")
    return ax


def plot_attention_heads(
    weights: torch.Tensor | np.ndarray,
    query_tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    *,
    ncols: int = 4,
    title: str = "Attention weights per head",
) -> np.ndarray:
    """Draw one attention map per head, side by side.

    Args:
        weights: ``(n_heads, n_q, n_k)`` per-head weights (e.g. ``MultiHeadAttention.weights(x)[0]`` for
            the first sequence of a batch).
        query_tokens, key_tokens: as in :func:`plot_attention`.
        ncols: heads per row of the grid.
        title: the figure's title.

    Returns:
        The array of :class:`~matplotlib.axes.Axes`, one per head (unused cells are hidden).
    """
    w = _as_matrix(weights)
    if w.ndim != 3:
        raise ValueError(
            f"weights must have shape (n_heads, n_queries, n_keys), got shape {tuple(w.shape)}"
        )
    n_heads, n_q, n_k = w.shape
    ncols = max(1, min(ncols, n_heads))
    nrows = -(-n_heads // ncols)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(
            ncols * (0.8 + 0.35 * max(n_k, 4)),
            nrows * (0.9 + 0.35 * max(n_q, 4)),
        ),
        squeeze=False,
    )
    for h, ax in enumerate(axes.flat):
        if h >= n_heads:
            ax.set_visible(False)
            continue
        plot_attention(
            w[h],
            query_tokens,
            key_tokens,
            ax=ax,
            title=f"head {h}",
            annotate=False,
            colorbar=False,
        )
    fig.suptitle(title)
    fig.tight_layout()
    return axes.flatten()[:n_heads]


_GUIDE_STYLES = {1: "k:", 2: "k--"}


def plot_attention_cost(
    rows: Sequence[AttentionMeasurement],
    *,
    names: Sequence[str] | None = None,
    guides: Sequence[int] = (1, 2),
    slopes: bool = True,
    axes: Sequence[Axes] | None = None,
    title: str = "The cost of attention against the sequence length",
) -> Sequence[Axes]:
    """Draw time and peak memory against the sequence length n (log–log), one line per implementation.

    On log–log axes a cost ``∝ n^p`` is a straight line of slope ``p``: the dashed guides ``∝ n^p`` (one per
    power in ``guides``, through the geometric middle of the values drawn) show what linear and quadratic
    growth look like, and with ``slopes`` the legend gives each line's fitted slope
    (:func:`companion.benchmarking.fit_loglog_slope`). Values of 0 (memory not measured) are not drawn.

    Args:
        rows: measurements from :func:`companion.benchmarking.measure_attention`.
        names: the implementations to draw, in this order; default all, in the order of ``rows``.
        guides: the powers p of the guide lines ``∝ n^p``; ``()`` for none.
        slopes: write each line's fitted slope in the legend.
        axes: two axes (time, memory); default a new figure with two panels.
        title: the figure's title.

    Returns:
        The two axes.
    """
    if (
        not isinstance(rows, Sequence)
        or not rows
        or not all(isinstance(r, AttentionMeasurement) for r in rows)
    ):
        raise TypeError(
            f"rows must be a non-empty list of AttentionMeasurement (from measure_attention), got {describe(rows)}"
        )
    measured = list(dict.fromkeys(r.name for r in rows))
    names = measured if names is None else list(names)
    if not names or any(name not in measured for name in names):
        raise ValueError(
            f"names must be some of the measured implementations {measured}, got {names}"
        )
    guides = [require_int(p, "guide", low=1) for p in guides]  # powers of n
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    elif len(axes) != 2:
        raise ValueError(f"axes must be two axes (time, memory), got {len(axes)}")
    fig = axes[0].figure
    ns = sorted({r.n for r in rows if r.name in names})
    panels = (
        (axes[0], "milliseconds", "time per call (ms)"),
        (axes[1], "peak_mib", "peak memory (MiB)"),
    )
    for ax, attr, label in panels:
        values = []
        for name in names:
            mine = sorted(
                (r for r in rows if r.name == name and getattr(r, attr) > 0),
                key=lambda r: r.n,
            )
            if not mine:
                continue
            xs, ys = [r.n for r in mine], [getattr(r, attr) for r in mine]
            values += ys
            slope = (
                f", slope {fit_loglog_slope(xs, ys).slope:.2f}"
                if slopes and len(mine) > 1
                else ""
            )
            ax.plot(xs, ys, marker="o", label=f"{name}{slope}")
        if values and len(ns) > 1:
            middle, n_mid = (min(values) * max(values)) ** 0.5, (ns[0] * ns[-1]) ** 0.5
            for power in guides:
                guide = [middle * (n / n_mid) ** power for n in ns]
                guide_label = (
                    "∝ n" if power == 1 else "∝ n²" if power == 2 else f"∝ n^{power}"
                )
                ax.plot(
                    ns,
                    guide,
                    _GUIDE_STYLES.get(power, "k-."),
                    linewidth=1,
                    label=guide_label,
                )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.minorticks_off()
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(label)
        ax.set_title(label.split(" (")[0])
        if ax.get_lines():
            ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return axes
