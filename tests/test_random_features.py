"""Random features (chapter 9): each test asserts a piece of the mathematics with fixed seeds.

Statistical tests compare a Monte Carlo average over T independent draws with its exact value and allow four
standard errors (a two-sided 4σ band: a correct implementation fails with probability ≈ 6e-5 per check, and the
seeds are fixed, so a pass is reproducible). Each such test also runs a wrong estimator through the same check
and asserts that it is rejected, so that the check can fail.
"""

import math

import numpy as np
import pytest
import scipy.stats
import torch
from checker_testing import F64
from raising import raises
from sklearn.kernel_approximation import RBFSampler
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import Ridge
from sklearn.metrics.pairwise import laplacian_kernel, rbf_kernel

from companion.benchmarking import fit_loglog_slope
from companion.linear_attention import (
    LinearAttention,
)
from companion.random_features import (
    KERNELS,
    PerformerAttention,
    PerformerFeatures,
    RandomFourierFeatures,
    approximation_errors,
    cauchy_kernel,
    feature_ridge,
    gaussian_kernel,
    kernel_approximation_error,
    kernel_at,
    kernel_ridge,
    laplace_kernel,
    monte_carlo_kernel,
    negative_fraction,
    one_hot,
    orthogonal_gaussian,
    performer_attention,
    positive_softmax_features,
    random_fourier_features,
    random_fourier_features_cos_sin,
    rff_variance,
    sample_frequencies,
    sample_phases,
    shift_invariant_kernel,
    softmax_kernel,
    softmax_kernel_mse,
    trig_softmax_features,
)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def draws(
    x,
    y,
    R,
    T,
    kernel="gaussian",
    sigma=1.0,
    variant="cos",
    seed=0,
    orthogonal=False,
    phases=True,
):
    """T independent estimates z(x)ᵀz(y), each with its own R features.

    The library's feature map is applied once with all T·R features (frequencies drawn in one batch), then split
    into T groups; the factor √T turns its normalisation √(2/(TR)) into √(2/R).
    """
    d = x.shape[-1]
    if variant == "cos":
        w = sample_frequencies(d, T * R, kernel, sigma, orthogonal, gen(seed), F64)
        b = (
            sample_phases(T * R, gen(seed + 1), F64)
            if phases
            else torch.zeros(T * R, dtype=F64)
        )
        zx, zy = (
            random_fourier_features(t, w, b).reshape(T, R) * math.sqrt(T)
            for t in (x, y)
        )
    else:
        w = sample_frequencies(d, T * R // 2, kernel, sigma, orthogonal, gen(seed), F64)
        zx, zy = (
            random_fourier_features_cos_sin(t, w).reshape(2, T, R // 2).transpose(0, 1)
            * math.sqrt(T)
            for t in (x, y)
        )
    return (zx * zy).flatten(1).sum(-1)


def within(sample: torch.Tensor, expected: float, n_se: float = 4.0) -> bool:
    """|mean − expected| ≤ n_se standard errors of the mean."""
    se = float(sample.std()) / math.sqrt(sample.numel())
    return abs(float(sample.mean()) - expected) <= n_se * se


def variance_within(sample: torch.Tensor, expected: float, n_se: float = 4.0) -> bool:
    """|sample variance − expected| ≤ n_se standard errors; SE² of the variance ≈ (μ₄ − s⁴)/T."""
    c = sample - sample.mean()
    s2, mu4 = float((c**2).mean()), float((c**4).mean())
    return abs(s2 - expected) <= n_se * math.sqrt((mu4 - s2**2) / sample.numel())


X = torch.tensor([0.3, -0.5, 0.8], dtype=F64)
Y = torch.tensor([-0.2, 0.4, 0.1], dtype=F64)


# ----------------------------------------------------------------------------------------------------
# Exact kernels


@pytest.mark.parametrize("sigma", [0.5, 1.0, 3.0])
def test_gaussian_kernel_equals_sklearn_rbf_kernel(sigma):
    x, y = (
        torch.randn(7, 5, generator=gen(0), dtype=F64),
        torch.randn(4, 5, generator=gen(1), dtype=F64),
    )
    expected = rbf_kernel(x.numpy(), y.numpy(), gamma=1 / (2 * sigma**2))
    np.testing.assert_allclose(
        gaussian_kernel(x, y, sigma).numpy(), expected, rtol=1e-12, atol=1e-14
    )


def test_laplace_kernel_equals_sklearn_and_cauchy_kernel_equals_a_loop():
    x, y = (
        torch.randn(6, 3, generator=gen(0), dtype=F64),
        torch.randn(5, 3, generator=gen(1), dtype=F64),
    )
    np.testing.assert_allclose(
        laplace_kernel(x, y, 2.0).numpy(),
        laplacian_kernel(x.numpy(), y.numpy(), gamma=0.5),
    )
    loop = [
        [
            math.prod(
                1 / (1 + ((a - b) / 1.5) ** 2)
                for a, b in zip(xi.tolist(), yj.tolist(), strict=True)
            )
            for yj in y
        ]
        for xi in x
    ]
    np.testing.assert_allclose(
        cauchy_kernel(x, y, 1.5).numpy(), np.array(loop), rtol=1e-12
    )
    for kernel in KERNELS:  # the matrix forms and k(Δ) agree
        k = shift_invariant_kernel(x, y, kernel, 1.5)
        np.testing.assert_allclose(
            k.numpy(), kernel_at(x[:, None] - y[None], kernel, 1.5).numpy(), rtol=1e-12
        )


def test_softmax_kernel_factorises_into_norms_and_the_gaussian_kernel():
    x, y = (
        torch.randn(5, 4, generator=gen(0), dtype=F64),
        torch.randn(3, 4, generator=gen(1), dtype=F64),
    )
    hx, hy = torch.exp((x * x).sum(-1) / 2), torch.exp((y * y).sum(-1) / 2)
    torch.testing.assert_close(
        softmax_kernel(x, y), hx[:, None] * hy[None] * gaussian_kernel(x, y, 1.0)
    )


# ----------------------------------------------------------------------------------------------------
# Sampling p(w): Bochner's pairs


@pytest.mark.parametrize(
    "kernel, law",
    [
        ("gaussian", scipy.stats.norm),
        ("laplace", scipy.stats.cauchy),
        ("cauchy", scipy.stats.laplace),
    ],
)
def test_frequencies_follow_the_density_bochner_pairs_with_the_kernel(kernel, law):
    sigma = 2.0
    w = (
        sample_frequencies(2, 4000, kernel, sigma, generator=gen(3), dtype=F64)
        .reshape(-1)
        .numpy()
    )
    assert scipy.stats.kstest(w, law(scale=1 / sigma).cdf).pvalue > 1e-3
    # the same check rejects the wrong length scale
    assert scipy.stats.kstest(w, law(scale=1.5 / sigma).cdf).pvalue < 1e-6


def test_laplace_kernel_from_cauchy_frequencies_and_not_from_gaussian_ones():
    deltas = torch.tensor([[0.3, -0.2], [1.0, 0.5], [-0.1, 2.0]], dtype=F64)
    T = 40000
    for delta in deltas:
        exact = float(kernel_at(delta, "laplace", 1.0))
        w = sample_frequencies(2, T, "laplace", 1.0, generator=gen(5), dtype=F64)
        assert within(torch.cos(delta @ w), exact)
        w_wrong = sample_frequencies(2, T, "gaussian", 1.0, generator=gen(5), dtype=F64)
        assert not within(torch.cos(delta @ w_wrong), exact)


def test_orthogonal_gaussian_blocks_are_orthogonal_with_chi_norms():
    d, blocks = 8, 200
    w = orthogonal_gaussian(d, d * blocks, gen(0), F64)
    first = w[:, :d]
    gram = first.T @ first
    torch.testing.assert_close(
        gram - torch.diag(torch.diagonal(gram)),
        torch.zeros(d, d, dtype=F64),
        atol=1e-10,
        rtol=0,
    )
    norms2 = (w**2).sum(0).numpy()
    assert scipy.stats.kstest(norms2, scipy.stats.chi2(d).cdf).pvalue > 1e-3
    # each column is N(0, I): mean 0 entry by entry (over the blocks) and E[w wᵀ] = I within sampling error
    # means[i, j]: entry i of the j-th column of a block
    means = w.reshape(d, blocks, d).mean(1)
    assert float(means.abs().max()) < 4.5 / math.sqrt(blocks)
    cov = (w @ w.T / w.shape[1]).numpy()
    assert np.abs(cov - np.eye(d)).max() < 4 * math.sqrt(2 / w.shape[1])
    assert orthogonal_gaussian(d, 5, gen(0)).shape == (d, 5)


def test_phase_lemma_cos_t_plus_2b_averages_to_zero():
    b = sample_phases(200000, gen(2), F64)
    assert (
        scipy.stats.kstest(b.numpy(), scipy.stats.uniform(0, 2 * math.pi).cdf).pvalue
        > 1e-3
    )
    for t in (0.0, 0.7, 2.0):
        assert within(torch.cos(t + 2 * b), 0.0)
        # a phase on [0, π/2) does not average out
        assert not within(torch.cos(t + b / 4), 0.0)


# ----------------------------------------------------------------------------------------------------
# Unbiasedness and the closed-form variances


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("variant", ["cos", "cos_sin"])
def test_random_fourier_features_are_unbiased(kernel, variant):
    sample = draws(
        X, Y, R=8, T=20000, kernel=kernel, sigma=1.3, variant=variant, seed=11
    )
    assert within(sample, float(kernel_at(X - Y, kernel, 1.3)))


def test_without_the_random_phase_the_cos_features_are_biased():
    # 2cos(wᵀx)cos(wᵀy) = cos(wᵀΔ) + cos(wᵀ(x+y))
    sample = draws(X, Y, R=8, T=20000, seed=11, phases=False)
    exact = float(kernel_at(X - Y))
    assert not within(sample, exact, n_se=10)
    # the bias is k(x + y), as the identity says
    assert within(sample, exact + float(kernel_at(X + Y)))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("variant", ["cos", "cos_sin"])
def test_closed_form_variance_matches_the_empirical_variance(kernel, variant):
    R = 8
    for delta_scale, seed in ((1.0, 21), (0.3, 22)):
        x, y = delta_scale * X, delta_scale * Y
        sample = draws(
            x, y, R=R, T=20000, kernel=kernel, sigma=1.3, variant=variant, seed=seed
        )
        assert variance_within(
            sample, float(rff_variance(x - y, R, kernel, 1.3, variant))
        )
    # the other variant's formula is rejected at Δ = X − Y
    other = "cos_sin" if variant == "cos" else "cos"
    assert not variance_within(
        sample, float(rff_variance(x - y, R, kernel, 1.3, other))
    )


def test_cos_sin_variance_is_smaller_for_the_gaussian_kernel():
    deltas = (
        torch.randn(500, 4, generator=gen(0), dtype=F64)
        * torch.linspace(0.01, 3, 500, dtype=F64)[:, None]
    )
    v_cos, v_cs = (
        rff_variance(deltas, 16, variant="cos"),
        rff_variance(deltas, 16, variant="cos_sin"),
    )
    k = kernel_at(deltas)
    # (2k(Δ)² − k(2Δ))/(2R), k(2Δ) = k(Δ)⁴
    torch.testing.assert_close(v_cos - v_cs, (2 * k**2 - k**4) / 32)
    assert bool((v_cs <= v_cos).all())
    torch.testing.assert_close(
        rff_variance(torch.zeros(4, dtype=F64), 16, variant="cos_sin"),
        torch.tensor(0.0, dtype=F64),
    )


def test_cos_variant_wins_for_the_cauchy_kernel_far_out():
    """2k(Δ)² − k(2Δ) changes sign at Δ² = (3 + √10)σ² in one dimension (k(Δ) = 1/(1 + Δ²/σ²))."""
    threshold = math.sqrt(3 + math.sqrt(10))
    near, far = (
        torch.tensor([threshold - 0.05], dtype=F64),
        torch.tensor([threshold + 0.05], dtype=F64),
    )
    v = {}
    for name, delta in (("near", near), ("far", far)):
        for variant in ("cos", "cos_sin"):
            v[name, variant] = float(rff_variance(delta, 8, "cauchy", 1.0, variant))
    assert (
        v["near", "cos_sin"] < v["near", "cos"]
        and v["far", "cos"] < v["far", "cos_sin"]
    )
    x, y = torch.tensor([3.0], dtype=F64), torch.tensor([0.0], dtype=F64)
    # the formula still matches the empirical variance out there
    for variant in ("cos", "cos_sin"):
        sample = draws(x, y, R=8, T=20000, kernel="cauchy", variant=variant, seed=31)
        assert variance_within(
            sample, float(rff_variance(x - y, 8, "cauchy", 1.0, variant))
        )


def test_monte_carlo_kernel_is_the_cos_sin_estimate():
    w = sample_frequencies(3, 64, generator=gen(4), dtype=F64)
    zx, zy = (
        random_fourier_features_cos_sin(X, w),
        random_fourier_features_cos_sin(Y, w),
    )
    torch.testing.assert_close(monte_carlo_kernel(X - Y, w), zx @ zy)


# ----------------------------------------------------------------------------------------------------
# The error law


def test_expected_squared_error_is_the_mean_closed_form_variance():
    """E[RMS²] = mean over the N² pairs of Var[z(x_i)ᵀz(x_j)] = C/R exactly (not only for large R)."""
    x = torch.randn(30, 3, generator=gen(0), dtype=F64)
    R, seeds = 32, range(150)
    err2 = approximation_errors(x, [R], seeds, sigma=1.5)[0] ** 2
    expected = float(rff_variance(x[:, None] - x[None], R, sigma=1.5).mean())
    assert within(err2, expected)
    # the cos_sin variant's formula (about 20% smaller here) is rejected for the cos features
    assert not within(
        err2,
        float(
            rff_variance(x[:, None] - x[None], R, sigma=1.5, variant="cos_sin").mean()
        ),
    )


def test_error_falls_like_one_over_sqrt_R():
    """Slope of log RMS error against log R is −½ within 3 standard errors of the fitted slope (and ±0.05).

    Since E[RMS²] = C/R exactly (previous test), log RMS = −½ log R + const + noise; the noise is the relative
    spread of the RMS over seeds, so the fitted slope's standard error measures how far it may stray.
    """
    x = torch.randn(40, 3, generator=gen(1), dtype=F64)
    Rs = [16, 32, 64, 128, 256, 512, 1024]
    errors = approximation_errors(x, Rs, range(6), sigma=1.5)
    slope, _, se = fit_loglog_slope(Rs, errors)
    assert abs(slope + 0.5) <= max(3 * se, 0.02) and abs(slope + 0.5) < 0.05, (
        slope,
        se,
    )
    for variant in ("cos_sin",):
        slope_cs, _, se_cs = fit_loglog_slope(
            Rs, approximation_errors(x, Rs, range(6), sigma=1.5, variant=variant)
        )
        assert (
            abs(slope_cs + 0.5) <= max(3 * se_cs, 0.02) and abs(slope_cs + 0.5) < 0.05
        ), (slope_cs, se_cs)


def test_fit_loglog_slope_recovers_exact_power_laws():
    Rs = [10, 100, 1000, 10000]
    for p in (-0.5, -1.0):
        slope, intercept, se = fit_loglog_slope(
            Rs, torch.tensor([3.0 * r**p for r in Rs], dtype=F64)
        )
        assert slope == pytest.approx(p, abs=1e-12) and intercept == pytest.approx(
            math.log(3.0), abs=1e-10
        )
        assert se == pytest.approx(0.0, abs=1e-10)


# ----------------------------------------------------------------------------------------------------
# Against scikit-learn's RBFSampler


def test_rbfsampler_is_the_cos_map_with_its_own_frequencies():
    x = np.random.default_rng(0).normal(size=(10, 4))
    sampler = RBFSampler(gamma=0.3, n_components=50, random_state=0).fit(x)
    ours = random_fourier_features(
        torch.from_numpy(x),
        torch.from_numpy(sampler.random_weights_),
        torch.from_numpy(sampler.random_offset_),
    )
    np.testing.assert_allclose(
        ours.numpy(), sampler.transform(x), rtol=1e-10, atol=1e-12
    )


def test_approximation_error_equals_rbfsampler_within_statistical_noise():
    """Two-sample Welch t-test over 30 seeds each: |t| < 3 at the same γ and R; a 30% wrong σ gives |t| > 3."""
    x = np.random.default_rng(1).normal(size=(60, 5))
    gamma, R, seeds = 0.1, 200, range(30)
    sigma = 1 / math.sqrt(2 * gamma)
    k = rbf_kernel(x, gamma=gamma)
    theirs = []
    for s in seeds:
        z = RBFSampler(gamma=gamma, n_components=R, random_state=s).fit_transform(x)
        theirs.append(np.sqrt(((z @ z.T - k) ** 2).mean()))
    xt = torch.from_numpy(x)
    ours = approximation_errors(xt, [R], seeds, sigma=sigma)[0].numpy()
    assert abs(scipy.stats.ttest_ind(ours, theirs, equal_var=False).statistic) < 3
    k_t = torch.from_numpy(k)
    wrong = [
        kernel_approximation_error(
            k_t, (z := RandomFourierFeatures(5, R, sigma=1.3 * sigma, seed=s)(xt)) @ z.T
        )
        for s in seeds
    ]
    assert abs(scipy.stats.ttest_ind(wrong, theirs, equal_var=False).statistic) > 3


# ----------------------------------------------------------------------------------------------------
# Ridge regression


def test_kernel_ridge_equals_sklearn_kernel_ridge():
    rng = np.random.default_rng(0)
    x, y, x_new = (
        rng.normal(size=(40, 3)),
        rng.normal(size=(40, 2)),
        rng.normal(size=(7, 3)),
    )
    sk = KernelRidge(alpha=0.3, kernel="rbf", gamma=0.5).fit(x, y)
    xt = torch.from_numpy(x)
    alpha = kernel_ridge(gaussian_kernel(xt, xt, 1.0), torch.from_numpy(y), 0.3)
    pred = gaussian_kernel(torch.from_numpy(x_new), xt, 1.0) @ alpha
    np.testing.assert_allclose(pred.numpy(), sk.predict(x_new), rtol=1e-8, atol=1e-10)


def test_feature_ridge_equals_sklearn_ridge_and_kernel_ridge_on_zzt():
    rng = np.random.default_rng(1)
    z, y = (
        torch.from_numpy(rng.normal(size=(50, 20))),
        torch.from_numpy(rng.normal(size=50)),
    )
    beta = feature_ridge(z, y, 0.7)
    sk = Ridge(alpha=0.7, fit_intercept=False, solver="cholesky").fit(
        z.numpy(), y.numpy()
    )
    np.testing.assert_allclose(beta.numpy(), sk.coef_, rtol=1e-10)
    # push-through identity: Z(ZᵀZ + λI)⁻¹Zᵀy = ZZᵀ(ZZᵀ + λI)⁻¹y, i.e. kernel ridge with K̂ = ZZᵀ
    torch.testing.assert_close(z @ beta, z @ z.T @ kernel_ridge(z @ z.T, y, 0.7))


def test_ridge_classifiers_on_digits():
    from sklearn.datasets import load_digits

    digits = load_digits()
    x, labels = torch.from_numpy(digits.data / 16.0), torch.from_numpy(digits.target)
    perm = torch.randperm(len(x), generator=gen(0))
    train, test = perm[:600], perm[600:1000]
    y = one_hot(labels[train], 10)
    sigma, lam = 2.5, 1e-2
    alpha = kernel_ridge(gaussian_kernel(x[train], x[train], sigma), y, lam)
    exact = (gaussian_kernel(x[test], x[train], sigma) @ alpha).argmax(1)
    rff = RandomFourierFeatures(64, 1000, sigma=sigma, seed=0)
    approx = (rff(x[test]) @ feature_ridge(rff(x[train]), y, lam)).argmax(1)
    acc_exact, acc_rff = (
        (exact == labels[test]).double().mean(),
        (approx == labels[test]).double().mean(),
    )
    assert acc_exact > 0.95 and acc_rff > 0.93, (acc_exact, acc_rff)


# ----------------------------------------------------------------------------------------------------
# Back to attention: positive and trigonometric features of the softmax kernel


def pair(norm_x, norm_y, cos_angle, d=16, seed=0):
    """Two vectors of given norms at a given angle."""
    e = torch.linalg.qr(torch.randn(d, 2, generator=gen(seed), dtype=F64))[0].T
    x = norm_x * e[0]
    y = norm_y * (cos_angle * e[0] + math.sqrt(1 - cos_angle**2) * e[1])
    return x, y


def softmax_draws(x, y, m, T, kind, orthogonal=False, seed=0):
    """T independent estimates φ(x)ᵀφ(y) of exp(xᵀy), each with m frequencies.

    The features are computed once with all T·m frequencies, then split into T groups of m; the factor √T turns
    the normalisation 1/√(Tm) into 1/√m.
    """
    w = sample_frequencies(
        x.shape[-1], T * m, orthogonal=orthogonal, generator=gen(seed), dtype=F64
    )
    if kind == "positive":
        fx, fy = (
            positive_softmax_features(t, w).reshape(T, m) * math.sqrt(T) for t in (x, y)
        )
    else:  # [cos | sin] halves, each (T·m,)
        fx, fy = (
            trig_softmax_features(t, w).reshape(2, T, m).transpose(0, 1) * math.sqrt(T)
            for t in (x, y)
        )
    return (fx * fy).flatten(1).sum(-1)


@pytest.mark.parametrize("kind", ["positive", "trig"])
@pytest.mark.parametrize("orthogonal", [False, True])
def test_softmax_kernel_estimates_are_unbiased(kind, orthogonal):
    x, y = pair(0.8, 0.6, 0.3)
    assert within(
        softmax_draws(x, y, 16, 5000, kind, orthogonal, seed=3), math.exp(float(x @ y))
    )


@pytest.mark.parametrize("kind", ["positive", "trig"])
@pytest.mark.parametrize(
    "geometry", [(0.8, 0.6, 0.3), (1.0, 1.0, -0.8), (0.5, 0.9, 0.9)]
)
def test_lemma2_mse_matches_the_empirical_mse(kind, geometry):
    x, y = pair(*geometry)
    m = 8
    sq_err = (softmax_draws(x, y, m, 8000, kind, seed=7) - math.exp(float(x @ y))) ** 2
    assert within(sq_err, float(softmax_kernel_mse(x, y, m, kind)))
    other = "trig" if kind == "positive" else "positive"
    assert not within(sq_err, float(softmax_kernel_mse(x, y, m, other)))


def test_positive_features_beat_trig_where_the_softmax_kernel_is_small():
    """Lemma 2: as xᵀy → −∞ the positive MSE → 0 while the trig MSE grows; for x = y trig is exact."""
    x, y = pair(2.0, 2.0, -1.0)
    assert softmax_kernel_mse(x, y, 8, "positive") < 1e-3 * softmax_kernel_mse(
        x, y, 8, "trig"
    )
    assert (
        float(softmax_kernel_mse(x, x, 8, "trig"))
        == 0.0
        < float(softmax_kernel_mse(x, x, 8, "positive"))
    )


@pytest.mark.parametrize("kind", ["positive", "gaussian_rff"])
def test_orthogonal_features_have_lower_mse_than_iid(kind):
    m = 16  # = d: one orthogonal block per draw
    x, y = pair(0.6, 0.6, 0.0)
    if kind == "positive":
        exact = math.exp(float(x @ y))
        iid, orth = (
            softmax_draws(x, y, m, 20000, "positive", o, seed=9) for o in (False, True)
        )
    else:
        exact = float(kernel_at(x - y))
        iid, orth = (
            draws(x, y, R=2 * m, T=20000, variant="cos_sin", seed=9, orthogonal=o)
            for o in (False, True)
        )
    e_iid, e_orth = (iid - exact) ** 2, (orth - exact) ** 2
    se = math.sqrt(float(e_iid.var()) / len(e_iid) + float(e_orth.var()) / len(e_orth))
    assert float(e_iid.mean() - e_orth.mean()) > 4 * se


def test_positive_features_never_negative_while_trig_estimates_can_be():
    x = torch.randn(200, 16, generator=gen(0), dtype=F64) * 0.6
    w = sample_frequencies(16, 8, generator=gen(1), dtype=F64)
    for stabilize in (None, "rows", "all"):
        phi = positive_softmax_features(x, w, stabilize)
        assert bool((phi >= 0).all())
    assert (
        negative_fraction(
            positive_softmax_features(x, w) @ positive_softmax_features(x, w).T
        )
        == 0.0
    )
    trig = trig_softmax_features(x, w)
    k_hat = trig @ trig.T
    # exp(xᵀy) > 0 always, yet many trig estimates are negative
    assert negative_fraction(k_hat) > 0.05
    assert negative_fraction(k_hat) == float((k_hat < 0).sum()) / k_hat.numel()


def feature_attention(phi_q, phi_k, v):
    """Non-causal linear attention written out: φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / φ(q_i)ᵀ Σ_j φ(k_j)."""
    return (phi_q @ (phi_k.transpose(-2, -1) @ v)) / (
        phi_q @ phi_k.sum(-2, keepdim=True).transpose(-2, -1)
    )


def test_max_subtraction_cancels_in_the_attention_ratio():
    q, k = (
        torch.randn(2, 10, 8, generator=gen(0), dtype=F64),
        torch.randn(2, 12, 8, generator=gen(1), dtype=F64),
    )
    v = torch.randn(2, 12, 3, generator=gen(2), dtype=F64)
    w = sample_frequencies(8, 32, generator=gen(3), dtype=F64)
    plain = feature_attention(
        positive_softmax_features(q, w), positive_softmax_features(k, w), v
    )
    for sq in (None, "rows", "all"):
        stab = feature_attention(
            positive_softmax_features(q, w, sq),
            positive_softmax_features(k, w, "all"),
            v,
        )
        torch.testing.assert_close(stab, plain, rtol=1e-12, atol=1e-12)
    # a per-row max for the keys rescales each key differently: it does not cancel
    wrong = feature_attention(
        positive_softmax_features(q, w), positive_softmax_features(k, w, "rows"), v
    )
    assert (wrong - plain).abs().max() > 1e-3


def test_float32_underflow_without_the_stabilizer_and_fixed_with_it():
    d, m = 16, 64
    q = torch.randn(20, d, generator=gen(0))
    k = torch.randn(30, d, generator=gen(1))
    # ‖x‖ = 20: ‖x‖²/2 = 200
    q, k = 20 * q / q.norm(dim=-1, keepdim=True), 20 * k / k.norm(dim=-1, keepdim=True)
    v = torch.randn(30, 4, generator=gen(2))
    w = sample_frequencies(d, m, generator=gen(3))
    raw = positive_softmax_features(k, w)
    assert float(raw.max()) == 0.0  # every key feature underflows in float32
    bad = feature_attention(positive_softmax_features(q, w), raw, v)
    assert bool(torch.isnan(bad).all())
    good = feature_attention(
        positive_softmax_features(q, w, "rows"),
        positive_softmax_features(k, w, "all"),
        v,
    )
    # the same estimator in float64, where nothing underflows yet (e^{-400} ≈ 1e-174)
    ref = feature_attention(
        positive_softmax_features(q.double(), w.double()),
        positive_softmax_features(k.double(), w.double()),
        v.double(),
    )
    assert bool(torch.isfinite(good).all())
    torch.testing.assert_close(good.double(), ref, rtol=1e-3, atol=1e-4)
    # Performer attention, bidirectional and causal: float32 against the unstabilised float64 ratio
    phi = PerformerFeatures(d, m, scale=1.0, seed=3)
    q, k, v = q[None, :20], k[None, :20], v[None, :20]
    for causal in (False, True):
        out = performer_attention(q, k, v, phi, causal=causal, eps=0.0)
        plain = LinearAttention(feature_map=phi, eps=0.0).quadratic(
            *(t.double() for t in (q, k, v)), causal=causal
        )
        assert bool(torch.isfinite(out).all())
        torch.testing.assert_close(out.double(), plain, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("kind", ["positive", "trig"])
def test_performer_features_split_into_a_bounded_factor_and_a_log_scale(kind):
    x = torch.randn(2, 9, 16, generator=gen(0), dtype=F64)
    phi = PerformerFeatures(16, 32, kind, seed=5).double()
    f, a = phi.scaled(x)
    torch.testing.assert_close(f * torch.exp(a), phi(x), rtol=1e-12, atol=0)
    assert (
        a.shape == (2, 9, 1)
        and not a.requires_grad
        and float(f.abs().max()) <= 1 / math.sqrt(32) + 1e-15
    )
    if kind == "positive":  # the row's largest entry is exactly 1/√m
        torch.testing.assert_close(
            f.amax(-1), torch.full((2, 9), 32**-0.5, dtype=F64), rtol=1e-15, atol=0
        )
    # φ(q)ᵀφ(k) is the estimate of exp(qᵀk/√d) itself
    est = phi(x[0]) @ phi(x[1]).T
    assert est.shape == (9, 9) and (kind == "trig" or bool((est > 0).all()))


@pytest.mark.parametrize("kind", ["positive", "trig"])
@pytest.mark.parametrize("causal", [False, True])
def test_performer_attention_is_linear_attention_with_its_features(kind, causal):
    """The stabiliser changes nothing but rounding, ε included, in every form: chunks, a cache's keys, a mask."""
    q = torch.randn(2, 3, 13, 8, generator=gen(0), dtype=F64)
    k, v = (
        torch.randn(2, 3, 17, 8, generator=gen(1), dtype=F64),
        torch.randn(2, 3, 17, 4, generator=gen(2), dtype=F64),
    )
    phi = PerformerFeatures(8, 32, kind, seed=1).double()
    mask = torch.rand(2, 1, 1, 17, generator=gen(3)) > 0.3
    mask[..., 5] = True  # every query of the causal form sees a kept key
    for keep, eps in ((None, 0.0), (None, 1e-6), (mask, 0.1)):
        ref = LinearAttention(feature_map=phi, eps=eps).quadratic(
            q, k, v, keep, causal=causal
        )
        for chunk_size in (1, 4, 128):
            out = performer_attention(
                q, k, v, phi, keep, causal=causal, eps=eps, chunk_size=chunk_size
            )
            torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-11)
    module = PerformerAttention(8, 32, kind=kind, seed=1).double()
    torch.testing.assert_close(
        module(q, k, v, causal=causal), performer_attention(q, k, v, phi, causal=causal)
    )


def test_performer_features_estimate_exp_qk_over_sqrt_d():
    d, m, T = 16, 8, 20000
    q, k = pair(1.5, 1.2, 0.4, d=d)
    # T groups of m
    phi = PerformerFeatures(d, T * m, orthogonal=False, seed=4).double()
    est = (phi(q[None]).reshape(T, m) * phi(k[None]).reshape(T, m)).sum(-1) * T
    assert within(est, math.exp(float(q @ k) / math.sqrt(d)))
    # the scale d^(-1/4) on both sides is what makes √d
    assert not within(est, math.exp(float(q @ k)))


@pytest.mark.parametrize("causal", [False, True])
def test_gradients_pass_through_the_stabilised_attention_unchanged(causal):
    q = torch.randn(6, 8, generator=gen(0), dtype=F64, requires_grad=True)
    k, v = (
        torch.randn(6, 8, generator=gen(1), dtype=F64),
        torch.randn(6, 3, generator=gen(2), dtype=F64),
    )
    phi = PerformerFeatures(8, 32, seed=1).double()
    stabilised = lambda t: performer_attention(
        t, k, v, phi, causal=causal, eps=0.0, chunk_size=4
    )
    plain = lambda t: LinearAttention(feature_map=phi, eps=0.0).quadratic(
        t, k, v, causal=causal
    )
    (g_stable,), (g_plain,) = (
        torch.autograd.grad(f(q).sum(), q) for f in (stabilised, plain)
    )
    torch.testing.assert_close(g_stable, g_plain)
    assert torch.autograd.gradcheck(stabilised, (q,))


def test_performer_attention_approaches_softmax_attention_as_m_grows():
    # entries of q, k with standard deviation ½: ‖q + k‖²/√d ≈ 2, so the relative MSE ≈ e²/m (Lemma 2)
    d = 16
    q, k = (
        0.5 * torch.randn(64, d, generator=gen(0), dtype=F64),
        0.5 * torch.randn(64, d, generator=gen(1), dtype=F64),
    )
    v = torch.randn(64, 8, generator=gen(2), dtype=F64)
    exact = torch.softmax(q @ k.T / math.sqrt(d), dim=-1) @ v
    err = {}
    for m in (16, 1024):
        e = []
        for seed in range(5):
            phi = PerformerFeatures(d, m, seed=seed).double()
            e.append(
                float(
                    (feature_attention(phi(q), phi(k), v) - exact).pow(2).mean().sqrt()
                )
            )
        err[m] = sum(e) / len(e)
    # 1/√m law: 64× more features, about 8× smaller error
    assert err[1024] < err[16] / 4, err


def first_order_mse(q, k, v, causal):
    """Lemma 2 carried through the ratio: the MSE of Performer attention's row i, m = 1, iid frequencies.

    One frequency w gives Y_j = exp(wᵀ(q + k_j) − ‖q‖²/2 − ‖k_j‖²/2), E[Y_j] = SM(q, k_j) and
    E[Y_j Y_j'] = exp(‖2q + k_j + k_j'‖²/2 − ‖q‖² − ‖k_j‖²/2 − ‖k_j'‖²/2) (j = j': Lemma 2). To first order
    out_i − o_i = Σ_j (K̂_ij − K_ij)(v_j − o_i) / D_i, so MSE_i = Σ_jj' Cov(Y_j, Y_j') (v_j − o_i)ᵀ(v_j' − o_i) / D_i²
    for m = 1, divided by m for m frequencies. Inputs are scaled by d^(-1/4) as PerformerFeatures does.
    """
    qs, ks = q / q.shape[-1] ** 0.25, k / k.shape[-1] ** 0.25
    n = q.shape[0]
    seen = (
        torch.ones(n, n, dtype=torch.bool).tril()
        if causal
        else torch.ones(n, n, dtype=torch.bool)
    )
    sm = torch.exp(qs @ ks.T) * seen  # K_ij
    out = (sm @ v) / sm.sum(-1, keepdim=True)  # softmax attention o_i
    # (i, j, j', d)
    s = 2 * qs[:, None, None, :] + ks[None, :, None, :] + ks[None, None, :, :]
    sq_q, sq_k = (qs * qs).sum(-1), (ks * ks).sum(-1)
    second = torch.exp(
        (s * s).sum(-1) / 2
        - sq_q[:, None, None]
        - sq_k[None, :, None] / 2
        - sq_k[None, None, :] / 2
    )
    cov = (second - sm[:, :, None] * sm[:, None, :]) * (
        seen[:, :, None] & seen[:, None, :]
    )
    lemma2 = softmax_kernel_mse(
        qs[:, None, :].expand(n, n, -1), ks[None].expand(n, n, -1), 1
    )
    torch.testing.assert_close(
        torch.diagonal(cov, dim1=1, dim2=2), lemma2 * seen, rtol=1e-10, atol=0
    )
    dv = v[None, :, :] - out[:, None, :]  # (i, j, d_v)
    return (cov * (dv @ dv.transpose(-2, -1))).sum((-2, -1)) / sm.sum(-1) ** 2, out


@pytest.mark.parametrize("causal", [False, True])
def test_performer_attention_converges_to_softmax_as_lemma_2_predicts(causal):
    """MSE ∝ 1/m up to m = 16,384, within a band of Lemma 2's prediction, stabiliser on.

    A stabiliser that divided by a constant over all positions let ε grow with m (its largest exponent grows
    with m): at m = 16,384 its causal MSE was twice the prediction, and growing.
    """
    n, d = 16, 16
    q, k = (0.5 * torch.randn(n, d, generator=gen(s), dtype=F64) for s in (0, 1))
    v = torch.randn(n, 4, generator=gen(2), dtype=F64)
    predicted, softmax_out = first_order_mse(q, k, v, causal)
    for m in (256, 16384):
        errors = [
            (
                (
                    PerformerAttention(d, m, orthogonal=False, seed=s).double()(
                        q, k, v, causal=causal
                    )
                    - softmax_out
                )
                ** 2
            )
            .sum(-1)
            .mean()
            for s in range(50)
        ]
        ratio = float(torch.stack(errors).mean() / (predicted.mean() / m))
        # 50 draws: 0.79 to 1.03 over four sets of seeds
        assert 0.7 < ratio < 1.3, (m, ratio)


def test_redraw_changes_frequencies_and_seeds_reproduce():
    a, b = PerformerFeatures(8, 16, seed=1), PerformerFeatures(8, 16, seed=1)
    torch.testing.assert_close(a.w, b.w)
    before = a.w.clone()
    a.redraw(seed=2)
    assert not torch.equal(a.w, before) and a.w.shape == (8, 16)
    r = RandomFourierFeatures(4, 10, seed=0)
    w0 = r.w.clone()
    r.redraw(3)
    assert not torch.equal(r.w, w0)


# ----------------------------------------------------------------------------------------------------
# Bad input


def test_bad_inputs_raise_clear_errors():
    x = torch.randn(5, 3)
    with raises(TypeError, "x", "floating-point", "got a ndarray"):
        gaussian_kernel(np.ones((5, 3)), x)
    with raises(ValueError, "same d"):
        gaussian_kernel(x, torch.randn(4, 2))
    with raises(ValueError, "sigma", "> 0", "got 0.0"):
        laplace_kernel(x, x, sigma=0.0)
    with raises(ValueError, "kernel must be one of"):
        sample_frequencies(3, 4, kernel="matern")
    with raises(ValueError, "orthogonal frequencies"):
        sample_frequencies(3, 4, kernel="laplace", orthogonal=True)
    with raises(ValueError, "w", "(3, R)"):
        random_fourier_features(x, torch.randn(4, 10), torch.rand(10))
    with raises(ValueError, "b must have shape (R,) = (10,)"):
        random_fourier_features(x, torch.randn(3, 10), torch.rand(9))
    with raises(TypeError, "floating-point"):
        random_fourier_features_cos_sin(
            torch.ones(5, 3, dtype=torch.long), torch.randn(3, 4)
        )
    with raises(ValueError, "even number of features"):
        RandomFourierFeatures(3, 7, variant="cos_sin")
    with raises(TypeError, "R", ">= 1"):
        RandomFourierFeatures(3, 7.0)
    with raises(ValueError, "stabilize must be"):
        positive_softmax_features(x, torch.randn(3, 4), stabilize="max")
    with raises(ValueError, "x must have shape (..., d=3)"):
        PerformerFeatures(3, 4)(torch.randn(5, 4))
    assert PerformerFeatures(3, 4)(torch.randn(3)).shape == (4,)
    with raises(TypeError, "features must be a PerformerFeatures"):
        performer_attention(x, x, x, lambda t: t)
    with raises(ValueError, "forms no attention weights to drop"):
        PerformerAttention(3, 4)(x, x, x, dropout_p=0.1)
    with raises(ValueError, "k_train must be square"):
        kernel_ridge(torch.randn(4, 3, dtype=F64), torch.randn(4, dtype=F64), 1.0)
    with raises(ValueError, "same N"):
        feature_ridge(torch.randn(4, 3), torch.randn(5), 1.0)
    with raises(ValueError, "labels must lie in"):
        one_hot(torch.tensor([0, 10]), 10)
    with raises(ValueError, "k_approx must have one shape"):
        kernel_approximation_error(torch.eye(3), torch.eye(4))
    with raises(ValueError, "kind must be one of"):
        softmax_kernel_mse(x, x, 4, kind="relu")


# ----------------------------------------------------------------------------------------------------
# Plugged into chapter 8's linear attention


def test_performer_features_plug_into_linear_attention():
    d = 16
    q = 0.5 * torch.randn(2, 3, 40, d, generator=gen(0), dtype=F64)  # (B, h, n, d)
    k = 0.5 * torch.randn(2, 3, 40, d, generator=gen(1), dtype=F64)
    v = torch.randn(2, 3, 40, 8, generator=gen(2), dtype=F64)
    phi = PerformerFeatures(d, 256, seed=0).double()
    out = LinearAttention(feature_map=phi, eps=0.0)(q, k, v)
    torch.testing.assert_close(out, feature_attention(phi(q), phi(k), v))
    # the stabiliser's constants cancel in the prefix sums too
    for causal in (False, True):
        stable = performer_attention(q, k, v, phi, causal=causal, eps=0.0)
        torch.testing.assert_close(
            stable, LinearAttention(feature_map=phi, eps=0.0)(q, k, v, causal=causal)
        )
    exact = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1) @ v
    err = [
        float(
            (
                LinearAttention(feature_map=PerformerFeatures(d, m, seed=1).double())(
                    q, k, v
                )
                - exact
            )
            .abs()
            .mean()
        )
        for m in (16, 1024)
    ]
    assert err[1] < err[0] / 4, err


def test_performer_features_step_by_step():
    """The features are computed position by position, so the recurrent form gives the parallel one's numbers."""
    d = 8
    q, k = (
        0.5 * torch.randn(1, 12, d, generator=gen(0), dtype=F64),
        0.5 * torch.randn(1, 12, d, generator=gen(1), dtype=F64),
    )
    v = torch.randn(1, 12, 4, generator=gen(2), dtype=F64)
    off = PerformerFeatures(d, 64, seed=0).double()
    parallel = LinearAttention(feature_map=off, eps=0.0)(q, k, v, causal=True)
    state, outs = None, []
    for i in range(12):
        y, state = LinearAttention(feature_map=off, eps=0.0).step(
            q[:, i], k[:, i], v[:, i], state
        )
        outs.append(y)
    torch.testing.assert_close(torch.stack(outs, dim=1), parallel)
