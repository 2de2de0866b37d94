"""The checkers of chapter 10's model-building exercises (kernel ridge regression on random Fourier features,
the causal stabiliser of the Performer) accept independently written right answers, reject typical wrong ones
with the message that names the mistake, and their references agree with independent computations
(scikit-learn's KernelRidge, the unstabilised ratio in float64)."""

import math

import numpy as np
import pytest
import torch
from checker_testing import assert_passes, assert_wrong, correct_answers, randn, stub

from companion import random_features as rf
from companion.exercises import random_feature_models as ex
from companion.exercises.random_feature_models import (
    check_rff_ridge,
    check_stable_causal_performer,
)

CHECKERS = [check_rff_ridge, check_stable_causal_performer]


@pytest.mark.parametrize("checker", CHECKERS)
def test_stub_is_not_attempted(checker):
    assert checker.verdict(stub).status == "not attempted"


@pytest.mark.parametrize("checker", CHECKERS)
def test_a_crash_is_a_wrong_verdict(checker):
    assert_wrong(checker.verdict(lambda *a: 1 / 0), "raised ZeroDivisionError")


@pytest.mark.parametrize("checker", CHECKERS)
def test_verdicts_do_not_depend_on_the_global_random_state(checker):
    wrong = {
        "rff_ridge": lambda x, y, x_test, w, b, lam: x_test @ w @ w.T @ x.T @ y,
        "stable_causal_performer": lambda q, k, v, w: v.cumsum(-2),
    }[checker.exercise]
    torch.manual_seed(1)
    first = str(checker.verdict(wrong))
    torch.manual_seed(2)
    assert str(checker.verdict(wrong)) == first


def test_an_answer_that_changes_its_input_is_told():
    def in_place(x, y, x_test, w, b, lam):
        x.mul_(2.0)
        return ridge_by_solve(x / 2, y, x_test, w, b, lam)

    assert_wrong(check_rff_ridge.verdict(in_place), "changed its argument `x` in place")


# --- kernel ridge regression on random Fourier features ---------------------------------------------------------


def ridge_by_solve(x, y, x_test, w, b, lam):
    R = w.shape[1]
    z, z_test = (math.sqrt(2 / R) * torch.cos(t @ w + b) for t in (x, x_test))
    return z_test @ torch.linalg.solve(
        z.T @ z + lam * torch.eye(R, dtype=z.dtype), z.T @ y
    )


def ridge_by_the_dual(x, y, x_test, w, b, lam):
    """The push-through identity: Zᵀ(ZZᵀ + λI)⁻¹ = (ZᵀZ + λI)⁻¹Zᵀ, an N × N solve instead of R × R."""
    R = w.shape[1]
    z, z_test = (math.sqrt(2 / R) * torch.cos(t @ w + b) for t in (x, x_test))
    alpha = torch.linalg.solve(z @ z.T + lam * torch.eye(len(z), dtype=z.dtype), y)
    return (z_test @ z.T) @ alpha


def ridge_by_augmented_least_squares(x, y, x_test, w, b, lam):
    """Least squares on Z stacked over √λ I (targets padded with zeros): the same normal equations."""
    feats = lambda t: (
        np.sqrt(2 / w.shape[1]) * np.cos(t.numpy() @ w.numpy() + b.numpy())
    )  # noqa: E731
    z = feats(x)
    a = np.vstack([z, np.sqrt(lam) * np.eye(z.shape[1])])
    rhs = np.vstack([y.numpy(), np.zeros((z.shape[1], y.shape[1]))])
    beta = np.linalg.lstsq(a, rhs, rcond=None)[0]
    return torch.from_numpy(feats(x_test) @ beta)


def ridge_by_svd(x, y, x_test, w, b, lam):
    z = math.sqrt(2 / w.shape[1]) * torch.cos(x @ w + b)
    u, s, vh = torch.linalg.svd(z, full_matrices=False)
    beta = vh.T @ torch.diag(s / (s**2 + lam)) @ u.T @ y
    return math.sqrt(2 / w.shape[1]) * torch.cos(x_test @ w + b) @ beta


@correct_answers(
    (check_rff_ridge, ridge_by_solve),
    (check_rff_ridge, ridge_by_the_dual),
    (check_rff_ridge, ridge_by_augmented_least_squares),
    (check_rff_ridge, ridge_by_svd),
)
def test_ridge_right_answers(checker, student):
    assert_passes(checker, student)


