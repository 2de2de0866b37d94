"""FMMformer (Nguyen, Suliafu, Osher, Chen and Wang, 2021): banded near field plus low-rank far field, in O(N).

Notation (chapter 9): queries ``q`` of shape ``(..., n_q, d_k)``, keys ``k`` of shape ``(..., n_k, d_k)``, values
``v`` of shape ``(..., n_k, d_v)``; a bandwidth ``k`` and ``r`` feature maps ``φ_1 … φ_r``. FMMformer replaces
softmax attention ``V̂ = softmax(QKᵀ/√d_k) V`` by

    V̂ = w₁ · D V  +  w₂ · Σ_l φ_l(Q)(φ_l(K)ᵀ V) / (φ_l(Q) φ_l(K)ᵀ 1),

- the near field ``D V`` with ``D = softmax(band_k(QKᵀ/√d_k))``: :class:`companion.banded_attention.BandedAttention`,
  O(N·k);
- the far field: one linear attention (:class:`companion.linear_attention.LinearAttention`, chapter 8) per
  feature map, each a matrix of rank ≤ d_k, so the far-field matrix has rank ≤ r·d_k, and costs O(N);
- ``w₁, w₂``: learned blend weights, positive in the paper (here ``softplus`` of a free parameter); the released
  code leaves them unconstrained (and keeps one per head and value channel, the near one starting at 0).

The feature maps of the paper's code: ``elu(x) + 1``, ``elu(−x) + 1`` and ``tanh(x) + 1``. The released code
also divides each ``φ_l(k_j)`` by the sum of its entries before summing; that is a different kernel, not followed
here (each far-field term here is exactly chapter 8's linear attention).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import scaled_dot_product_attention
from .banded_attention import (
    DEFAULT_BANDWIDTH,
    BandedAttention,
    band_mask,
    band_matrix,
    banded_attention_dense,
)
from .linear_attention import (
    DEFAULT_EPS,
    FeatureMap,
    LinearAttention,
    elu_plus_one,
    linear_attention,
    numerical_rank,
)
from .masks import Mask
from .validation import (
    describe,
    require_callable,
    require_int,
    require_number,
    require_tensor,
)

__all__ = [
    "elu_plus_one",
    "elu_flip_plus_one",
    "tanh_plus_one",
    "FMM_FEATURE_MAPS",
    "far_field_attention",
    "far_field_matrix",
    "far_field_rank",
    "FMMConfig",
    "FMMAttention",
    "fixed_fmm_attention",
    "AttentionSpectrum",
    "attention_spectrum",
    "fmmformer_implementations",
]


# ----------------------------------------------------------------------------------------------------
# Feature maps: linearly independent maps give independent rank-d_k terms


def elu_flip_plus_one(x: Tensor) -> Tensor:
    """φ(x) = elu(−x) + 1 = e^{min(−x, 0)} + max(−x, 0), elementwise (..., d) → (..., d): always > 0."""
    return elu_plus_one(-x)


def tanh_plus_one(x: Tensor) -> Tensor:
    """φ(x) = tanh(x) + 1, elementwise (..., d) → (..., d): in [0, 2]."""
    return torch.tanh(x) + 1


FMM_FEATURE_MAPS: tuple[FeatureMap, ...] = (
    elu_plus_one,
    elu_flip_plus_one,
    tanh_plus_one,
)
"""The three feature maps of the FMMformer code, in its order (``kernels = 1, 2, 3`` uses the first 1, 2, 3)."""


def _check_feature_maps(feature_maps: object) -> tuple[FeatureMap, ...]:
    if callable(feature_maps):
        feature_maps = (feature_maps,)
    if not isinstance(feature_maps, Sequence):
        raise TypeError(
            f"feature_maps must be a sequence of feature maps, got {describe(feature_maps)}"
        )
    maps = enumerate(feature_maps)
    return tuple(
        require_callable(f, f"feature_maps[{i}]", "a function (..., d_k) -> (..., r)")
        for i, f in maps
    )


# ----------------------------------------------------------------------------------------------------
# The far field: a sum of linear attentions


def far_field_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Mask = None,
    *,
    causal: bool = False,
    feature_maps: Sequence[FeatureMap] = FMM_FEATURE_MAPS[:2],
    eps: float = DEFAULT_EPS,
) -> Tensor:
    """Σ_l φ_l(Q)(φ_l(K)ᵀV) / (φ_l(Q)φ_l(K)ᵀ1): one chapter-8 linear attention per feature map, O(N)."""
    maps = _check_feature_maps(feature_maps)
    if not maps:
        raise ValueError("far_field_attention needs at least one feature map, got none")
    out = LinearAttention(feature_map=maps[0], eps=eps)(q, k, v, mask, causal=causal)
    for phi in maps[1:]:
        out = out + LinearAttention(feature_map=phi, eps=eps)(
            q, k, v, mask, causal=causal
        )
    return out


def far_field_matrix(
    q: Tensor,
    k: Tensor,
    *,
    causal: bool = False,
    feature_maps: Sequence[FeatureMap] = FMM_FEATURE_MAPS[:2],
    eps: float = DEFAULT_EPS,
) -> Tensor:
    """L = Σ_l diag(1 / (φ_l(Q)φ_l(K)ᵀ1 + eps)) φ_l(Q)φ_l(K)ᵀ (..., n_q, n_k): the far field as a matrix, O(N²).

    Non-causal, each term has rank ≤ d_k (a diagonal scaling of φ_l(Q) φ_l(K)ᵀ), so rank(L) ≤ r·d_k. Causal,
    each term is masked by the causal triangle first (and is then no longer low-rank).
    """
    maps = _check_feature_maps(feature_maps)
    require_tensor(q, "q", "float")
    require_tensor(k, "k", "float")
    if (
        q.ndim < 2
        or k.ndim < 2
        or q.shape[-1] != k.shape[-1]
        or q.shape[:-2] != k.shape[:-2]
    ):
        raise ValueError(
            f"q and k must have shapes (..., n_q, d_k) and (..., n_k, d_k) with the same leading dimensions, "
            f"got {tuple(q.shape)} and {tuple(k.shape)}"
        )
    n_q, n_k = q.shape[-2], k.shape[-2]
    total = q.new_zeros(*q.shape[:-2], n_q, n_k)
    for phi in maps:
        a = phi(q) @ phi(k).transpose(-2, -1)
        if causal:
            a = a.tril(diagonal=n_k - n_q)
        total = total + a / (a.sum(dim=-1, keepdim=True) + eps)
    return total


# ----------------------------------------------------------------------------------------------------
# FMMformer attention: the blend


def _inverse_softplus(y: float) -> float:
    """x with softplus(x) = log(1 + eˣ) = y > 0."""
    return y + math.log(-math.expm1(-y))


def _check_fmm_attention(
    bandwidth: object,
    n_heads: object,
    positive: object,
    init_near: float,
    init_far: float,
):
    require_int(bandwidth, "bandwidth", low=1)
    if n_heads is not None:
        require_int(n_heads, "n_heads", low=1)
    for name, w in (
        (("init_near", init_near), ("init_far", init_far)) if positive else ()
    ):
        require_number(w, name, low=0, low_open=True, why="positive weights")


def _check_head_weights(w: Tensor, q: Tensor) -> None:
    if w.ndim and (q.ndim < 3 or q.shape[-3] != w.shape[0]):
        raise ValueError(
            f"FMMAttention has {w.shape[0]} heads' weights, got q of shape {tuple(q.shape)}"
        )


@dataclass
class FMMConfig:
    """FMMAttention's options: the band, the far field, the learned blend w₁, w₂."""

    bandwidth: int = DEFAULT_BANDWIDTH  # k, the keys in the band
    feature_maps: Sequence[FeatureMap] = FMM_FEATURE_MAPS[:2]  # far-field φ_l
    eps: float = DEFAULT_EPS  # added to each far-field denominator
    n_heads: int | None = None  # one (w₁, w₂) per head if given, else one pair
    positive: bool = True  # w = softplus(θ) (paper), else w = θ (released code)
    init_near: float = 0.5  # w₁ at the start
    init_far: float = 0.5  # w₂ at the start

    def __post_init__(self) -> None:
        c = self
        _check_fmm_attention(
            c.bandwidth, c.n_heads, c.positive, c.init_near, c.init_far
        )
        self.feature_maps = _check_feature_maps(c.feature_maps)


