"""The n-body analogue of attention: a direct O(N²) sum, a cutoff, near + far field, and low rank far away.

Notation (chapter 9): particles at ``x_1 … x_N`` (a tensor ``x`` of shape ``(N, dim)``) with masses (charges)
``m_1 … m_N`` and a kernel ``g(r)`` of the distance ``r = ‖x_i − x_j‖``. The potential at particle ``i`` is

    φ_i = Σ_{j ≠ i} m_j g(‖x_i − x_j‖),

the same sum as attention's ``v̂_i = Σ_j k(q_i, k_j) v_j`` with ``g`` for the similarity and ``m_j`` for the
values. Computing every φ_i directly costs O(N²) (:func:`direct_potential`).

- **Cutoff** (:func:`cutoff_potential`): keep only the pairs closer than a radius, the analogue of local
  (banded) attention. Fine for a short-range kernel such as the screened potential ``e^{−r/λ}/r``; for the
  long-range ``1/r`` the far particles, many and each weak, add up to a large part that the cutoff loses.
- **Near + far field** (:func:`cell_potential`): a grid of cells; the particles of neighbouring cells interact
  directly, a far cell acts through its multipole expansion about its centre (its total mass, order 0, plus its
  dipole, order 1). This is the idea of the fast multipole method (Greengard and Rokhlin, 1987) with one level of
  cells; the full method nests the cells in a tree and reaches O(N).
- **Low rank** (:func:`distance_kernel_matrix`, :func:`separation_ratio`, :func:`numerical_ranks`,
  :func:`hmatrix_partition`): the block of the kernel matrix between two well-separated clusters has singular
  values that fall fast, so it is close to a matrix of small rank p (p grows like log(1/ε) for a tolerance ε);
  the whole matrix, with its near pairs, is not. Splitting the matrix recursively into near blocks (kept) and
  well-separated blocks (low rank) gives the H-matrix picture.

Everything is computed in the dtype of ``x`` (float64 recommended for the error measurements).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from .linear_attention import numerical_rank
from .validation import (
    describe,
    require_callable,
    require_choice,
    require_entries,
    require_floats,
    require_int,
    require_number,
    require_same_dtype,
    require_tensor,
)

__all__ = [
    "Kernel",
    "inverse_distance",
    "screened_potential",
    "distance_kernel_matrix",
    "direct_potential",
    "direct_field",
    "cutoff_potential",
    "relative_error",
    "cell_potential",
    "default_n_cells",
    "separation_ratio",
    "kernel_singular_values",
    "numerical_ranks",
    "HBlock",
    "hmatrix_partition",
    "hmatrix_ranks",
]

_EXACT = "donot_use_mm_for_euclid_dist"
"""torch.cdist's exact mode: the default computes ‖x‖² + ‖y‖² − 2xᵀy, which loses the digits of close pairs."""

Kernel = Callable[[torch.Tensor], torch.Tensor]
"""The kernel g(r), a function of the distances r > 0, applied elementwise."""


def inverse_distance(r: torch.Tensor) -> torch.Tensor:
    """g(r) = 1/r: gravity and electrostatics, a long-range kernel."""
    return 1.0 / r


def screened_potential(r: torch.Tensor, length: float = 0.05) -> torch.Tensor:
    """g(r) = e^{−r/λ}/r with λ = ``length``: the screened (Yukawa) potential, a short-range kernel."""
    return torch.exp(-r / length) / r


# ----------------------------------------------------------------------------------------------------
# Direct sums, O(N²)


def _check_points(x: object, name: str) -> torch.Tensor:
    x = require_floats(x, name, "(N, dim)", ndim=2)
    require_int(x.shape[0], f"the number of points N of {name}", low=1)
    return x


def _check_masses(masses: object, x: torch.Tensor) -> torch.Tensor:
    masses = require_floats(masses, "masses", shape=(x.shape[0],))
    require_same_dtype(x=x, masses=masses)
    return masses


def distance_kernel_matrix(
    x: torch.Tensor, y: torch.Tensor | None = None, kernel: Kernel = inverse_distance
) -> torch.Tensor:
    """K_ij = g(‖x_i − y_j‖), x (m, dim), y (n, dim) → (m, n). With y omitted, y = x and K_ii = 0 (no self-term)."""
    x = _check_points(x, "x")
    kernel = require_callable(kernel, "kernel", "a function g(r) of the distances")
    same = y is None
    y = x if y is None else _check_points(y, "y")
    if y.shape[1] != x.shape[1] or y.dtype != x.dtype:
        raise ValueError(
            f"y must have shape (n, {x.shape[1]}) and dtype {x.dtype}, got {describe(y)}"
        )
    r = torch.cdist(x, y, compute_mode=_EXACT)
    if same:
        r = r.fill_diagonal_(1.0)  # any positive number: the diagonal is zeroed below
        return kernel(r).fill_diagonal_(0.0)
    return kernel(r)


