"""Random features: a finite random map z with z(x)ᵀz(y) ≈ k(x, y) (chapter 10).

Notation. Inputs are rows: ``x`` of shape ``(N, d)`` (or ``(..., d)``), ``y`` of shape ``(M, d)``; their
difference is ``Δ = x − y``. A shift-invariant kernel is written ``k(Δ)``. Frequencies are the columns of
``w`` of shape ``(d, R)``, drawn from the density ``p(w)`` that Bochner's theorem pairs with the kernel;
phases ``b`` of shape ``(R,)`` are uniform on ``[0, 2π)``. ``R`` counts the features (the columns of ``z``).

The kernels and Bochner's pairs of kernel and frequency density live in :mod:`companion.kernels`; their
names are re-exported here, so that ``random_features.sample_frequencies`` and the rest keep working.

Two unbiased estimators with ``R`` features (Rahimi and Recht, 2007):

- ``"cos"``: z(x) = √(2/R) cos(xw + b) with R frequencies; one term 2cos(wᵀx + b)cos(wᵀy + b) has variance
  1 + k(2Δ)/2 − k(Δ)², so Var[z(x)ᵀz(y)] = (1 + k(2Δ)/2 − k(Δ)²) / R;
- ``"cos_sin"``: z(x) = √(2/R) [cos(xw), sin(xw)] with R/2 frequencies; one term cos(wᵀΔ) has variance
  (1 + k(2Δ))/2 − k(Δ)², so Var[z(x)ᵀz(y)] = (1 + k(2Δ) − 2k(Δ)²) / R.

The difference is (2k(Δ)² − k(2Δ)) / (2R): ``cos_sin`` wins wherever k(2Δ) ≤ 2k(Δ)². That holds for every
Δ for the Gaussian kernel (k(2Δ) = k(Δ)⁴) and the Laplace kernel (k(2Δ) = k(Δ)²), but not for the Cauchy
kernel far out: in one dimension it fails once Δ² > (3 + √10)σ², i.e. ``|Δ| > 2.48σ``, where ``cos`` wins.

Back to attention (Choromanski et al., 2021). The softmax kernel exp(xᵀy) = e^{‖x‖²/2} e^{‖y‖²/2} k(x − y)
with the Gaussian kernel of σ = 1, so trigonometric features times e^{‖x‖²/2} estimate it, but the estimates
can be negative. Positive random features φ(x) = exp(xw − ‖x‖²/2)/√m with w ~ N(0, I) estimate it without
bias and are never negative, because E_w[exp(wᵀ(x + y))] = exp(‖x + y‖²/2). Lemma 2 of the Performer paper
gives the mean squared errors of both (:func:`softmax_kernel_mse`). :func:`performer_attention` computes the
attention with a stabiliser that uses no future position (a running maximum over the keys, as online softmax).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

# the kernels and their frequencies, re-exported (documented in companion.kernels)
from .kernels import KERNELS as KERNELS
from .kernels import _check_features_in
from .kernels import cauchy_kernel as cauchy_kernel
from .kernels import gaussian_kernel as gaussian_kernel
from .kernels import kernel_at as kernel_at
from .kernels import laplace_kernel as laplace_kernel
from .kernels import orthogonal_gaussian as orthogonal_gaussian
from .kernels import sample_frequencies as sample_frequencies
from .kernels import sample_phases as sample_phases
from .kernels import shift_invariant_kernel as shift_invariant_kernel
from .linear_attention import DEFAULT_CHUNK_SIZE, DEFAULT_EPS, _key_mask, _no_dropout
from .masks import Mask
from .validation import (
    check_attention_inputs,
    check_pair,
    describe,
    require_choice,
    require_floats,
    require_int,
    require_keys_cover_queries,
    require_number,
    require_tensor,
)

__all__ = [
    "random_fourier_features",
    "random_fourier_features_cos_sin",
    "RandomFourierFeatures",
    "monte_carlo_kernel",
    "rff_variance",
    "kernel_approximation_error",
    "approximation_errors",
    "kernel_ridge",
    "feature_ridge",
    "one_hot",
    "softmax_kernel",
    "trig_softmax_features",
    "positive_softmax_features",
    "softmax_kernel_mse",
    "negative_fraction",
    "PerformerFeatures",
    "performer_attention",
    "PerformerAttention",
]

VARIANTS = ("cos", "cos_sin")


# ----------------------------------------------------------------------------------------------------
# Random Fourier features


def random_fourier_features(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    """z(x) = √(2/R) cos(xw + b) for x (..., d), w (d, R), b (R,) -> (..., R)."""
    x, w, b = _check_features(x, w, b)
    R = w.shape[1]
    return math.sqrt(2 / R) * torch.cos(x @ w + b)  # (..., R)


def random_fourier_features_cos_sin(x: Tensor, w: Tensor) -> Tensor:
    """z(x) = √(2/R) [cos(xw), sin(xw)]: x (..., d), w (d, R/2) → (..., R)."""
    x, w = _check_features(x, w)
    xw = x @ w  # (..., R/2)
    return torch.cat([torch.cos(xw), torch.sin(xw)], dim=-1) / math.sqrt(w.shape[1])


class RandomFourierFeatures(nn.Module):
    """z(x) (..., d) -> (..., R) with z(x)ᵀz(y) ≈ k(x − y): the ``cos`` or ``cos_sin`` map, frequencies held."""

    def __init__(
        self,
        d: int,
        R: int,
        kernel: str = "gaussian",
        sigma: float = 1.0,
        variant: str = "cos",
        orthogonal: bool = False,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.d, self.R = require_int(d, "d", low=1), require_int(R, "R", low=1)
        self.kernel, self.sigma = (
            require_choice(kernel, "kernel", KERNELS),
            require_number(sigma, "sigma", low=0, low_open=True),
        )
        self.variant, self.orthogonal = (
            require_choice(variant, "variant", VARIANTS),
            bool(orthogonal),
        )
        if self.variant == "cos_sin" and R % 2:
            raise ValueError(
                f"the cos_sin variant needs an even number of features R, got R={R}"
            )
        self.register_buffer("w", torch.empty(0))
        self.register_buffer("b", torch.empty(0))
        self.redraw(seed)

    def redraw(self, seed: int | None = None) -> None:
        """Draw new frequencies w (and phases b) from p(w); ``seed=None`` draws from PyTorch's global generator."""
        g = None if seed is None else torch.Generator().manual_seed(seed)
        n_freq = self.R if self.variant == "cos" else self.R // 2
        self.w = sample_frequencies(
            self.d, n_freq, self.kernel, self.sigma, self.orthogonal, g, torch.float64
        )
        self.b = sample_phases(n_freq, g, torch.float64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.variant == "cos":
            return random_fourier_features(x, self.w, self.b)
        return random_fourier_features_cos_sin(x, self.w)


def _check_features(
    x: object, w: object, b: object = None, *, name: str = "x", stabilize: object = None
):
    """Check the inputs of a random-feature map; return them, ``w`` and ``b`` in the dtype of ``x``."""
    x = _check_features_in(x, name)
    w = require_floats(w, "w", "(d, R)", shape=(x.shape[-1], "R")).to(x.dtype)
    require_choice(stabilize, "stabilize", (None, "rows", "all"))
    if stabilize == "all" and x.ndim < 2:
        raise ValueError(
            f"stabilize='all' needs x of shape (..., n, d), got shape {tuple(x.shape)}"
        )
    if b is None:
        return x, w
    return x, w, require_floats(b, "b", "(R,)", shape=(w.shape[1],)).to(x.dtype)


def monte_carlo_kernel(delta: Tensor, w: Tensor) -> Tensor:
    """k(Δ) ≈ (1/R) Σ_r cos(w_rᵀΔ), Monte Carlo: Δ (..., d), w (d, R) → (...)."""
    delta, w = _check_features(delta, w, name="delta")
    return torch.cos(delta @ w).mean(-1)  # (..., R) -> (...)


def rff_variance(
    delta: torch.Tensor,
    R: int,
    kernel: str = "gaussian",
    sigma: float = 1.0,
    variant: str = "cos",
) -> torch.Tensor:
    """Var[z(x)ᵀz(y)] for Δ = x − y (..., d) -> (...): (1 + k(2Δ)/2 − k(Δ)²)/R or (1 + k(2Δ) − 2k(Δ)²)/R."""
    R, variant = (
        require_int(R, "R", low=1),
        require_choice(variant, "variant", VARIANTS),
    )
    k1, k2 = kernel_at(delta, kernel, sigma), kernel_at(2 * delta, kernel, sigma)
    if variant == "cos":
        return (1 + k2 / 2 - k1**2) / R
    return (1 + k2 - 2 * k1**2) / R


def kernel_approximation_error(k_exact: torch.Tensor, k_approx: torch.Tensor) -> float:
    """The root-mean-square entry error √(mean (K − K̂)²) of two (N, M) kernel matrices."""
    for name, t in (("k_exact", k_exact), ("k_approx", k_approx)):
        require_tensor(t, name, "float")
    if k_exact.shape != k_approx.shape:
        raise ValueError(
            f"k_exact and k_approx must have one shape, got {tuple(k_exact.shape)} and {tuple(k_approx.shape)}"
        )
    return float(((k_exact.double() - k_approx.double()) ** 2).mean().sqrt())


def approximation_errors(
    x: torch.Tensor,
    Rs: Sequence[int],
    seeds: Sequence[int] = range(5),
    kernel: str = "gaussian",
    sigma: float = 1.0,
    variant: str = "cos",
    orthogonal: bool = False,
) -> torch.Tensor:
    """errors[i, s] = RMS error of Z Zᵀ against K on x (N, d) with R = Rs[i] features drawn with seeds[s]."""
    x = _check_features_in(x, "x")
    k = shift_invariant_kernel(x, x, kernel, sigma)
    errors = torch.empty(len(Rs), len(seeds), dtype=torch.float64)
    for i, R in enumerate(Rs):
        for s, seed in enumerate(seeds):
            z = RandomFourierFeatures(
                x.shape[-1], R, kernel, sigma, variant, orthogonal, seed=seed
            ).to(x.dtype)(x)
            errors[i, s] = kernel_approximation_error(k, z @ z.T)
    return errors


# ----------------------------------------------------------------------------------------------------
# Ridge regression with the exact kernel or with features


def _check_ridge(
    a: object, a_name: str, targets: object, lam: object
) -> tuple[torch.Tensor, torch.Tensor, float]:
    require_tensor(a, a_name, "float")
    require_tensor(targets, "targets", "float")
    if a.ndim != 2 or targets.ndim not in (1, 2) or targets.shape[0] != a.shape[0]:
        raise ValueError(
            f"{a_name} must have shape (N, ·) and targets (N,) or (N, c) with the same N, got shapes "
            f"{tuple(a.shape)} and {tuple(targets.shape)}"
        )
    return a, targets.to(a.dtype), require_number(lam, "lam", low=0, low_open=True)


def kernel_ridge(
    k_train: torch.Tensor, targets: torch.Tensor, lam: float
) -> torch.Tensor:
    """α = (K + λI)⁻¹ Y for K (N, N), Y (N, c) -> (N, c); predictions are K_test α. O(N³)."""
    k_train, targets, lam = _check_ridge(k_train, "k_train", targets, lam)
    if k_train.shape[0] != k_train.shape[1]:
        raise ValueError(
            f"k_train must be square (N, N), got shape {tuple(k_train.shape)}"
        )
    eye = torch.eye(k_train.shape[0], dtype=k_train.dtype)
    return torch.cholesky_solve(
        _as_2d(targets), torch.linalg.cholesky(k_train + lam * eye)
    ).reshape(targets.shape)


def feature_ridge(
    z_train: torch.Tensor, targets: torch.Tensor, lam: float
) -> torch.Tensor:
    """β = (ZᵀZ + λI)⁻¹ ZᵀY for Z (N, R), Y (N, c) -> (R, c); predictions are Z_test β. O(N·R² + R³)."""
    z_train, targets, lam = _check_ridge(z_train, "z_train", targets, lam)
    eye = torch.eye(z_train.shape[1], dtype=z_train.dtype)
    chol = torch.linalg.cholesky(z_train.T @ z_train + lam * eye)
    beta = torch.cholesky_solve(z_train.T @ _as_2d(targets), chol)
    return beta if targets.ndim == 2 else beta[:, 0]


def _as_2d(t: torch.Tensor) -> torch.Tensor:
    return t if t.ndim == 2 else t[:, None]


def one_hot(
    labels: torch.Tensor, num_classes: int, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """Y[n, c] = 1 if labels[n] == c else 0 for labels (N,) -> (N, C): ridge targets for classification."""
    num_classes = require_int(num_classes, "num_classes", low=1)
    if (
        not isinstance(labels, torch.Tensor)
        or labels.dtype.is_floating_point
        or labels.ndim != 1
    ):
        raise TypeError(
            f"labels must be a 1-dimensional integer tensor, got {describe(labels)}"
        )
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise ValueError(
            f"labels must lie in [0, {num_classes - 1}], got values {int(labels.min())}…{int(labels.max())}"
        )
    return torch.nn.functional.one_hot(labels.long(), num_classes).to(dtype)


# ----------------------------------------------------------------------------------------------------
# Back to attention: the softmax kernel exp(xᵀy) (Performer)


def softmax_kernel(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """SM(x, y) = exp(xᵀy) for x (N, d), y (M, d) -> (N, M) = e^{‖x‖²/2} e^{‖y‖²/2} exp(−‖x − y‖²/2)."""
    x, y = check_pair(x, y, ndim=2)
    return torch.exp(x @ y.T)


def trig_softmax_features(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """φ(x) = e^{‖x‖²/2} [cos(xw), sin(xw)] / √m for x (..., d), w (d, m) ~ N(0, I) -> (..., 2m)."""
    x = _check_features_in(x, "x")
    w = require_floats(w, "w", "(d, R)", shape=(x.shape[-1], "R"))
    xw = x @ w.to(x.dtype)
    h = torch.exp((x * x).sum(-1, keepdim=True) / 2)
    return h * torch.cat([torch.cos(xw), torch.sin(xw)], dim=-1) / math.sqrt(w.shape[1])


def positive_softmax_features(
    x: Tensor, w: Tensor, stabilize: str | None = None
) -> Tensor:
    """φ(x) = exp(xw − ‖x‖²/2 − c) / √m: x (..., d), w (d, m) ~ N(0, I) -> (..., m)."""
    x, w = _check_features(x, w, stabilize=stabilize)
    exponent = x @ w - (x * x).sum(-1, keepdim=True) / 2  # (..., m)
    # c cancels in attention's ratio; with it the largest feature is exp(0) = 1, not 0
    if stabilize == "rows":  # c_i per row: a factor common to row i (queries only)
        exponent = exponent - exponent.detach().amax(dim=-1, keepdim=True)
    elif stabilize == "all":  # one c for all positions: keys of bidirectional attention
        exponent = exponent - exponent.detach().amax(dim=(-2, -1), keepdim=True)
    return torch.exp(exponent) / math.sqrt(w.shape[1])


def softmax_kernel_mse(
    x: torch.Tensor, y: torch.Tensor, m: int, kind: str = "positive"
) -> torch.Tensor:
    """Lemma 2 (Choromanski et al., 2021) for x, y (..., d) -> (...), m iid w ~ N(0, I) (trig: 2m features).

    trig:     MSE = exp(‖x + y‖²) SM(x, y)⁻² (1 − exp(−‖x − y‖²))² / (2m)
    positive: MSE = exp(‖x + y‖²) SM(x, y)² (1 − exp(−‖x + y‖²)) / m
    """
    x, y = check_pair(x, y, same_dtype=False)
    m, kind = (
        require_int(m, "m", low=1),
        require_choice(kind, "kind", ("positive", "trig")),
    )
    s, dlt = ((x + y) ** 2).sum(-1), ((x - y) ** 2).sum(-1)  # ‖x + y‖², ‖x − y‖²
    sm = torch.exp((x * y).sum(-1))
    if kind == "trig":
        return torch.exp(s) * sm**-2 * (1 - torch.exp(-dlt)) ** 2 / (2 * m)
    return torch.exp(s) * sm**2 * (1 - torch.exp(-s)) / m


def negative_fraction(estimates: torch.Tensor) -> float:
    """The fraction of entries < 0 of a tensor of kernel estimates (or of attention normalisers)."""
    require_tensor(estimates, "estimates", "float")
    return float((estimates < 0).double().mean()) if estimates.numel() else 0.0


class PerformerFeatures(nn.Module):
    """φ(x) (..., d) -> (..., m) with φ(q)ᵀφ(k) ≈ exp(qᵀk/√d): positive (or trig) features of x/d^{1/4}.

    Plugs into linear attention as its ``feature_map``: out_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / φ(q_i)ᵀ Σ_j φ(k_j).
    The features are computed position by position, with no stabiliser, so any causal form is causal. Long
    inputs underflow them (every feature of a key 0); :class:`PerformerAttention` stabilises without letting
    the future in. :meth:`scaled` returns φ(x) = f(x) e^{a(x)} split into a factor f of size at most 1 and a
    per-position log-scale a. ``redraw()`` draws new frequencies (Performer redraws them during training).
    """

    def __init__(
        self,
        d: int,
        m: int,
        kind: str = "positive",
        orthogonal: bool = True,
        scale: float | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.d, self.m = require_int(d, "d", low=1), require_int(m, "m", low=1)
        self.kind = require_choice(kind, "kind", ("positive", "trig"))
        self.orthogonal = bool(orthogonal)
        self.scale = (
            d**-0.25
            if scale is None
            else require_number(scale, "scale", low=0, low_open=True)
        )
        self.register_buffer("w", torch.empty(0))
        self.redraw(seed)

    def redraw(self, seed: int | None = None) -> None:
        """Draw new frequencies w (d, m) ~ N(0, I), block-orthogonal if ``orthogonal``; ``None``: global RNG."""
        g = None if seed is None else torch.Generator().manual_seed(seed)
        self.w = sample_frequencies(
            self.d, self.m, "gaussian", 1.0, self.orthogonal, g, torch.float32
        )

    def _input(self, x: object) -> Tensor:
        x = _check_features_in(x, "x")
        if x.shape[-1] != self.d:
            raise ValueError(
                f"x must have shape (..., d={self.d}), got shape {tuple(x.shape)}"
            )
        return x * self.scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self._input(x)
        if self.kind == "positive":
            return positive_softmax_features(x, self.w)
        return trig_softmax_features(x, self.w)

    def scaled(self, x: torch.Tensor) -> tuple[Tensor, Tensor]:
        """φ(x) = f e^a: f (..., m) with entries of size ≤ 1, a (..., 1) the log-scale (no gradient) of each x."""
        x = self._input(x)
        xw = x @ self.w.to(x.dtype)
        if self.kind == "trig":  # φ = e^{‖x‖²/2} [cos, sin] / √m
            a = (x * x).sum(-1, keepdim=True).detach() / 2
            return torch.cat([torch.cos(xw), torch.sin(xw)], dim=-1) / math.sqrt(
                self.m
            ), a
        exponent = xw - (x * x).sum(-1, keepdim=True) / 2  # φ = exp(exponent) / √m
        # the row's largest exponent: f's largest entry is 1/√m
        a = exponent.detach().amax(dim=-1, keepdim=True)
        return torch.exp(exponent - a) / math.sqrt(self.m), a


def performer_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    features: PerformerFeatures,
    mask: Mask = None,
    *,
    causal: bool = False,
    eps: float = DEFAULT_EPS,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> Tensor:
    """Linear attention with ``features`` (a :class:`PerformerFeatures`), stabilised without seeing the future.

    With φ(x_j) = f_j e^{a_j} (:meth:`PerformerFeatures.scaled`), row i of linear attention is N_i / (D_i + ε),
    N_i = Σ_j (f_iᵀ f_j) e^{a_i + a_j} v_j and D_i the same without v_j. Both are divided by e^{a_i + M_i}: the
    query's own factor, and for the keys one reference M_i for all keys that row i sees, their largest log-scale:
    M = max_j a_j bidirectionally, the running maximum M_i = max_{j ≤ i} a_j causally (as online softmax does).
    No e^{a_j − M_i} ≤ 1 overflows, the largest key's does not underflow, and ε is scaled by the same
    e^{−(a_i + M_i)}, so each row is its unstabilised ratio, ε included, up to rounding; every factor depends on
    positions ≤ i only. The causal form runs in chunks of ``chunk_size`` queries and rescales the state S, z by
    e^{M_old − M_new} when the maximum grows. ``mask``: a key-padding mask, as in linear attention.
    """
    q, k, v = check_attention_inputs(q, k, v)
    eps, chunk_size = (
        require_number(eps, "eps", low=0),
        require_int(chunk_size, "chunk_size", low=1),
    )
    keep = _key_mask(mask, (*q.shape[:-2], q.shape[-2], k.shape[-2]))
    if not isinstance(features, PerformerFeatures):
        raise TypeError(
            f"features must be a PerformerFeatures, got {describe(features)}"
        )
    (f_q, a_q), (f_k, a_k) = features.scaled(q), features.scaled(k)
    if keep is not None:
        a_k = a_k.masked_fill(~keep.unsqueeze(-1), -math.inf)
    if not causal:
        # M, one constant for all keys, (..., 1, 1)
        reference = a_k.amax(dim=-2, keepdim=True)
        phi_k = f_k * _exp_difference(a_k, reference)
        # (..., r, d_v), (..., r, 1)
        s, z = phi_k.transpose(-2, -1) @ v, phi_k.sum(dim=-2).unsqueeze(-1)
        return _ratio(f_q @ s, f_q @ z, eps, a_q + reference)
    require_keys_cover_queries(q.shape[-2], k.shape[-2], "causal Performer attention")
    return _causal_stabilised(f_q, a_q, f_k, a_k, v, eps, chunk_size)


def _exp_difference(a: Tensor, b: Tensor) -> Tensor:
    """e^{a − b}, with e^{−∞ − b} = 0 also where b = −∞ (a dropped key against a reference of dropped keys)."""
    return torch.where(a == -math.inf, 0.0, torch.exp(a - b)).to(a.dtype)


def _ratio(
    numerator: Tensor, denominator: Tensor, eps: float, log_scale: Tensor
) -> Tensor:
    """N / (D + ε) from N e^{−s}, D e^{−s} (s = ``log_scale`` per row): N e^{−s} / (D e^{−s} + ε e^{−s})."""
    if eps:  # with no key seen, s = −∞ and ε e^{−s} = ∞: the output is 0, as N / ε
        denominator = denominator + eps * torch.exp(-log_scale)
    return numerator / denominator


def _causal_stabilised(
    f_q: Tensor,
    a_q: Tensor,
    f_k: Tensor,
    a_k: Tensor,
    v: Tensor,
    eps: float,
    chunk_size: int,
) -> Tensor:
    """Row i: Σ_{j≤i} (f_iᵀf_j) e^{a_j − M_i} v_j / (Σ_{j≤i} (f_iᵀf_j) e^{a_j − M_i} + ε e^{−a_i − M_i})."""
    # the first n_pre keys are seen by every query
    n_q, n_pre = f_q.shape[-2], f_k.shape[-2] - f_q.shape[-2]
    # The state S = Σ f_j e^{a_j − M} v_jᵀ, z = Σ f_j e^{a_j − M} of the keys so far, relative to M their max.
    # (..., 1, 1); any value if n_pre = 0
    reference = a_k[..., : max(n_pre, 1), :].amax(dim=-2, keepdim=True)
    weighted = f_k[..., :n_pre, :] * _exp_difference(a_k[..., :n_pre, :], reference)
    s, z = (
        weighted.transpose(-2, -1) @ v[..., :n_pre, :],
        weighted.sum(dim=-2).unsqueeze(-1),
    )
    outputs = []
    for start in range(0, n_q, chunk_size):
        rows = slice(start, min(start + chunk_size, n_q))
        keys = slice(n_pre + rows.start, n_pre + rows.stop)
        f_c, a_c, v_c = f_k[..., keys, :], a_k[..., keys, :], v[..., keys, :]
        # M_i, (..., C, 1)
        running = torch.maximum(a_c.cummax(dim=-2).values, reference)
        log_w = a_c.transpose(-2, -1) - running  # [i, j] = a_j − M_i, (..., C, C)
        after = torch.ones(
            log_w.shape[-2:], dtype=torch.bool, device=log_w.device
        ).triu(1)
        # j > i or dropped
        log_w = log_w.masked_fill(
            after | (a_c.transpose(-2, -1) == -math.inf), -math.inf
        )
        weights = (f_q[..., rows, :] @ f_c.transpose(-2, -1)) * torch.exp(log_w)
        # e^{M_before − M_i} ≤ 1, (..., C, 1)
        carry = _exp_difference(reference, running)
        numerator = weights @ v_c + (f_q[..., rows, :] @ s) * carry
        denominator = (
            weights.sum(dim=-1, keepdim=True) + (f_q[..., rows, :] @ z) * carry
        )
        outputs.append(_ratio(numerator, denominator, eps, a_q[..., rows, :] + running))
        new_reference = running[..., -1:, :]
        weighted = f_c * _exp_difference(a_c, new_reference)
        rescale = _exp_difference(reference, new_reference)
        s = s * rescale + weighted.transpose(-2, -1) @ v_c
        z = z * rescale + weighted.sum(dim=-2).unsqueeze(-1)
        reference = new_reference
    if not outputs:
        return v.new_zeros(*f_q.shape[:-1], v.shape[-1])
    return torch.cat(outputs, dim=-2)


class PerformerAttention(nn.Module):
    """:func:`performer_attention` as MultiHeadAttention's attention, with ``PerformerFeatures(d, m, **options)``."""

    def __init__(
        self, d: int, m: int, *, eps: float = DEFAULT_EPS, **options: object
    ) -> None:
        super().__init__()
        self.features = PerformerFeatures(d, m, **options)
        self.eps = require_number(eps, "eps", low=0)

    def redraw(self, seed: int | None = None) -> None:
        """Draw new frequencies (see :meth:`PerformerFeatures.redraw`)."""
        self.features.redraw(seed)

    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Mask = None,
        *,
        causal: bool = False,
        dropout_p: float = 0.0,
    ) -> Tensor:
        _no_dropout(dropout_p, "Performer attention")
        return performer_attention(
            q, k, v, self.features, mask, causal=causal, eps=self.eps
        )
