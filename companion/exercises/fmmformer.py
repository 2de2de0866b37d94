"""Checkers for the FMMformer chapter.

================================  ==========================================================================
checker                           what the student writes
================================  ==========================================================================
``check_causal_band_mask``        ``causal_band_mask(n, b) -> (n, n)`` boolean: ``True`` where
                                  ``0 <= i - j < b`` (query i sees itself and the b - 1 keys before it)
``check_banded_softmax``          ``banded_softmax(q, k, v, b)``: ``softmax(band_b(QKᵀ/√d_k)) V`` for the
                                  causal band, ``(..., n, d_k) → (..., n, d_v)``, without an n × n matrix
``check_fmm_blend``               ``fmm_blend(q, k, v, b, w_near, w_far)``: causal FMMformer attention,
                                  ``w_near · DV + w_far · (two linear attentions: elu(x) + 1, elu(−x) + 1)``
``check_numerical_rank``          ``numerical_rank(a, eps) -> int``: how many singular values of ``a``
                                  exceed ``eps · σ_1``
================================  ==========================================================================
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..banded_attention import band_mask, banded_attention, banded_attention_dense
from ..fmmformer import elu_flip_plus_one, fmmformer_attention
from ..linear_attention import elu_plus_one, linear_attention, numerical_rank
from .checking import Checker, case, compare, expect_memory

__all__ = ["check_causal_band_mask", "check_banded_softmax", "check_fmm_blend", "check_numerical_rank"]


# --- the band mask ----------------------------------------------------------------------------------------


def _causal_band(n: int, b: int) -> torch.Tensor:
    return band_mask(n, n, b, causal=True)


def _offsets(n: int) -> torch.Tensor:
    i = torch.arange(n)
    return i.unsqueeze(1) - i  # i - j


check_causal_band_mask = compare(
    "causal_band_mask",
    _causal_band,
    lambda: [
        case(5, 2, why="each query sees itself and the key just before it"),
        case(6, 3, why="a band of 3 keys"),
        case(4, 1, why="b = 1: only the diagonal"),
        case(4, 4, why="b = n: the whole causal triangle"),
        case(3, 10, why="b > n: still the causal triangle, nothing more"),
        case(12, 5, why="a longer sequence"),
    ],
    mistakes=[
        (
            lambda n, b: _offsets(n).abs() < b,
            "Your band looks both ways (|i - j| < b): the causal band never lets query i see a key j > i.",
        ),
        (
            lambda n, b: (_offsets(n) >= 0) & (_offsets(n) <= b),
            "Your band holds b + 1 keys: query i sees itself and b - 1 keys before it, 0 <= i - j < b.",
        ),
        (
            lambda n, b: (_offsets(n) > 0) & (_offsets(n) <= b),
            "Query i must see itself (i - j = 0): the band is 0 <= i - j < b, not 0 < i - j <= b.",
        ),
        (lambda n, b: _causal_band(n, b).T, "Rows are queries i, columns keys j: your mask is the transpose."),
        (lambda n, b: ~_causal_band(n, b), "True means 'may attend': inside the band, not outside it."),
    ],
    hint="mask[i, j] is True exactly when 0 <= i - j < b.",
    hidden=lambda: [case(int(n), int(b), why="random n and b") for n, b in torch.randint(1, 14, (4, 2)).tolist()],
    withhold=["companion.banded_attention.band_mask"],
    what="The mask",
    atol=0,
    rtol=0,
)


# --- banded softmax in O(n·b) ------------------------------------------------------------------------------


def _banded(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: int) -> torch.Tensor:
    return banded_attention(q, k, v, causal=True, bandwidth=b)


_MISTAKES_BANDED = [
    (
        lambda q, k, v, b: banded_attention(q * math.sqrt(q.shape[-1]), k, v, causal=True, bandwidth=b),
        "Divide the scores by √d_k before the softmax.",
    ),
    (
        lambda q, k, v, b: banded_attention(q, k, v, causal=False, bandwidth=b),
        "Your band also reads keys after the query (|i - j| < b): the causal band is 0 <= i - j < b.",
    ),
    (
        lambda q, k, v, b: banded_attention(q, k, v, causal=True, bandwidth=b + 1),
        "Your band holds b + 1 keys: query i sees itself and the b - 1 keys before it.",
    ),
    (
        lambda q, k, v, b: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "You computed full causal attention: keys more than b - 1 positions back must get weight 0.",
    ),
    (
        lambda q, k, v, b: banded_attention_dense(q, k, v, causal=True, bandwidth=b, return_weights=True)[1],
        "Return the weighted values D V, not the weights D.",
    ),
]

_banded_values = compare(
    "banded_softmax",
    _banded,
    lambda: [
        case(torch.randn(6, 4), torch.randn(6, 4), torch.randn(6, 3), 2, why="one head, n = 6, b = 2"),
        case(torch.randn(2, 3, 9, 4), torch.randn(2, 3, 9, 4), torch.randn(2, 3, 9, 5), 3, why="(B, h, n, d)"),
        case(torch.randn(5, 2), torch.randn(5, 2), torch.randn(5, 2), 1, why="b = 1: each query reads its own value"),
        case(torch.randn(7, 4), torch.randn(7, 4), torch.randn(7, 4), 7, why="b = n: plain causal attention"),
        case(torch.randn(4, 3), torch.randn(4, 3), torch.randn(4, 3), 9, why="b > n"),
        case(
            10 * torch.randn(1, 40, 8),
            10 * torch.randn(1, 40, 8),
            torch.randn(1, 40, 8),
            6,
            why="large scores: subtract the row maximum before exp",
        ),
    ],
    mistakes=_MISTAKES_BANDED,
    hint="For query i the weights are softmax over j = i - b + 1 … i of q_i·k_j/√d_k; zero elsewhere.",
    what="The output",
)

MEMORY_N = 2048
"""The sequence length of the memory check: one n × n float32 matrix is 16 MiB there."""


def _banded_memory(student) -> tuple[int, int]:
    count, hidden = _banded_values._cases(student)
    n, d, b = MEMORY_N, 8, 16
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(n, d, generator=g) for _ in range(3))
    square = n * n * q.element_size()
    expect_memory(
        student,
        _banded,
        (q, k, v, b),
        input=f"q, k, v of shape ({n}, {d}), b={b}",
        limit=square // 4,
        problem=f"an n × n score matrix takes {square / 2**20:.0f} MiB at n = {n} (the band has n·b = {n * b} scores)",
        hint="Compute only the scores inside the band: pad k and v with b - 1 rows in front and gather, for "
        "each query, its b keys (k_pad.unfold(-2, b, 1) is a view), then softmax over those b. NumPy arrays count "
        "too.",
    )
    return count + 1, hidden


check_banded_softmax = Checker(
    "banded_softmax",
    _banded_memory,
    kind="function",
    withhold=["companion.banded_attention.banded_attention", "companion.banded_attention.banded_attention_dense"],
)


# --- the blend ---------------------------------------------------------------------------------------------


def _blend(q, k, v, b, w_near, w_far):
    return fmmformer_attention(q, k, v, causal=True, bandwidth=b, w_near=w_near, w_far=w_far)


def _shared_denominator(q, k, v, b, w_near, w_far):
    """One denominator for both maps: (Σ_l φ_l(Q)φ_l(K)ᵀ)V / (Σ_l φ_l(Q)φ_l(K)ᵀ)1, causal."""
    sim = sum(f(q) @ f(k).transpose(-2, -1) for f in (elu_plus_one, elu_flip_plus_one)).tril()
    far = (sim @ v) / sim.sum(-1, keepdim=True)
    return w_near * banded_attention(q, k, v, causal=True, bandwidth=b) + w_far * far


check_fmm_blend = compare(
    "fmm_blend",
    _blend,
    lambda: [
        case(
            torch.randn(2, 2, 10, 4),
            torch.randn(2, 2, 10, 4),
            torch.randn(2, 2, 10, 4),
            4,
            1.0,
            0.0,
            why="w_far = 0: banded attention alone",
        ),
        case(
            torch.randn(1, 12, 4),
            torch.randn(1, 12, 4),
            torch.randn(1, 12, 2),
            3,
            0.0,
            1.0,
            why="w_near = 0: the far field alone",
        ),
        case(torch.randn(8, 4), torch.randn(8, 4), torch.randn(8, 3), 3, 0.7, 0.4, why="one head, both terms"),
        case(
            torch.randn(2, 3, 16, 8),
            torch.randn(2, 3, 16, 8),
            torch.randn(2, 3, 16, 8),
            5,
            0.3,
            1.5,
            why="(B, h, n, d) with unequal weights",
        ),
    ],
    mistakes=[
        (
            lambda q, k, v, b, wn, wf: wn * _banded(q, k, v, b) + wf * linear_attention(q, k, v, causal=True),
            "The far field has two terms, one linear attention with elu(x) + 1 and one with elu(-x) + 1.",
        ),
        (
            _shared_denominator,
            "Each feature map is its own linear attention with its own denominator φ_l(q_i)ᵀ Σ_j φ_l(k_j).",
        ),
        (
            lambda q, k, v, b, wn, wf: _blend(q, k, v, b, wf, wn),
            "w_near multiplies the banded (near) term, w_far the low-rank (far) term: yours are swapped.",
        ),
        (
            lambda q, k, v, b, wn, wf: (
                wn * _banded(q, k, v, b)
                + wf * sum(linear_attention(q, k, v, feature_map=f) for f in (elu_plus_one, elu_flip_plus_one))
            ),
            "The far field must be causal too (causal=True in linear_attention): yours reads future keys.",
        ),
        (
            lambda q, k, v, b, wn, wf: (wn * _banded(q, k, v, b) + wf * _blend(q, k, v, b, 0.0, 1.0)) / (wn + wf),
            "Do not divide by w_near + w_far: the blend is w_near · DV + w_far · far field.",
        ),
    ],
    hint="V̂ = w_near · softmax(band_b(QKᵀ/√d_k)) V + w_far · Σ_l linear_attention(q, k, v, causal, φ_l).",
    withhold=[
        "companion.fmmformer.fmmformer_attention",
        "companion.fmmformer.far_field_attention",
        "companion.fmmformer.FMMAttention.forward",
    ],
    what="The output",
)


# --- a rank check ------------------------------------------------------------------------------------------


def _rank(a: torch.Tensor, eps: float) -> int:
    return numerical_rank(a, rtol=eps)


def _low_rank(m: int, n: int, r: int) -> torch.Tensor:
    return torch.randn(m, r, dtype=torch.float64) @ torch.randn(r, n, dtype=torch.float64)


def _decaying(n: int, scale: float) -> torch.Tensor:
    u, _ = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64))
    w, _ = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64))
    return scale * (u * 0.5 ** torch.arange(n, dtype=torch.float64)) @ w.T


def _eig_rank(a: torch.Tensor, eps: float) -> int:
    lam = torch.linalg.eigvals(a).abs() if a.shape[0] == a.shape[1] else torch.linalg.svdvals(a)
    return int((lam > eps * lam.max()).sum())


check_numerical_rank = compare(
    "numerical_rank",
    _rank,
    lambda: [
        case(_low_rank(12, 10, 3), 1e-8, why="a product of (12, 3) and (3, 10) factors: rank 3"),
        case(_decaying(16, 1.0), 1e-3, why="singular values 1, 1/2, 1/4, …"),
        case(_decaying(16, 1e-4), 1e-3, why="the same matrix times 1e-4: the tolerance is relative to σ_1"),
        case(
            torch.triu(torch.ones(6, 6, dtype=torch.float64)),
            1e-6,
            why="an upper-triangular matrix of ones: all its eigenvalues are 1, its singular values are not",
        ),
        case(
            _low_rank(5, 9, 5) @ torch.diag(torch.linspace(1, 2, 9, dtype=torch.float64)),
            1e-8,
            why="a wide matrix of rank 5",
        ),
        case(
            torch.tensor([[1.0, 1e3], [0.0, 1.0]], dtype=torch.float64),
            1e-5,
            why="a non-normal matrix: eigenvalues 1 and 1, σ_2 / σ_1 ≈ 1e-6",
        ),
    ],
    mistakes=[
        (
            lambda a, eps: int((torch.linalg.svdvals(a) > eps).sum()),
            "The tolerance is relative: count σ_i > eps · σ_1, not σ_i > eps.",
        ),
        (_eig_rank, "Use singular values (torch.linalg.svdvals), not the sizes of eigenvalues."),
        (
            lambda a, eps: int(torch.linalg.matrix_rank(a)),
            "torch.linalg.matrix_rank's default tolerance is machine precision: use the given eps.",
        ),
        (
            lambda a, eps: int((torch.linalg.svdvals(a) >= eps * torch.linalg.svdvals(a)[0]).sum()) - 1,
            "Count every singular value above eps · σ_1, σ_1 itself included.",
        ),
    ],
    hint="rank_eps(A) = #{i : σ_i(A) > eps · σ_1(A)}.",
    withhold=["companion.linear_attention.numerical_rank"],
    what="The rank",
    atol=0,
    rtol=0,
)
