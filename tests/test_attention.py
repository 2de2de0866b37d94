"""Attention: loops, matrices and PyTorch's own agree; MultiHeadAttention equals nn.MultiheadAttention."""

import math

import pytest
import torch
import torch.nn.functional as F
from checker_testing import F64, randn
from hypothesis import given, settings
from hypothesis import strategies as st
from raising import raises
from torch import nn

from companion.attention import (
    MultiHeadAttention,
    attention_loop,
    blocked_attention,
    merge_heads,
    scaled_dot_product_attention,
    split_heads,
    weightless_self_attention,
)
from companion.interop import mha_from_torch, to_torch_mha_mask
from companion.masks import (
    causal_mask,
    padding_mask_from_lengths,
    padding_to_attention_mask,
)
from companion.positional import RotaryEmbedding

SETTINGS = settings(max_examples=25, deadline=None)


# --- the worked example and the three forms ----------------------------------------------------------------


def test_thinking_machines_example():
    """Scores 112 and 96, divided by √64 = 8, give 14 and 12 and the softmax 0.88 / 0.12."""
    q = torch.zeros(1, 64, dtype=F64)
    q[0, :2] = 8.0
    k = torch.zeros(2, 64, dtype=F64)
    k[0, :2] = 7.0
    k[1, :2] = 6.0
    assert (q @ k.T).tolist() == [[112.0, 96.0]]
    v = randn(2, 3, seed=0)
    out, w = scaled_dot_product_attention(q, k, v, return_weights=True)
    assert [round(x, 2) for x in w[0].tolist()] == [0.88, 0.12]
    torch.testing.assert_close(
        w[0], torch.softmax(torch.tensor([14.0, 12.0], dtype=F64), 0)
    )
    torch.testing.assert_close(out[0], w[0, 0] * v[0] + w[0, 1] * v[1])


def _masks(n_q, n_k, seed=0):
    g = torch.Generator().manual_seed(seed)
    arbitrary = torch.rand(n_q, n_k, generator=g) > 0.4
    arbitrary[:, 0] = True  # every query sees at least one key
    padding = padding_to_attention_mask(
        padding_mask_from_lengths(torch.tensor([n_k - 2]), n_k)
    )[0]
    return {
        "none": None,
        "causal": causal_mask(n_q, n_k),
        "padding": padding.expand(n_q, n_k),
        "arbitrary": arbitrary,
    }