def _blocked_pair_sum(
    x: torch.Tensor,
    masses: torch.Tensor,
    pair: Callable[[torch.Tensor], torch.Tensor],
    block: int = 1024,
) -> torch.Tensor:
    """Σ_{j ≠ i} m_j pair(x_i − x_j), computed block of targets by block (memory block × N, not N²)."""
    out = []
    index = torch.arange(x.shape[0], device=x.device)
    for start in range(0, x.shape[0], block):
        rows = slice(start, start + block)
        diff = x[rows].unsqueeze(1) - x.unsqueeze(0)  # (block, N, dim): x_i − x_j
        self_pair = index[rows].unsqueeze(1) == index  # (block, N)
        # a harmless stand-in, zeroed below
        diff = diff.masked_fill(self_pair.unsqueeze(-1), 1.0)
        values = pair(diff)  # (block, N) or (block, N, dim)
        keep = (~self_pair).to(x.dtype)
        if values.ndim == 3:
            out.append(torch.einsum("ijd,ij,j->id", values, keep, masses))
        else:
            out.append((values * keep) @ masses)
    return torch.cat(out)


def direct_potential(
    x: torch.Tensor, masses: torch.Tensor, kernel: Kernel = inverse_distance
) -> torch.Tensor:
    """φ_i = Σ_{j ≠ i} m_j g(‖x_i − x_j‖), x (N, dim), masses (N,) → (N,): every pair, O(N²) time."""
    x = _check_points(x, "x")
    masses = _check_masses(masses, x)
    kernel = require_callable(kernel, "kernel", "a function g(r) of the distances")
    return _blocked_pair_sum(x, masses, lambda d: kernel(d.norm(dim=-1)))


def direct_field(x: torch.Tensor, masses: torch.Tensor) -> torch.Tensor:
    """E_i = Σ_{j ≠ i} m_j (x_i − x_j)/‖x_i − x_j‖³ = −∇φ_i for g = 1/r, x (N, dim) → (N, dim): the force per mass."""
    x = _check_points(x, "x")
    masses = _check_masses(masses, x)
    return _blocked_pair_sum(x, masses, lambda d: d / d.norm(dim=-1, keepdim=True) ** 3)


def cutoff_potential(
    x: torch.Tensor,
    masses: torch.Tensor,
    radius: float,
    kernel: Kernel = inverse_distance,
) -> torch.Tensor:
    """φ_i^cut = Σ_{j ≠ i, ‖x_i − x_j‖ < radius} m_j g(‖x_i − x_j‖): only the near pairs (local attention)."""
    require_number(radius, "radius", low=0, low_open=True)
    kernel = require_callable(kernel, "kernel", "a function g(r) of the distances")

    def near(d: torch.Tensor) -> torch.Tensor:
        r = d.norm(dim=-1)
        return torch.where(r < radius, kernel(r), torch.zeros_like(r))

    x = _check_points(x, "x")
    return _blocked_pair_sum(x, _check_masses(masses, x), near)


def relative_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    """‖approx − exact‖ / ‖exact‖ (Euclidean norms over all entries)."""
    require_tensor(approx, "approx", "float")
    require_tensor(exact, "exact", "float")
    if approx.shape != exact.shape:
        raise ValueError(
            f"approx and exact must have the same shape, got {tuple(approx.shape)} and {tuple(exact.shape)}"
        )
    return float((approx - exact).norm() / exact.norm())


# ----------------------------------------------------------------------------------------------------
# Near field + far field on a grid of cells


def default_n_cells(n: int, dim: int = 2) -> int:
    """Cells per axis C with C^dim ≈ √(3^dim·N): balances 3^dim·N/C^dim near pairs and C^dim far cells per particle."""
    require_int(n, "n", low=1)
    require_int(dim, "dim", low=1)
    return max(1, round((3**dim * n) ** (1 / (2 * dim))))


