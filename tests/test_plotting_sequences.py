"""The figures of token sequences draw what their docstrings say."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib.colors import to_hex
from raising import raises

from companion.plotting import sequences


def _cells(ax, colour):
    """The labels of the cells filled with ``colour``, by their position (x, y)."""
    boxes = [
        p
        for p in ax.patches
        if p.get_width() > 0 and to_hex(p.get_facecolor()) == colour
    ]
    texts = {
        (
            round(t.get_position()[0] - 0.5, 3),
            round(t.get_position()[1] - 0.4, 3),
        ): t.get_text()
        for t in ax.texts
    }
    return [texts[(round(b.get_x(), 3), round(b.get_y(), 3))] for b in boxes]


def test_windows_figure_shows_each_window_and_the_batch():
    n_tokens, n, s, b = 14, 4, 3, 2
    ax = sequences.draw_sliding_windows(n_tokens, n, s, b)
    starts = list(range(0, n_tokens - n, s))  # 0, 3, 6, 9: the last window ends at w13
    inputs = [f"w{i + j}" for i in starts for j in range(n)]
    targets = [f"w{i + 1 + j}" for i in starts for j in range(n)]
    batch_in = [f"w{i + j}" for i in starts[:b] for j in range(n)]
    batch_tgt = [f"w{i + 1 + j}" for i in starts[:b] for j in range(n)]
    assert _cells(ax, "#9dc3e6") == inputs + batch_in
    assert _cells(ax, "#f4b183") == targets + batch_tgt
    assert _cells(ax, "#e8e8e8") == [f"w{t}" for t in range(n_tokens)]
    labels = [t.get_text() for t in ax.texts]
    assert sum(label == f"s = {s}" for label in labels) == len(starts) - 1
    assert "batch input: (2, 4) = (B, n)" in labels and ax.get_title()
    plt.close("all")
    with raises(ValueError, "fewer than 5"):
        sequences.draw_sliding_windows(14, 4, 3, 5)


def test_search_tree_draws_every_branch_with_its_probability():
    table = torch.tensor(
        [
            [0.0, 0.5, 0.4, 0.1],
            [0.0, 0.3, 0.3, 0.4],
            [0.0, 0.05, 0.05, 0.9],
            [0, 0, 0, 1.0],
        ]
    )
    paths = {"greedy": ((1, 3), "C1"), "beam": ((2, 3), "C2")}
    ax = sequences.draw_search_tree(
        table, ["<bos>", "A", "B", "<eos>"], paths, title="tree"
    )
    branches = [line for line in ax.lines if len(line.get_xdata())]
    # three first tokens, three continuations of A and of B
    assert len(branches) == 3 + 2 * 3
    thick = sorted(
        (line.get_color(), line.get_xdata()[1])
        for line in branches
        if line.get_linewidth() > 2
    )
    assert thick == [("C1", 1), ("C1", 2), ("C2", 1), ("C2", 2)]
    probabilities = sorted(
        float(t.get_text()) for t in ax.texts if t.get_text()[0].isdigit()
    )
    expected = sorted([0.5, 0.4, 0.1, 0.3, 0.3, 0.4, 0.05, 0.05, 0.9])
    assert probabilities == pytest.approx(expected)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["greedy", "beam"]
    plt.close("all")
    with raises(ValueError, "table must be"):
        sequences.draw_search_tree(table[:3], ["<bos>", "A", "B", "<eos>"], paths)
