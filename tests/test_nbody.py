"""The n-body analogue: direct sums, cutoff, near + far field on cells, well-separation, ranks, H-matrix blocks."""

from __future__ import annotations

import math

import pytest
import torch
from raising import raises

from companion.benchmarking.nbody import NBodyMeasurement, measure_nbody
from companion.nbody import (
    HBlock,
    cell_potential,
    cutoff_potential,
    default_n_cells,
    direct_field,
    direct_potential,
    distance_kernel_matrix,
    hmatrix_partition,
    hmatrix_ranks,
    inverse_distance,
    kernel_singular_values,
    numerical_ranks,
    relative_error,
    screened_potential,
    separation_ratio,
)


def particles(n, dim=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, dim, generator=g, dtype=torch.float64)
    m = torch.rand(n, generator=g, dtype=torch.float64) + 0.5
    return x, m


def test_direct_potential_by_loops():
    x, m = particles(30)
    expected = torch.zeros(30, dtype=torch.float64)
    for i in range(30):
        for j in range(30):
            if i != j:
                expected[i] += m[j] / math.dist(x[i].tolist(), x[j].tolist())
    assert torch.allclose(direct_potential(x, m), expected, rtol=1e-13)
    assert torch.allclose(distance_kernel_matrix(x) @ m, expected, rtol=1e-13)
    assert torch.allclose(
        direct_potential(x, m, screened_potential),
        distance_kernel_matrix(x, None, screened_potential) @ m,
    )


def test_direct_potential_in_blocks_equals_one_block():
    x, m = particles(2500)  # more than one block of 1024 targets
    assert relative_error(direct_potential(x, m), distance_kernel_matrix(x) @ m) < 1e-13


def test_field_is_minus_the_gradient_of_the_energy():
    x, m = particles(25, dim=3)
    x.requires_grad_(True)
    energy = 0.5 * (m * direct_potential(x, m)).sum()  # U = ½ Σ_i m_i φ_i
    (grad,) = torch.autograd.grad(energy, x)
    assert torch.allclose(-grad, m[:, None] * direct_field(x.detach(), m), rtol=1e-12)


def test_cutoff_covering_everything_is_the_direct_sum():
    x, m = particles(200)
    assert relative_error(cutoff_potential(x, m, 2.0), direct_potential(x, m)) < 1e-14


def test_cutoff_fails_for_the_long_range_kernel_only():
    x, m = particles(1500, seed=1)
    exact = {
        g: direct_potential(x, m, g) for g in (inverse_distance, screened_potential)
    }
    errors = {
        g: [relative_error(cutoff_potential(x, m, r, g), exact[g]) for r in (0.1, 0.2)]
        for g in exact
    }
    # 1/r: the far particles carry most of the potential
    assert min(errors[inverse_distance]) > 0.5
    # e^{-r/λ}/r: they carry almost nothing
    assert max(errors[screened_potential]) < 0.15
    assert errors[screened_potential][1] < errors[screened_potential][0] / 4


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_cells_that_are_all_neighbours_give_the_direct_sum(dim):
    x, m = particles(300, dim=dim)
    for n_cells in (1, 2):
        assert (
            relative_error(cell_potential(x, m, n_cells), direct_potential(x, m))
            < 1e-13
        )


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_near_plus_far_field_is_close_to_the_direct_sum(dim):
    x, m = particles(2000, dim=dim, seed=dim)
    exact = direct_potential(x, m)
    e0 = relative_error(cell_potential(x, m, order=0), exact)
    e1 = relative_error(cell_potential(x, m, order=1), exact)
    assert e1 < e0 < 2e-2
    assert e1 < 5e-3


def test_far_field_of_one_cell_is_its_multipole_expansion():
    # One source particle in a far cell: the order-1 expansion about the cell centre z is
    # m/‖x − z‖ + m (s − z)ᵀ(x − z)/‖x − z‖³, checked at the target against that formula.
    x = torch.tensor([[0.05, 0.05], [0.93, 0.81]], dtype=torch.float64)
    m = torch.tensor([1.0, 2.0], dtype=torch.float64)
    # centre of the source's cell for 4 cells per axis
    z = torch.tensor([0.875, 0.875], dtype=torch.float64)
    d = x[0] - z
    expected = m[1] / d.norm() + m[1] * (x[1] - z) @ d / d.norm() ** 3
    assert torch.allclose(cell_potential(x, m, 4, order=1)[0], expected, rtol=1e-14)
    assert torch.allclose(
        cell_potential(x, m, 4, order=0)[0], m[1] / d.norm(), rtol=1e-14
    )


def test_clustered_points_with_empty_cells():
    g = torch.Generator().manual_seed(3)
    x = (0.1 + 0.2 * torch.rand(800, 2, generator=g, dtype=torch.float64)).clamp(
        0, 0.999
    )
    x[:100] += 0.6  # two clusters, most cells empty
    m = torch.ones(800, dtype=torch.float64)
    assert relative_error(cell_potential(x, m, 12), direct_potential(x, m)) < 5e-3


def test_cell_errors():
    x, m = particles(10)
    with raises(ValueError, "unit cube"):
        cell_potential(x + 1.0, m)
    with raises(ValueError, "order"):
        cell_potential(x, m, order=2)
    with raises(ValueError, "shape (10,)"):
        direct_potential(x, m[:5])
    with raises(TypeError, "kernel"):
        direct_potential(x, m, kernel=3)
    with raises(ValueError, "radius"):
        cutoff_potential(x, m, 0.0)


