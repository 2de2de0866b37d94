"""FMMformer attention: reductions to softmax and linear attention, causality, the far field's rank, the module."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from raising import raises
from torch import nn

from companion.attention import MultiHeadAttention
from companion.banded_attention import band_mask, banded_attention_dense
from companion.fmmformer import (
    FMM_FEATURE_MAPS,
    AttentionSpectrum,
    FMMAttention,
    FMMConfig,
    attention_spectrum,
    elu_flip_plus_one,
    far_field_attention,
    far_field_matrix,
    far_field_rank,
    fixed_fmm_attention,
    tanh_plus_one,
)
from companion.linear_attention import (
    LinearAttention,
    elu_plus_one,
    linear_attention,
    numerical_rank,
)


def fmmformer_attention(
    q, k, v, mask=None, *, causal=False, w_near=1.0, w_far=1.0, dropout_p=0.0, **options
):
    """FMMformer attention with fixed weights: a number, or a tensor of one per head."""
    n_heads = (
        w_near.shape[0] if isinstance(w_near, torch.Tensor) and w_near.ndim else None
    )
    attn = fixed_fmm_attention(n_heads=n_heads, **options).to(q.dtype)
    with torch.no_grad():  # w₁, w₂ set in q's dtype (a float32 parameter rounds 0.7)
        attn.near_raw.copy_(torch.as_tensor(w_near, dtype=q.dtype).detach())
        attn.far_raw.copy_(torch.as_tensor(w_far, dtype=q.dtype).detach())
    return attn(q, k, v, mask, causal=causal, dropout_p=dropout_p)


def qkv(b=2, h=3, n=40, d=8, d_v=5, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(b, h, n, d, generator=g, dtype=dtype),
        torch.randn(b, h, n, d, generator=g, dtype=dtype),
        torch.randn(b, h, n, d_v, generator=g, dtype=dtype),
    )


def test_feature_maps_by_formula():
    x = torch.linspace(-5, 5, 101, dtype=torch.float64)
    assert torch.allclose(elu_flip_plus_one(x), F.elu(-x) + 1, atol=1e-15)
    assert torch.allclose(tanh_plus_one(x), torch.tanh(x) + 1)
    assert FMM_FEATURE_MAPS[0] is elu_plus_one
    for phi in FMM_FEATURE_MAPS:
        assert bool((phi(x) >= 0).all())


@pytest.mark.parametrize("causal", [True, False])
def test_no_far_field_and_a_band_covering_everything_is_softmax(causal):
    q, k, v = qkv()
    got = fmmformer_attention(q, k, v, causal=causal, bandwidth=40, w_far=0.0)
    assert (
        got - F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    ).abs().max() < 1e-12


@pytest.mark.parametrize("causal", [True, False])
def test_no_near_field_is_linear_attention(causal):
    q, k, v = qkv()
    one = fmmformer_attention(
        q, k, v, causal=causal, w_near=0.0, feature_maps=[elu_plus_one]
    )
    assert (one - linear_attention(q, k, v, causal=causal)).abs().max() < 1e-12
    # Two maps: the sum of two linear attentions, each checked against its N × N kernel-matrix form.
    two = fmmformer_attention(
        q, k, v, causal=causal, w_near=0.0, feature_maps=FMM_FEATURE_MAPS[:2]
    )
    expected = sum(
        LinearAttention(feature_map=phi).quadratic(q, k, v, causal=causal)
        for phi in FMM_FEATURE_MAPS[:2]
    )
    assert (two - expected).abs().max() < 1e-12


@pytest.mark.parametrize("causal", [True, False])
def test_blend_equals_the_formula_with_matrices(causal):
    q, k, v = qkv(seed=3)
    w1, w2 = 0.7, 1.9
    got = fmmformer_attention(
        q,
        k,
        v,
        causal=causal,
        bandwidth=5,
        feature_maps=FMM_FEATURE_MAPS,
        w_near=w1,
        w_far=w2,
    )
    d_matrix = banded_attention_dense(
        q, k, v, causal=causal, bandwidth=5, return_weights=True
    )[1]
    l_matrix = far_field_matrix(q, k, causal=causal, feature_maps=FMM_FEATURE_MAPS)
    # V̂ = (w₁ D + w₂ L) V, the N × N way
    expected = (w1 * d_matrix + w2 * l_matrix) @ v
    assert (got - expected).abs().max() < 1e-12
    far = far_field_attention(q, k, v, causal=causal, feature_maps=FMM_FEATURE_MAPS)
    assert (far - l_matrix @ v).abs().max() < 1e-12


def test_far_field_matrix_by_loops():
    q, k, _ = qkv(b=1, h=1, n=6, d=3)
    q, k = q[0, 0], k[0, 0]
    expected = torch.zeros(6, 6, dtype=torch.float64)
    for phi in FMM_FEATURE_MAPS[:2]:
        for i in range(6):
            row = torch.stack([phi(q[i]) @ phi(k[j]) for j in range(i + 1)])
            expected[i, : i + 1] += row / (row.sum() + 1e-6)
    assert torch.allclose(far_field_matrix(q, k, causal=True), expected, atol=1e-14)


def test_weights_per_head_broadcast():
    q, k, v = qkv()
    w1 = torch.tensor([0.1, 1.0, 3.0], dtype=torch.float64).view(3, 1, 1)
    got = fmmformer_attention(q, k, v, causal=True, bandwidth=4, w_near=w1, w_far=2.0)
    for head in range(3):
        one = fmmformer_attention(
            q[:, head],
            k[:, head],
            v[:, head],
            causal=True,
            bandwidth=4,
            w_near=float(w1[head]),
            w_far=2.0,
        )
        assert (got[:, head] - one).abs().max() < 1e-12


@pytest.mark.parametrize("maps", [FMM_FEATURE_MAPS[:2], FMM_FEATURE_MAPS])
def test_causal_never_reads_the_future(maps):
    # longer than one chunk (128) of causal linear attention
    q, k, v = qkv(n=300, d=8, seed=5)
    out = fmmformer_attention(q, k, v, causal=True, bandwidth=16, feature_maps=maps)
    for t in (q, k, v):
        t[..., 200:, :] += torch.randn_like(t[..., 200:, :])
    again = fmmformer_attention(q, k, v, causal=True, bandwidth=16, feature_maps=maps)
    assert (out[..., :200, :] - again[..., :200, :]).abs().max() < 1e-13
    assert (out[..., 200:, :] - again[..., 200:, :]).abs().max() > 1e-3


def test_causal_jacobian_is_lower_triangular():
    q, k, v = qkv(b=1, h=1, n=12, d=3, d_v=1)
    x = torch.cat([q, k, v], dim=-1)[0, 0]  # one token = (q, k, v) of width 7

    def f(x):
        return fmmformer_attention(
            x[None, None, :, :3],
            x[None, None, :, 3:6],
            x[None, None, :, 6:],
            causal=True,
        )

    jac = torch.autograd.functional.jacobian(f, x)[0, 0, :, 0]  # (n out, n in, 7)
    reads = jac.abs().sum(-1) > 0  # output i depends on input token j
    assert torch.equal(reads, torch.ones(12, 12, dtype=torch.bool).tril())


@pytest.mark.parametrize("n_maps", [1, 2, 3])
def test_far_field_rank_is_at_most_maps_times_feature_dimension(n_maps):
    g = torch.Generator().manual_seed(n_maps)
    d = 6
    q, k = (torch.randn(120, d, generator=g, dtype=torch.float64) for _ in range(2))
    maps = FMM_FEATURE_MAPS[:n_maps]
    rank = far_field_rank(q, k, feature_maps=maps)
    assert rank == numerical_rank(far_field_matrix(q, k, feature_maps=maps))
    assert rank == n_maps * d  # ≤ r·d by construction, and generic inputs reach it
    # Softmax attention's matrix, for comparison, has full rank.
    assert numerical_rank(torch.softmax(q @ k.T / d**0.5, dim=-1)) == 120


def test_module_weights_positive_and_learned():
    torch.manual_seed(0)
    attn = FMMAttention(FMMConfig(bandwidth=4, init_near=0.3, init_far=2.0))
    assert torch.allclose(attn.w_near, torch.tensor(0.3)) and torch.allclose(
        attn.w_far, torch.tensor(2.0)
    )
    with torch.no_grad():
        attn.near_raw.fill_(-40.0)
    assert attn.w_near > 0
    q, k, v = qkv(dtype=torch.float32)
    out = attn(q, k, v, causal=True)
    expected = fmmformer_attention(
        q, k, v, causal=True, bandwidth=4, w_near=attn.w_near, w_far=attn.w_far
    )
    assert torch.allclose(out, expected)
    out.square().sum().backward()
    assert attn.near_raw.grad is not None and attn.far_raw.grad is not None
    assert {name for name, _ in attn.named_parameters()} == {"near_raw", "far_raw"}


def test_module_unconstrained_like_the_released_code():
    config = FMMConfig(4, positive=False, init_near=0.0, init_far=-1.0, n_heads=3)
    attn = FMMAttention(config)
    assert attn.w_near.shape == (3, 1, 1) and torch.equal(
        attn.w_far, torch.full((3, 1, 1), -1.0)
    )
    q, k, v = qkv(dtype=torch.float32)
    far = far_field_attention(q, k, v, causal=True)
    # w₁ = 0: only −1 · far field
    assert torch.allclose(attn(q, k, v, causal=True), -far, atol=1e-6)
    with raises(ValueError, "heads"):
        attn(q[:, :2], k[:, :2], v[:, :2])
    with raises(ValueError, "init_near"):
        FMMConfig(init_near=0.0)
    with raises(ValueError, "bandwidth"):
        FMMConfig(bandwidth=0)
    with raises(ValueError, "same leading"):
        far_field_matrix(torch.ones(4, 3), torch.ones(4, 2))


def test_module_is_an_attention_function_of_the_seam():
    attn = FMMAttention(FMMConfig(bandwidth=3))
    q, k, v = qkv(dtype=torch.float32)
    out = attn(q, k, v, mask=None, causal=True)
    assert out.shape == (2, 3, 40, 5)
    keep = torch.ones(2, 1, 1, 40, dtype=torch.bool)
    keep[..., -5:] = False  # a key-padding mask honoured by both terms
    padded = attn(q, k, v, mask=keep, causal=False)
    cut = attn(q[..., :-5, :], k[..., :-5, :], v[..., :-5, :], causal=False)
    assert torch.allclose(padded[..., :-5, :], cut, atol=1e-5)
    with raises(ValueError, "key-padding"):
        attn(q, k, v, mask=torch.rand(40, 40) > 0.5)
    attn.train()
    assert not torch.allclose(attn(q, k, v, causal=True, dropout_p=0.5), out)


def test_module_inside_multi_head_attention():
    torch.manual_seed(0)
    fmm = FMMAttention(FMMConfig(bandwidth=4, n_heads=2))
    mha = MultiHeadAttention(16, 2, causal=True, attention=fmm)
    assert any(p is fmm.near_raw for p in mha.parameters())
    x = torch.randn(3, 20, 16)
    out = mha(x)
    assert out.shape == (3, 20, 16)
    y = x.clone()
    y[:, 12:] += 1.0
    assert torch.allclose(mha(y)[:, :12], out[:, :12], atol=1e-6)


def test_blend_errors():
    with raises(TypeError, "feature_maps"):
        FMMConfig(feature_maps=[1, 2])
    with raises(TypeError, "init_near"):
        FMMConfig(init_near="1")


# ----------------------------------------------------------------------------------------------------
# The spectrum of an attention matrix with and without its band


def test_spectrum_against_explicit_masking():
    g = torch.Generator().manual_seed(0)
    a = torch.softmax(torch.randn(30, 30, generator=g, dtype=torch.float64), dim=-1)
    spec = attention_spectrum(a, 4, causal=False)
    off = a.clone()
    for i in range(30):
        for j in range(30):
            if abs(i - j) < 4:
                off[i, j] = 0.0
    top = torch.linalg.svdvals(a)[0]
    assert torch.allclose(spec.full, torch.linalg.svdvals(a) / top)
    assert torch.allclose(spec.off_band, torch.linalg.svdvals(off) / top)
    assert isinstance(spec, AttentionSpectrum) and spec.bandwidth == 4


def test_spectrum_of_a_banded_matrix_has_no_far_field():
    g = torch.Generator().manual_seed(1)
    a = torch.rand(40, 40, generator=g, dtype=torch.float64) * band_mask(
        40, 40, 3, causal=True
    )
    spec = attention_spectrum(a, 3, causal=True)
    assert spec.rank(1e-12) == (40, 0)


def test_off_band_part_of_a_smooth_matrix_decays_faster():
    i = torch.arange(200, dtype=torch.float64)
    # large near the diagonal, smooth away from it
    a = 1.0 / (1.0 + (i[:, None] - i[None, :]).abs())
    a = a / a.sum(-1, keepdim=True)
    spec = attention_spectrum(a, 8, causal=False)
    full, off = spec.rank(0.1)
    # at a coarse tolerance the far field is nearly low-rank, A is not
    assert off <= 5 and full >= 40
    full, off = spec.rank(3e-2)
    assert off < full / 3
    # The jump left at the band's edge is not low-rank: at a fine tolerance both ranks are large.
    assert min(spec.rank(1e-3)) > 150


def test_spectrum_errors():
    with raises(ValueError, "one attention matrix"):
        attention_spectrum(torch.rand(2, 5, 5), 2)
    with pytest.raises(TypeError):
        attention_spectrum(torch.ones(5, 5, dtype=torch.long), 2)


def test_module_registers_inside_a_model():
    model = nn.ModuleDict({"attn": FMMAttention(FMMConfig())})
    assert len(list(model.parameters())) == 2
    assert "bandwidth=32" in repr(model)


@pytest.mark.parametrize("causal", [True, False])
def test_benchmark_implementations_agree(causal):
    from companion.fmmformer import fmmformer_implementations

    q, k, v = qkv(n=70, d=8, d_v=8, dtype=torch.float32)
    impls = fmmformer_implementations(causal=causal, bandwidth=6)
    outs = {name: fn(q, k, v) for name, fn in impls.items()}
    assert torch.allclose(outs["sdpa"], outs["softmax"], atol=1e-5)
    assert torch.allclose(outs["band"], outs["band dense"], atol=1e-5)
    assert torch.allclose(outs["band"], outs["band sdpa"], atol=1e-5)
    assert torch.allclose(
        outs["linear"], linear_attention(q, k, v, causal=causal), atol=1e-6
    )
    assert torch.allclose(
        outs["fmmformer"],
        fmmformer_attention(q, k, v, causal=causal, bandwidth=6),
        atol=1e-6,
    )
    assert not torch.allclose(outs["band"], outs["sdpa"], atol=1e-3)


def test_queries_aligned_at_the_end_like_a_kv_cache():
    q, k, v = qkv(n=50)
    full = fmmformer_attention(q, k, v, causal=True, bandwidth=7)
    last = fmmformer_attention(q[..., -3:, :], k, v, causal=True, bandwidth=7)
    assert (last - full[..., -3:, :]).abs().max() < 1e-12
