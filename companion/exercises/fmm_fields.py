"""Checkers for the FMMformer chapter's two fields as matrices.

================================  ==========================================================================
checker                           what the student writes
================================  ==========================================================================
``check_best_rank_k``             ``best_rank_k(a, k) -> (m, n)``: the best rank-k approximation
                                  A_k = Σ_{i<=k} σ_i u_i v_iᵀ of a (m, n) matrix (truncated SVD)
``check_near_far_split``          ``near_far_split(a, b, k) -> (near, far)``: near = band_b(a) (the
                                  causal band 0 <= i - j < b), far = the best rank-k approximation
                                  of a - near
================================  ==========================================================================
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..banded_attention import band_mask, band_matrix
from ..linear_attention import best_rank_r_approximation
from .checking import case, compare

__all__ = ["check_best_rank_k", "check_near_far_split"]


# --- the far field as a low-rank matrix: the best rank-k approximation -------------------------------------------


def _rank_k(a: torch.Tensor, k: int) -> torch.Tensor:
    return best_rank_r_approximation(a, k)


def _svd(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.linalg.svd(a, full_matrices=False)


def _spectrum(m: int, n: int, sigma: Sequence[float]) -> torch.Tensor:
    """A random (m, n) matrix with the given singular values."""
    r = len(sigma)
    u, _ = torch.linalg.qr(torch.randn(m, r, dtype=torch.float64))
    w, _ = torch.linalg.qr(torch.randn(n, r, dtype=torch.float64))
    return (u * torch.tensor(sigma, dtype=torch.float64)) @ w.T


def _gauss(m: int, n: int) -> torch.Tensor:
    return torch.randn(m, n, dtype=torch.float64)


def _smallest_k(a: torch.Tensor, k: int) -> torch.Tensor:
    u, s, vh = _svd(a)
    r = s.numel()
    return (u[:, r - k :] * s[r - k :]) @ vh[r - k :]


def _kth_term(a: torch.Tensor, k: int) -> torch.Tensor:
    u, s, vh = _svd(a)
    return (
        torch.zeros_like(a)
        if k == 0
        else s[k - 1] * torch.outer(u[:, k - 1], vh[k - 1])
    )


_EY_HINT = (
    "A_k = U_k diag(σ_1, …, σ_k) V_kᵀ = Σ_{i=1}^k σ_i u_i v_iᵀ, from u, s, vh = torch.linalg.svd(a, "
    "full_matrices=False) (largest σ first, the v_i are the rows of vh); it misses A by "
    "‖A − A_k‖_F² = Σ_{i>k} σ_i², less than any other matrix of rank k (Eckart–Young)."
)

check_best_rank_k = compare(
    "best_rank_k",
    _rank_k,
    lambda: [
        case(
            _spectrum(6, 5, [4.0, 2.0, 1.0, 0.5, 0.25]),
            2,
            why="singular values 4, 2, 1, 1/2, 1/4: keep two",
        ),
        case(_gauss(8, 6), 3, why="a random (8, 6) matrix"),
        case(_gauss(4, 9), 1, why="a wide matrix, k = 1: one term σ_1 u_1 v_1ᵀ"),
        case(_gauss(5, 5), 0, why="k = 0: the zero matrix"),
        case(_gauss(6, 4), 4, why="k = min(m, n): A itself"),
        case(1e3 * _gauss(10, 10), 5, why="large entries: the tolerance is relative"),
    ],
    mistakes=[
        (
            lambda a, k: _svd(a)[0][:, :k] @ _svd(a)[2][:k],
            "Scale each term by its singular value: σ_i u_i v_iᵀ, not u_i v_iᵀ.",
        ),
        (
            _smallest_k,
            "Keep the k largest singular values (torch.linalg.svd returns them largest first).",
        ),
        (
            lambda a, k: _rank_k(a, min(k + 1, min(a.shape))),
            "Keep k terms, σ_1 … σ_k: yours has k + 1 (Python's slices :k stop before k).",
        ),
        (
            _kth_term,
            "Sum the first k terms σ_i u_i v_iᵀ, i = 1 … k, not the k-th alone.",
        ),
        (
            lambda a, k: a - _rank_k(a, k),
            "Return the approximation A_k, not what it leaves out, A − A_k.",
        ),
        (
            lambda a, k: (_svd(a)[0][:, :k] * _svd(a)[1][:k]) @ _svd(a)[2][:, :k].T,
            "torch.linalg.svd returns Vᵀ: the right singular vectors v_i are the rows of vh, vh[:k], not its columns.",
        ),
        (
            lambda a, k: a * (torch.arange(a.shape[1]) < k),
            "Keeping k columns of A gives a matrix of rank ≤ k, but not the best one: "
            + _EY_HINT,
        ),
    ],
    hint=_EY_HINT,
    hidden=lambda: [
        case(
            _gauss(m, n),
            int(torch.randint(0, min(m, n) + 1, ())),
            why="a random matrix and k",
        )
        for m, n in torch.randint(2, 12, (4, 2)).tolist()
    ],
    withhold=[
        "companion.linear_attention.best_rank_r_approximation",
        "companion.linear_attention.low_rank_factors",
    ],
    what="The approximation",
)


# --- the FMMformer split of an attention matrix: a band plus a low-rank remainder --------------------------------


def _near_far(a: torch.Tensor, b: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    near = band_matrix(a, b, causal=True)
    return near, best_rank_r_approximation(a - near, k)


def _attention_matrix(n: int, causal: bool = True) -> torch.Tensor:
    """A random (n, n) attention matrix: rows of weights that sum to 1, causal or not."""
    scores = 2 * torch.randn(n, n, dtype=torch.float64)
    if causal:
        scores = scores.masked_fill(
            ~torch.ones(n, n, dtype=torch.bool).tril(), -math.inf
        )
    return torch.softmax(scores, dim=-1)


def _split_with(
    near: Callable[[torch.Tensor, int], torch.Tensor],
) -> Callable[..., Any]:
    """A split whose near field is ``near(a, b)``, the far field the best rank-k approximation of the rest."""
    return lambda a, b, k: (near(a, b), _rank_k(a - near(a, b), k))


def _offset_band(low: int, high: int) -> Callable[[torch.Tensor, int], torch.Tensor]:
    """The entries with low <= i - j < b + high kept."""

    def near(a: torch.Tensor, b: int) -> torch.Tensor:
        off = _offsets(a.shape[-1])
        return a * ((off >= low) & (off < b + high))

    return near


def _offsets(n: int) -> torch.Tensor:
    i = torch.arange(n)
    return i.unsqueeze(1) - i  # i - j


def _hidden_splits() -> list[Any]:
    cases = []
    for _ in range(3):
        n = int(torch.randint(3, 13, ()))
        b, k = (
            int(torch.randint(1, n + 1, ())),
            int(torch.randint(0, min(n, 4) + 1, ())),
        )
        causal = bool(torch.rand(()) < 0.5)
        cases.append(
            case(
                _attention_matrix(n, causal),
                b,
                k,
                why=f"a random {'causal ' * causal}attention matrix",
            )
        )
    return cases


check_near_far_split = compare(
    "near_far_split",
    _near_far,
    lambda: [
        case(
            _attention_matrix(6),
            2,
            1,
            why="a causal attention matrix, n = 6, b = 2, k = 1",
        ),
        case(_attention_matrix(8), 3, 2, why="b = 3, k = 2"),
        case(_attention_matrix(5), 1, 2, why="b = 1: the near field is the diagonal"),
        case(
            _attention_matrix(4),
            6,
            1,
            why="b > n: the band holds the whole causal triangle, nothing is left",
        ),
        case(_attention_matrix(7), 2, 0, why="k = 0: no far field"),
        case(
            _attention_matrix(7, causal=False),
            3,
            2,
            why="a non-causal matrix: the far field holds j > i too",
        ),
        case(_attention_matrix(12), 4, 3, why="a longer sequence"),
    ],
    mistakes=[
        (
            _split_with(lambda a, b: band_matrix(a, b, causal=False)),
            "Your band looks both ways (|i − j| < b): the near field is the causal band 0 <= i − j < b, and the "
            "entries with j > i belong to the far field.",
        ),
        (
            _split_with(_offset_band(0, 1)),
            "Your band holds b + 1 keys: query i keeps itself and the b − 1 before it.",
        ),
        (
            _split_with(_offset_band(1, 1)),
            "The band includes the diagonal (i − j = 0): 0 <= i − j < b.",
        ),
        (
            _split_with(
                lambda a, b: a * band_mask(a.shape[-2], a.shape[-1], b, causal=True).T
            ),
            "Rows are queries i, columns keys j: your band is the transpose (0 <= j − i < b).",
        ),
        (
            lambda a, b, k: (band_matrix(a, b, causal=True), _rank_k(a, k)),
            "The far field approximates what the band leaves, A − band_b(A), not A itself.",
        ),
        (
            lambda a, b, k: (
                band_matrix(a, b, causal=True),
                a - band_matrix(a, b, causal=True),
            ),
            "The far field is the best rank-k approximation of A − band_b(A), not all of A − band_b(A).",
        ),
        (
            lambda a, b, k: (
                band_matrix(a, b, causal=True),
                _rank_k(a, k) - band_matrix(_rank_k(a, k), b, causal=True),
            ),
            "Take the band out first, then approximate the rest: zeroing the band of A_k gives a matrix that is "
            "neither of rank k nor the best approximation of A − band_b(A).",
        ),
        (
            lambda a, b, k: _near_far(a, b, k)[::-1],
            "Return (near, far): the band first, then the low-rank part.",
        ),
        (
            lambda a, b, k: (
                a - band_matrix(a, b, causal=True),
                _rank_k(band_matrix(a, b, causal=True), k),
            ),
            "The near field keeps the entries inside the band (0 <= i − j < b) and zeros elsewhere, not the outside.",
        ),
    ],
    hint="near = A with every entry outside the causal band 0 <= i − j < b set to 0; far = best_rank_k(A − near, k), "
    "your function of the exercise before.",
    hidden=_hidden_splits,
    withhold=[
        "companion.banded_attention.band_matrix",
        "companion.banded_attention.band_mask",
        "companion.linear_attention.best_rank_r_approximation",
        "companion.linear_attention.low_rank_factors",
    ],
    what="The split",
)
