"""The linear-attention chapter's sweep figure: recall accuracy against the number of key–value pairs.

Each attention is one line through the mean accuracy of its seeds, with a bar from the worst seed to the best;
the grey band is what a model scores that answers with a value of the sequence and ignores the query
(:func:`companion.data.recall_task.no_lookup_accuracy`), and dotted vertical lines mark named numbers of pairs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes

from .._validate import describe, require_entries

__all__ = ["plot_recall_sweep"]


def _check_sweep(accuracy: object, no_lookup: object) -> list[int]:
    """The sorted numbers of pairs of a sweep, after checking both mappings agree on them."""
    if not isinstance(accuracy, Mapping) or not accuracy:
        raise TypeError(
            f"accuracy must be a non-empty {{kind: {{n_pairs: [accuracy per seed]}}}}, got {describe(accuracy)}"
        )
    pairs = None
    for kind, runs in accuracy.items():
        if not isinstance(runs, Mapping) or not runs:
            raise TypeError(
                f"accuracy[{kind!r}] must be a non-empty {{n_pairs: [accuracy per seed]}}, got {describe(runs)}"
            )
        for n, values in runs.items():
            seeds = np.asarray(values, dtype=float)
            if seeds.ndim != 1 or seeds.size == 0:
                raise ValueError(f"accuracy[{kind!r}][{n!r}] must be accuracies, one per seed, got {values!r}")
            require_entries(seeds, f"accuracy[{kind!r}][{n!r}]", low=0, high=1, why="accuracies")
        if pairs is None:
            pairs = sorted(runs)
        elif sorted(runs) != pairs:
            raise ValueError(f"every kind needs the same numbers of pairs: {pairs} and {sorted(runs)} ({kind!r})")
    if not isinstance(no_lookup, Mapping) or sorted(no_lookup) != pairs:
        raise ValueError(f"no_lookup must be {{n_pairs: (low, high)}} for the pairs {pairs}, got {describe(no_lookup)}")
    return pairs


def plot_recall_sweep(
    accuracy: Mapping[str, Mapping[int, Sequence[float]]],
    no_lookup: Mapping[int, tuple[float, float]],
    *,
    marks: Mapping[str, float] | None = None,
    ax: Axes | None = None,
    title: str = "Associative recall against the number of pairs",
) -> Axes:
    """Draw each attention's test accuracy against the number of pairs (log₂ axis): mean and seed range.

    Args:
        accuracy: ``{kind: {n_pairs: [final accuracy of each seed]}}``, the same pairs for every kind.
        no_lookup: ``{n_pairs: (low, high)}``, the no-lookup band at each number of pairs.
        marks: ``{label: n_pairs}``, dotted vertical lines (for example where the sequence outgrows the features).
        ax: the axes to draw on; default a new figure.
        title: the axes' title.

    Returns:
        The axes.
    """
    pairs = _check_sweep(accuracy, no_lookup)
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.5))
    low, high = zip(*(no_lookup[n] for n in pairs), strict=True)
    ax.fill_between(pairs, low, high, color="0.85", label="a value of the sequence, query ignored")
    for kind, runs in accuracy.items():
        seeds = [np.asarray(runs[n], dtype=float) for n in pairs]
        mean = np.array([s.mean() for s in seeds])
        below = mean - np.array([s.min() for s in seeds])
        above = np.array([s.max() for s in seeds]) - mean
        ax.errorbar(pairs, mean, yerr=[below, above], marker="o", capsize=3, label=kind)
    for (label, n), style in zip((marks or {}).items(), (":", "--", "-."), strict=False):
        ax.axvline(n, color="k", linestyle=style, linewidth=1, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(pairs, [str(n) for n in pairs])
    ax.minorticks_off()
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("key–value pairs in the sequence")
    ax.set_ylabel("test accuracy (mean; bar: worst to best seed)")
    ax.set_title(title)
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3)  # below the axes
    return ax
