"""Chapter 8's figures: what each draws, and the input it refuses."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.colors import to_rgba
from raising import raises

from companion.fmmformer import attention_spectrum
from companion.nbody import distance_kernel_matrix, hmatrix_partition, hmatrix_ranks
from companion.plotting.fmmformer import (
    FAR_COLOUR,
    NEAR_COLOUR,
    plot_attention_spectrum,
    plot_hmatrix_partition,
    plot_singular_values,
)


def test_hmatrix_picture_has_one_rectangle_per_block_coloured_by_kind():
    blocks = hmatrix_partition(128, 8)
    a = distance_kernel_matrix(torch.linspace(0, 1, 128, dtype=torch.float64)[:, None])
    ranks = hmatrix_ranks(a, blocks, 1e-6)
    ax = plot_hmatrix_partition(blocks, ranks)
    patches = ax.patches
    assert len(patches) == len(blocks)
    for patch, block in zip(patches, blocks, strict=True):
        colour = NEAR_COLOUR if block.kind == "near" else FAR_COLOUR
        assert patch.get_facecolor() == to_rgba(colour)
        assert (
            patch.get_x(),
            patch.get_y(),
            patch.get_width(),
            patch.get_height(),
        ) == (
            block.c0,
            block.r0,
            block.c1 - block.c0,
            block.r1 - block.r0,
        )
    shown = [int(t.get_text()) for t in ax.texts]
    big_far = [
        r
        for r, b in zip(ranks, blocks, strict=True)
        if b.kind == "far" and min(b.shape) >= 8
    ]
    assert shown == big_far and shown
    assert ax.get_ylim() == (128, 0)  # row 0 at the top, as a matrix
    plt.close("all")


def test_spectrum_plot_draws_both_curves_and_the_tolerance():
    a = torch.softmax(
        torch.randn(
            50, 50, generator=torch.Generator().manual_seed(0), dtype=torch.float64
        ),
        -1,
    )
    spec = attention_spectrum(a, 5, causal=False)
    ax = plot_attention_spectrum(spec, eps=1e-2)
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["A", "A − band_5(A)", "ε = 0.01"]
    np.testing.assert_allclose(lines[0].get_ydata(), spec.full.numpy())
    assert ax.get_yscale() == "log"
    plt.close("all")


def test_a_floor_clips_tiny_values_and_the_axis():
    sigma = torch.tensor([1.0, 1e-2, 1e-4, 1e-300, 0.0], dtype=torch.float64)
    ax = plot_singular_values({"s": sigma}, floor=1e-6)
    np.testing.assert_allclose(
        ax.get_lines()[0].get_ydata(), [1.0, 1e-2, 1e-4, 1e-6, 1e-6]
    )
    assert ax.get_ylim()[0] == 5e-7
    for bad in (0.0, -1.0, "1e-6", True):
        with raises((TypeError, ValueError), "floor"):
            plot_singular_values({"s": sigma}, floor=bad)
    plt.close("all")


def test_zero_singular_values_are_drawn_at_the_bottom_not_dropped():
    ax = plot_singular_values({"zeros": torch.zeros(4, dtype=torch.float64)})
    assert len(ax.get_lines()[0].get_ydata()) == 4
    plt.close("all")


def test_plots_refuse_other_input():
    with raises(TypeError, "HBlock"):
        plot_hmatrix_partition([(0, 1, 0, 1)])
    with raises(ValueError, "one rank per block"):
        plot_hmatrix_partition(hmatrix_partition(32, 8), [1])
    with raises(TypeError, "1-D"):
        plot_singular_values({"a": torch.ones(2, 2)})
    with raises(TypeError, "AttentionSpectrum"):
        plot_attention_spectrum(torch.ones(3))