def cell_potential(
    x: torch.Tensor,
    masses: torch.Tensor,
    n_cells: int | None = None,
    *,
    order: Literal[0, 1] = 1,
) -> torch.Tensor:
    """φ_i ≈ near field (direct, own and neighbouring cells) + far field (multipoles of the other cells), g = 1/r.

    The unit cube [0, 1)^dim is cut into ``n_cells`` cells per axis (default :func:`default_n_cells`). For the
    particle i in cell c:

    - near: Σ m_j/‖x_i − x_j‖ over the particles j ≠ i of the cells whose index differs from c by at most 1 on
      every axis (3^dim cells), exactly;
    - far: every other cell b acts through its expansion about its centre z_b, with M_b = Σ_{j ∈ b} m_j and
      p_b = Σ_{j ∈ b} m_j (x_j − z_b): M_b/‖x_i − z_b‖ (order 0) + p_bᵀ(x_i − z_b)/‖x_i − z_b‖³ (order 1).

    The error is that of the truncated expansion: about (a/ρ)^{order+1}, a the cell's radius and ρ ≥ 1.5 cell widths
    the distance to its centre. With ``n_cells ≤ 2`` every cell is a neighbour and the result is the direct sum.
    Cost: N·(3^dim·N/C^dim + C^dim) instead of N², i.e. O(N^1.5) at the default C (a tree of cells reaches O(N)).
    Points must lie in [0, 1)^dim.
    """
    x = _check_points(x, "x")
    masses = _check_masses(masses, x)
    require_choice(order, "order (0: monopole, 1: monopole + dipole)", (0, 1))
    n, dim = x.shape
    c = default_n_cells(n, dim) if n_cells is None else n_cells
    require_int(c, "n_cells", low=1)
    require_entries(
        x,
        "x",
        low=0,
        high=1,
        high_open=True,
        why="cell_potential needs points in the unit cube",
    )
    h = 1.0 / c

    # Which cell each particle is in, and its slot among the particles of that cell.
    cell_xyz = (x / h).floor().long().clamp(0, c - 1)  # (N, dim)
    strides = torch.tensor([c**a for a in reversed(range(dim))], device=x.device)
    cell = (cell_xyz * strides).sum(-1)  # (N,): flat cell index
    n_cell_total = c**dim
    order_ = torch.argsort(cell, stable=True)
    counts = torch.bincount(cell, minlength=n_cell_total)
    starts = counts.cumsum(0) - counts
    slot = torch.empty_like(cell)
    slot[order_] = torch.arange(n, device=x.device) - starts[cell[order_]]
    p = int(counts.max())

    # Padded per-cell arrays: positions (C^dim, P, dim), masses (C^dim, P) (0 in the empty slots), real slots.
    pos = x.new_zeros(n_cell_total, p, dim)
    mass = x.new_zeros(n_cell_total, p)
    real = torch.zeros(n_cell_total, p, dtype=torch.bool, device=x.device)
    pos[cell, slot], mass[cell, slot], real[cell, slot] = x, masses, True

    # Near field: the 3^dim neighbour offsets, each one batched over all cells.
    # (C^dim, dim)
    grid = torch.stack(
        torch.unravel_index(torch.arange(n_cell_total, device=x.device), (c,) * dim), -1
    )
    near = x.new_zeros(n_cell_total, p)
    for offset in itertools.product((-1, 0, 1), repeat=dim):
        other = grid + torch.tensor(offset, device=x.device)
        inside = ((other >= 0) & (other < c)).all(-1)  # (C^dim,): the neighbour exists
        src = (other.clamp(0, c - 1) * strides).sum(-1)
        r = torch.cdist(pos, pos[src], compute_mode=_EXACT)  # (C^dim, P, P)
        ok = real.unsqueeze(2) & real[src].unsqueeze(1) & inside.view(-1, 1, 1)
        if not any(offset):
            # no self-interaction
            ok = ok & ~torch.eye(p, dtype=torch.bool, device=x.device)
        inv = torch.where(
            ok, 1.0 / torch.where(ok, r, torch.ones_like(r)), torch.zeros_like(r)
        )
        near = near + (inv * mass[src].unsqueeze(1)).sum(-1)
    phi = near[cell, slot]  # (N,)

    # Far field: each particle against the expansions of the cells that are not its neighbours.
    centre = (grid.to(x.dtype) + 0.5) * h  # (C^dim, dim)
    total = mass.sum(-1)  # M_b
    # p_b (C^dim, dim)
    dipole = (mass.unsqueeze(-1) * (pos - centre.unsqueeze(1))).sum(1)
    for start in range(0, n, 2048):
        rows = slice(start, start + 2048)
        d = x[rows].unsqueeze(1) - centre  # (rows, C^dim, dim)
        far = ((cell_xyz[rows].unsqueeze(1) - grid).abs() > 1).any(-1)  # (rows, C^dim)
        r = d.norm(dim=-1).where(far, torch.ones(()))
        term = total / r
        if order == 1:
            term = term + (d * dipole).sum(-1) / r**3
        phi[rows] += (term * far).sum(-1)
    return phi