def _ridge_changed(**kw):
    return ex._ridge_with(**kw)


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (
            _ridge_changed(features=lambda x, w, b: torch.cos(x @ w + b)),
            ["√(2/R) cos(xw + b): without the factor"],
        ),
        (
            _ridge_changed(
                features=lambda x, w, b: math.sqrt(2 / w.shape[1]) * torch.cos(x @ w)
            ),
            ["phase b"],
        ),
        (_ridge_changed(solve="no penalty"), ["Add λI"]),
        (_ridge_changed(lam_times_n=True), ["not λ times the number of points"]),
        (ex._exact_ridge, ["exact kernel ridge regression"]),
        (ex._linear_ridge, ["ridge regression on Z, not on x"]),
        (
            _ridge_changed(test_features=lambda x, w, b: torch.cos(x @ w + b)),
            ["The test points need the same"],
        ),
        (_ridge_changed(solve="penalty on Z"), ["λ goes on the diagonal"]),
        (
            lambda x, y, xt, w, b, lam: ridge_by_solve(x, y, xt, w, b, lam).float(),
            ["dtype"],
        ),
        (
            lambda x, y, xt, w, b, lam: ridge_by_solve(x, y, xt, w, b, lam)[:, 0],
            ["shape"],
        ),
        (lambda x, y, xt, w, b, lam: ridge_by_solve(x, y, xt, w, b, 0.5), ["λ = 0.1"]),
        (
            lambda x, y, xt, w, b, lam: (
                rf.random_fourier_features(xt, w, b)
                @ rf.feature_ridge(rf.random_fourier_features(x, w, b), y, lam)
            ),
            ["yourself"],
        ),
    ],
)
def test_ridge_wrong_answers(student, fragments):
    assert_wrong(check_rff_ridge.verdict(student), *fragments)


def test_ridge_with_many_features_is_scikit_learns_kernel_ridge():
    """The reference's predictions approach exact kernel ridge regression with the Gaussian kernel (scikit-learn's
    KernelRidge, γ = 1/2 for σ = 1) as R grows: the error falls roughly like 1/√R (seeds fixed)."""
    from sklearn.kernel_ridge import KernelRidge

    x, x_test, y = randn(40, 3, seed=1), randn(10, 3, seed=2), randn(40, 2, seed=3)
    exact = (
        KernelRidge(alpha=1.0, kernel="rbf", gamma=0.5)
        .fit(x.numpy(), y.numpy())
        .predict(x_test.numpy())
    )
    exact = torch.from_numpy(exact)
    errors = {}
    for R in (100, 2000):
        g = torch.Generator().manual_seed(R)
        w = torch.randn(3, R, generator=g, dtype=torch.float64)
        b = 2 * math.pi * torch.rand(R, generator=g, dtype=torch.float64)
        errors[R] = float(
            (ex._reference_ridge(x, y, x_test, w, b, 1.0) - exact).norm() / exact.norm()
        )
    # sqrt(20) = 4.5 expected
    assert errors[2000] < 0.25 and errors[2000] < errors[100] / 2.5, errors
    torch.testing.assert_close(ex._exact_ridge(x, y, x_test, None, None, 1.0), exact)


# --- the causal stabiliser ----------------------------------------------------------------------------------------


def stable_by_masked_log_weights(q, k, v, w):
    m = w.shape[1]
    u_q, u_k = (x @ w - (x * x).sum(-1, keepdim=True) / 2 for x in (q, k))
    a_q, a_k = u_q.amax(-1, keepdim=True), u_k.amax(-1, keepdim=True)
    f_q, f_k = torch.exp(u_q - a_q) / math.sqrt(m), torch.exp(u_k - a_k) / math.sqrt(m)
    big = torch.cummax(a_k, dim=-2).values
    n = q.shape[-2]
    log_w = (a_k.transpose(-2, -1) - big).masked_fill(
        torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf
    )
    weights = (f_q @ f_k.transpose(-2, -1)) * torch.exp(log_w)
    return weights @ v / weights.sum(-1, keepdim=True)


def stable_by_recurrence(q, k, v, w):
    """Token by token: the state S, z relative to the running maximum, rescaled when it grows."""
    m = w.shape[1]
    u_q, u_k = (x @ w - (x * x).sum(-1, keepdim=True) / 2 for x in (q, k))
    s = torch.zeros(*v.shape[:-2], m, v.shape[-1], dtype=v.dtype)
    z = torch.zeros(*v.shape[:-2], m, dtype=v.dtype)
    big = torch.full(v.shape[:-2], -math.inf, dtype=v.dtype)
    ys = []
    for i in range(q.shape[-2]):
        a_k = u_k[..., i, :].amax(-1)
        new = torch.maximum(big, a_k)
        shrink = torch.where(
            big == -math.inf, torch.zeros_like(big), torch.exp(big - new)
        )
        fk = torch.exp(u_k[..., i, :] - new[..., None]) / math.sqrt(m)
        s = s * shrink[..., None, None] + fk[..., :, None] * v[..., i, None, :]
        z = z * shrink[..., None] + fk
        big = new
        a_q = u_q[..., i, :].amax(-1)
        fq = torch.exp(u_q[..., i, :] - a_q[..., None]) / math.sqrt(m)
        num = torch.einsum("...r,...rd->...d", fq, s)
        den = (fq * z).sum(-1)
        ys.append(num / den[..., None])
    return torch.stack(ys, dim=-2)


