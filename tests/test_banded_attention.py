"""Banded attention (chapter 8's near field): the O(N·k) form equals the definition, with every band and mask."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from raising import raises

from companion.attention import scaled_dot_product_attention
from companion.banded_attention import (
    BandedAttention,
    band_mask,
    band_matrix,
    banded_attention,
    banded_attention_dense,
)
from companion.benchmarking import peak_memory


def loop_banded_attention(q, k, v, bandwidth, causal, mask=None):
    """The definition, one query at a time: softmax over the keys of the band (an independent reference)."""
    n_q, n_k = q.shape[0], k.shape[0]
    out = torch.zeros(n_q, v.shape[1], dtype=q.dtype)
    for i in range(n_q):
        p = i + n_k - n_q
        keys = [
            j
            for j in range(n_k)
            if (p - bandwidth < j <= p if causal else abs(p - j) < bandwidth)
        ]
        if mask is not None:
            keys = [j for j in keys if mask[i, j]]
        if not keys:
            continue
        scores = torch.stack([q[i] @ k[j] / math.sqrt(q.shape[1]) for j in keys])
        weights = torch.softmax(scores, dim=0)
        out[i] = sum(w * v[j] for w, j in zip(weights, keys, strict=True))
    return out


def qkv(shape_q, n_k=None, d_v=5, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    *lead, n_q, d = shape_q
    n_k = n_q if n_k is None else n_k
    return (
        torch.randn(*lead, n_q, d, generator=g, dtype=dtype),
        torch.randn(*lead, n_k, d, generator=g, dtype=dtype),
        torch.randn(*lead, n_k, d_v, generator=g, dtype=dtype),
    )


def test_band_mask_by_hand():
    causal = torch.tensor(
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]], dtype=torch.bool
    )
    both = torch.tensor(
        [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]], dtype=torch.bool
    )
    assert torch.equal(band_mask(4, 4, 2, causal=True), causal)
    assert torch.equal(band_mask(4, 4, 2, causal=False), both)
    # Queries aligned at the end: 2 queries at key positions 3 and 4 of 5 keys.
    assert torch.equal(
        band_mask(2, 5, 2, causal=True),
        torch.tensor([[0, 0, 1, 1, 0], [0, 0, 0, 1, 1]], dtype=torch.bool),
    )


def test_every_band_and_attention_function_is_bidirectional_unless_told_causal():
    """One default for ``causal`` (False, as PyTorch's ``is_causal``) in the masks and the attention functions."""
    import inspect

    from companion.fmmformer import FMMAttention
    from companion.linear_attention import LinearAttention

    functions = (
        band_mask,
        band_matrix,
        BandedAttention.__call__,
        banded_attention_dense,
    )
    functions += (scaled_dot_product_attention, LinearAttention.__call__)
    functions += (FMMAttention.forward,)
    defaults = {
        f.__qualname__: inspect.signature(f).parameters["causal"].default
        for f in functions
    }
    assert defaults == dict.fromkeys(defaults, False)
    assert torch.equal(band_mask(6, 6, 2), band_mask(6, 6, 2, causal=False))
    a = torch.rand(6, 6)
    assert torch.equal(band_matrix(a, 2), band_matrix(a, 2, causal=False))


@pytest.mark.parametrize("causal", [True, False])
def test_band_mask_counts(causal):
    n, k = 50, 7
    m = band_mask(n, n, k, causal=causal)
    i = torch.arange(n)
    expected = (
        (i + 1).clamp(max=k)
        if causal
        else (i + 1).clamp(max=k) + (n - i).clamp(max=k) - 1
    )
    assert torch.equal(m.sum(-1), expected)
    assert bool(m.diagonal().all())


def test_band_matrix_zeroes_outside():
    a = torch.arange(1.0, 26.0).view(5, 5)
    b = band_matrix(a, 2, causal=False)
    assert torch.equal(b != 0, band_mask(5, 5, 2, causal=False))
    assert torch.equal(b[b != 0], a[band_mask(5, 5, 2, causal=False)])


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    ("n_q", "n_k", "bandwidth"), [(12, 12, 3), (9, 17, 4), (20, 20, 1), (6, 6, 40)]
)
def test_dense_reference_is_the_definition(causal, n_q, n_k, bandwidth):
    q, k, v = qkv((n_q, 6), n_k)
    expected = loop_banded_attention(q, k, v, bandwidth, causal)
    assert torch.allclose(
        banded_attention_dense(q, k, v, causal=causal, bandwidth=bandwidth),
        expected,
        atol=1e-13,
    )


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    ("n_q", "n_k", "bandwidth", "block_size"),
    [
        (64, 64, 8, None),
        (100, 100, 7, 16),
        (37, 37, 5, 4),
        (10, 45, 6, 3),
        (33, 33, 1, 8),
        (20, 20, 50, None),
    ],
)
def test_blocked_equals_dense_float64(causal, n_q, n_k, bandwidth, block_size):
    q, k, v = qkv((2, 3, n_q, 8), n_k)
    got = BandedAttention(bandwidth, block_size=block_size)(q, k, v, causal=causal)
    expected = banded_attention_dense(q, k, v, causal=causal, bandwidth=bandwidth)
    assert got.shape == (2, 3, n_q, 5)
    assert (got - expected).abs().max() < 1e-12


