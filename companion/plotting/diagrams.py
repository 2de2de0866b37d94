"""Diagrams for chapters 4–6, drawn with matplotlib: the data flow of attention and of multi-head attention,
the Transformer's encoder and decoder stacks, RoPE as a rotation in the plane, and GPT's pre-norm stack.

Each function draws on a new figure (or on ``ax``) and returns the axes, so the book can show it with
``plt.show()`` and the tests can inspect what was drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from ..validation import describe, require_int, require_number

__all__ = [
    "draw_attention_flow",
    "draw_multi_head_attention",
    "draw_transformer",
    "draw_rope_rotation",
    "draw_gpt",
]

# One colour per kind of operation, the same in every diagram.
COLOURS = {
    "input": "#e8e8e8",
    "query": "#f4b183",
    "key": "#9dc3e6",
    "value": "#a9d18e",
    "attention": "#ffd966",
    "norm": "#f8f4c4",
    "ffn": "#b4c7e7",
    "embed": "#f2c4de",
    "output": "#d9d2e9",
}


def _new_axes(ax: Axes | None, size: tuple[float, float]) -> Axes:
    if ax is None:
        _, ax = plt.subplots(figsize=size)
    elif not isinstance(ax, Axes):
        raise TypeError(f"ax must be a matplotlib Axes or None, got {describe(ax)}")
    return ax


def _box(
    ax: Axes,
    x: float,
    y: float,
    w: float,
    h: float,
    text: str,
    colour: str,
    size: float = 11,
) -> None:
    """A rounded box centred at (x, y)."""
    patch = FancyBboxPatch(
        (x - w / 2, y - h / 2),
        w,
        h,
        boxstyle="round,pad=0.02,rounding_size=0.12",
        fc=colour,
        ec="black",
        lw=1.2,
    )
    ax.add_patch(patch)
    ax.text(x, y, text, ha="center", va="center", fontsize=size)


def _arrow(
    ax: Axes, start: tuple[float, float], end: tuple[float, float], **kwargs: object
) -> None:
    style = {
        "arrowstyle": "-|>",
        "mutation_scale": 14,
        "lw": 1.3,
        "color": "black",
        "shrinkA": 0,
        "shrinkB": 0,
    }
    style.update(kwargs)
    ax.add_patch(FancyArrowPatch(start, end, **style))


def _finish(ax: Axes, width: float, height: float, title: str | None) -> Axes:
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_aspect("equal")
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=13)
    return ax


def draw_attention_flow(
    *, ax: Axes | None = None, title: str | None = "One attention head"
) -> Axes:
    """The data flow of one head: X → (W_Q, W_K, W_V) → Q, K, V → softmax(QKᵀ/√d_k) → weights · V → Z."""
    ax = _new_axes(ax, (10.5, 4.2))
    _box(ax, 1.0, 3.0, 1.5, 1.1, "$X$\n$n \\times d$", COLOURS["input"], 13)
    rows = [
        (5.0, "$W_Q$", "$Q = X W_Q^\\top$\n$n \\times d_k$", "query"),
        (3.0, "$W_K$", "$K = X W_K^\\top$\n$n \\times d_k$", "key"),
        (1.0, "$W_V$", "$V = X W_V^\\top$\n$n \\times d_v$", "value"),
    ]
    for y, matrix, result, kind in rows:
        _arrow(ax, (1.8, 3.0), (3.0, y))
        _box(ax, 3.45, y, 0.9, 0.8, matrix, COLOURS[kind], 13)
        _arrow(ax, (3.9, y), (4.5, y))
        _box(ax, 5.5, y, 2.0, 1.1, result, COLOURS[kind], 12)
    softmax = "$\\mathrm{softmax}\\left(\\frac{Q K^\\top}{\\sqrt{d_k}}\\right)$\nweights $n \\times n$"
    _box(ax, 8.4, 4.0, 2.4, 1.3, softmax, COLOURS["attention"], 12)
    _arrow(ax, (6.5, 5.0), (7.2, 4.4))
    _arrow(ax, (6.5, 3.0), (7.2, 3.6))
    _box(
        ax,
        11.0,
        2.2,
        2.5,
        1.1,
        "$Z$ = weights $\\cdot\\, V$\n$n \\times d_v$",
        COLOURS["output"],
        12,
    )
    _arrow(ax, (9.6, 3.35), (10.3, 2.75))
    _arrow(ax, (6.5, 1.0), (9.75, 1.9))
    ax.text(
        11.0,
        1.1,
        "row $i$ of $Z$: a weighted\naverage of the rows of $V$",
        ha="center",
        va="top",
        fontsize=10,
    )
    return _finish(ax, 12.3, 6, title)


def draw_multi_head_attention(
    n_heads: int = 3,
    *,
    ax: Axes | None = None,
    title: str | None = "Multi-head attention",
) -> Axes:
    """``n_heads`` heads side by side: each projects X with its own slices of W_Q, W_K, W_V and attends; the
    outputs are concatenated and mixed by W_O."""
    require_int(n_heads, "n_heads", low=1, high=6, why="what fits on the page")
    height = 1.6 * n_heads + 1.2
    ax = _new_axes(ax, (10, 0.75 * height + 0.7))
    middle = height / 2
    _box(ax, 0.9, middle, 1.3, 1.1, "$X$\n$n \\times d_{model}$", COLOURS["input"], 12)
    concat_x = 8.4
    for head in range(n_heads):
        y = height - 1.2 - 1.6 * head
        label = f"{head + 1}" if head < n_heads - 1 or n_heads < 3 else "h"
        _arrow(ax, (1.55, middle), (2.3, y))
        for dx, kind, letter in (
            (0, "query", "Q"),
            (0.95, "key", "K"),
            (1.9, "value", "V"),
        ):
            _box(
                ax,
                2.8 + dx,
                y,
                0.85,
                0.8,
                f"$W_{letter}^{{{label}}}$",
                COLOURS[kind],
                11,
            )
        _arrow(ax, (5.1, y), (5.6, y))
        _box(
            ax,
            6.55,
            y,
            1.8,
            0.9,
            f"head {label}\n$n \\times d_{{head}}$",
            COLOURS["attention"],
            10,
        )
        _arrow(ax, (7.45, y), (concat_x - 0.55, y))
        if n_heads >= 3 and head == n_heads - 2:
            ax.text(6.55, y - 0.8, "⋮", ha="center", va="center", fontsize=16)
    _box(
        ax,
        concat_x,
        middle,
        1.1,
        height - 1.0,
        "concat\n\n$n \\times$\n$d_{model}$",
        COLOURS["input"],
        10,
    )
    _arrow(ax, (concat_x + 0.55, middle), (9.6, middle))
    _box(ax, 10.0, middle, 0.8, 0.8, "$W_O$", COLOURS["output"], 12)
    _arrow(ax, (10.4, middle), (11.0, middle))
    ax.text(11.1, middle, "output\n$n \\times d_{model}$", va="center", fontsize=11)
    ax.text(3.75, 0.2, "$d_{head} = d_{model} / h$: each head gets a slice of $W_Q, W_K, W_V$", ha="center",
            fontsize=10)  # fmt: skip
    return _finish(ax, 12.3, height, title)


def _sublayers(
    ax: Axes, x: float, y0: float, names: Sequence[tuple[str, str]], width: float
) -> list[float]:
    """Stack sub-layers upwards from y0, each followed by "Add & Norm" with its residual arrow; return centres."""
    centres = []
    y = y0
    for name, kind in names:
        _box(ax, x, y, width, 0.75, name, COLOURS[kind], 10.5)
        _arrow(ax, (x, y + 0.375), (x, y + 0.725))
        _box(ax, x, y + 1.1, width, 0.55, "Add & Norm", COLOURS["norm"], 10)
        # the residual path goes around the sub-layer
        side = x - width / 2 - 0.25
        ax.plot([x, side, side], [y - 0.6, y - 0.6, y + 1.1], color="grey", lw=1.2)
        _arrow(ax, (side, y + 1.1), (x - width / 2, y + 1.1), color="grey")
        centres.append(y)
        y += 1.95
        if len(centres) < len(names):
            _arrow(ax, (x, y - 1.95 + 1.375), (x, y - 0.375))
    return centres


def draw_transformer(
    *, ax: Axes | None = None, title: str | None = "The Transformer"
) -> Axes:
    """The encoder–decoder of Vaswani et al. (2017), after their figure 1 (post-norm: Add & Norm after each
    sub-layer): L encoder blocks on the left, L decoder blocks on the right."""
    ax = _new_axes(ax, (9, 11.5))
    width = 2.8
    enc_x, dec_x = 2.6, 7.4
    for x, label in (
        (enc_x, "Inputs (source tokens)"),
        (dec_x, "Outputs so far (shifted right)"),
    ):
        ax.text(x, 0.25, label, ha="center", fontsize=10.5)
        _arrow(ax, (x, 0.55), (x, 0.95))
        _box(ax, x, 1.3, width, 0.7, "Embedding", COLOURS["embed"], 10.5)
        _arrow(ax, (x, 1.65), (x, 2.1))
        ax.add_patch(plt.Circle((x, 2.35), 0.25, fc="white", ec="black", lw=1.2))
        ax.text(x, 2.35, "+", ha="center", va="center", fontsize=13)
        ax.text(x + 0.4, 2.35, "positional\nencoding", va="center", fontsize=9.5)
        _arrow(ax, (x, 2.6), (x, 3.05))
    enc = _sublayers(
        ax,
        enc_x,
        3.6,
        [("Multi-Head\nSelf-Attention", "attention"), ("Feed Forward", "ffn")],
        width,
    )
    dec = _sublayers(
        ax,
        dec_x,
        3.6,
        [("Masked Multi-Head\nSelf-Attention", "attention"), ("Multi-Head\nCross-Attention", "attention"),
         ("Feed Forward", "ffn")],
        width,
    )  # fmt: skip
    enc_top = enc[-1] + 1.375
    dec_top = dec[-1] + 1.375
    for x, top, side in ((enc_x, enc_top, -1), (dec_x, dec_top, 1)):
        frame = FancyBboxPatch(
            (x - width / 2 - 0.5, 3.0), width + 1.0, top + 0.15 - 3.0, boxstyle="round,pad=0.05,rounding_size=0.2",
            fc="none", ec="grey", lw=1.5, ls="--",
        )  # fmt: skip
        ax.add_patch(frame)
        edge = x + side * (width / 2 + 0.75)
        ax.text(
            edge, (3.0 + top) / 2, "$L\\times$", ha="center", va="center", fontsize=14
        )
    # the encoder's output (the memory) feeds the keys and values of every decoder cross-attention
    ax.plot(
        [enc_x, enc_x, 5.0, 5.0],
        [enc_top, enc_top + 0.5, enc_top + 0.5, dec[1]],
        color="black",
        lw=1.3,
    )
    _arrow(ax, (5.0, dec[1]), (dec_x - width / 2, dec[1]))
    ax.text(4.85, (enc_top + 0.5 + dec[1]) / 2, "memory: keys and values", rotation=90, ha="right", va="center",
            fontsize=9.5)  # fmt: skip
    _arrow(ax, (dec_x, dec_top), (dec_x, dec_top + 0.5))
    _box(ax, dec_x, dec_top + 0.85, width, 0.6, "Linear", COLOURS["output"], 10.5)
    _arrow(ax, (dec_x, dec_top + 1.15), (dec_x, dec_top + 1.5))
    _box(ax, dec_x, dec_top + 1.85, width, 0.6, "Softmax", COLOURS["output"], 10.5)
    _arrow(ax, (dec_x, dec_top + 2.15), (dec_x, dec_top + 2.5))
    ax.text(
        dec_x, dec_top + 2.7, "next-token probabilities", ha="center", fontsize=10.5
    )
    for x, name in ((enc_x, "encoder"), (dec_x, "decoder")):
        ax.text(
            x - width / 2 - 0.5,
            2.9,
            name,
            va="top",
            fontsize=11,
            style="italic",
            color="dimgrey",
        )
    return _finish(ax, 10, dec_top + 3.1, title)


def _plus(ax: Axes, x: float, y: float) -> None:
    ax.add_patch(plt.Circle((x, y), 0.22, fc="white", ec="black", lw=1.2))
    ax.text(x, y, "+", ha="center", va="center", fontsize=13)


def draw_gpt(*, ax: Axes | None = None, title: str | None = "GPT-2") -> Axes:
    """GPT-2's decoder-only stack (pre-norm: LayerNorm before each sub-layer, the residual stream left
    un-normalised): token + position embeddings, L blocks of masked self-attention and feed-forward, a final
    LayerNorm and the output layer tied to the token table E."""
    ax = _new_axes(ax, (6.5, 11.5))
    x, width = 3.6, 3.0
    ax.text(x, 0.2, "token ids $w_1 \\dots w_n$", ha="center", fontsize=10.5)
    for dx, text in (
        (-1.05, "Token\nembedding $E$"),
        (1.05, "Position\nembedding $P$"),
    ):
        _arrow(ax, (x + dx, 0.5), (x + dx, 0.9))
        _box(ax, x + dx, 1.35, 1.8, 0.8, text, COLOURS["embed"], 10)
        _arrow(ax, (x + dx, 1.75), (x + 0.2 * np.sign(dx), 2.25))
    _plus(ax, x, 2.45)
    y = 2.67  # the residual stream enters the first block here
    frame_bottom = y + 0.2
    adds = []
    for name, kind in (
        ("Masked Multi-Head\nSelf-Attention", "attention"),
        ("Feed Forward (GELU)", "ffn"),
    ):
        branch = y + 0.35
        _arrow(ax, (x, y), (x, branch + 0.25))
        _box(ax, x, branch + 0.5, width, 0.5, "LayerNorm", COLOURS["norm"], 10)
        _arrow(ax, (x, branch + 0.75), (x, branch + 1.05))
        _box(ax, x, branch + 1.45, width, 0.8, name, COLOURS[kind], 10.5)
        _arrow(ax, (x, branch + 1.85), (x, branch + 2.13))
        add = branch + 2.35
        _plus(ax, x, add)
        side = x - width / 2 - 0.35  # the residual path goes around the sub-layer
        ax.plot([x, side, side], [branch, branch, add], color="grey", lw=1.2)
        _arrow(ax, (side, add), (x - 0.22, add), color="grey")
        adds.append(add)
        y = add + 0.22
    frame_top = y + 0.15
    frame = FancyBboxPatch(
        (x - width / 2 - 0.6, frame_bottom), width + 1.2, frame_top - frame_bottom,
        boxstyle="round,pad=0.05,rounding_size=0.2", fc="none", ec="grey", lw=1.5, ls="--",
    )  # fmt: skip
    ax.add_patch(frame)
    ax.text(
        x + width / 2 + 0.95,
        (frame_bottom + frame_top) / 2,
        "$L\\times$",
        ha="center",
        va="center",
        fontsize=14,
    )
    top = y
    for name, kind in (
        ("LayerNorm", "norm"),
        ("Linear: $E^\\top$ (tied)", "output"),
        ("Softmax", "output"),
    ):
        _arrow(ax, (x, top), (x, top + 0.4))
        _box(ax, x, top + 0.7, width, 0.6, name, COLOURS[kind], 10.5)
        top += 1.0
    _arrow(ax, (x, top), (x, top + 0.35))
    ax.text(x, top + 0.5, "next-token probabilities", ha="center", fontsize=10.5)
    return _finish(ax, 7.2, top + 1.0, title)


def _rotate(vector: np.ndarray, angle: float) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, -s], [s, c]]) @ vector


def draw_rope_rotation(
    vector: Sequence[float] = (1.0, 0.4),
    theta: float = math.radians(25),
    *,
    positions: Sequence[int] = (0, 1, 2, 3, 4, 5),
    query: Sequence[float] = (1.0, 0.3),
    key: Sequence[float] = (0.7, 0.6),
    pairs: Sequence[tuple[int, int]] = ((1, 3), (5, 7)),
    axes: Sequence[Axes] | None = None,
) -> list[Axes]:
    """RoPE in one pair of features: left, ``vector`` at each of ``positions`` is turned by ``p · theta``;
    right, a query at position m and a key at position n, for each ``(m, n)`` in ``pairs``: both are turned,
    and the angle between them changes by ``(n - m) · theta``, whatever m is.

    Returns:
        The two axes.
    """
    vector, query, key = (np.asarray(v, dtype=float) for v in (vector, query, key))
    for name, v in (("vector", vector), ("query", query), ("key", key)):
        if v.shape != (2,) or not np.all(np.isfinite(v)) or not np.any(v):
            raise ValueError(
                f"{name} must be a non-zero pair of finite numbers, got {v.tolist()}"
            )
    require_number(theta, "theta")  # radians
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(11, 5))
    left, right = axes
    colours = plt.cm.viridis(np.linspace(0, 0.9, len(positions)))
    reach = 1.15 * max(
        np.linalg.norm(vector), np.linalg.norm(query), np.linalg.norm(key)
    )
    for ax in (left, right):
        ax.add_patch(plt.Circle((0, 0), np.linalg.norm(vector if ax is left else query), fill=False, ls=":",
                                color="grey"))  # fmt: skip
        ax.axhline(0, color="lightgrey", lw=0.8)
        ax.axvline(0, color="lightgrey", lw=0.8)
        ax.set_xlim(-reach, reach)
        ax.set_ylim(-reach, reach)
        ax.set_aspect("equal")
        ax.set_xlabel("feature $2i$")
        ax.set_ylabel("feature $2i+1$")
    for p, colour in zip(positions, colours, strict=True):
        end = _rotate(vector, p * theta)
        left.annotate(
            "", end, (0, 0), arrowprops={"arrowstyle": "-|>", "color": colour, "lw": 2}
        )
        left.text(
            *(1.08 * end),
            f"$p={p}$",
            ha="center",
            va="center",
            fontsize=10,
            color=colour,
        )
    left.set_title(
        f"One vector at positions {positions[0]}–{positions[-1]}: turned by $p\\,\\theta$"
    )
    styles = ["-", "--", "-.", ":"]
    for (m, n), style in zip(pairs, styles * len(pairs), strict=False):
        q_m, k_n = _rotate(query, m * theta), _rotate(key, n * theta)
        for v, colour, name, pos in (
            (q_m, "tab:orange", "q", m),
            (k_n, "tab:blue", "k", n),
        ):
            right.annotate(
                "",
                v,
                (0, 0),
                arrowprops={"arrowstyle": "-|>", "color": colour, "lw": 2, "ls": style},
            )
            label = f"$\\mathcal{{R}}_{{{pos}}}{name}$"
            right.text(
                *(1.1 * v), label, ha="center", va="center", fontsize=11, color=colour
            )
        gap = math.degrees(math.atan2(q_m[0] * k_n[1] - q_m[1] * k_n[0], q_m @ k_n))
        right.plot(
            [],
            [],
            color="black",
            ls=style,
            label=f"m={m}, n={n}: angle {gap:.0f}°, score {q_m @ k_n:.3f}",
        )
    right.legend(loc="lower left", fontsize=9.5)
    right.set_title("Query at m, key at n: the angle depends on $n - m$")
    return [left, right]
