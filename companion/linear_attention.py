"""Linear attention (Katharopoulos et al., 2020): softmax's similarity replaced by a kernel φ(q)ᵀφ(k).

Notation (chapter 8): queries ``q`` of shape ``(..., n_q, d_k)``, keys ``k`` of shape ``(..., n_k, d_k)``,
values ``v`` of shape ``(..., n_k, d_v)``, and a feature map ``φ: (..., d_k) → (..., r)``. Softmax attention
is a normalised weighted average with the similarity ``sim(q, k) = exp(qᵀk / √d_k)``,

    v̂_i = Σ_j sim(q_i, k_j) v_j / Σ_j sim(q_i, k_j).

Linear attention uses the kernel ``sim(q, k) = φ(q)ᵀφ(k)`` instead, and associativity takes ``φ(q_i)`` out
of the sums:

    v̂_i = φ(q_i)ᵀ S / (φ(q_i)ᵀ z + eps),     S = Σ_j φ(k_j) v_jᵀ  (r × d_v),     z = Σ_j φ(k_j)  (r).

``S`` and ``z`` are shared by every query, so the cost is O(N r d_v) time and memory: no N × N matrix.
With a causal mask they become running sums ``S_i, z_i`` over ``j ≤ i``, and causal linear attention is an
RNN whose state ``(S_i, z_i)`` has a constant size. This module computes that one model in four ways that
give the same numbers, the methods of :class:`LinearAttention` (a frozen dataclass of the options φ, eps and
the chunk size; calling it is the attention function): masked quadratic (``quadratic``), recurrent
(``recurrent``, ``step``), chunked (``chunked``, the fast one, what ``causal=True`` runs) and all-prefix-sums
(``cumsum``, which stores N·r·d_v numbers). ``linear_attention`` is the instance with the defaults.

Conventions (the attention-function seam of :mod:`companion.attention`):

- ``mask`` is boolean, ``True`` = may attend. Linear attention can only *drop keys* (a key-padding mask,
  broadcasting against ``(..., 1, n_k)``): a dropped key gets ``φ(k_j) = 0`` and adds nothing to S or z.
  Any other mask raises :class:`ValueError`; only ``LinearAttention.quadratic`` honours every mask.
- ``causal=True``: query ``i`` sees keys ``j ≤ i + (n_k − n_q)`` (aligned at the end, as with a KV cache).
- ``eps`` is added to the denominator ``φ(q_i)ᵀz``, which can be 0 (ReLU features, dropped keys, elu + 1 of
  very negative inputs): the output is then 0 instead of NaN.
- No ``1/√d_k`` scaling: the paper applies φ to q and k as they are. A feature map that approximates
  ``exp(qᵀk / √d_k)`` (chapter 10's random features) divides its input by ``d_k^{1/4}`` itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .masks import Mask
from .validation import (
    check_attention_inputs,
    check_mask,
    describe,
    require_callable,
    require_floats,
    require_int,
    require_keys_cover_queries,
    require_ndim,
    require_number,
    require_tensor,
)

__all__ = [
    "FeatureMap",
    "elu_plus_one",
    "relu_feature_map",
    "exponential_kernel",
    "kernel_matrix",
    "kernel_attention",
    "LinearAttention",
    "linear_attention",
    "LinearAttentionState",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_EPS",
    "low_rank_factors",
    "best_rank_r_approximation",
    "low_rank_error",
    "numerical_rank",
]

FeatureMap = Callable[[Tensor], Tensor]
"""A feature map φ, any function from ``(..., d_k)`` to ``(..., r)`` with non-negative values."""

DEFAULT_EPS = 1e-6
"""Added to the denominator φ(q_i)ᵀz_i (the value of the paper's code)."""

DEFAULT_CHUNK_SIZE = 128
"""Queries per block in ``LinearAttention.chunked``, chosen by measurement: 4 heads, d = 64,
float32, 1 CPU thread, ``benchmarks/linear_attention_vs_sdpa.py --chunk-sweep`` on a loaded 2-core machine,
ms per call for C = 16, 32, 64, 128, 256: 171, 123, 98, 97, 132 at N = 4,096 and 889, 523, 455, 373, 1057
at N = 16,384. A chunk's C × C kernel matrix costs N·C per head, the states before the chunks N·d²/C."""


# ----------------------------------------------------------------------------------------------------
# Feature maps and kernels


def elu_plus_one(x: Tensor) -> Tensor:
    """φ(x) = elu(x) + 1 = e^{min(x, 0)} + max(x, 0) > 0, elementwise."""
    # F.elu(x) + 1 = (eˣ − 1) + 1 is 0 in float32 for x < −16.6; eˣ is not, to x ≈ −87
    return torch.exp(x.clamp(max=0)) + x.clamp(min=0)


def relu_feature_map(x: Tensor) -> Tensor:
    """φ(x) = max(x, 0), elementwise (..., d) → (..., d): non-negative, and exactly 0 for half the inputs."""
    return F.relu(x)


def exponential_kernel(q: Tensor, k: Tensor) -> Tensor:
    """sim(q_i, k_j) = exp(q_iᵀk_j / √d_k), q (..., n_q, d_k), k (..., n_k, d_k) → (..., n_q, n_k): softmax's."""
    # No max subtracted (unlike softmax): exp overflows once a score passes 88 in float32. A reference only.
    return torch.exp(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))


