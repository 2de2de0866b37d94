"""Every causal attention of the companion is causal: earlier outputs do not move when the future changes.

Causality is a statement about *all* inputs, so the future is changed strongly, not resampled from the same
distribution: the queries, keys and values at positions ``t ≥ PAST`` are multiplied by 10, 1,000 and 0.001,
negated and scaled by 100, or replaced by random vectors of standard deviation 30. The outputs at the positions
before ``PAST`` must stay the same to rounding (float64, relative 1e-12). A stabiliser that takes its constant
over all positions (the Performer's old block-wide maximum) fails this check through the ε of the normaliser:
:func:`test_the_check_catches_a_block_wide_stabiliser` keeps that failure in view.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch
from raising import raises

from companion import attention as att
from companion import banded_attention as ba
from companion import fmmformer as fmm
from companion import linear_attention as la
from companion import random_features as rf
from companion.gpt import GPT, GPTConfig, Sampling, generate
from companion.induction import AttentionOnlyTransformer
from companion.masks import causal_mask
from companion.transformer import EncoderDecoder, TransformerConfig

F64 = torch.float64
N, PAST, D = 13, 7, 8  # positions 0 … PAST − 1 are the past of every perturbation
TOLERANCE = dict(rtol=1e-12, atol=1e-12)

PERTURBATIONS = {
    "times 10": lambda x, g: 10 * x,
    "times 1e3": lambda x, g: 1e3 * x,
    "times 1e-3": lambda x, g: 1e-3 * x,
    "negated times 100": lambda x, g: -100 * x,
    "random, std 30": lambda x, g: (
        30 * torch.randn(x.shape, generator=g, dtype=x.dtype)
    ),
}


def _loop(q, k, v, **kw):
    """attention_loop is unbatched: one (batch, head) at a time."""
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=v.dtype)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            out[b, h] = att.attention_loop(q[b, h], k[b, h], v[b, h], **kw)
    return out


def _step_by_step(q, k, v, **kw):
    """linear_attention.step over the positions: causal linear attention as an RNN."""
    state, outs = None, []
    for i in range(q.shape[-2]):
        y, state = la.linear_attention.step(
            q[..., i, :], k[..., i, :], v[..., i, :], state, **kw
        )
        outs.append(y)
    return torch.stack(outs, dim=-2)


PERFORMER = rf.PerformerFeatures(D, 32, seed=0).double()
PERFORMER_TRIG = rf.PerformerFeatures(D, 16, "trig", seed=0).double()

CAUSAL_ATTENTIONS = {
    "softmax": partial(att.scaled_dot_product_attention, causal=True),
    "softmax, causal mask": lambda q, k, v: att.scaled_dot_product_attention(
        q, k, v, causal_mask(N)
    ),
    "softmax, loop": lambda q, k, v: _loop(q, k, v, mask=causal_mask(N)),
    "softmax, blocked": partial(att.blocked_attention, causal=True, block_size=4),
    "kernel (exp)": partial(la.kernel_attention, causal=True),
    "linear": partial(la.linear_attention, causal=True),
    "linear, quadratic": partial(la.linear_attention.quadratic, causal=True),
    "linear, recurrent": la.linear_attention.recurrent,
    "linear, chunked by 4": la.LinearAttention(chunk_size=4).chunked,
    "linear, cumsum": la.linear_attention.cumsum,
    "linear, step by step": _step_by_step,
    "band": partial(ba.BandedAttention(3), causal=True),
    "band, blocks of 4": partial(ba.BandedAttention(3, block_size=4), causal=True),
    "band, dense": partial(ba.banded_attention_dense, causal=True, bandwidth=3),
    "far field": partial(fmm.far_field_attention, causal=True),
    "FMMformer": partial(fmm.fixed_fmm_attention(bandwidth=3), causal=True),
    "FMMAttention": partial(
        fmm.FMMAttention(fmm.FMMConfig(bandwidth=3, n_heads=2)).double(), causal=True
    ),
    "Performer features in linear attention": partial(
        la.LinearAttention(feature_map=PERFORMER), causal=True
    ),
    "Performer": partial(rf.performer_attention, features=PERFORMER, causal=True),
    "Performer, chunks of 4": partial(
        rf.performer_attention, features=PERFORMER, causal=True, chunk_size=4
    ),
    "Performer, trig": partial(
        rf.performer_attention, features=PERFORMER_TRIG, causal=True, chunk_size=4
    ),
    "PerformerAttention": partial(
        rf.PerformerAttention(D, 32, seed=1).double(), causal=True
    ),
}


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 2, N, D, generator=g, dtype=F64) for _ in range(3)]


def _perturb(x, perturbation, g):
    y = x.clone()
    y[..., PAST:, :] = PERTURBATIONS[perturbation](x[..., PAST:, :], g)
    return y


def assert_past_unchanged(attention, which="qkv"):
    q, k, v = _inputs()
    before = attention(q, k, v)
    assert before.shape == (2, 2, N, D) and bool(torch.isfinite(before).all())
    g = torch.Generator().manual_seed(1)
    for perturbation in PERTURBATIONS:
        changed = [
            _perturb(x, perturbation, g) if name in which else x
            for name, x in zip("qkv", (q, k, v), strict=True)
        ]
        after = attention(*changed)
        message = lambda m, p=perturbation: f"{p}: {m}"
        torch.testing.assert_close(
            after[..., :PAST, :], before[..., :PAST, :], **TOLERANCE, msg=message
        )
        # the future did change
        assert not torch.equal(after[..., PAST:, :], before[..., PAST:, :])


@pytest.mark.parametrize("which", ["qkv", "k"])
@pytest.mark.parametrize("name", list(CAUSAL_ATTENTIONS))
def test_future_queries_keys_values_do_not_reach_earlier_outputs(name, which):
    assert_past_unchanged(CAUSAL_ATTENTIONS[name], which)


def _block_wide_performer(q, k, v):
    """The old stabiliser: queries per row, keys by one constant over all positions (the future included)."""
    w = PERFORMER.w.double()
    phi = lambda x, how: rf.positive_softmax_features(x * D**-0.25, w, how)
    return la.LinearAttention(feature_map=_RoleAware(phi)).chunked(q, k, v)


class _RoleAware:
    """A feature map called first for the queries, then for the keys (as linear attention calls it)."""

    def __init__(self, phi):
        self.phi, self.calls = phi, 0

    def __call__(self, x):
        self.calls += 1
        return self.phi(x, "rows" if self.calls % 2 else "all")


def test_the_check_catches_a_block_wide_stabiliser():
    """Doubling the future's keys moves earlier outputs: the stabiliser e^c no longer cancels against ε."""
    with raises(AssertionError, "times 10"):
        assert_past_unchanged(_block_wide_performer, "k")
    q, k, v = _inputs()
    before = _block_wide_performer(q, k, v)
    k2 = k.clone()
    k2[..., PAST:, :] *= 2
    moved = (_block_wide_performer(q, k2, v) - before)[..., :PAST, :].norm() / before[
        ..., :PAST, :
    ].norm()
    assert moved > 1e-5  # far above rounding
    # the causal stabiliser on the same features and inputs
    stable = partial(rf.performer_attention, features=PERFORMER, causal=True)
    torch.testing.assert_close(
        stable(q, k2, v)[..., :PAST, :], stable(q, k, v)[..., :PAST, :], **TOLERANCE
    )


