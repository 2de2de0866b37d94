"""Linear attention: the four causal forms agree, the non-causal form is the kernel matrix computed by
associativity, softmax is the exponential kernel, gradients, causality, numerics and error messages."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from raising import raises

from companion.benchmarking import fit_loglog_slope
from companion.benchmarking.linear_attention import measure_generation
from companion.linear_attention import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_EPS,
    LinearAttention,
    LinearAttentionState,
    best_rank_r_approximation,
    elu_plus_one,
    exponential_kernel,
    kernel_attention,
    kernel_matrix,
    linear_attention,
    low_rank_error,
    low_rank_factors,
    numerical_rank,
    relu_feature_map,
)


def _form(method, chunk_size=DEFAULT_CHUNK_SIZE):
    """LinearAttention(**options).method(q, k, v, mask); method None: the call with causal=True."""

    def form(q, k, v, mask=None, **options):
        attention = LinearAttention(chunk_size=chunk_size, **options)
        if method is None:
            return attention(q, k, v, mask, causal=True)
        return getattr(attention, method)(q, k, v, mask)

    return form


CAUSAL_FORMS = {
    "recurrent": _form("recurrent"),
    "chunked": _form("chunked"),
    "chunked C=7": _form("chunked", 7),
    "chunked C=1": _form("chunked", 1),
    "cumsum": _form("cumsum"),
    "linear_attention(causal=True)": _form(None),
}


def qkv(*shape_q, n_k=None, d_v=None, dtype=torch.float64, seed=0):
    """Random q (..., n_q, d), k and v (..., n_k, d or d_v)."""
    g = torch.Generator().manual_seed(seed)
    *lead, n_q, d = shape_q
    n_k = n_q if n_k is None else n_k
    d_v = d if d_v is None else d_v
    q = torch.randn(*lead, n_q, d, generator=g, dtype=dtype)
    k = torch.randn(*lead, n_k, d, generator=g, dtype=dtype)
    v = torch.randn(*lead, n_k, d_v, generator=g, dtype=dtype)
    return q, k, v


def signed_relu_features(x):
    """A feature map with r = 2d features (not d): [relu(x), relu(-x)] — the shape of chapter 9's maps."""
    return torch.cat([F.relu(x), F.relu(-x)], dim=-1)


def loop_linear_attention(q, k, v, phi, causal, eps, keep=None):
    """An independent reference: Python loops over queries and keys, one scalar kernel value at a time."""
    n_q, n_k = q.shape[0], k.shape[0]
    out = torch.zeros(n_q, v.shape[1], dtype=q.dtype)
    for i in range(n_q):
        numerator = torch.zeros(v.shape[1], dtype=q.dtype)
        denominator = 0.0
        for j in range(n_k):
            if causal and j > i + n_k - n_q:
                continue
            if keep is not None and not keep[j]:
                continue
            sim = float(
                sum(
                    a * b
                    for a, b in zip(phi(q[i]).tolist(), phi(k[j]).tolist(), strict=True)
                )
            )
            numerator += sim * v[j]
            denominator += sim
        out[i] = numerator / (denominator + eps)
    return out


# ----------------------------------------------------------------------------------------------------
# Feature maps


def test_elu_plus_one_is_elu_plus_one_and_stays_accurate_for_very_negative_inputs():
    x = torch.linspace(-10, 10, 201, dtype=torch.float64)
    torch.testing.assert_close(elu_plus_one(x), F.elu(x) + 1, rtol=1e-12, atol=1e-12)
    # float32: e^{-20} ≈ 2.1e-9 is representable, but (e^{-20} - 1) + 1 rounds to 0.
    x32 = torch.tensor([-20.0, -50.0, -80.0])
    assert (F.elu(x32) + 1 == 0).all()  # why the companion does not write it that way
    expected = torch.tensor(
        [math.exp(-20.0), math.exp(-50.0), math.exp(-80.0)], dtype=torch.float64
    )
    torch.testing.assert_close(elu_plus_one(x32).double(), expected, rtol=1e-6, atol=0)
    assert (elu_plus_one(torch.tensor([-1e4, -200.0])) >= 0).all()
    assert torch.isfinite(elu_plus_one(torch.tensor([-1e30, 1e30]))).all()


def test_relu_feature_map():
    x = torch.randn(5, 7, dtype=torch.float64)
    torch.testing.assert_close(relu_feature_map(x), x.clamp(min=0))


# ----------------------------------------------------------------------------------------------------
# Softmax is kernel attention with the exponential kernel; the quadratic form is a double loop


