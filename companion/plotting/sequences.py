"""Figures of token sequences: the sliding windows that cut a token stream into (input, target) pairs
(chapter 6), and the search tree of a decoder that reads one token at a time (chapter 5).

Each function draws on a new figure (or on ``ax``) and returns the axes, so the book can show it with
``plt.show()`` and the tests can inspect what was drawn.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.patches import Rectangle

from ..validation import describe, require_positive_ints

__all__ = ["draw_sliding_windows", "draw_search_tree"]

_INPUT, _TARGET, _STREAM = "#9dc3e6", "#f4b183", "#e8e8e8"


def _axes(ax: Axes | None, size: tuple[float, float]) -> Axes:
    if ax is None:
        _, ax = plt.subplots(figsize=size)
    elif not isinstance(ax, Axes):
        raise TypeError(f"ax must be a matplotlib Axes or None, got {describe(ax)}")
    return ax


def _cells(
    ax: Axes, x0: float, y: float, labels: Sequence[str], colour: str, size: float = 9
) -> None:
    for j, label in enumerate(labels):
        ax.add_patch(
            Rectangle((x0 + j, y), 1, 0.8, facecolor=colour, edgecolor="0.3", lw=0.8)
        )
        ax.text(x0 + j + 0.5, y + 0.4, label, ha="center", va="center", fontsize=size)


def draw_sliding_windows(
    n_tokens: int = 14,
    length: int = 4,
    stride: int = 3,
    batch_size: int = 2,
    *,
    ax: Axes | None = None,
    title: str
    | None = "Sliding windows: input = ids[i : i + n], target = ids[i + 1 : i + n + 1]",
) -> Axes:
    """The token stream ``w_0 … w_{N-1}`` (``N = n_tokens``), every window of ``length + 1`` tokens at starts
    ``i = 0, stride, 2·stride, …`` as an input row over a target row shifted one position right, and the first
    ``batch_size`` windows stacked into the ``(B, n)`` input and target of one batch."""
    require_positive_ints(
        n_tokens=n_tokens, length=length, stride=stride, batch_size=batch_size
    )
    starts = list(range(0, n_tokens - length, stride))
    if not starts or batch_size > len(starts):
        raise ValueError(
            f"{n_tokens} tokens give {len(starts)} windows of {length + 1}, fewer than {batch_size}"
        )
    ax = _axes(ax, (11, 1.2 + 0.85 * len(starts)))
    words = [f"w{t}" for t in range(n_tokens)]
    top = 2.6 * len(starts)
    ax.text(-0.3, top + 0.4, "stream", ha="right", va="center", fontsize=10)
    _cells(ax, 0, top, words, _STREAM)
    for k, i in enumerate(starts):
        y = top - 2.6 * (k + 1)
        ax.text(
            -0.3, y + 1.0, f"window {k}, i = {i}", ha="right", va="center", fontsize=9
        )
        _cells(ax, i, y + 1.0, words[i : i + length], _INPUT)
        _cells(ax, i + 1, y + 0.1, words[i + 1 : i + length + 1], _TARGET)
        if k:
            ax.annotate(
                "",
                (i, y + 2.25),
                (i - stride, y + 2.25),
                arrowprops=dict(arrowstyle="->", color="0.4"),
            )
            ax.text(
                i - stride - 0.15,
                y + 2.25,
                f"s = {stride}",
                ha="right",
                va="center",
                fontsize=8,
                color="0.3",
            )
    x0 = n_tokens + 2.5
    for name, shift, colour, y in (
        ("input", 0, _INPUT, top),
        ("target", 1, _TARGET, top - 1.4 - batch_size),
    ):
        ax.text(
            x0 + length / 2,
            y + 0.9,
            f"batch {name}: ({batch_size}, {length}) = (B, n)",
            ha="center",
            fontsize=9,
        )
        for b in range(batch_size):
            i = starts[b] + shift
            _cells(ax, x0, y - b, words[i : i + length], colour)
    ax.add_patch(
        Rectangle((0, 0), 0, 0, facecolor=_INPUT, label=f"input: n = {length} tokens")
    )
    ax.add_patch(
        Rectangle((0, 0), 0, 0, facecolor=_TARGET, label="target: the same, one later")
    )
    # above the last window
    ax.legend(loc="lower right", bbox_to_anchor=(1.0, 0.2), fontsize=9, frameon=False)
    ax.set_xlim(-4.5, x0 + length + 0.5)
    ax.set_ylim(top - 2.6 * len(starts) - 0.3, top + 1.2)
    ax.set_aspect("equal")
    ax.axis("off")
    if title:
        ax.set_title(title)
    return ax


def draw_search_tree(
    table: torch.Tensor,
    tokens: Sequence[str],
    paths: dict[str, tuple[Sequence[int], str]],
    *,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Two decoding steps of a model whose next token depends only on the last: ``table[a, b]`` is
    ``p(b | a)``, token 0 is the start and the last token ends a sentence. Every branch is labelled with its
    probability; ``paths`` maps a legend label to ``(tokens after the start, colour)``, drawn thick."""
    table = torch.as_tensor(table, dtype=torch.float64)
    if (
        table.ndim != 2
        or table.shape[0] != table.shape[1]
        or table.shape[0] != len(tokens)
    ):
        raise ValueError(
            f"table must be (V, V) with V = len(tokens) = {len(tokens)}, got {tuple(table.shape)}"
        )
    ax = _axes(ax, (8, 4.2))
    middle = list(range(1, len(tokens) - 1))  # the tokens that continue a sentence
    firsts = [*middle, len(tokens) - 1]
    heights: dict[tuple[int, ...], float] = {}
    for j, first in enumerate(firsts):
        heights[(first,)] = 2.0 * ((len(firsts) - 1) / 2 - j)
    for first in middle:
        for j, second in enumerate(firsts):
            heights[(first, second)] = heights[(first,)] + 0.6 * (
                (len(firsts) - 1) / 2 - j
            )
    drawn = {tuple(path): colour for path, colour in paths.values()}
    for path, y in heights.items():
        depth, parent = len(path), path[:-1]
        p = table[parent[-1] if parent else 0, path[-1]].item()
        colour = next((c for full, c in drawn.items() if full[:depth] == path), "0.75")
        y0 = heights[parent] if parent else 0.0
        ax.plot(
            [depth - 1, depth], [y0, y], color=colour, lw=1 if colour == "0.75" else 2.5
        )
        ax.text(depth - 0.5, (y0 + y) / 2 + 0.1, f"{p:g}", ha="center", fontsize=9)
        ax.text(depth + 0.04, y, tokens[path[-1]], va="center", fontsize=10)
    ax.text(-0.05, 0, tokens[0], ha="right", va="center", fontsize=10)
    for label, (_, colour) in paths.items():
        ax.plot([], [], color=colour, lw=2.5, label=label)
    ax.set_xticks([0, 1, 2], ["start", "step 1", "step 2"])
    ax.set_yticks([])
    ax.set_xlim(-0.4, 2.5)
    ax.set_xlabel("decoding step")
    ax.set_ylabel("the tokens written so far")
    if title:
        ax.set_title(title)
    ax.legend(loc="upper left", fontsize=9)
    return ax