def kernel_matrix(
    q: Tensor, k: Tensor, *, feature_map: FeatureMap = elu_plus_one
) -> Tensor:
    """sim(q_i, k_j) = φ(q_i)ᵀφ(k_j), q (..., n_q, d_k), k (..., n_k, d_k) → (..., n_q, n_k): rank ≤ r."""
    return feature_map(q) @ feature_map(k).transpose(-2, -1)


# ----------------------------------------------------------------------------------------------------
# Input checks (once, at the public entry points)


def _key_mask(mask: Tensor | None, scores_shape: tuple[int, ...]) -> Tensor | None:
    """The mask as a key-padding mask ``(..., n_k)`` (True = keep the key), or ValueError if it is not one."""
    if mask is None:
        return None
    check_mask(mask, scores_shape)
    if mask.shape[-2] != 1 and not bool((mask == mask[..., :1, :]).all()):
        raise ValueError(
            "linear attention can only drop keys: the mask must be a key-padding mask that broadcasts against "
            f"(..., 1, {scores_shape[-1]}) (the same row for every query), got a mask of shape "
            f"{tuple(mask.shape)} whose rows differ. For causal attention pass causal=True; for any other mask "
            "use LinearAttention.quadratic, which forms the n_q × n_k kernel matrix"
        )
    return mask[..., 0, :]


def _check_one_position(q: object, k: object, v: object) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        require_ndim(x, name, 1, "(..., d) for one position", at_least=True)


# ----------------------------------------------------------------------------------------------------
# The quadratic forms: the N × N kernel matrix, as softmax attention builds it


def kernel_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Mask = None,
    *,
    causal: bool = False,
    kernel: Callable[[Tensor, Tensor], Tensor] = exponential_kernel,
    eps: float = 0.0,
) -> Tensor:
    """v̂_i = Σ_j sim(q_i, k_j) v_j / (Σ_j sim(q_i, k_j) + eps) over allowed j; sim = kernel(q, k) (..., n_q, n_k)."""
    q, k, v = check_attention_inputs(q, k, v)
    eps = require_number(eps, "eps", low=0)
    n_q, n_k = q.shape[-2], k.shape[-2]
    require_callable(kernel, "kernel", "a function (q, k) -> (..., n_q, n_k)")
    sim = kernel(q, k)  # (..., n_q, n_k)
    if not isinstance(sim, Tensor) or sim.shape != (*q.shape[:-2], n_q, n_k):
        raise ValueError(
            f"kernel must return shape {(*q.shape[:-2], n_q, n_k)}, got {describe(sim)}"
        )
    if mask is not None:
        sim = sim * check_mask(mask, tuple(sim.shape))
    if causal:
        sim = sim.tril(diagonal=n_k - n_q)  # keep j <= i + n_k - n_q
    return (sim @ v) / (sim.sum(dim=-1, keepdim=True) + eps)


