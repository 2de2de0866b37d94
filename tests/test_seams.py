"""The seams chapters 6-9 build on: a swappable attention function, the decoder-only and encoder blocks, the
residual sublayer that places the norm, and incremental decoding with a key/value cache."""

import pytest
import torch
from checker_testing import randn
from raising import raises

from companion.attention import (
    KVCache,
    MultiHeadAttention,
    attention_loop,
    blocked_attention,
    scaled_dot_product_attention,
)
from companion.gpt import GPT, GPTConfig, Sampling, generate
from companion.masks import causal_mask
from companion.positional import RotaryEmbedding
from companion.transformer import (
    BlockConfig,
    CausalBlock,
    EncoderBlock,
    LayerNorm,
    Residual,
)


def chapter_8_model(vocab_size, context_length=256, **fields):
    """The configuration chapters 8 and 9 train: rotary positions, an untied output layer, ReLU, PyTorch's init."""
    options = dict(
        positional="rope",
        activation="relu",
        tie_weights=False,
        init="pytorch",
        d_ff=4 * 8,
    )
    config = GPTConfig(
        vocab_size=vocab_size,
        context_length=context_length,
        n_layers=1,
        n_heads=2,
        d_model=8,
    )
    return GPT(GPTConfig(**(vars(config) | options | fields)))


# --- the attention function -----------------------------------------------------------------------------------


def test_causal_flag_is_aligned_at_the_end():
    """The last m queries attending causally to all n keys are the last m rows of the full causal attention."""
    q, k, v = (
        randn(2, 3, 7, 4, seed=1),
        randn(2, 3, 7, 4, seed=2),
        randn(2, 3, 7, 5, seed=3),
    )
    full = scaled_dot_product_attention(q, k, v, mask=None, causal=True)
    for m in (1, 3, 7):
        torch.testing.assert_close(
            scaled_dot_product_attention(q[..., -m:, :], k, v, causal=True),
            full[..., -m:, :],
        )
        torch.testing.assert_close(
            blocked_attention(q[..., -m:, :], k, v, causal=True), full[..., -m:, :]
        )
    loop = attention_loop(q[0, 0, -2:], k[0, 0], v[0, 0], causal_mask(2, 7))
    torch.testing.assert_close(loop, full[0, 0, -2:])
    # query i of the last 2 sees keys j <= i + 5: the explicit mask of that rule gives the same numbers
    ends = torch.ones(2, 7, dtype=torch.bool).tril(5)
    torch.testing.assert_close(
        scaled_dot_product_attention(q[..., -2:, :], k, v, ends), full[..., -2:, :]
    )


def test_multi_head_attention_calls_the_given_attention_function():
    """q, k, v of shape (B, h, n, d_head) and the mask and causal flag reach the attention function."""
    calls = []

    def recording(q, k, v, mask=None, causal=False):
        calls.append((q.shape, k.shape, v.shape, mask, causal))
        return scaled_dot_product_attention(q, k, v, mask, causal=causal)

    torch.manual_seed(0)
    default = MultiHeadAttention(8, 2).double()
    swapped = MultiHeadAttention(8, 2, attention=recording).double()
    swapped.load_state_dict(default.state_dict())
    x, memory, mask = (
        randn(3, 5, 8, seed=1),
        randn(3, 4, 8, seed=2),
        causal_mask(5)[:, :4],
    )
    torch.testing.assert_close(swapped(x, memory, mask), default(x, memory, mask))
    assert calls == [((3, 2, 5, 4), (3, 2, 4, 4), (3, 2, 4, 4), mask, False)]
    swapped.causal = True  # the layer's option reaches every call
    swapped(x)
    assert calls[-1][-1] is True


@pytest.mark.parametrize("block_cls", [EncoderBlock, CausalBlock])
def test_blocks_with_blocked_attention_equal_the_default(block_cls):
    torch.manual_seed(0)
    config = BlockConfig(8, 2, 16, norm_first=True)
    default = block_cls(config).double().eval()
    swapped = block_cls(config, attention=blocked_attention).double().eval()
    swapped.load_state_dict(default.state_dict())
    x = randn(2, 6, 8, seed=1)
    torch.testing.assert_close(swapped(x), default(x))


def test_a_different_attention_function_changes_the_output():
    """The seam is real: uniform attention (every key weight 1/n_k) gives other numbers than softmax."""

    def uniform(q, k, v, mask=None, causal=False):
        return v.mean(dim=-2, keepdim=True).expand(*q.shape[:-1], v.shape[-1])

    torch.manual_seed(0)
    default = MultiHeadAttention(8, 2).double()
    swapped = MultiHeadAttention(8, 2, attention=uniform).double()
    swapped.load_state_dict(default.state_dict())
    x = randn(1, 4, 8, seed=1)
    expected = swapped.out_proj(
        swapped.v_proj(x).mean(dim=1, keepdim=True).expand(1, 4, 8)
    )
    torch.testing.assert_close(swapped(x), expected)
    assert not torch.allclose(swapped(x), default(x))