# ----------------------------------------------------------------------------------------------------
# Well-separated clusters and low rank


def separation_ratio(targets: torch.Tensor, sources: torch.Tensor) -> float:
    """δ = max_j ‖y_j − y*‖ / min_i ‖x_i − y*‖, y* the sources' centre: the targets are well-separated if δ < 1.

    The seed's definition: T₁ (targets x_i) is well-separated from T₂ (sources y_j) when ‖y_j − y*‖ ≤ δ‖x_i − y*‖
    for all i, j with δ < 1; then ‖x_i − y_j‖ ≈ ‖x_i − y*‖ and the block g(‖x_i − y_j‖) is nearly low-rank.
    """
    for name, points in (("targets", targets), ("sources", sources)):
        _check_points(points, name)
    centre = sources.mean(dim=0)
    spread = (sources - centre).norm(dim=-1).max()
    distance = (targets - centre).norm(dim=-1).min()
    return float(spread / distance) if distance > 0 else math.inf


def kernel_singular_values(
    x: torch.Tensor, y: torch.Tensor | None = None, kernel: Kernel = inverse_distance
) -> torch.Tensor:
    """σ_i / σ_1 of the kernel matrix g(‖x_i − y_j‖) (:func:`distance_kernel_matrix`), largest first."""
    sigma = torch.linalg.svdvals(distance_kernel_matrix(x, y, kernel))
    return sigma / sigma[0]


def numerical_ranks(a: torch.Tensor, eps: Sequence[float]) -> list[int]:
    """The rank of A at each relative tolerance ε: the number of singular values above ε·σ_1 (chapter 9).

    Chapter 8's :func:`companion.linear_attention.numerical_rank` counts them at one tolerance.
    """
    eps = list(eps)
    if not eps:
        raise ValueError(
            f"eps must be a non-empty list of positive tolerances, got {eps!r}"
        )
    for e in eps:
        require_number(e, "each tolerance in eps", low=0, low_open=True)
    return [numerical_rank(a, rtol=float(e)) for e in eps]


@dataclass(frozen=True)
class HBlock:
    """One block of an H-matrix partition: rows ``[r0, r1)``, columns ``[c0, c1)``, ``"near"`` (dense) or ``"far"``."""

    r0: int
    r1: int
    c0: int
    c1: int
    kind: Literal["near", "far"]

    @property
    def shape(self) -> tuple[int, int]:
        return self.r1 - self.r0, self.c1 - self.c0

    def of(self, a: torch.Tensor) -> torch.Tensor:
        """This block of the matrix ``a``."""
        return a[..., self.r0 : self.r1, self.c0 : self.c1]


def hmatrix_partition(n: int, leaf_size: int = 16, eta: float = 1.0) -> list[HBlock]:
    """Split the n × n matrix of n points in a row (index = position) into near and far (well-separated) blocks.

    Start from the whole matrix; a block of row range I and column range J is **far** if the ranges are separated
    by a gap at least as wide as the larger one divided by η (max(len I, len J) ≤ η·gap), **near** if it is not far
    and no larger than ``leaf_size``; otherwise it is split into its four quarters. The far blocks grow with
    their distance from the diagonal, the near ones hug it: the H-matrix picture.
    """
    require_int(n, "n", low=1)
    require_int(leaf_size, "leaf_size", low=1)
    require_number(eta, "eta", low=0, low_open=True)
    blocks: list[HBlock] = []

    def split(r0: int, r1: int, c0: int, c1: int) -> None:
        gap = max(c0 - r1, r0 - c1, 0)
        if gap > 0 and max(r1 - r0, c1 - c0) <= eta * gap:
            blocks.append(HBlock(r0, r1, c0, c1, "far"))
        elif max(r1 - r0, c1 - c0) <= leaf_size:
            blocks.append(HBlock(r0, r1, c0, c1, "near"))
        else:
            rm, cm = (r0 + r1) // 2, (c0 + c1) // 2
            for a, b in ((r0, rm), (rm, r1)):
                for c, d in ((c0, cm), (cm, c1)):
                    if a < b and c < d:
                        split(a, b, c, d)

    split(0, n, 0, n)
    return blocks


def hmatrix_ranks(
    a: torch.Tensor, blocks: Sequence[HBlock], eps: float = 1e-6
) -> list[int]:
    """The numerical rank at tolerance ε of each block of ``a`` (n, n): small for the far blocks of a smooth kernel."""
    require_tensor(a, "a", "float")
    if not all(isinstance(b, HBlock) for b in blocks):
        raise TypeError("blocks must be HBlock objects (from hmatrix_partition)")
    return [numerical_rank(b.of(a), rtol=eps) for b in blocks]
