"""Figures for chapters 2 and 3: the two tables of the word-embedding LM, 2-D projections, loss curves.

Every function draws on the ``ax`` it is given (or a new one), labels both axes, sets a title and returns
the :class:`matplotlib.axes.Axes`.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes

from ..validation import describe, require_int
from .figures import _as_numpy as _numpy

__all__ = [
    "plot_lm_tables",
    "pca_2d",
    "plot_projection",
    "plot_loss",
    "plot_word2vec_network",
]


def plot_lm_tables(
    E: torch.Tensor,
    U: torch.Tensor,
    tokens: Sequence[str],
    *,
    prev: str | None = None,
    ax: Axes | None = None,
    title: str = "Previous-token vectors E and next-token vectors U",
) -> Axes:
    """Draw the rows of the ``(|V|, 2)`` tables ``E`` (circles) and ``U`` (squares), each labelled by its token.

    With ``prev`` set, ``e_prev`` is drawn as an arrow from the origin and each ``u_j`` is sized and shaded
    by the model's ``p(next = j | prev) = softmax(U e_prev)_j``, as in the lecture notes' figure: the next
    tokens the model favours are the ``u_j`` with the largest dot product with ``e_prev``.
    """
    v, u = _numpy(E, "E"), _numpy(U, "U")
    for arr, name in ((v, "E"), (u, "U")):
        if arr.ndim != 2 or arr.shape[1] != 2:
            raise ValueError(
                f"{name} must have shape (N, 2) to be drawn, got {arr.shape}"
            )
    if v.shape != u.shape:
        raise ValueError(
            f"E and U must have the same shape, got {v.shape} and {u.shape}"
        )
    if len(tokens) != v.shape[0]:
        raise ValueError(
            f"tokens must have one entry per row ({v.shape[0]}), got {len(tokens)}"
        )
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 6))
    sizes = np.full(u.shape[0], 60.0)
    alphas = np.full(u.shape[0], 0.9)
    if prev is not None:
        if prev not in tokens:
            raise ValueError(
                f"prev must be one of the tokens {list(tokens)}, got {prev!r}"
            )
        i = list(tokens).index(prev)
        scores = u @ v[i]
        p = np.exp(scores - scores.max())
        p /= p.sum()
        sizes = 30.0 + 400.0 * p
        alphas = 0.25 + 0.75 * p / p.max()
        ax.annotate(
            "",
            xy=tuple(v[i]),
            xytext=(0, 0),
            arrowprops={"arrowstyle": "->", "color": "C0", "lw": 1.5},
        )
        title = f"{title}\n(U sized by p(next | prev = {prev!r}))"
    ax.scatter(
        v[:, 0],
        v[:, 1],
        marker="o",
        s=60,
        color="C0",
        label="E (previous token)",
        zorder=3,
    )
    colours = np.tile(matplotlib.colors.to_rgba("C1"), (u.shape[0], 1))
    colours[:, 3] = alphas
    ax.scatter(u[:, 0], u[:, 1], marker="s", s=sizes, c=colours, zorder=3)
    # the legend's entry
    ax.scatter([], [], marker="s", s=60, color="C1", label="U (next token)")
    for (x, y), t in zip(v, tokens, strict=True):
        ax.annotate(
            str(t),
            (x, y),
            xytext=(4, 4),
            textcoords="offset points",
            color="C0",
            fontsize=10,
        )
    for (x, y), t in zip(u, tokens, strict=True):
        ax.annotate(
            str(t),
            (x, y),
            xytext=(4, -12),
            textcoords="offset points",
            color="C1",
            fontsize=10,
        )
    ax.axhline(0, color="0.85", lw=0.8, zorder=0)
    ax.axvline(0, color="0.85", lw=0.8, zorder=0)
    ax.set_xlabel("dimension 1")
    ax.set_ylabel("dimension 2")
    ax.set_title(title)
    ax.legend(loc="best", fontsize=9)
    ax.set_aspect("equal", adjustable="datalim")
    return ax


def pca_2d(vectors: torch.Tensor) -> torch.Tensor:
    """Project ``(N, D)`` rows onto their first two principal components: ``(N, 2)``.

    Centres the rows and takes the top two right singular vectors of the centred matrix (an exact SVD,
    so the result is deterministic; each component's sign is fixed so its largest entry is positive).
    """
    if not isinstance(vectors, torch.Tensor):
        raise TypeError(f"vectors must be a torch.Tensor, got {describe(vectors)}")
    if vectors.ndim != 2 or vectors.shape[0] < 2 or vectors.shape[1] < 2:
        raise ValueError(
            f"vectors must have shape (N, D) with N, D >= 2, got {tuple(vectors.shape)}"
        )
    x = vectors.detach().to(torch.float64)
    x = x - x.mean(dim=0)
    _, _, vh = torch.linalg.svd(x, full_matrices=False)
    comps = vh[:2]
    signs = torch.sign(comps.gather(1, comps.abs().argmax(dim=1, keepdim=True)))
    return x @ (comps * signs).T


def plot_projection(
    vectors: torch.Tensor,
    words: Sequence[str],
    *,
    ax: Axes | None = None,
    title: str = "Word vectors projected on their first two principal components",
    groups: Sequence[int] | None = None,
) -> Axes:
    """Scatter the 2-D PCA projection (:func:`pca_2d`) of ``vectors`` with each point labelled by its word.

    ``groups`` (one int per word) colours the points, e.g. to show countries and capitals apart.
    """
    if len(words) != vectors.shape[0]:
        raise ValueError(
            f"words must have one entry per row ({vectors.shape[0]}), got {len(words)}"
        )
    p = pca_2d(vectors).numpy()
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 6))
    colours = [f"C{g % 10}" for g in groups] if groups is not None else "C0"
    ax.scatter(p[:, 0], p[:, 1], c=colours, s=25, zorder=3)
    for (x, y), w in zip(p, words, strict=True):
        ax.annotate(
            str(w), (x, y), xytext=(3, 3), textcoords="offset points", fontsize=9
        )
    ax.set_xlabel("principal component 1")
    ax.set_ylabel("principal component 2")
    ax.set_title(title)
    return ax


def plot_loss(
    history: Sequence[float] | torch.Tensor,
    *,
    ax: Axes | None = None,
    title: str = "Training loss",
    xlabel: str = "step",
    ylabel: str = "loss",
    smooth: int | None = None,
    label: str | None = None,
) -> Axes:
    """Plot a loss history; ``smooth = w`` adds its moving average over ``w`` steps (for noisy losses)."""
    h = _numpy(history, "history").ravel()
    if h.size == 0:
        raise ValueError("history is empty: nothing to plot")
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    steps = np.arange(1, h.size + 1)
    if smooth is not None and smooth > 1 and h.size >= smooth:
        ax.plot(steps, h, color="0.75", lw=0.8, label=f"{label or 'loss'} (raw)")
        avg = np.convolve(h, np.ones(smooth) / smooth, mode="valid")
        ax.plot(
            steps[smooth - 1 :],
            avg,
            color="C0",
            lw=1.5,
            label=f"{label or 'loss'} (mean of {smooth})",
        )
        ax.legend(fontsize=9)
    else:
        ax.plot(steps, h, color="C0", lw=1.5, label=label)
        if label:
            ax.legend(fontsize=9)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return ax


def plot_word2vec_network(
    words: Sequence[str],
    centre: str,
    *,
    hidden: int = 3,
    probabilities: Sequence[float] | torch.Tensor | None = None,
    ax: Axes | None = None,
    title: str = "The skip-gram network: one-hot in, hidden layer, softmax out",
) -> Axes:
    """Draw word2vec as a network: a one-hot input layer, a linear hidden layer of ``hidden`` units, a softmax.

    The input layer has one unit per word of ``words`` (the vocabulary), holding the one-hot vector of
    ``centre``; the weights from input to hidden are the ``(|V|, d)`` input table ``E``, so the hidden layer
    is ``h = E^T 1_c = e_c``, the row of the centre word (only the edges from the active unit carry a signal
    and are drawn dark). The weights from hidden to output are the ``(|V|, d)`` output table ``U``: the
    output layer holds the scores ``U h`` and, after a softmax, ``p(o | c)``. ``probabilities`` (one per
    word), if given, are drawn as bars next to the output units.
    """
    words = list(words)
    if len(words) < 2:
        raise ValueError(
            f"words must hold at least 2 words (the vocabulary), got {len(words)}"
        )
    if centre not in words:
        raise ValueError(f"centre must be one of the words {words}, got {centre!r}")
    require_int(hidden, "hidden", low=1, why="the width d")
    p = None
    if probabilities is not None:
        p = _numpy(probabilities, "probabilities").ravel()
        if p.size != len(words):
            raise ValueError(
                f"probabilities must have one entry per word ({len(words)}), got {p.size}"
            )
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.45 * len(words) + 2.5))
    n = len(words)
    active = words.index(centre)
    xs = (0.0, 7.0, 14.0)
    y_io = np.linspace(n - 1, 0, n)
    y_h = np.linspace(
        (n - 1) / 2 + (hidden - 1) / 2, (n - 1) / 2 - (hidden - 1) / 2, hidden
    )
    radius = 0.3
    for i, y in enumerate(y_io):  # input -> hidden: E
        for yh in y_h:
            on = i == active
            ax.plot(
                [xs[0], xs[1]],
                [y, yh],
                color="C0" if on else "0.85",
                lw=1.6 if on else 0.6,
                zorder=1,
            )
    for yh in y_h:  # hidden -> output: U
        for y in y_io:
            ax.plot([xs[1], xs[2]], [yh, y], color="C1", lw=0.6, alpha=0.6, zorder=1)
    for i, (y, w) in enumerate(zip(y_io, words, strict=True)):
        on = i == active
        ax.add_patch(
            matplotlib.patches.Circle(
                (xs[0], y),
                radius,
                facecolor="C0" if on else "white",
                edgecolor="0.2",
                zorder=2,
            )
        )
        ax.text(
            xs[0],
            y,
            "1" if on else "0",
            ha="center",
            va="center",
            fontsize=9,
            color="white" if on else "0.3",
        )
        ax.text(
            xs[0] - 0.5,
            y,
            w,
            ha="right",
            va="center",
            fontsize=12,
            fontweight="bold" if on else "normal",
        )
        ax.add_patch(
            matplotlib.patches.Circle(
                (xs[2], y), radius, facecolor="#fde0c5", edgecolor="0.2", zorder=2
            )
        )
        ax.text(xs[2] + 0.5, y, w, ha="left", va="center", fontsize=12)
        if p is not None:
            ax.barh(
                y, 2.5 * float(p[i]), height=0.5, left=xs[2] + 4.3, color="C1", zorder=2
            )
            ax.text(
                xs[2] + 4.4 + 2.5 * float(p[i]),
                y,
                f"{float(p[i]):.2f}",
                va="center",
                fontsize=10,
            )
    for yh in y_h:
        ax.add_patch(
            matplotlib.patches.Circle(
                (xs[1], yh), radius, facecolor="#d8e8f5", edgecolor="0.2", zorder=2
            )
        )
    top = n - 1 + 0.9
    ax.text(
        xs[0],
        top,
        f"input: one-hot $\\mathbf{{1}}_c$\n({n} = $|\\mathcal{{V}}|$ units)",
        ha="center",
        fontsize=11,
    )
    ax.text(
        xs[1],
        top,
        f"hidden: $h = E^\\top \\mathbf{{1}}_c = e_c$\n({hidden} = $d$ units, no activation)",
        ha="center",
        fontsize=11,
    )
    ax.text(
        xs[2],
        top,
        "output: scores $U h$,\nthen softmax $p(o \\mid c)$",
        ha="center",
        fontsize=11,
    )
    bottom = -1.0
    ax.text(
        (xs[0] + xs[1]) / 2,
        bottom,
        "weights $E$ ($|\\mathcal{V}| \\times d$)",
        ha="center",
        color="C0",
        fontsize=12,
    )
    ax.text(
        (xs[1] + xs[2]) / 2,
        bottom,
        "weights $U$ ($|\\mathcal{V}| \\times d$)",
        ha="center",
        color="C1",
        fontsize=12,
    )
    ax.set_xlim(xs[0] - 4.4, xs[2] + (7.8 if p is not None else 3.2))
    ax.set_ylim(bottom - 0.6, top + 1.3)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_xlabel("input layer  →  hidden layer  →  output layer")
    ax.set_ylabel("one unit per word")
    ax.set_title(title)
    return ax
