"""The linear-attention chapter's sweep figure: trained recall accuracy against pairs per feature, N / r.

One panel per attention; each trained run is a dot (its colour says r, the features per head), the grey bar at
each cell is what a model scores that answers with a value of the sequence and ignores the query
(:func:`companion.data.recall_task.no_lookup_accuracy`), the vertical line is the bound N = r, and the dashed
curve min(1, r/N) is the most queries an exact read-out of rank r can answer exactly: k exact one-hot rows are
linearly independent, so k ≤ r.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes

from ..validation import describe, require_entries

__all__ = ["exact_readout_fraction", "plot_recall_bound"]

_FIELDS = ("kind", "r", "n_pairs", "seed", "accuracy")


def exact_readout_fraction(
    pairs_per_feature: np.ndarray | Sequence[float],
) -> np.ndarray:
    """min(1, r/N): the largest share of N queries that a read-out of rank r returns exactly as one-hot values."""
    x = np.asarray(pairs_per_feature, dtype=float)
    require_entries(x, "pairs_per_feature", low=0, why="N / r")
    return np.minimum(1.0, 1.0 / np.maximum(x, 1e-300))


def _check_runs(runs: object, no_lookup: object) -> list[str]:
    """The kinds of the runs, in order of appearance, after checking every run and the bands."""
    if not isinstance(runs, Sequence) or not runs:
        raise TypeError(
            f"runs must be a non-empty list of {{{', '.join(_FIELDS)}}}, got {describe(runs)}"
        )
    kinds: list[str] = []
    for run in runs:
        if not isinstance(run, Mapping) or any(field not in run for field in _FIELDS):
            raise ValueError(f"every run needs the fields {_FIELDS}, got {run!r}")
        require_entries(
            np.asarray([run["accuracy"]], float),
            "accuracy",
            low=0,
            high=1,
            why="an accuracy",
        )
        if run["kind"] not in kinds:
            kinds.append(run["kind"])
    pairs = {run["n_pairs"] for run in runs}
    if not isinstance(no_lookup, Mapping) or not pairs <= set(no_lookup):
        raise ValueError(
            f"no_lookup must be {{n_pairs: (low, high)}} for the pairs {sorted(pairs)}"
        )
    return kinds


def plot_recall_bound(
    runs: Sequence[Mapping[str, object]],
    no_lookup: Mapping[int, tuple[float, float]],
    *,
    kinds: Sequence[str] | None = None,
    axes: Sequence[Axes] | None = None,
    title: str = "Trained recall against pairs per feature",
    hollow: Callable[[Mapping[str, object]], bool] | None = None,
    hollow_label: str = "another training budget",
) -> list[Axes]:
    """Draw each run's test accuracy against N / r (log₂ axis), one panel per kind.

    Args:
        runs: dictionaries with ``kind``, ``r`` (features per head), ``n_pairs`` (N), ``seed``, ``accuracy``.
        no_lookup: ``{n_pairs: (low, high)}``, the no-lookup band of each number of pairs.
        kinds: the panels, in order; default every kind of ``runs``.
        axes: one axes per kind; default a new figure with three panels a row.
        title: the figure's title.
        hollow: runs for which it is true are drawn as open circles (runs trained another way, say).
        hollow_label: the legend's words for the open circles.

    Returns:
        The axes, one per kind.
    """
    kinds = list(kinds) if kinds is not None else _check_runs(runs, no_lookup)
    _check_runs(runs, no_lookup)
    features = sorted({int(run["r"]) for run in runs})
    colours = dict(
        zip(
            features,
            plt.get_cmap("viridis")(np.linspace(0, 0.85, len(features))),
            strict=True,
        )
    )
    made, rows = axes is None, -(-len(kinds) // 3)
    if made:
        fig, grid = plt.subplots(
            rows, min(3, len(kinds)), figsize=(11, 3.4 * rows + 0.6), squeeze=False
        )
        axes = list(grid.flat)[: len(kinds)]
        fig.suptitle(title)
    x_all = sorted({run["n_pairs"] / run["r"] for run in runs})
    curve = np.geomspace(min(x_all) / 1.3, max(x_all) * 1.3, 200)
    for ax, kind in zip(axes, kinds, strict=True):
        mine = [run for run in runs if run["kind"] == kind]
        # cells of one N / r apart
        shift = {r: 2.0 ** (0.05 * (features.index(r) - 1.5)) for r in features}
        for r, n in sorted({(run["r"], run["n_pairs"]) for run in mine}):
            low, high = no_lookup[n]
            x = n / r * shift[r]
            ax.plot(
                [x, x],
                [low, high],
                color="0.6",
                lw=6,
                alpha=0.5,
                solid_capstyle="butt",
                zorder=1,
            )
        for r in features:
            dots = [run for run in mine if run["r"] == r]
            for is_open in (False, True):
                some = [d for d in dots if bool(hollow and hollow(d)) == is_open]
                if not some:
                    continue
                x = np.array([d["n_pairs"] / r for d in some]) * shift[r]
                ax.scatter(
                    x,
                    [d["accuracy"] for d in some],
                    s=22,
                    color=colours[r] if not is_open else "none",
                    edgecolors=colours[r],
                    label=f"r = {r}" if not is_open else f"r = {r}, {hollow_label}",
                    zorder=3,
                )
        ax.plot(
            curve,
            exact_readout_fraction(curve),
            "k--",
            lw=1,
            label="exact read-out of rank r: min(1, r/N)",
        )
        ax.axvline(1, color="k", lw=1, label="the bound N = r")
        ax.set_xscale("log", base=2)
        ax.set_xticks(x_all, [f"{x:g}" if x >= 1 else f"1/{1 / x:g}" for x in x_all])
        ax.minorticks_off()
        ax.set_ylim(0, 1.05)
        ax.set_title(kind)
        ax.set_xlabel("pairs per feature, N / r")
        ax.set_ylabel("test accuracy (each dot a seed)")
    legend = {}  # label -> handle, over every panel (some draw open circles, some not)
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    handles, labels = list(legend.values()), list(legend)
    handles.append(plt.Line2D([], [], color="0.6", lw=6, alpha=0.5))
    labels.append("no lookup: a value of the sequence, query ignored")
    figure = axes[0].figure
    figure.legend(handles, labels, fontsize="small", loc="lower center", ncol=4)
    if made:
        figure.tight_layout(rect=(0, 0.12 / rows, 1, 1))
    return list(axes)