def test_default_cells_balance_near_and_far_work():
    assert default_n_cells(16384, 2) == round((9 * 16384) ** 0.25)
    assert default_n_cells(1, 1) == 2


def test_measure_nbody_rows():
    rows = measure_nbody([512], min_run_time=0.01)
    assert len(rows) == 1 and isinstance(rows[0], NBodyMeasurement)
    assert rows[0].error < 1e-2 and rows[0].direct_seconds > 0 and rows[0].speedup > 0


# ----------------------------------------------------------------------------------------------------
# Well-separation and low rank


def test_separation_ratio_by_hand():
    sources = torch.tensor([[-1.0], [1.0]], dtype=torch.float64)  # centre 0, spread 1
    targets = torch.tensor([[4.0], [5.0]], dtype=torch.float64)  # nearest at distance 4
    assert separation_ratio(targets, sources) == 0.25
    # a cluster against itself: not separated
    assert separation_ratio(sources, sources) == 1.0
    # a target at the centre
    assert separation_ratio(torch.zeros(1, 1, dtype=torch.float64), sources) == math.inf


def points_on_a_line(a, b, n):
    return torch.linspace(a, b, n, dtype=torch.float64)[:, None]


def test_well_separated_block_rank_grows_like_log_one_over_eps():
    eps = [1e-2, 1e-4, 1e-6, 1e-8, 1e-10, 1e-12]
    x, y = points_on_a_line(0, 1, 400), points_on_a_line(2, 3, 400)
    assert separation_ratio(x, y) < 1
    ranks = numerical_ranks(distance_kernel_matrix(x, y), eps)
    assert ranks == sorted(ranks) and max(ranks) <= 12  # far below the block size 400
    # rank(ε) ≈ a + b·log(1/ε): a straight line in log(1/ε), fitted by least squares.
    t = torch.tensor([math.log(1 / e) for e in eps], dtype=torch.float64)
    r = torch.tensor(ranks, dtype=torch.float64)
    slope = ((t - t.mean()) * (r - r.mean())).sum() / ((t - t.mean()) ** 2).sum()
    fit = r.mean() + slope * (t - t.mean())
    r2 = 1 - ((r - fit) ** 2).sum() / ((r - r.mean()) ** 2).sum()
    assert slope > 0 and r2 > 0.95


def test_whole_matrix_is_not_low_rank():
    q = points_on_a_line(0, 1, 400)
    k = q + 0.5 / 400  # queries and keys interleaved: every query has keys nearby
    ranks = numerical_ranks(distance_kernel_matrix(q, k), [1e-2, 1e-6])
    assert min(ranks) > 300
    sigma = kernel_singular_values(q, k)
    assert sigma[0] == 1 and sigma[50] > 1e-2  # slow decay
    far = kernel_singular_values(q, points_on_a_line(2, 3, 400))
    assert far[10] < 1e-10  # fast decay


def test_hmatrix_blocks_tile_the_matrix_once():
    for n, leaf in ((256, 16), (100, 8), (33, 4)):
        blocks = hmatrix_partition(n, leaf)
        cover = torch.zeros(n, n, dtype=torch.int64)
        for b in blocks:
            cover[b.r0 : b.r1, b.c0 : b.c1] += 1
        assert bool((cover == 1).all())


def test_hmatrix_blocks_near_hug_the_diagonal_far_are_separated():
    n, leaf = 256, 16
    blocks = hmatrix_partition(n, leaf)
    for b in blocks:
        gap = max(b.c0 - b.r1, b.r0 - b.c1, 0)
        if b.kind == "far":
            assert gap > 0 and max(b.shape) <= gap
        else:
            assert max(b.shape) <= leaf and gap < 2 * leaf
    kinds = {b.kind for b in blocks}
    assert kinds == {"near", "far"}
    # Far blocks get larger away from the diagonal: the largest is a quarter of the matrix's side.
    assert max(b.shape[0] for b in blocks if b.kind == "far") == n // 4
    # The number of blocks grows like n: doubling n about doubles it.
    assert len(hmatrix_partition(4096, leaf)) < 2.1 * len(hmatrix_partition(2048, leaf))


def test_far_blocks_of_the_kernel_matrix_are_low_rank():
    n = 256
    x = points_on_a_line(0, 1, n)
    a = distance_kernel_matrix(x)
    blocks = hmatrix_partition(n, 16)
    ranks = hmatrix_ranks(a, blocks, eps=1e-8)
    far = [r for r, b in zip(ranks, blocks, strict=True) if b.kind == "far"]
    near = [r for r, b in zip(ranks, blocks, strict=True) if b.kind == "near"]
    assert max(far) <= 8
    assert max(near) == 16  # the blocks on the diagonal are full rank
    assert isinstance(blocks[0], HBlock) and blocks[0].of(a).shape == blocks[0].shape


def test_rank_helpers_errors():
    with raises(ValueError, "eps"):
        numerical_ranks(torch.eye(3, dtype=torch.float64), [])
    with raises(ValueError, "eta"):
        hmatrix_partition(16, 4, eta=0)
    with raises(TypeError, "HBlock"):
        hmatrix_ranks(torch.eye(3, dtype=torch.float64), [(0, 1, 0, 1)])