@pytest.mark.parametrize("causal", [False, True])
def test_exponential_kernel_recovers_softmax_attention(causal):
    q, k, v = qkv(2, 3, 9, 5, d_v=4)
    got = kernel_attention(q, k, v, causal=causal, kernel=exponential_kernel, eps=0.0)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    keep = torch.tensor([True, False, True, True, False, True, True, True, True])
    got = kernel_attention(q, k, v, keep.expand(9, 9), kernel=exponential_kernel)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[None])
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("phi", [elu_plus_one, relu_feature_map, signed_relu_features])
def test_quadratic_form_equals_a_double_loop(causal, phi):
    q, k, v = qkv(6, 3, n_k=8, d_v=2, seed=1)
    keep = torch.tensor([True, True, False, True, True, True, False, True])
    for mask, keep_list in ((None, None), (keep.expand(6, 8), keep)):
        got = LinearAttention(feature_map=phi, eps=1e-3).quadratic(
            q, k, v, mask, causal=causal
        )
        expected = loop_linear_attention(q, k, v, phi, causal, 1e-3, keep_list)
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_kernel_matrix_is_feature_products():
    q, k, _ = qkv(5, 4)
    torch.testing.assert_close(kernel_matrix(q, k), (F.elu(q) + 1) @ (F.elu(k) + 1).T)


# ----------------------------------------------------------------------------------------------------
# Non-causal linear attention by associativity


@pytest.mark.parametrize("phi", [elu_plus_one, relu_feature_map, signed_relu_features])
def test_linear_attention_equals_the_quadratic_form(phi):
    q, k, v = qkv(2, 3, 11, 6, n_k=13, d_v=5)
    expected = LinearAttention(feature_map=phi).quadratic(q, k, v)
    torch.testing.assert_close(
        LinearAttention(feature_map=phi)(q, k, v), expected, rtol=1e-10, atol=1e-10
    )


def test_key_padding_mask_equals_removing_the_keys():
    q, k, v = qkv(2, 3, 7, 4, n_k=10)
    keep = torch.ones(2, 10, dtype=torch.bool)
    keep[0, 6:] = False
    keep[1, [0, 3]] = False
    for mask in (keep[:, None, None, :], keep[:, None, None, :].expand(2, 3, 7, 10)):
        got = linear_attention(q, k, v, mask)
        for b in range(2):
            expected = linear_attention(q[b], k[b][:, keep[b]], v[b][:, keep[b]])
            torch.testing.assert_close(got[b], expected, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(
            got, linear_attention.quadratic(q, k, v, mask), rtol=1e-12, atol=1e-12
        )
    # all keys dropped: output 0 (the eps in the denominator), not NaN
    assert (linear_attention(q, k, v, torch.zeros(1, 10, dtype=torch.bool)) == 0).all()


def test_arbitrary_mask_raises():
    q, k, v = qkv(2, 5, 4)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    with raises(ValueError, "can only drop keys", "causal=True"):
        linear_attention(q, k, v, mask)
    with raises(ValueError, "can only drop keys"):
        linear_attention.chunked(q, k, v, mask)
    # the quadratic form honours it
    expected = linear_attention.quadratic(q, k, v, causal=True)
    torch.testing.assert_close(linear_attention.quadratic(q, k, v, mask), expected)


# ----------------------------------------------------------------------------------------------------
# Causal linear attention: four forms, one model


@pytest.mark.parametrize("name", list(CAUSAL_FORMS))
@pytest.mark.parametrize("phi", [elu_plus_one, relu_feature_map, signed_relu_features])
def test_causal_forms_equal_the_masked_quadratic_form_float64(name, phi):
    form = CAUSAL_FORMS[name]
    for n_q, n_k in ((1, 1), (17, 17), (64, 64), (70, 70), (9, 30)):
        q, k, v = qkv(2, 3, n_q, 8, n_k=n_k, d_v=5, seed=n_q)
        expected = LinearAttention(feature_map=phi).quadratic(q, k, v, causal=True)
        got = form(q, k, v, feature_map=phi)
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    keep = torch.rand(2, 1, 1, 30, generator=torch.Generator().manual_seed(3)) > 0.3
    q, k, v = qkv(2, 3, 30, 8, seed=5)
    expected = LinearAttention(feature_map=phi).quadratic(q, k, v, keep, causal=True)
    torch.testing.assert_close(
        form(q, k, v, keep, feature_map=phi), expected, rtol=1e-10, atol=1e-10
    )


@pytest.mark.parametrize("name", list(CAUSAL_FORMS))
def test_causal_forms_equal_the_masked_quadratic_form_float32(name):
    q, k, v = qkv(2, 4, 300, 32, dtype=torch.float32)
    expected = linear_attention.quadratic(
        q.double(), k.double(), v.double(), causal=True
    )
    got = CAUSAL_FORMS[name](q, k, v)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)