def test_dropout_is_passed_only_while_training():
    seen = []

    def recording(q, k, v, mask=None, causal=False, dropout_p=0.0):
        seen.append(dropout_p)
        return scaled_dot_product_attention(q, k, v, mask, causal=causal)

    mha = MultiHeadAttention(8, 2, dropout=0.25, attention=recording)
    x = torch.randn(1, 3, 8)
    mha(x)
    mha.eval()
    mha(x)
    assert seen == [0.25, 0.0]


# --- blocks and the residual sublayer -------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
def test_residual_places_the_norm(norm_first):
    torch.manual_seed(0)
    residual = Residual(BlockConfig(6, 1, 1, norm_first=norm_first)).double()
    with torch.no_grad():
        residual.norm.weight.normal_()
        residual.norm.bias.normal_()
    x = randn(2, 3, 6, seed=1)
    f = torch.tanh
    norm = residual.norm
    expected = x + f(norm(x)) if norm_first else norm(x + f(x))
    torch.testing.assert_close(residual(x, f), expected)


def test_causal_block_is_causal_and_encoder_block_is_not():
    torch.manual_seed(0)
    config = BlockConfig(8, 2, 16, norm_first=False)
    causal = CausalBlock(config).double().eval()
    encoder = EncoderBlock(config).double().eval()
    encoder.load_state_dict(causal.state_dict())
    x = randn(1, 6, 8, seed=1)
    y = x.clone()
    y[:, 4:] = randn(1, 2, 8, seed=2)
    torch.testing.assert_close(causal(x)[:, :4], causal(y)[:, :4])
    assert not torch.allclose(encoder(x)[:, :4], encoder(y)[:, :4])
    # the last position sees everything anyway
    torch.testing.assert_close(causal(x)[:, -1:], encoder(x)[:, -1:])


# --- incremental decoding -------------------------------------------------------------------------------------


@pytest.mark.parametrize("rotary", [False, True])
def test_multi_head_attention_with_cache_equals_full_causal_attention(rotary):
    torch.manual_seed(0)
    rope = RotaryEmbedding(4, context_length=16) if rotary else None
    mha = MultiHeadAttention(8, 2, causal=True, rotary=rope).double()
    x = randn(2, 6, 8, seed=1)
    full = mha(x)
    cache = KVCache()
    first = mha(x[:, :2], cache=cache)  # a prompt of two tokens
    # then one token at a time
    steps = [mha(x[:, t : t + 1], cache=cache) for t in range(2, 6)]
    torch.testing.assert_close(torch.cat([first, *steps], dim=1), full)
    assert (
        len(cache) == 6
        and cache.k.shape == (2, 2, 6, 4)
        and cache.v.shape == (2, 2, 6, 4)
    )


@pytest.mark.parametrize("positional", ["rope", "learned", "sinusoidal"])
def test_cached_generation_equals_uncached_token_by_token(positional):
    """Each step's logits with the cache equal those of rerunning the whole sequence; so do the tokens."""
    torch.manual_seed(0)
    model = chapter_8_model(23, 32, d_model=16, n_layers=3, positional=positional)
    model = model.double().eval()
    prompt = torch.tensor([[3, 7, 1], [5, 5, 9]])
    caches = model.new_caches()
    ids, logits = prompt, model(prompt, caches)
    for _ in range(8):
        torch.testing.assert_close(
            logits[:, -1], model(ids)[:, -1], rtol=1e-10, atol=1e-10
        )
        nxt = logits[:, -1].argmax(dim=-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
        logits = model(nxt, caches)
    assert len(caches[0]) == ids.shape[1]
    cached = generate(model, prompt, Sampling(8, temperature=0))
    torch.testing.assert_close(
        cached,
        generate(model, prompt, Sampling(8, temperature=0), use_cache=False),
        rtol=0,
        atol=0,
    )
    torch.testing.assert_close(cached, ids)
    # the continuation is not one token repeated
    assert len(set(cached[:, 3:].flatten().tolist())) > 1


def test_generate_restores_training_mode_and_checks_input():
    model = chapter_8_model(10, 6, d_ff=8)
    out = generate(model, torch.tensor([[1, 2]]), Sampling(3, temperature=0))
    assert out.shape == (1, 5) and model.training
    with raises(
        ValueError, "ids has 3 positions", "after 4 cached ones", "context length T = 6"
    ):
        model(torch.tensor([[1, 2, 3]]), _filled(model, 4))
    with raises(ValueError, "positional", "got 'alibi'"):
        GPTConfig(positional="alibi")
    with raises(TypeError, "model must be a GPT, got"):
        generate(torch.nn.Linear(2, 2), torch.tensor([[1]]), Sampling(2))


def _filled(model, n):
    """Caches already holding n positions."""
    caches = model.new_caches()
    model(torch.zeros(1, n, dtype=torch.long), caches)
    return caches


def test_layer_norm_in_the_decoder_only_model_is_the_final_norm():
    model = chapter_8_model(10, d_ff=8)
    assert isinstance(model.norm, LayerNorm) and all(
        r.norm_first for b in model.blocks for r in b.residuals
    )