@pytest.mark.parametrize("mask_name", ["none", "causal", "padding", "arbitrary"])
@pytest.mark.parametrize(("n_q", "n_k"), [(5, 5), (3, 6)])
def test_loop_equals_matrix_equals_torch(mask_name, n_q, n_k):
    q, k, v = randn(n_q, 8, seed=1), randn(n_k, 8, seed=2), randn(n_k, 3, seed=3)
    mask = _masks(n_q, n_k)[mask_name]
    loop = attention_loop(q, k, v, mask)
    loop_w = attention_loop(
        q, k, torch.eye(n_k, dtype=q.dtype), mask
    )  # v = I: the a_ij
    matrix, matrix_w = scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    torch_out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(loop, matrix, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(loop_w, matrix_w, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(matrix, torch_out, rtol=1e-12, atol=1e-12)


def test_causal_flag_equals_causal_mask_and_torch_is_causal():
    q, k, v = (
        randn(2, 3, 6, 4, seed=0),
        randn(2, 3, 6, 4, seed=1),
        randn(2, 3, 6, 5, seed=2),
    )
    flag = scaled_dot_product_attention(q, k, v, causal=True)
    torch.testing.assert_close(
        flag, scaled_dot_product_attention(q, k, v, causal_mask(6))
    )
    torch.testing.assert_close(
        flag, F.scaled_dot_product_attention(q, k, v, is_causal=True)
    )
    torch.testing.assert_close(
        attention_loop(q[0, 0], k[0, 0], v[0, 0], causal_mask(6)), flag[0, 0]
    )


def test_batched_with_broadcast_mask_matches_torch():
    q, k, v = (
        randn(2, 4, 5, 8, seed=0),
        randn(2, 4, 7, 8, seed=1),
        randn(2, 4, 7, 3, seed=2),
    )
    # (2, 1, 1, 7)
    pad = padding_to_attention_mask(
        padding_mask_from_lengths(torch.tensor([7, 4])), heads=True
    )
    ours = scaled_dot_product_attention(q, k, v, pad)
    torch.testing.assert_close(
        ours, F.scaled_dot_product_attention(q, k, v, attn_mask=pad)
    )
    # k and v shared across the batch broadcast against q
    shared = scaled_dot_product_attention(q, k[0, 0], v[0, 0])
    torch.testing.assert_close(
        shared,
        F.scaled_dot_product_attention(q, k[0, 0].expand_as(k), v[0, 0].expand_as(v)),
    )


@pytest.mark.parametrize("block_size", [None, 1, 4, 100])
@pytest.mark.parametrize("grad", [False, True])
def test_blocked_attention_equals_matrix_form(block_size, grad):
    q, k, v = (
        randn(2, 3, 9, 8, seed=0),
        randn(2, 3, 7, 8, seed=1),
        randn(2, 3, 7, 5, seed=2),
    )
    mask = torch.rand(2, 1, 9, 7, generator=torch.Generator().manual_seed(3)) > 0.4
    mask[0, 0, 2] = False  # a fully masked query
    with torch.set_grad_enabled(grad):
        for m in (None, mask):
            for causal in (False, True):
                expected = scaled_dot_product_attention(q, k, v, m, causal=causal)
                got = blocked_attention(
                    q, k, v, m, causal=causal, block_size=block_size
                )
                torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(
            blocked_attention(q, k[0, 0], v[0, 0]),
            scaled_dot_product_attention(q, k[0, 0], v[0, 0]),
        )
        torch.testing.assert_close(
            blocked_attention(q[0, 0], k[0, 0], v[0, 0], scale=0.3),
            scaled_dot_product_attention(q[0, 0], k[0, 0], v[0, 0], scale=0.3),
        )


def test_blocked_attention_gradcheck_and_bad_block_size():
    x = randn(6, 4, seed=5).requires_grad_()
    mask = causal_mask(6)
    assert torch.autograd.gradcheck(
        lambda t: blocked_attention(t, t, t, mask, block_size=4), (x,)
    )
    with raises(ValueError, "block_size", ">= 1", "got 0"):
        blocked_attention(x, x, x, block_size=0)


def test_custom_scale():
    q, k, v = randn(4, 8, seed=0), randn(4, 8, seed=1), randn(4, 2, seed=2)
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, scale=0.5),
        F.scaled_dot_product_attention(q, k, v, scale=0.5),
    )


def test_weightless_self_attention_formula():
    x = randn(2, 5, 3, seed=4)
    y, w = weightless_self_attention(x, return_weights=True)
    manual_w = torch.exp(x @ x.transpose(1, 2))
    manual_w = manual_w / manual_w.sum(-1, keepdim=True)
    torch.testing.assert_close(w, manual_w)
    torch.testing.assert_close(y, manual_w @ x)
    # it is scaled dot-product attention with q = k = v = x and no scaling
    torch.testing.assert_close(y, scaled_dot_product_attention(x, x, x, scale=1.0))


# --- numerics -----------------------------------------------------------------------------------------------