class FMMAttention(nn.Module):
    """FMMformer attention with learned w₁, w₂, as MultiHeadAttention's attention."""

    def __init__(self, c: FMMConfig) -> None:
        super().__init__()
        self.config = c
        self.near = BandedAttention(c.bandwidth)  # D V
        self.far = [LinearAttention(phi, c.eps) for phi in c.feature_maps]  # φ_l
        shape = (c.n_heads, 1, 1) if c.n_heads is not None else ()
        to_raw = _inverse_softplus if c.positive else float  # θ from w
        self.near_raw = nn.Parameter(torch.full(shape, to_raw(c.init_near)))  # θ₁
        self.far_raw = nn.Parameter(torch.full(shape, to_raw(c.init_far)))  # θ₂

    w_near = property(lambda self: self._weight(self.near_raw))  # w₁: () or (h, 1, 1)
    w_far = property(lambda self: self._weight(self.far_raw))  # w₂

    def _weight(self, raw: Tensor) -> Tensor:
        return F.softplus(raw) if self.config.positive else raw

    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Mask = None,  # near field: any mask; far field: key padding only
        *,
        causal: bool = False,
        dropout_p: float = 0.0,  # on the near-field weights
    ) -> Tensor:
        """The attention function of :mod:`companion.attention`: the weights checked, then :meth:`attend`."""
        _check_head_weights(self.w_near, q)
        return self.attend(q, k, v, mask, causal=causal, p=dropout_p)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Mask, *, causal: bool, p: float
    ) -> Tensor:
        """V̂ = w₁·DV + w₂·Σ_l φ_l(Q)(φ_l(K)ᵀV)/(φ_l(Q)φ_l(K)ᵀ1): V̂ (..., n_q, d_v)."""
        near = self.near(q, k, v, mask, causal=causal, dropout_p=p)  # O(N·k)
        far = sum(f(q, k, v, mask, causal=causal) for f in self.far)  # O(N·r)
        return self.w_near.to(q.dtype) * near + self.w_far.to(q.dtype) * far

    def extra_repr(self) -> str:
        c = self.config
        names = ", ".join(
            getattr(f, "__name__", type(f).__name__) for f in c.feature_maps
        )
        return f"bandwidth={c.bandwidth}, feature_maps=({names}), positive={c.positive}"