def stable_by_logsumexp(q, k, v, w):
    """The log of each kernel value, log φ(q_i)ᵀφ(k_j) = logsumexp over the features, and a row maximum over
    j ≤ i: online softmax's stabiliser applied to the estimated scores."""
    m = w.shape[1]
    u_q, u_k = (x @ w - (x * x).sum(-1, keepdim=True) / 2 for x in (q, k))
    # (..., n, n)
    logs = torch.logsumexp(
        u_q[..., :, None, :] + u_k[..., None, :, :], dim=-1
    ) - math.log(m)
    n = q.shape[-2]
    logs = logs.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
    top = logs.amax(-1, keepdim=True)
    e = torch.exp(logs - top)
    return e @ v / e.sum(-1, keepdim=True)


@correct_answers(
    (check_stable_causal_performer, stable_by_masked_log_weights),
    (check_stable_causal_performer, stable_by_recurrence),
    (check_stable_causal_performer, stable_by_logsumexp),
)
def test_stable_right_answers(checker, student):
    assert_passes(checker, student)


def stable_with_reversed_maximum(q, k, v, w):
    """The running maximum taken from the end: M_i the largest a(k_j) over j >= i, the future."""
    flipped = lambda t: t.flip(-2)  # noqa: E731
    m = w.shape[1]
    u_q, u_k = (x @ w - (x * x).sum(-1, keepdim=True) / 2 for x in (q, k))
    a_q, a_k = u_q.amax(-1, keepdim=True), u_k.amax(-1, keepdim=True)
    f_q, f_k = torch.exp(u_q - a_q) / math.sqrt(m), torch.exp(u_k - a_k) / math.sqrt(m)
    big = flipped(torch.cummax(flipped(a_k), dim=-2).values)
    n = q.shape[-2]
    log_w = (a_k.transpose(-2, -1) - big).masked_fill(
        torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf
    )
    weights = (f_q @ f_k.transpose(-2, -1)) * torch.exp(log_w)
    return weights @ v / weights.sum(-1, keepdim=True)


def _one_query_scale(q, k, v, w):
    m = w.shape[1]
    u_q, u_k = (x @ w - (x * x).sum(-1, keepdim=True) / 2 for x in (q, k))
    a_q, a_k = u_q.amax(dim=(-2, -1), keepdim=True), u_k.amax(-1, keepdim=True)
    f_q, f_k = torch.exp(u_q - a_q) / math.sqrt(m), torch.exp(u_k - a_k) / math.sqrt(m)
    big = torch.cummax(a_k, dim=-2).values
    n = q.shape[-2]
    log_w = (a_k.transpose(-2, -1) - big).masked_fill(
        torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf
    )
    weights = (f_q @ f_k.transpose(-2, -1)) * torch.exp(log_w)
    return weights @ v / weights.sum(-1, keepdim=True)


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (ex._stable_with(keys="none"), ["divides 0 by 0", "length 20"]),
        (ex._stable_with(keys="own"), ["does not cancel"]),
        (ex._stable_with(keys="all"), ["lets the future in", "0.01"]),
        (ex._stable_with(mask="strict"), ["its own key"]),
        (ex._stable_with(mask="none"), ["not causal"]),
        (ex._stable_with(half_norm=False), ["‖x‖²/2"]),
        (stable_with_reversed_maximum, ["future"]),
        (_one_query_scale, ["future"]),
        (
            lambda q, k, v, w: stable_by_logsumexp(
                q.double(), k.double(), v.double(), w.double()
            ),
            ["dtype"],
        ),
        (
            lambda q, k, v, w: ex._reference_stable(q, k, v, w),
            ["yourself"],
        ),
    ],
)
def test_stable_wrong_answers(student, fragments):
    assert_wrong(check_stable_causal_performer.verdict(student), *fragments)


def test_the_stable_reference_is_the_unstabilised_ratio():
    """Where float64 holds every feature, the reference equals the plain causal ratio N_i / D_i computed from φ₊
    directly (no ε)."""
    for length, seed in ((None, 0), (10.0, 1), (20.0, 2)):
        q, k = (randn(2, 7, 4, seed=seed + s) for s in (10, 20))
        if length:
            q, k = (length * x / x.norm(dim=-1, keepdim=True) for x in (q, k))
        v, w = randn(2, 7, 3, seed=seed + 30), randn(4, 8, seed=seed + 40)
        phi = lambda x, w=w: (
            torch.exp(x @ w - (x * x).sum(-1, keepdim=True) / 2) / math.sqrt(8)
        )  # noqa: E731
        a = (phi(q) @ phi(k).transpose(-2, -1)).tril()
        plain = a @ v / a.sum(-1, keepdim=True)
        torch.testing.assert_close(
            ex._reference_stable(q, k, v, w), plain, atol=1e-10, rtol=1e-8
        )
