"""Time of the n-body sums (chapter 9): :func:`companion.nbody.direct_potential` against
:func:`companion.nbody.cell_potential`, with the cell method's error."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import torch

from ..nbody import cell_potential, default_n_cells, direct_potential, relative_error
from ..validation import (
    require_int,
)
from .measuring import time_call

__all__ = ["NBodyMeasurement", "measure_nbody"]


@dataclass(frozen=True)
class NBodyMeasurement:
    """One row of :func:`measure_nbody`: N particles, seconds of the direct and of the cell sum, and its error."""

    n: int
    n_cells: int
    direct_seconds: float
    cell_seconds: float
    error: float

    @property
    def speedup(self) -> float:
        return self.direct_seconds / self.cell_seconds


def measure_nbody(
    ns: Iterable[int] = (1024, 2048, 4096, 8192),
    *,
    dim: int = 2,
    order: Literal[0, 1] = 1,
    min_run_time: float = 0.2,
    seed: int = 0,
) -> list[NBodyMeasurement]:
    """Time :func:`~companion.nbody.direct_potential` and :func:`~companion.nbody.cell_potential` (g = 1/r) on N
    uniform random points of [0, 1)^dim with unit masses, float64, and measure the cell method's relative error
    against the direct sum."""
    rows = []
    generator = torch.Generator().manual_seed(seed)
    for n in ns:
        require_int(n, "each n", low=1)
        x = torch.rand(n, dim, generator=generator, dtype=torch.float64)
        m = torch.ones(n, dtype=torch.float64)
        exact = direct_potential(x, m)
        approx = cell_potential(x, m, order=order)
        t_direct = time_call(direct_potential, x, m, min_run_time=min_run_time)
        t_cell = time_call(
            lambda x, m: cell_potential(x, m, order=order),
            x,
            m,
            min_run_time=min_run_time,
        )
        rows.append(
            NBodyMeasurement(
                n,
                default_n_cells(n, dim),
                t_direct,
                t_cell,
                relative_error(approx, exact),
            )
        )
    return rows