def fixed_fmm_attention(
    w_near: float = 1.0, w_far: float = 1.0, **options: object
) -> FMMAttention:
    """FMMAttention with w₁ = w_near, w₂ = w_far fixed, not learned; ``options`` are FMMConfig's (bandwidth, ...)."""
    config = FMMConfig(positive=False, init_near=w_near, init_far=w_far, **options)
    return FMMAttention(config).requires_grad_(False)


# ----------------------------------------------------------------------------------------------------
# The spectrum of an attention matrix, with and without its band


@dataclass(frozen=True)
class AttentionSpectrum:
    """Singular values of A and of A − band_k(A), largest first, each divided by A's largest."""

    bandwidth: int
    full: Tensor
    off_band: Tensor

    def rank(self, eps: float) -> tuple[int, int]:
        """(rank of A, rank of A − band_k(A)) at tolerance eps: the singular values above eps · σ_1(A)."""
        return int((self.full > eps).sum()), int((self.off_band > eps).sum())


def attention_spectrum(
    a: Tensor, bandwidth: int, *, causal: bool = True
) -> AttentionSpectrum:
    """The spectrum of an attention matrix A (n_q, n_k) and of its far field A − band_k(A) (the band of ``band_mask``).

    Both are divided by σ_1(A), so the two curves share one scale: if A − band_k(A) is nearly low-rank its
    singular values fall below a tolerance far sooner than A's. Only up to a point: cutting the band out leaves a
    jump at the band's edge, which is not low-rank, so the far field's singular values fall fast at first and
    then level off near the size of what was cut (for a smooth 200 × 200 matrix peaked on the diagonal, rank 3
    against 62 at ε = 0.1, but both above 150 at ε = 10⁻³; see the tests). Computed in float64.
    """
    require_tensor(a, "a", "float")
    if a.ndim != 2:
        raise ValueError(
            f"a must be one attention matrix (n_q, n_k), got shape {tuple(a.shape)}"
        )
    a = a.detach().to(torch.float64)
    full = torch.linalg.svdvals(a)
    off = torch.linalg.svdvals(a - band_matrix(a, bandwidth, causal=causal))
    top = full[0] if full.numel() and full[0] > 0 else torch.ones((), dtype=a.dtype)
    return AttentionSpectrum(int(bandwidth), full / top, off / top)


def far_field_rank(
    q: Tensor, k: Tensor, *, feature_maps: Sequence[FeatureMap] = FMM_FEATURE_MAPS[:2]
) -> int:
    """Numerical rank of the non-causal far-field matrix of one head, q (n_q, d_k), k (n_k, d_k): ≤ r·d_k."""
    return numerical_rank(far_field_matrix(q, k, feature_maps=feature_maps))


# ----------------------------------------------------------------------------------------------------
# Time and memory against n: for companion.benchmarking.measure_attention and the benchmark


def fmmformer_implementations(
    *, causal: bool = True, bandwidth: int = DEFAULT_BANDWIDTH, dense: bool = True
) -> dict[str, Callable[..., Tensor]]:
    """``name → fn(q, k, v)`` for :func:`companion.benchmarking.measure_attention`.

    ``"sdpa"``: ``torch.nn.functional.scaled_dot_product_attention`` (fused softmax attention); ``"softmax"``:
    :func:`companion.attention.scaled_dot_product_attention` (the N × N matrix); ``"linear"``: chapter 8's linear
    attention (elu + 1); ``"band"``: :class:`companion.banded_attention.BandedAttention`; ``"fmmformer"``:
    :func:`fixed_fmm_attention` with two feature maps and w₁ = w₂ = 1. With ``dense=True`` also the band the N × N way:
    ``"band dense"`` (:func:`companion.banded_attention.banded_attention_dense`) and ``"band sdpa"`` (the fused
    kernel with the band as a boolean N × N mask).
    """

    def sdpa(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    impls: dict[str, Callable[..., Tensor]] = {
        "sdpa": sdpa,
        "softmax": lambda q, k, v: scaled_dot_product_attention(q, k, v, causal=causal),
        "linear": lambda q, k, v: linear_attention(q, k, v, causal=causal),
        "band": partial(BandedAttention(bandwidth), causal=causal),
        "fmmformer": partial(fixed_fmm_attention(bandwidth=bandwidth), causal=causal),
    }
    if dense:

        def band_sdpa(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            mask = band_mask(q.shape[-2], k.shape[-2], bandwidth, causal=causal).to(
                q.device
            )
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

        impls["band dense"] = lambda q, k, v: banded_attention_dense(
            q, k, v, causal=causal, bandwidth=bandwidth
        )
        impls["band sdpa"] = band_sdpa
    return impls
