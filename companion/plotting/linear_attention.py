"""Chapter 8's figure: time and memory of attention against the sequence length n, on log–log axes.

On log–log axes a cost ``∝ n^p`` is a straight line of slope ``p``: linear attention's lines run parallel
to the ``∝ n`` guide, softmax attention's time to the ``∝ n²`` one. The legend gives each line's fitted slope
(:func:`companion.benchmarking.fit_loglog_slope`).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from ..benchmarking import AttentionMeasurement, fit_loglog_slope

__all__ = ["plot_linear_attention_cost"]


def plot_linear_attention_cost(
    rows: Sequence[AttentionMeasurement],
    *,
    axes: Sequence[Axes] | None = None,
    title: str = "Softmax against linear attention",
) -> Sequence[Axes]:
    """Draw time and peak memory against n (log–log) for each implementation, with ∝ n and ∝ n² guides.

    Args:
        rows: measurements from :func:`companion.benchmarking.linear_attention.measure_linear_attention` (or any list of
            :class:`companion.benchmarking.AttentionMeasurement`).
        axes: two axes (time, memory); default a new figure with two panels.
        title: the figure's title.

    Returns:
        The two axes.
    """
    if not rows or not all(isinstance(r, AttentionMeasurement) for r in rows):
        raise TypeError("rows must be a non-empty list of AttentionMeasurement (from measure_linear_attention)")
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    else:
        if len(axes) != 2:
            raise ValueError(f"axes must be two axes (time, memory), got {len(axes)}")
        fig = axes[0].figure
    names = list(dict.fromkeys(r.name for r in rows))
    ns = sorted({r.n for r in rows})
    panels = ((axes[0], "milliseconds", "time per call (ms)"), (axes[1], "peak_mib", "peak memory (MiB)"))
    for ax, attr, label in panels:
        values = []
        for name in names:
            mine = sorted((r for r in rows if r.name == name and getattr(r, attr) > 0), key=lambda r: r.n)
            if not mine:
                continue
            xs, ys = [r.n for r in mine], [getattr(r, attr) for r in mine]
            values += ys
            slope = f", slope {fit_loglog_slope(xs, ys).slope:.2f}" if len(mine) > 1 else ""
            ax.plot(xs, ys, marker="o", label=f"{name}{slope}")
        if values and len(ns) > 1:
            # guides through the geometric middle of the measurements
            middle = (min(values) * max(values)) ** 0.5
            n_mid = (ns[0] * ns[-1]) ** 0.5
            for power, style, guide in ((1, "k:", "∝ n"), (2, "k--", "∝ n²")):
                ax.plot(ns, [middle * (n / n_mid) ** power for n in ns], style, linewidth=1, label=guide)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(label)
        ax.set_title(label.split(" (")[0])
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return axes