def test_fully_masked_row_gives_zero_weights_and_zero_output():
    q, k, v = randn(3, 4, seed=0), randn(5, 4, seed=1), randn(5, 2, seed=2)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False  # query 1 may look at nothing
    loop = lambda q, k, v, mask, **_: (  # the weights are the outputs with v = I
        attention_loop(q, k, v, mask),
        attention_loop(q, k, torch.eye(k.shape[0], dtype=F64), mask),
    )
    for fn in (loop, scaled_dot_product_attention):
        out, w = fn(q, k, v, mask, return_weights=True)
        assert torch.isfinite(out).all() and torch.isfinite(w).all()
        assert torch.equal(w[1], torch.zeros(5, dtype=F64))
        assert torch.equal(out[1], torch.zeros(2, dtype=F64))
        torch.testing.assert_close(w[[0, 2]].sum(-1), torch.ones(2, dtype=F64))
    # ... and the gradient stays finite
    q.requires_grad_(True)
    scaled_dot_product_attention(q, k, v, mask).sum().backward()
    assert torch.isfinite(q.grad).all() and torch.equal(
        q.grad[1], torch.zeros(4, dtype=F64)
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_huge_logits_are_stable(dtype):
    """Scores of about ±1e4: exp overflows, but subtracting the row maximum keeps everything finite."""
    q = torch.tensor([[100.0, 0.0], [0.0, -100.0]], dtype=dtype)
    k = torch.tensor([[100.0, 0.0], [99.0, 1.0], [0.0, 100.0]], dtype=dtype)
    v = torch.tensor([[1.0], [2.0], [3.0]], dtype=dtype)
    assert (q @ k.T).abs().max() == 1e4
    eye = torch.eye(3, dtype=dtype)  # the loop's weights are its outputs with v = I
    loop = attention_loop(q, k, v), attention_loop(q, k, eye)
    for out, w in (
        loop,
        scaled_dot_product_attention(q, k, v, scale=1.0, return_weights=True),
    ):
        assert torch.isfinite(out).all() and torch.isfinite(w).all()
    scores = (q @ k.T).to(F64)
    naive = torch.exp(scores) / torch.exp(scores).sum(-1, keepdim=True)
    assert torch.isnan(naive).any()  # what happens without subtracting the maximum
    stable = torch.exp(scores - scores.amax(-1, keepdim=True))
    stable = stable / stable.sum(-1, keepdim=True)
    out, w = scaled_dot_product_attention(q, k, v, scale=1.0, return_weights=True)
    torch.testing.assert_close(w.to(F64), stable)
    torch.testing.assert_close(out.to(F64), stable @ v.to(F64))
    # and the loop form, which scales by 1/√2, agrees with the matrix form
    torch.testing.assert_close(
        attention_loop(q, k, v), scaled_dot_product_attention(q, k, v)
    )


def test_gradcheck_attention():
    q, k, v = (randn(2, 3, 4, seed=s).requires_grad_() for s in range(3))
    mask = causal_mask(3)
    assert torch.autograd.gradcheck(
        lambda a, b, c: scaled_dot_product_attention(a, b, c, mask), (q, k, v)
    )
    assert torch.autograd.gradcheck(
        lambda a, b, c: attention_loop(a[0], b[0], c[0], mask), (q, k, v)
    )


def test_gradcheck_multi_head_attention():
    torch.manual_seed(0)
    mha = MultiHeadAttention(4, 2, causal=True).double()
    x = randn(1, 3, 4, seed=1).requires_grad_()
    pad = padding_to_attention_mask(torch.tensor([[True, True, False]]), heads=True)
    assert torch.autograd.gradcheck(lambda t: mha(t, mask=pad), (x,))


def test_dropout_on_weights_only_while_asked():
    q, k, v = randn(6, 4, seed=0), randn(6, 4, seed=1), randn(6, 4, seed=2)
    torch.manual_seed(0)
    dropped = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert not torch.allclose(dropped, scaled_dot_product_attention(q, k, v))
    mha = MultiHeadAttention(4, 2, dropout=0.5).double().eval()
    x = randn(1, 6, 4, seed=3)
    torch.testing.assert_close(mha(x), mha(x))


# --- properties ---------------------------------------------------------------------------------------------


@SETTINGS
@given(n=st.integers(1, 7), d=st.integers(1, 6), seed=st.integers(0, 10_000))
def test_permutation_equivariance(n, d, seed):
    """Without positions or masks, permuting the sequence permutes the outputs the same way."""
    torch.manual_seed(seed)
    x = torch.randn(n, d, dtype=F64)
    perm = torch.randperm(n)
    torch.testing.assert_close(
        weightless_self_attention(x[perm]), weightless_self_attention(x)[perm]
    )
    torch.testing.assert_close(
        scaled_dot_product_attention(x[perm], x[perm], x[perm]),
        scaled_dot_product_attention(x, x, x)[perm],
    )
    mha = MultiHeadAttention(2 * d, 2).double()
    xb = torch.randn(1, n, 2 * d, dtype=F64)
    torch.testing.assert_close(mha(xb[:, perm]), mha(xb)[:, perm])


@SETTINGS
@given(n=st.integers(2, 8), t=st.integers(0, 7), seed=st.integers(0, 10_000))
def test_causality_future_never_changes_the_past(n, t, seed):
    t = t % (n - 1)  # change every position after t
    torch.manual_seed(seed)
    x = torch.randn(2, n, 8, dtype=F64)
    y = x.clone()
    y[:, t + 1 :] = torch.randn_like(y[:, t + 1 :]) * 10
    out_x = scaled_dot_product_attention(x, x, x, causal=True)
    out_y = scaled_dot_product_attention(y, y, y, causal=True)
    torch.testing.assert_close(out_x[:, : t + 1], out_y[:, : t + 1])
    mha = MultiHeadAttention(8, 4, causal=True).double()
    torch.testing.assert_close(mha(x)[:, : t + 1], mha(y)[:, : t + 1])


@SETTINGS
@given(
    n_q=st.integers(1, 6),
    n_k=st.integers(1, 6),
    seed=st.integers(0, 10_000),
    scale=st.floats(0.01, 100.0),
)
def test_rows_sum_to_one(n_q, n_k, seed, scale):
    torch.manual_seed(seed)
    q, k, v = torch.randn(n_q, 3), torch.randn(n_k, 3), torch.randn(n_k, 2)
    mask = torch.rand(n_q, n_k) > 0.5
    mask[:, torch.randint(n_k, (1,))] = True
    _, w = scaled_dot_product_attention(q * scale, k, v, mask, return_weights=True)
    torch.testing.assert_close(w.sum(-1), torch.ones(n_q))
    assert (w >= 0).all() and (w[~mask] == 0).all()


# --- multi-head attention -----------------------------------------------------------------------------------


def test_split_and_merge_heads():
    x = torch.arange(2 * 3 * 8.0).reshape(2, 3, 8)
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 2)
    # head 1 of position 2 = features 2, 3
    assert torch.equal(heads[0, 1, 2], x[0, 2, 2:4])
    assert torch.equal(merge_heads(heads), x)
    assert torch.equal(heads, x.view(2, 3, 4, 2).transpose(1, 2))


