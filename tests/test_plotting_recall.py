"""The recall sweep's figure: one line per attention through the seeds' mean, bars to the worst and best seed."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest

from companion.plotting.recall import plot_recall_sweep

ACCURACY = {
    "softmax": {4: [1.0, 1.0, 0.98], 16: [0.9, 0.5, 0.7]},
    "linear": {4: [0.3, 0.32, 0.31], 16: [0.1, 0.12, 0.11]},
}
NO_LOOKUP = {4: (0.28, 0.34), 16: (0.08, 0.1)}


def test_plot_recall_sweep_draws_means_seed_ranges_band_and_marks():
    ax = plot_recall_sweep(ACCURACY, NO_LOOKUP, marks={"pairs = r": 16})
    containers = ax.containers  # one ErrorbarContainer per kind, in order
    assert [c.get_label() for c in containers] == ["softmax", "linear"]
    for container, kind in zip(containers, ACCURACY, strict=True):
        line, _, (bars,) = container
        np.testing.assert_allclose(np.asarray(line.get_ydata(), float), [np.mean(ACCURACY[kind][n]) for n in (4, 16)])
        np.testing.assert_allclose(np.asarray(line.get_xdata(), float), [4, 16])
        segments = bars.get_segments()  # each bar runs from the worst seed to the best
        for segment, n in zip(segments, (4, 16), strict=True):
            np.testing.assert_allclose(sorted(segment[:, 1]), [min(ACCURACY[kind][n]), max(ACCURACY[kind][n])])
    (band,) = ax.collections[:1]
    corners = band.get_paths()[0].vertices
    assert corners[:, 1].min() == pytest.approx(0.08) and corners[:, 1].max() == pytest.approx(0.34)
    assert [line.get_xdata()[0] for line in ax.get_lines() if line.get_label() == "pairs = r"] == [16]
    assert ax.get_xscale() == "log"
    plt.close("all")


def test_plot_recall_sweep_rejects_inconsistent_input():
    with pytest.raises(TypeError, match="accuracy must be"):
        plot_recall_sweep({}, NO_LOOKUP)
    with pytest.raises(ValueError, match="same numbers of pairs"):
        plot_recall_sweep({"a": {4: [0.5]}, "b": {8: [0.5]}}, NO_LOOKUP)
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        plot_recall_sweep({"a": {4: [1.5], 16: [0.5]}}, NO_LOOKUP)
    with pytest.raises(ValueError, match="no_lookup must be"):
        plot_recall_sweep(ACCURACY, {4: (0.2, 0.3)})
    plt.close("all")