# ----------------------------------------------------------------------------------------------------
# Linear attention by associativity, and the causal forms of one model


@dataclass
class LinearAttentionState:
    """Causal linear attention's state after some keys: S = Σ_j φ(k_j)v_jᵀ (..., r, d_v), z = Σ_j φ(k_j) (..., r)."""

    s: Tensor
    z: Tensor

    @property
    def nbytes(self) -> int:
        """The number of bytes the state holds, the same however many tokens it has summed."""
        return (
            self.s.numel() * self.s.element_size()
            + self.z.numel() * self.z.element_size()
        )


def _state_of(phi_k: Tensor, v: Tensor) -> LinearAttentionState:
    """S = φ(K)ᵀV (..., r, d_v), z = φ(K)ᵀ1 (..., r) from features φ(K) (..., n, r) and values V (..., n, d_v)."""
    return LinearAttentionState(phi_k.transpose(-2, -1) @ v, phi_k.sum(dim=-2))


def _prefix(
    phi_k: Tensor, v: Tensor, n_q: int
) -> tuple[LinearAttentionState, Tensor, Tensor]:
    """Causal alignment at the end: the first n_k − n_q keys are seen by every query and start the state."""
    n_pre = phi_k.shape[-2] - n_q
    return (
        _state_of(phi_k[..., :n_pre, :], v[..., :n_pre, :]),
        phi_k[..., n_pre:, :],
        v[..., n_pre:, :],
    )


def _update(
    state: LinearAttentionState, phi_k: Tensor, v: Tensor
) -> LinearAttentionState:
    """S ← S + φ(k)vᵀ, z ← z + φ(k) for one position: φ(k) (..., r), v (..., d_v)."""
    return LinearAttentionState(
        state.s + phi_k.unsqueeze(-1) * v.unsqueeze(-2), state.z + phi_k
    )


def _check_state(state: object, phi_k: Tensor, v: Tensor) -> None:
    if not isinstance(state, LinearAttentionState):
        raise TypeError(
            f"state must be a LinearAttentionState or None, got {describe(state)}"
        )
    if state.s.shape != (*phi_k.shape, v.shape[-1]) or state.z.shape != phi_k.shape:
        raise ValueError(
            f"state must hold s of shape {(*phi_k.shape, v.shape[-1])} and z of shape {tuple(phi_k.shape)}, "
            f"got {tuple(state.s.shape)} and {tuple(state.z.shape)}"
        )


def _no_dropout(dropout_p: float, name: str) -> None:
    """Raise if ``dropout_p`` asks a form without attention weights (``name``) to drop some."""
    if dropout_p:
        raise ValueError(
            f"{name} forms no attention weights to drop, got dropout_p={dropout_p}: "
            "build the model with attention dropout 0"
        )