def test_multi_head_is_one_matrix_split_into_heads():
    """Head h uses rows h·d_head … (h+1)·d_head - 1 of W_Q, W_K, W_V, and the matching columns of W_O."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(6, 3, bias=False).double()
    x = randn(1, 4, 6, seed=1)
    out = torch.zeros(1, 4, 6, dtype=F64)
    for h in range(3):
        rows = slice(2 * h, 2 * h + 2)
        q, k, v = (
            x @ layer.weight[rows].T for layer in (mha.q_proj, mha.k_proj, mha.v_proj)
        )
        head = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(2), dim=-1) @ v
        out += head @ mha.out_proj.weight[:, rows].T
    torch.testing.assert_close(mha(x), out)


def _pair(d_model=8, n_heads=2, seed=0, bias=True):
    torch.manual_seed(seed)
    theirs = (
        nn.MultiheadAttention(d_model, n_heads, batch_first=True, bias=bias)
        .double()
        .eval()
    )
    ours = mha_from_torch(theirs).eval()
    return ours, theirs


@pytest.mark.parametrize("bias", [True, False])
def test_mha_self_attention_equals_torch(bias):
    ours, theirs = _pair(bias=bias)
    x = randn(3, 5, 8, seed=1)
    # PyTorch averages the weights over the heads
    out, w = ours(x), ours.weights(x).mean(dim=1)
    t_out, t_w = theirs(x, x, x)
    torch.testing.assert_close(out, t_out)
    torch.testing.assert_close(w, t_w)


def test_mha_cross_attention_with_masks_equals_torch():
    ours, theirs = _pair(d_model=12, n_heads=3)
    x, memory = randn(2, 4, 12, seed=1), randn(2, 6, 12, seed=2)
    pad = padding_mask_from_lengths(torch.tensor([6, 3]), 6)
    mask = torch.rand(4, 6, generator=torch.Generator().manual_seed(3)) > 0.3
    mask[:, 0] = True
    both = mask & padding_to_attention_mask(pad, heads=True)  # (2, 1, 4, 6)
    out, w = ours(x, memory, mask=both), ours.weights(x, memory, mask=both)
    t_out, t_w = theirs(
        x,
        memory,
        memory,
        attn_mask=to_torch_mha_mask(mask),
        key_padding_mask=to_torch_mha_mask(pad),
        average_attn_weights=False,
    )
    torch.testing.assert_close(out, t_out)
    torch.testing.assert_close(w, t_w)
    assert w.shape == (2, 3, 4, 6)


def test_mha_causal_and_per_head_masks_equal_torch():
    ours, theirs = _pair()
    ours.causal = True
    x = randn(2, 5, 8, seed=1)
    out, w = ours(x), ours.weights(x).mean(dim=1)
    t_out, t_w = theirs(x, x, x, attn_mask=to_torch_mha_mask(causal_mask(5)))
    torch.testing.assert_close(out, t_out)
    torch.testing.assert_close(w, t_w)
    # the unmasked weights of a causal layer, when asked for
    t_w = theirs(x, x, x)[1]
    torch.testing.assert_close(ours.weights(x, causal=False).mean(dim=1), t_w)
    ours.causal = False
    per_head = torch.rand(2, 2, 5, 5, generator=torch.Generator().manual_seed(5)) > 0.5
    per_head[..., 0] = True
    t_out = theirs(x, x, x, attn_mask=to_torch_mha_mask(per_head.reshape(4, 5, 5)))[0]
    torch.testing.assert_close(ours(x, mask=per_head), t_out)
    per_batch = per_head[:, 0]
    t_out = theirs(
        x, x, x, attn_mask=to_torch_mha_mask(per_batch.repeat_interleave(2, dim=0))
    )[0]
    # (batch, 1, n_q, n_k)
    torch.testing.assert_close(ours(x, mask=per_batch[:, None]), t_out)


def test_mha_fully_masked_query_returns_output_bias():
    ours, theirs = _pair()
    x = randn(1, 3, 8, seed=1)
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[2] = False
    out, w = ours(x, mask=mask), ours.weights(x, mask=mask)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[0, 2], ours.out_proj.bias)
    assert torch.equal(w[0, :, 2], torch.zeros(2, 3, dtype=F64))
    # PyTorch: NaN
    assert torch.isnan(
        theirs(x, x, x, attn_mask=to_torch_mha_mask(mask))[0][0, 2]
    ).all()


def test_mha_with_rotary_rotates_queries_and_keys():
    torch.manual_seed(0)
    rope = RotaryEmbedding(4, context_length=16)
    mha = MultiHeadAttention(8, 2, rotary=rope).double()
    x = randn(1, 5, 8, seed=1)
    q, k, v = (
        split_heads(layer(x), 2) for layer in (mha.q_proj, mha.k_proj, mha.v_proj)
    )
    expected = mha.out_proj(
        merge_heads(scaled_dot_product_attention(rope(q), rope(k), v))
    )
    torch.testing.assert_close(mha(x), expected)


# --- bad input ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda: scaled_dot_product_attention(
                torch.randn(3, 4), torch.randn(5, 6), torch.randn(5, 2)
            ),
            ValueError,
            (
                "expected k of shape (..., n_k, 4) to match q of shape (3, 4), got k of shape (5, 6)",
            ),
        ),
        (
            lambda: scaled_dot_product_attention(
                torch.randn(3, 4), torch.randn(5, 4), torch.randn(6, 2)
            ),
            ValueError,
            ("expected v of shape (..., 5, d_v)", "got v of shape (6, 2)"),
        ),
        (
            lambda: scaled_dot_product_attention(
                torch.randn(3, 4),
                torch.randn(5, 4),
                torch.randn(5, 2),
                torch.ones(3, 4, dtype=torch.bool),
            ),
            ValueError,
            ("mask", "(3, 5)", "got shape (3, 4)"),
        ),
        (
            lambda: scaled_dot_product_attention(
                torch.randn(3, 4),
                torch.randn(5, 4),
                torch.randn(5, 2),
                torch.ones(3, 5),
            ),
            TypeError,
            ("boolean tensor", "got dtype torch.float32"),
        ),
        (
            lambda: scaled_dot_product_attention(
                torch.ones(3, 4, dtype=torch.long), torch.randn(5, 4), torch.randn(5, 2)
            ),
            TypeError,
            ("q", "floating-point", "got dtype torch.int64"),
        ),
        (
            lambda: scaled_dot_product_attention(
                [[1.0]], torch.randn(5, 4), torch.randn(5, 2)
            ),
            TypeError,
            ("q", "got a list"),
        ),
        (
            lambda: scaled_dot_product_attention(
                torch.randn(4), torch.randn(4), torch.randn(4)
            ),
            ValueError,
            ("at least 2 dimensions", "got shape (4,)"),
        ),
        (
            lambda: scaled_dot_product_attention(
                torch.randn(3, 4), torch.randn(3, 4, dtype=F64), torch.randn(3, 4)
            ),
            TypeError,
            ("share one dtype",),
        ),
        (
            lambda: attention_loop(
                torch.randn(2, 3, 4), torch.randn(2, 3, 4), torch.randn(2, 3, 4)
            ),
            ValueError,
            ("q", "dimensions", "got shape (2, 3, 4)"),
        ),
        (
            lambda: split_heads(torch.randn(2, 3, 10), 3),
            ValueError,
            ("d_model = 10", "divisible by n_heads = 3"),
        ),
        (
            lambda: merge_heads(torch.randn(3, 4)),
            ValueError,
            ("at least 3 dimensions", "got shape (3, 4)"),
        ),
        (
            lambda: MultiHeadAttention(10, 3),
            ValueError,
            ("d_model = 10", "divisible"),
        ),
        (
            lambda: MultiHeadAttention(8, 2)(torch.randn(2, 3, 6)),
            ValueError,
            ("x must have last dimension d_model = 8", "got shape (2, 3, 6)"),
        ),
        (
            lambda: MultiHeadAttention(8, 2)(
                torch.randn(2, 3, 8), torch.randn(3, 4, 8)
            ),
            ValueError,
            ("memory must have shape (2, n_k, 8)", "got shape (3, 4, 8)"),
        ),
        (
            lambda: MultiHeadAttention(8, 2)(
                torch.randn(2, 3, 8), mask=torch.ones(3, 4, dtype=torch.bool)
            ),
            ValueError,
            ("mask", "(3, 3)", "scores of shape (2, 2, 3, 3), got shape (3, 4)"),
        ),
        (
            lambda: MultiHeadAttention(8, 2)(
                torch.randn(2, 3, 8), mask=torch.ones(2, 3)
            ),
            TypeError,
            ("mask", "boolean"),
        ),
        (
            lambda: MultiHeadAttention(8, 2)(torch.randn(3, 8)),
            ValueError,
            ("x", "dimensions", "got shape (3, 8)"),
        ),
        (
            lambda: MultiHeadAttention(8, 2)(torch.randn(2, 3, 8).long()),
            TypeError,
            ("x", "floating-point"),
        ),
    ],
)
def test_bad_input_names_expected_and_actual(call, error, match):
    with raises(error, *match):
        call()


def test_weights_can_be_asked_for_in_a_forward_hook():
    """Chapter 5 records cross-attention with a forward hook that calls ``weights``: asking for them must not run
    the hook again (it once recursed without end), and they are the softmax of the scaled scores of each head."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x, memory = torch.randn(2, 7, 16), torch.randn(2, 5, 16)
    seen = []
    hook = mha.register_forward_hook(
        lambda m, args, kwargs, out: seen.append(m.weights(*args, **kwargs)),
        with_kwargs=True,
    )
    with torch.no_grad():
        mha(x, memory)
    hook.remove()
    (w,) = seen
    q = mha.q_proj(x).view(2, 7, 4, 4).transpose(1, 2)
    k = mha.k_proj(memory).view(2, 5, 4, 4).transpose(1, 2)
    assert torch.allclose(
        w, torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1), atol=1e-6
    )
