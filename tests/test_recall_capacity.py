"""The state-size bound of chapter 8, against independent computations: numpy's SVD, loops, closed forms."""

import math

import numpy as np
import pytest
import torch
from raising import raises

from companion import recall_capacity as rc
from companion.linear_attention import LinearAttention


def loop_read_out(phi_q: np.ndarray, phi_k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """o_i = φ(q_i)ᵀS / φ(q_i)ᵀz with S and z summed key by key, one query at a time."""
    s = np.zeros((phi_k.shape[1], v.shape[1]))
    z = np.zeros(phi_k.shape[1])
    for f, value in zip(phi_k, v, strict=True):
        s += np.outer(f, value)
        z += f
    return np.stack([f @ s / (f @ z) for f in phi_q])


def eckart_young(targets: np.ndarray, r: int) -> float:
    """Σ_{i>r} σ_i², from numpy's singular values."""
    return float((np.linalg.svd(targets, compute_uv=False)[r:] ** 2).sum())


def read(phi: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return LinearAttention(feature_map=lambda x: x, eps=0.0)(phi, phi, v)


@pytest.mark.parametrize("r", [1, 3, 8, 16])
def test_shared_features_recall_r_pairs_exactly(r):
    phi = rc.shared_features(r, r).numpy()
    assert np.array_equal(phi, np.eye(r))  # one feature per key
    # distinct one-hot values, any order
    values = np.eye(r)[np.random.default_rng(r).permutation(r)]
    assert np.allclose(loop_read_out(phi, phi, values), values, rtol=0, atol=1e-15)


@pytest.mark.parametrize("r", [2, 5, 16])
@pytest.mark.parametrize("extra", [1, None, 3])  # N = r + 1, 2r, 4r
def test_shared_features_meet_the_eckart_young_bound_exactly(r, extra):
    n = r + 1 if extra == 1 else (2 * r if extra is None else 4 * r)
    phi = rc.shared_features(n, r)
    assert phi.shape == (n, r) and bool((phi.sum(0) >= 1).all())  # every feature used
    targets = np.eye(n)
    error = ((loop_read_out(phi.numpy(), phi.numpy(), targets) - targets) ** 2).sum()
    assert eckart_young(targets, r) == pytest.approx(n - r, abs=1e-9)
    assert error == pytest.approx(n - r, abs=1e-12)
    # the companion's linear attention gives the same read-out
    torch_error = (
        (
            read(phi, torch.eye(n, dtype=torch.float64))
            - torch.eye(n, dtype=torch.float64)
        )
        ** 2
    ).sum()
    assert float(torch_error) == pytest.approx(n - r, abs=1e-12)


@pytest.mark.parametrize("n, r", [(6, 2), (12, 4), (20, 16)])
def test_no_rank_r_read_out_beats_eckart_young(n, r):
    """Random non-negative features and random values, and random real rank-r matrices: never below the bound."""
    g = torch.Generator().manual_seed(n * r)
    targets = np.eye(n)
    best = math.inf
    for _ in range(200):
        phi_q = torch.rand(n, r, generator=g, dtype=torch.float64) ** 3
        phi_k = torch.rand(n, r, generator=g, dtype=torch.float64) ** 3
        v = torch.randn(n, n, generator=g, dtype=torch.float64)
        out = LinearAttention(feature_map=lambda x: x, eps=0.0)(phi_q, phi_k, v).numpy()
        assert np.linalg.matrix_rank(out) <= r
        a, b = np.random.default_rng(len(str(best))).standard_normal((2, n, r))
        best = min(best, ((out - targets) ** 2).sum(), ((a @ b.T - targets) ** 2).sum())
    assert best >= n - r - 1e-9
    # general targets: the bound is the tail of the singular values, and the truncated SVD attains it
    t = np.random.default_rng(0).standard_normal((n, n + 3))
    u, sigma, vt = np.linalg.svd(t, full_matrices=False)
    optimum = (u[:, :r] * sigma[:r]) @ vt[:r]
    assert ((optimum - t) ** 2).sum() == pytest.approx(eckart_young(t, r), rel=1e-10)


@pytest.mark.parametrize(
    "n_keys, r", [(1, 2), (2, 2), (9, 2), (17, 4), (64, 16), (30, 7)]
)
def test_quarter_circle_features_are_nonnegative_unit_vectors_on_their_circle(
    n_keys, r
):
    phi = rc.quarter_circle_features(n_keys, r)
    assert phi.shape == (n_keys, r) and bool((phi >= 0).all())
    assert torch.allclose(phi.norm(dim=1), torch.ones(n_keys, dtype=torch.float64))
    circles = r // 2
    for i in range(n_keys):
        g = i % circles
        on = [j for j in range(n_keys) if j % circles == g]
        theta = (on.index(i) * math.pi / 2 / (len(on) - 1)) if len(on) > 1 else 0.0
        expected = np.zeros(r)
        expected[2 * g], expected[2 * g + 1] = math.cos(theta), math.sin(theta)
        assert np.allclose(phi[i].numpy(), expected, atol=1e-15)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8, 33, 100])