# ----------------------------------------------------------------------------------------------------
# Modules and models: multi-head attention, GPT with each kind of attention, the decoder, the induction model

KINDS = {
    "softmax": lambda d_k: att.scaled_dot_product_attention,
    "linear": lambda d_k: la.linear_attention,
    "band": lambda d_k: ba.BandedAttention(3),
    "fmmformer": lambda d_k: fmm.FMMAttention(fmm.FMMConfig(bandwidth=3)),
    "performer": lambda d_k: rf.PerformerAttention(d_k, 16, seed=0),
    "performer, trig": lambda d_k: rf.PerformerAttention(d_k, 16, kind="trig", seed=0),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_multi_head_attention_is_causal(kind):
    torch.manual_seed(0)
    mha = att.MultiHeadAttention(16, 2, causal=True, attention=KINDS[kind](8))
    mha = mha.double()
    x = torch.randn(2, N, 16, dtype=F64)
    before = mha(x)
    g = torch.Generator().manual_seed(1)
    for perturbation in PERTURBATIONS:
        after = mha(_perturb(x, perturbation, g))
        torch.testing.assert_close(after[:, :PAST], before[:, :PAST], **TOLERANCE)


def _gpt(kind, seed=0):
    torch.manual_seed(seed)
    config = GPTConfig(
        vocab_size=20,
        context_length=N,
        n_layers=2,
        n_heads=2,
        d_model=16,
        d_ff=32,
        dropout=0.0,
    )
    model = GPT(config).double().eval()
    # one attention module per layer, as the recall sweep builds them
    for block in model.blocks:
        block.self_attn.attention = KINDS[kind](8)
    return model


def _future_replaced(ids, seed):
    g = torch.Generator().manual_seed(seed)
    new = ids.clone()
    new[:, PAST:] = torch.randint(20, new[:, PAST:].shape, generator=g)
    return new


def _token_ids(batch):
    return torch.randint(20, (batch, N), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("kind", list(KINDS))
def test_gpt_logits_ignore_future_tokens(kind):
    model, ids = _gpt(kind), _token_ids(3)
    with torch.no_grad():
        before = model(ids)
        for seed in range(3):
            changed = _future_replaced(ids, seed)
            assert not torch.equal(changed, ids)
            torch.testing.assert_close(
                model(changed)[:, :PAST], before[:, :PAST], **TOLERANCE
            )


@pytest.mark.parametrize("kind", list(KINDS))
def test_gpt_decoding_with_the_cache_gives_the_full_forward_logits(kind):
    """A token at a time through the key/value cache, each attention sees its past only: the same logits."""
    model, ids = _gpt(kind), _token_ids(2)
    with torch.no_grad():
        full = model(ids)
        caches = model.new_caches()
        steps = [model(ids[:, :4], caches)]  # a prompt of 4, then one token at a time
        steps += [model(ids[:, t : t + 1], caches) for t in range(4, N)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-10, atol=1e-10)
    out = generate(
        model, ids[:, :3], Sampling(5), generator=torch.Generator().manual_seed(0)
    )
    assert out.shape == (2, 8)


def test_decoder_and_induction_model_are_causal():
    torch.manual_seed(0)
    config = TransformerConfig(
        src_vocab_size=20,
        tgt_vocab_size=20,
        d_model=16,
        n_heads=2,
        d_ff=32,
        dropout=0.0,
        context_length=N,
    )
    seq2seq = EncoderDecoder(config).double().eval()
    src = torch.randint(1, 20, (2, 9), generator=torch.Generator().manual_seed(0))
    tgt = torch.randint(1, 20, (2, N), generator=torch.Generator().manual_seed(1))
    induction = AttentionOnlyTransformer(20, N).double()
    with torch.no_grad():
        memory = seq2seq.encode(src)
        models = {
            "decoder": lambda t: seq2seq.decode(t, memory, src),
            "induction": induction,
        }
        for name, model in models.items():
            before = model(tgt)
            for seed in range(3):
                changed = _future_replaced(tgt, seed).clamp_min(1)  # no padding token
                torch.testing.assert_close(
                    model(changed)[:, :PAST], before[:, :PAST], **TOLERANCE, msg=name
                )