@pytest.mark.parametrize("causal", [True, False])
def test_blocked_float32_against_float64(causal):
    q, k, v = qkv((2, 4, 300, 64), d_v=64, dtype=torch.float32)
    got = BandedAttention(32)(q, k, v, causal=causal)
    expected = banded_attention_dense(
        q.double(), k.double(), v.double(), causal=causal, bandwidth=32
    )
    assert (got.double() - expected).abs().max() < 1e-6


@pytest.mark.parametrize("causal", [True, False])
def test_band_covering_everything_is_softmax_attention(causal):
    q, k, v = qkv((2, 3, 40, 8))
    got = BandedAttention(40)(q, k, v, causal=causal)
    assert (
        got - scaled_dot_product_attention(q, k, v, causal=causal)
    ).abs().max() < 1e-12
    assert (
        got - F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    ).abs().max() < 1e-12


def test_bandwidth_one_causal_returns_the_values():
    q, k, v = qkv((3, 25, 4))
    assert torch.allclose(BandedAttention(1)(q, k, v, causal=True), v, atol=1e-15)


@pytest.mark.parametrize("causal", [True, False])
def test_masks_inside_the_band(causal):
    q, k, v = qkv((2, 3, 30, 8), 30, seed=1)
    g = torch.Generator().manual_seed(2)
    keep_keys = torch.rand(2, 1, 1, 30, generator=g) > 0.3  # key padding
    any_mask = torch.rand(2, 3, 30, 30, generator=g) > 0.4  # an arbitrary mask
    for mask in (keep_keys, any_mask):
        got = BandedAttention(6, block_size=8)(q, k, v, mask, causal=causal)
        expected = banded_attention_dense(q, k, v, mask, causal=causal, bandwidth=6)
        assert (got - expected).abs().max() < 1e-12
    loop = loop_banded_attention(q[1, 2], k[1, 2], v[1, 2], 6, causal, any_mask[1, 2])
    assert torch.allclose(
        BandedAttention(6)(q, k, v, any_mask, causal=causal)[1, 2],
        loop,
        atol=1e-13,
    )


def test_fully_masked_query_gets_zero_output_and_finite_gradients():
    q, k, v = qkv((1, 12, 4))
    q.requires_grad_(True)
    mask = torch.ones(12, 12, dtype=torch.bool)
    mask[5] = False
    out = BandedAttention(3)(q, k, v, mask, causal=True)
    assert torch.equal(out[0, 5], torch.zeros(5, dtype=out.dtype))
    out.sum().backward()
    assert bool(torch.isfinite(q.grad).all())


def test_queries_aligned_at_the_end_like_a_kv_cache():
    q, k, v = qkv((2, 30, 8))
    full = BandedAttention(5)(q, k, v, causal=True)
    last = BandedAttention(5)(q[:, -4:], k, v, causal=True)
    assert (last - full[:, -4:]).abs().max() < 1e-12


@pytest.mark.parametrize("causal", [True, False])
def test_gradcheck(causal):
    q, k, v = (t.requires_grad_(True) for t in qkv((1, 2, 11, 3), d_v=2))
    assert torch.autograd.gradcheck(
        lambda q, k, v: BandedAttention(3, block_size=4)(q, k, v, causal=causal),
        (q, k, v),
    )


def test_causal_band_never_reads_the_future():
    q, k, v = qkv((1, 40, 8))
    out = BandedAttention(6)(q, k, v, causal=True)
    for t in (q, k, v):
        t[0, 25:] += 3.0
    again = BandedAttention(6)(q, k, v, causal=True)
    assert torch.equal(out[0, :25], again[0, :25])
    assert not torch.allclose(out[0, 25:], again[0, 25:])


def test_memory_grows_like_n_and_stays_far_below_dense():
    def peak(fn, n):
        q, k, v = qkv((1, 2, n, 32), d_v=32, dtype=torch.float32)
        return peak_memory(lambda q, k, v: fn(q, k, v, causal=True), q, k, v)

    band = BandedAttention(16)
    small, large = peak(band, 1024), peak(band, 4096)
    assert 3.0 < large / small < 4.6  # 4× the tokens, about 4× the memory
    # the dense form stores n × n scores
    dense = partial(banded_attention_dense, bandwidth=16)
    assert peak(dense, 4096) > 20 * large


def test_dropout_changes_weights_only_when_asked():
    q, k, v = qkv((1, 20, 4))
    torch.manual_seed(0)
    a = BandedAttention(4)(q, k, v, causal=True, dropout_p=0.5)
    assert not torch.allclose(a, BandedAttention(4)(q, k, v, causal=True))


def test_errors():
    q, k, v = qkv((1, 10, 4))
    with raises(ValueError, "bandwidth"):
        BandedAttention(0)(q, k, v)
    with raises(ValueError, "at least as many keys as queries"):
        banded_attention(q, k[:, :5], v[:, :5])
    with raises(TypeError, "boolean"):
        banded_attention(q, k, v, torch.ones(10, 10))
    with raises(ValueError, "broadcast"):
        banded_attention(q, k, v, torch.ones(3, 10, dtype=torch.bool))
    with raises(TypeError, "one dtype"):
        banded_attention(q, k.float(), v)
    with raises(ValueError, "dropout_p"):
        banded_attention(q, k, v, dropout_p=1.0)
    with raises(ValueError, "n_k >= n_q"):
        band_mask(5, 3, 2)