@dataclass(frozen=True)
class LinearAttention:
    """Linear attention's options; ``LinearAttention(φ)(q, k, v)`` attends."""

    feature_map: FeatureMap = elu_plus_one  # φ: (..., d_k) → (..., r), values ≥ 0
    eps: float = DEFAULT_EPS  # added to the denominator φ(q_i)ᵀz
    chunk_size: int = DEFAULT_CHUNK_SIZE  # C, queries per block of the causal form

    def __post_init__(self) -> None:
        phi = "a function (..., d_k) -> (..., r)"
        require_callable(self.feature_map, "feature_map", phi)
        require_number(self.eps, "eps", low=0)
        require_int(self.chunk_size, "chunk_size", low=1)

    def __call__(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Mask = None,
        *,
        causal: bool = False,
        dropout_p: float = 0.0,
    ) -> Tensor:
        """The attention function of :mod:`companion.attention`: :meth:`attend`, or :meth:`chunked` if causal."""
        _no_dropout(dropout_p, "linear attention")
        return self.chunked(q, k, v, mask) if causal else self.attend(q, k, v, mask)

    def _features(
        self, q: object, k: object, v: object, mask: object, *, causal: bool = False
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Validate; return φ(q) (..., n_q, r), φ(k) (..., n_k, r) with dropped keys zeroed, v."""
        q, k, v = check_attention_inputs(q, k, v)
        keep = _key_mask(mask, (*q.shape[:-2], q.shape[-2], k.shape[-2]))
        if causal:
            require_keys_cover_queries(
                q.shape[-2], k.shape[-2], "causal linear attention"
            )
        phi_q, phi_k = self.feature_map(q), self.feature_map(k)
        for name, phi, x in (("q", phi_q, q), ("k", phi_k, k)):
            if not isinstance(phi, Tensor) or phi.shape[:-1] != x.shape[:-1]:
                raise ValueError(
                    f"feature_map must map (..., d_k) to (..., r); for {name} of shape {tuple(x.shape)} "
                    f"expected shape {(*x.shape[:-1], 'r')}, got {describe(phi)}"
                )
        if phi_q.shape[-1] != phi_k.shape[-1]:
            raise ValueError(
                f"feature_map gave r = {phi_q.shape[-1]} features for q but {phi_k.shape[-1]} for k"
            )
        if keep is not None:
            phi_k = phi_k * keep.unsqueeze(-1).to(phi_k.dtype)
        return phi_q, phi_k, v

    def _read(self, phi_q: Tensor, state: LinearAttentionState) -> Tensor:
        """y = φ(q)ᵀS / (φ(q)ᵀz + eps) for one position: φ(q) (..., r) → y (..., d_v)."""
        return (phi_q.unsqueeze(-2) @ state.s).squeeze(-2) / (
            (phi_q * state.z).sum(dim=-1, keepdim=True) + self.eps
        )

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask = None) -> Tensor:
        """v̂_i = φ(q_i)ᵀS / (φ(q_i)ᵀz + eps): q (..., n_q, d_k) → v̂ (..., n_q, d_v)."""
        phi_q, phi_k, v = self._features(q, k, v, mask)  # (..., n, r)
        s = phi_k.transpose(-2, -1) @ v  # S = Σ_j φ(k_j) v_jᵀ     (..., r, d_v)
        z = phi_k.sum(dim=-2)  # z = Σ_j φ(k_j)                (..., r)
        numerator = phi_q @ s  # (..., n_q, d_v)
        denominator = phi_q @ z.unsqueeze(-1)  # (..., n_q, 1)
        return numerator / (denominator + self.eps)

    def quadratic(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Mask = None,
        *,
        causal: bool = False,
    ) -> Tensor:
        """v̂ = (M ⊙ φ(Q)φ(K)ᵀ) V / ((M ⊙ φ(Q)φ(K)ᵀ) 1 + eps): the N × N kernel matrix, masked by any mask M."""
        kernel = lambda q, k: kernel_matrix(q, k, feature_map=self.feature_map)
        return kernel_attention(
            q, k, v, mask, causal=causal, kernel=kernel, eps=self.eps
        )

    def state(self, k: Tensor, v: Tensor, mask: Mask = None) -> LinearAttentionState:
        """The state after keys k (..., n, d_k) and values v (..., n, d_v), e.g. a prompt: S = φ(K)ᵀV, z = φ(K)ᵀ1."""
        require_tensor(k, "k")
        _, phi_k, v = self._features(k[..., :1, :], k, v, mask)
        return _state_of(phi_k, v)

    def step(
        self, q: Tensor, k: Tensor, v: Tensor, state: LinearAttentionState | None = None
    ) -> tuple[Tensor, LinearAttentionState]:
        """One token (..., d): S ← S + φ(k)vᵀ, z ← z + φ(k), y = φ(q)ᵀS / (φ(q)ᵀz + eps)."""
        _check_one_position(q, k, v)
        q, k, v = q.unsqueeze(-2), k.unsqueeze(-2), v.unsqueeze(-2)  # (..., 1, d)
        phi_q, phi_k, v = (t.squeeze(-2) for t in self._features(q, k, v, None))
        if state is None:  # S = 0 (..., r, d_v), z = 0 (..., r)
            s, z = v.new_zeros(*phi_k.shape, v.shape[-1]), v.new_zeros(phi_k.shape)
            state = LinearAttentionState(s, z)
        _check_state(state, phi_k, v)
        state = _update(state, phi_k, v)
        return self._read(phi_q, state), state

    def recurrent(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask = None) -> Tensor:
        """y_i = φ(q_i)ᵀS_i / (φ(q_i)ᵀz_i + eps), S_i = S_{i−1} + φ(k_i)v_iᵀ, z_i alike."""
        phi_q, phi_k, v = self._features(q, k, v, mask, causal=True)
        state, phi_k, v = _prefix(phi_k, v, phi_q.shape[-2])  # S_0 = 0 unless n_k > n_q
        outputs = []
        for i in range(phi_q.shape[-2]):
            state = _update(state, phi_k[..., i, :], v[..., i, :])
            outputs.append(self._read(phi_q[..., i, :], state))
        if not outputs:  # no queries
            return v.new_zeros(*phi_q.shape[:-1], v.shape[-1])
        return torch.stack(outputs, dim=-2)

    def chunked(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask = None) -> Tensor:
        """y_c = (A V_c + φQ_c S_{<c}) / (A 1 + φQ_c z_{<c} + eps), A = tril(φQ_c φK_cᵀ)."""
        phi_q, phi_k, v = self._features(q, k, v, mask, causal=True)
        state, phi_k, v = _prefix(phi_k, v, phi_q.shape[-2])  # S_0 = 0 unless n_k > n_q
        n = phi_q.shape[-2]
        c = min(self.chunk_size, n)  # a shorter sequence is one chunk, not padded
        # Pad to whole chunks with zero features: padded keys add nothing, queries are cut.
        chunks = lambda t: F.pad(t, (0, 0, 0, -n % c)).unflatten(-2, (-1, c))
        phi_q, phi_k, v = map(chunks, (phi_q, phi_k, v))  # (..., n_chunks, C, ·)
        # Inside a chunk: the masked quadratic form on C × C kernel matrices.
        a = (phi_q @ phi_k.transpose(-2, -1)).tril()  # (..., n_chunks, C, C)
        numerator, denominator = a @ v, a.sum(dim=-1, keepdim=True)
        # Across chunks: the state before chunk c, S_{<c} = S_0 + Σ_{c'<c} φK_{c'}ᵀV_{c'}.
        s_chunk = phi_k.transpose(-2, -1) @ v  # (..., n_chunks, r, d_v)
        z_chunk = phi_k.sum(dim=-2)  # (..., n_chunks, r)
        s_before = torch.cat([state.s.unsqueeze(-3), s_chunk[..., :-1, :, :]], dim=-3)
        z_before = torch.cat([state.z.unsqueeze(-2), z_chunk[..., :-1, :]], dim=-2)
        numerator = numerator + phi_q @ s_before.cumsum(dim=-3)
        denominator = denominator + phi_q @ z_before.cumsum(dim=-2).unsqueeze(-1)
        return (numerator / (denominator + self.eps)).flatten(-3, -2)[..., :n, :]

    def cumsum(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask = None) -> Tensor:
        """y_i = φ(q_i)ᵀS_i / (φ(q_i)ᵀz_i + eps), all S_i (..., N, r, d_v) in one cumsum."""
        phi_q, phi_k, v = self._features(q, k, v, mask, causal=True)
        state, phi_k, v = _prefix(phi_k, v, phi_q.shape[-2])  # S_0 = 0 unless n_k > n_q
        s = (phi_k.unsqueeze(-1) * v.unsqueeze(-2)).cumsum(dim=-3)  # (..., N, r, d_v)
        s = state.s.unsqueeze(-3) + s
        z = state.z.unsqueeze(-2) + phi_k.cumsum(dim=-2)  # (..., N, r)
        numerator = (phi_q.unsqueeze(-2) @ s).squeeze(-2)  # (..., N, d_v)
        denominator = (phi_q * z).sum(dim=-1, keepdim=True)  # (..., N, 1)
        return numerator / (denominator + self.eps)


linear_attention = LinearAttention()
"""Linear attention with the defaults (φ = elu + 1, eps = 1e-6, blocks of 128), as an attention function."""


# ----------------------------------------------------------------------------------------------------
# Rank: the rank-one remark and low-rank approximations of attention matrices


def _check_matrix(a: object, r: object | None = None) -> Tensor:
    a = require_floats(a, "a", "(..., m, n)", min_ndim=2)
    if r is not None and require_int(r, "r", low=0) > min(a.shape[-2:]):
        limit = min(a.shape[-2:])
        raise ValueError(
            f"r must be at most min(m, n) = {limit} for a of shape {tuple(a.shape)}, got {r}"
        )
    return a


def low_rank_factors(a: Tensor, r: int) -> tuple[Tensor, Tensor]:
    """A ≈ L Rᵀ, L = U_r Σ_r (..., m, r), R = V_r (..., n, r) from the SVD A = U Σ Vᵀ; A V ≈ L (Rᵀ V) costs O(N r)."""
    a = _check_matrix(a, r)
    u, sigma, vh = torch.linalg.svd(a, full_matrices=False)
    return u[..., :r] * sigma[..., None, :r], vh[..., :r, :].transpose(-2, -1)


def best_rank_r_approximation(a: Tensor, r: int) -> Tensor:
    """A_r = U_r Σ_r V_rᵀ (..., m, n): the closest matrix of rank ≤ r in Frobenius and spectral norm (Eckart–Young)."""
    left, right = low_rank_factors(a, r)
    return left @ right.transpose(-2, -1)


def low_rank_error(a: Tensor, ranks: int | Iterable[int]) -> Tensor:
    """‖A − A_r‖_F / ‖A‖_F = √(Σ_{i>r} σ_i²) / √(Σ_i σ_i²) for each r: (..., len(ranks)), or (...) for an int r."""
    a = _check_matrix(a)
    single = isinstance(ranks, int)
    rs = [ranks] if single else list(ranks)
    for r in rs:
        _check_matrix(a, r)
    sigma2 = torch.linalg.svdvals(a) ** 2  # (..., min(m, n)), largest first
    tail = sigma2.flip(-1).cumsum(-1).flip(-1)  # tail[i] = Σ_{i' ≥ i} σ_{i'}²
    # tail[min(m, n)] = 0
    tail = torch.cat([tail, torch.zeros_like(tail[..., :1])], dim=-1)
    errors = (tail[..., rs] / tail[..., :1]).sqrt()
    return errors[..., 0] if single else errors


def numerical_rank(a: Tensor, rtol: float | None = None) -> int:
    """The number of singular values σ_i > rtol · σ_1, as numpy's matrix_rank."""
    a = require_floats(a, "a", "(m, n)", ndim=2)
    sigma = torch.linalg.svdvals(a)
    if rtol is None:  # numpy's default
        rtol = max(a.shape) * torch.finfo(a.dtype).eps
    return int((sigma > rtol * sigma[0]).sum()) if sigma.numel() and sigma[0] > 0 else 0
