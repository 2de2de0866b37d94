"""Chapter 9's figures draw the right panels, titles and fitted slope."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import torch
from raising import raises

from companion.benchmarking import fit_loglog_slope
from companion.plotting.random_features import (
    plot_error_vs_R,
    plot_kernel_approximations,
)
from companion.random_features import approximation_errors


def test_plot_kernel_approximations_panels_and_errors():
    x = torch.randn(
        30, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    fig = plot_kernel_approximations(x, [10, 1000], sigma=1.0)
    axes = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title().split("\n")[0] for ax in axes] == [
        "exact K (gaussian)",
        "$ZZ^T$, R = 10",
        "$ZZ^T$, R = 1000",
    ]
    errs = [float(ax.get_title().split("RMS error ")[1]) for ax in axes[1:]]
    assert errs[1] < errs[0]  # more features, smaller error
    plt.close("all")


def test_plot_error_vs_R_shows_the_fitted_slope():
    x = torch.randn(
        20, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64
    )
    Rs = [8, 32, 128, 512]
    errors = approximation_errors(x, Rs, range(3))
    ax = plot_error_vs_R(Rs, errors)
    slope, _, _ = fit_loglog_slope(Rs, errors)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(f"slope {slope:.3f}" in lab for lab in labels)
    assert ax.get_xscale() == ax.get_yscale() == "log"
    plt.close("all")


def test_plot_kernel_approximations_rejects_empty_Rs():
    with raises(ValueError, "at least one"):
        plot_kernel_approximations(torch.randn(4, 2), [])