def test_causal_with_a_prefix_of_keys_is_the_end_of_the_full_causal_output():
    q, k, v = qkv(2, 3, 40, 6)
    full = linear_attention(q, k, v, causal=True)
    for form in (linear_attention, linear_attention.quadratic):
        torch.testing.assert_close(
            form(q[..., 25:, :], k, v, causal=True), full[..., 25:, :]
        )
    for name, form in CAUSAL_FORMS.items():
        torch.testing.assert_close(
            form(q[..., 25:, :], k, v), full[..., 25:, :], msg=name
        )


@pytest.mark.parametrize("name", list(CAUSAL_FORMS))
def test_causality(name):
    """Changing position j > i leaves output i unchanged; changing position i changes it."""
    form = CAUSAL_FORMS[name]
    q, k, v = qkv(1, 2, 20, 4)
    out = form(q, k, v)
    for i in (0, 7, 19):
        for tensor in range(3):
            changed = [t.clone() for t in (q, k, v)]
            changed[tensor][..., i + 1 :, :] += 5.0
            torch.testing.assert_close(
                form(*changed)[..., : i + 1, :],
                out[..., : i + 1, :],
                rtol=0,
                atol=1e-12,
            )
            changed[tensor][..., i, :] += 1.0
            if i > 0 or tensor == 2:  # (output 0 is v_0 whatever q_0 and k_0 are)
                assert not torch.allclose(form(*changed)[..., i, :], out[..., i, :])


def test_generation_by_steps_equals_the_recurrent_form():
    q, k, v = qkv(2, 3, 12, 4, d_v=3)
    expected = linear_attention.recurrent(q, k, v)
    state, outputs, sizes = None, [], set()
    for i in range(12):
        y, state = linear_attention.step(
            q[..., i, :], k[..., i, :], v[..., i, :], state
        )
        outputs.append(y)
        sizes.add(state.nbytes)
    torch.testing.assert_close(
        torch.stack(outputs, dim=-2), expected, rtol=1e-12, atol=1e-12
    )
    # S (r × d_v) and z (r) per head, float64: constant
    assert sizes == {2 * 3 * (4 * 3 + 4) * 8}
    # a state read from a prompt, then steps
    prompt = linear_attention.state(k[..., :8, :], v[..., :8, :])
    y, _ = linear_attention.step(q[..., 8, :], k[..., 8, :], v[..., 8, :], prompt)
    torch.testing.assert_close(y, expected[..., 8, :], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "form",
    [
        linear_attention,
        linear_attention.quadratic,
        linear_attention.recurrent,
        linear_attention.cumsum,
        lambda q, k, v: LinearAttention(chunk_size=3).chunked(q, k, v),
        lambda q, k, v: linear_attention.step(q[:, 0], k[:, 0], v[:, 0])[0],
    ],
)
def test_gradcheck(form):
    q, k, v = (t.requires_grad_() for t in qkv(2, 7, 3, d_v=2, seed=4))
    assert torch.autograd.gradcheck(form, (q, k, v))


# ----------------------------------------------------------------------------------------------------
# Numerics


@pytest.mark.parametrize("name", ["linear_attention", *CAUSAL_FORMS])
def test_very_negative_pre_activations_give_finite_outputs(name):
    form = CAUSAL_FORMS.get(name, _form("attend"))
    q, k, v = qkv(2, 50, 8, dtype=torch.float32)
    # φ ≈ e^{-30} · …, underflowing below e^{-87}, exactly 0
    for shift in (-30.0, -90.0, -1e4):
        out = form(q + shift, k + shift, v)
        assert torch.isfinite(out).all()
        expected = linear_attention.quadratic(
            (q + shift).double(), (k + shift).double(), v.double(), causal=True
        )
        if name == "linear_attention":
            expected = linear_attention.quadratic(
                (q + shift).double(), (k + shift).double(), v.double()
            )
        torch.testing.assert_close(out.double(), expected, rtol=1e-4, atol=1e-5)
    # ReLU features of all-negative inputs: every denominator is exactly 0; eps makes the output 0
    out = form(-q.abs(), -k.abs(), v, feature_map=relu_feature_map)
    assert (out == 0).all()
    out = form(-q.abs(), -k.abs(), v, feature_map=relu_feature_map, eps=0.0)
    assert out.isnan().all()  # without eps: 0 / 0 — the reason eps is there