def test_quarter_circle_recalls_every_key_by_argmax_at_the_closed_form_margin(n):
    phi = rc.quarter_circle_features(n, 2).numpy()
    outputs = loop_read_out(phi, phi, np.eye(n))
    assert (outputs.argmax(1) == np.arange(n)).all()
    margins = [
        row[i] - max((row[j] for j in range(n) if j != i), default=0.0)
        for i, row in enumerate(outputs)
    ]
    assert min(margins) == pytest.approx(rc.quarter_circle_margin(n), rel=1e-9)
    assert min(margins) > 0
    if n > 2:  # shrinks like δ³/(2√2), δ = π/(2(n − 1)): (r/N)³ with r = 2
        delta = math.pi / (2 * (n - 1))
        assert rc.quarter_circle_margin(n) == pytest.approx(
            delta**3 / (2 * math.sqrt(2)), rel=0.35
        )


def test_many_circles_hold_n_keys_at_the_margin_of_one_circle_of_2n_over_r():
    for r, per_circle in ((4, 5), (8, 8), (16, 3)):
        n = r // 2 * per_circle
        phi = rc.quarter_circle_features(n, r)
        margins = rc.argmax_margin(
            read(phi, torch.eye(n, dtype=torch.float64)), torch.arange(n)
        )
        assert float(margins.min()) == pytest.approx(
            rc.quarter_circle_margin(per_circle), rel=1e-9
        )


def test_argmax_margin_against_a_loop():
    outputs = torch.randn(
        50, 7, generator=torch.Generator().manual_seed(3), dtype=torch.float64
    )
    answers = torch.randint(7, (50,), generator=torch.Generator().manual_seed(4))
    expected = [
        float(row[a]) - max(float(row[c]) for c in range(7) if c != a)
        for row, a in zip(outputs, answers.tolist(), strict=True)
    ]
    margins = rc.argmax_margin(outputs, answers)
    assert margins.tolist() == pytest.approx(expected, abs=1e-15)
    assert ((margins > 0) == (outputs.argmax(1) == answers)).all()


@pytest.mark.parametrize("beta", [0.0, 1.0, 4.0, 12.0])
@pytest.mark.parametrize("n", [2, 5, 64, 1000])
def test_softmax_residual_and_margin_against_softmax_itself(n, beta):
    scores = beta * torch.eye(n, dtype=torch.float64)  # β on the match, 0 elsewhere
    # = the outputs, for distinct one-hot values
    weights = torch.softmax(scores, dim=-1)
    assert float(1 - weights.diagonal().min()) == pytest.approx(
        rc.softmax_residual(n, beta), rel=1e-9, abs=1e-15
    )
    margin = float(rc.argmax_margin(weights, torch.arange(n)).min())
    assert margin == pytest.approx(rc.softmax_margin(n, beta), rel=1e-9, abs=1e-15)
    # squared error per query: ε² n/(n − 1), below the linear bound once β is large enough
    eps = rc.softmax_residual(n, beta)
    mse = float(((weights - torch.eye(n, dtype=torch.float64)) ** 2).sum() / n)
    assert mse == pytest.approx(eps**2 * n / (n - 1), rel=1e-9, abs=1e-15)


def test_the_arguments_are_checked():
    with raises(ValueError, "n_keys"):
        rc.shared_features(0, 3)
    with raises(ValueError, "r must be"):
        rc.quarter_circle_features(4, 1)
    with raises(TypeError, "r must be"):
        rc.shared_features(4, 2.0)
    with raises(ValueError, "n must be"):
        rc.softmax_margin(1, 2.0)
    with raises(ValueError, "beta"):
        rc.softmax_residual(3, -1.0)
    with raises(ValueError, "outputs"):
        rc.argmax_margin(torch.zeros(3), torch.zeros(3))


# ---- key-only queries: every two-pair context at once ----


def test_key_only_leak_is_what_a_two_pair_context_reads():
    rng = np.random.default_rng(0)
    phi_q, phi_k = rng.random((2, 5, 3)) + 0.1  # 5 keys, 3 non-negative features
    leak = rc.key_only_leak(torch.from_numpy(phi_q), torch.from_numpy(phi_k)).numpy()
    values = np.eye(2)  # v_a = e_0, v_b = e_1
    for a in range(5):
        assert leak[a, a] == 0
        for b in range(5):
            # the context (k_a, v_a), (k_b, v_b), read by q_a: (v_a + x v_b) / (1 + x)
            if b != a:
                out = loop_read_out(phi_q[[a]], phi_k[[a, b]], values)[0]
                assert out[1] / out[0] == pytest.approx(leak[a, b], rel=1e-12)


@pytest.mark.parametrize(("n_keys", "r"), [(2, 1), (5, 4), (9, 3), (16, 8), (12, 2)])
def test_key_only_least_leak_is_eckart_young_on_the_identity(n_keys, r):
    floor = math.sqrt(eckart_young(np.eye(n_keys), r) / (n_keys * (n_keys - 1)))
    assert rc.key_only_least_leak(n_keys, r) == pytest.approx(floor, rel=1e-12)
    if r > 1:
        assert rc.key_only_least_leak(r, r) == 0.0  # r keys fit in r features


@pytest.mark.parametrize(("n_keys", "r"), [(5, 4), (9, 3), (16, 8)])
def test_no_key_only_features_go_below_the_floor(n_keys, r):
    g = torch.Generator().manual_seed(n_keys)
    for signed in (True, False):
        for _ in range(50):
            phi = torch.randn(2, n_keys, r, generator=g, dtype=torch.float64)
            phi = phi if signed else phi.abs()
            leak = rc.key_only_leak(phi[0], phi[1])
            assert (leak**2).sum() >= n_keys - r - 1e-9
            assert leak.abs().max() >= rc.key_only_least_leak(n_keys, r) - 1e-12
    shared = rc.shared_features(r, r)  # r keys on r features: no leak at all
    assert torch.equal(
        rc.key_only_leak(shared, shared), torch.zeros(r, r, dtype=torch.float64)
    )


def test_learned_key_only_features_recall_up_to_r_keys_and_stop_at_the_floor_beyond():
    r = 3
    for n_keys in (2, 3, 4, 6):
        phi = rc.learn_key_only_features(n_keys, r, steps=400, seed=0)
        assert phi.shape == (2, n_keys, r) and bool((phi > 0).all())
        leak = rc.key_only_leak(phi[0], phi[1])
        if n_keys <= r:
            assert leak.max() < 0.05, (n_keys, leak.max())
        else:
            assert (
                leak.abs().max() >= rc.key_only_least_leak(n_keys, r)
                and leak.max() > 0.5
            )