def test_long_sequence_float32_against_float64():
    """N = 32,768 positions in float32 (chunked) against the cumulative-sum form in float64."""
    n = 2**15
    q, k, v = qkv(1, 2, n, 16, dtype=torch.float32, seed=7)
    got = linear_attention.chunked(q, k, v)
    expected = linear_attention.cumsum(q.double(), k.double(), v.double())
    assert torch.isfinite(got).all()
    error = (got.double() - expected).abs().max().item()
    assert error < 1e-5, error
    # the non-causal form too
    expected = linear_attention(q.double(), k.double(), v.double())
    assert (linear_attention(q, k, v).double() - expected).abs().max().item() < 1e-5


# ----------------------------------------------------------------------------------------------------
# Errors


def test_bad_inputs_raise_clear_errors():
    q, k, v = qkv(2, 5, 4)
    with raises(TypeError, "q", "floating-point", "got dtype torch.int64"):
        linear_attention(q.long(), k, v)
    with raises(TypeError, "k", "got a list"):
        linear_attention(q, k.tolist(), v)
    with raises(TypeError, "share one dtype"):
        linear_attention(q, k.float(), v)
    with raises(
        ValueError, "expected k of shape (..., n_k, 4)", "got k of shape (2, 5, 3)"
    ):
        linear_attention(q, k[..., :3], v)
    with raises(
        ValueError, "expected v of shape (..., 5, d_v)", "got v of shape (2, 4, 4)"
    ):
        linear_attention.recurrent(q, k, v[:, :4])
    with raises(
        ValueError,
        "leading (batch) dimensions of q, k and v",
        "broadcast",
        "(2, 5, 4), (3, 5, 4)",
    ):
        linear_attention.cumsum(q, torch.cat([k, k[:1]]), torch.cat([v, v[:1]]))
    with raises(ValueError, "at least 2 dimensions", "got shape (4,)"):
        linear_attention(q[0, 0], k, v)
    with raises(TypeError, "boolean tensor"):
        linear_attention(q, k, v, torch.ones(1, 5))
    with raises(ValueError, "broadcast against the scores of shape (2, 5, 5)"):
        linear_attention(q, k, v, torch.ones(1, 4, dtype=torch.bool))
    with raises(ValueError, "expected shape (2, 5, 'r'), got a tensor of shape (2, 4)"):
        LinearAttention(feature_map=lambda x: x.sum(-2))(q, k, v)
    with raises(TypeError, "feature_map must be a function"):
        LinearAttention(feature_map="elu")(q, k, v)
    with raises(ValueError, "eps", ">= 0", "got -1.0"):
        LinearAttention(eps=-1.0).chunked(q, k, v)
    with raises(ValueError, "chunk_size", ">= 1", "got 0"):
        LinearAttention(chunk_size=0).chunked(q, k, v)
    with raises(
        ValueError,
        "at least as many keys as queries",
        "n_q = 5 queries and n_k = 3 keys",
    ):
        linear_attention(q, k[:, :3], v[:, :3], causal=True)
    bad_state = LinearAttentionState(
        torch.zeros(2, 3, 4, dtype=torch.float64),
        torch.zeros(2, 4, dtype=torch.float64),
    )
    with raises(ValueError, "state must hold s of shape (2, 4, 4)"):
        linear_attention.step(q[:, 0], k[:, 0], v[:, 0], bad_state)
    with raises(ValueError, "no attention weights to drop, got dropout_p=0.1"):
        linear_attention(q, k, v, dropout_p=0.1)
    with raises(ValueError, "kernel must return shape"):
        kernel_attention(q, k, v, kernel=lambda q, k: q)


def test_defaults():
    assert DEFAULT_EPS > 0
    q, k, v = qkv(3, 2)
    torch.testing.assert_close(
        linear_attention(q, k, v), LinearAttention(eps=DEFAULT_EPS)(q, k, v)
    )


# ----------------------------------------------------------------------------------------------------
# Rank


def test_low_rank_approximation_against_numpy():
    a = torch.softmax(
        torch.randn(
            30, 20, generator=torch.Generator().manual_seed(0), dtype=torch.float64
        )
        * 3,
        -1,
    )
    u, s, vt = np.linalg.svd(a.numpy(), full_matrices=False)
    for r in (0, 1, 5, 20):
        expected = (u[:, :r] * s[:r]) @ vt[:r]
        np.testing.assert_allclose(
            best_rank_r_approximation(a, r).numpy(), expected, atol=1e-12
        )
        direct = np.linalg.norm(a.numpy() - expected) / np.linalg.norm(a.numpy())
        np.testing.assert_allclose(low_rank_error(a, r).item(), direct, atol=1e-12)
        left, right = low_rank_factors(a, r)
        v = torch.randn(20, 4, dtype=torch.float64)
        # A_r V = L (Rᵀ V)
        torch.testing.assert_close(left @ (right.T @ v), torch.from_numpy(expected) @ v)
    errors = low_rank_error(a, [1, 2, 3])
    assert errors.shape == (3,) and (errors[:-1] >= errors[1:]).all()
    # Eckart–Young: no other rank-2 matrix is closer
    other = torch.randn(30, 2, dtype=torch.float64) @ torch.randn(
        2, 20, dtype=torch.float64
    )
    assert (a - other).norm() > (a - best_rank_r_approximation(a, 2)).norm()


def test_numerical_rank_and_the_rank_of_linear_attention():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(40, 40, generator=g, dtype=torch.float64)
    assert numerical_rank(a) == np.linalg.matrix_rank(a.numpy()) == 40
    low = torch.randn(40, 3, generator=g, dtype=torch.float64) @ torch.randn(
        3, 40, generator=g, dtype=torch.float64
    )
    assert numerical_rank(low) == np.linalg.matrix_rank(low.numpy()) == 3
    # φ(Q)φ(K)ᵀ with r features has rank ≤ r; the softmax matrix of the same q, k has full rank
    q, k = torch.randn(2, 60, 4, generator=g, dtype=torch.float64)
    assert numerical_rank(kernel_matrix(q, k)) == 4
    assert numerical_rank(kernel_matrix(q, k, feature_map=signed_relu_features)) == 8
    assert numerical_rank(torch.softmax(q @ k.T, dim=-1)) == 60
    # and the rank-one approximation of a softmax attention matrix is poor
    assert low_rank_error(torch.softmax(q @ k.T, dim=-1), 1) > 0.3


def test_rank_errors():
    with raises(ValueError, "r must be at most min(m, n) = 3"):
        low_rank_factors(torch.ones(3, 5), 4)
    with raises(ValueError, "a", "at least 2 dimensions", "got shape (3,)"):
        low_rank_error(torch.ones(3), 1)
    with raises(TypeError, "floating-point"):
        numerical_rank(torch.ones(3, 3, dtype=torch.long))


# ----------------------------------------------------------------------------------------------------
# Generation cost


def test_measure_generation_counts_the_state_and_the_cache():
    rows = measure_generation([4, 64], d=8, heads=2, min_run_time=0.01)
    assert [(r.name, r.length) for r in rows] == [
        ("linear (state)", 4),
        ("softmax (KV cache)", 4),
        ("linear (state)", 64),
        ("softmax (KV cache)", 64),
    ]
    assert all(r.seconds > 0 for r in rows)
    linear = [r.state_bytes for r in rows if r.name.startswith("linear")]
    cache = [r.state_bytes for r in rows if r.name.startswith("softmax")]
    # heads · (r·d_v + r) float32 numbers, however long the text
    assert linear == [2 * (8 * 8 + 8) * 4] * 2
    # keys and values of n + 1 tokens
    assert cache == [2 * 2 * (n + 1) * 8 * 4 for n in (4, 64)]


# ----------------------------------------------------------------------------------------------------
# Measuring against N


def test_loglog_slope_against_numpy_polyfit():
    g = np.random.default_rng(0)
    xs = [2.0**p for p in range(9, 16)]
    ys = [3e-7 * x**1.7 for x in xs]
    assert fit_loglog_slope(xs, ys).slope == pytest.approx(1.7, abs=1e-12)
    noisy = [y * math.exp(0.2 * g.standard_normal()) for y in ys]
    expected = np.polyfit(np.log(xs), np.log(noisy), 1)[0]
    assert fit_loglog_slope(xs, noisy).slope == pytest.approx(expected, abs=1e-12)
    # y = 1.5 x, and no spread to measure
    two = fit_loglog_slope([2.0, 8.0], [3.0, 12.0])
    assert (
        two.slope == pytest.approx(1.0)
        and two.intercept == pytest.approx(math.log(1.5))
        and math.isnan(two.slope_se)
    )
    with raises(ValueError, "ys must be > 0"):
        fit_loglog_slope([1.0, 2.0], [1.0, 0.0])
