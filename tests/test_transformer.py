"""The Transformer's blocks equal PyTorch's own, masks work end to end, and the model learns a copy task."""

import math

import pytest
import torch
import torch.nn.functional as F
from checker_testing import F64, randn
from raising import raises
from torch import nn

from companion.decoding import Sampling
from companion.interop import (
    decoder_block_from_torch,
    encoder_block_from_torch,
    layer_norm_from_torch,
    to_torch_mha_mask,
)
from companion.masks import (
    causal_mask,
    padding_mask_from_lengths,
    padding_to_attention_mask,
)
from companion.training import train
from companion.transformer import (
    BlockConfig,
    CausalBlock,
    DecoderBlock,
    EncoderBlock,
    EncoderDecoder,
    FeedForward,
    LayerNorm,
    Residual,
    TransformerConfig,
    greedy_decode,
    label_smoothed_cross_entropy,
    seq2seq_loss,
    smoothed_targets,
)

# --- layer normalisation and feed-forward -------------------------------------------------------------------


def test_layer_norm_equals_torch():
    torch.manual_seed(0)
    theirs = nn.LayerNorm(6, eps=1e-4).double()
    with torch.no_grad():
        theirs.weight.normal_()
        theirs.bias.normal_()
    ours = layer_norm_from_torch(theirs)
    x = 5 * randn(3, 4, 6, seed=1) + 2
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-12, atol=1e-12)
    constant = torch.full((2, 6), 3.0, dtype=F64)
    # variance 0: the output is the bias
    torch.testing.assert_close(ours(constant), theirs(constant))


def test_layer_norm_formula_and_statistics():
    norm = LayerNorm(8).double()
    y = norm(randn(5, 8, seed=2) * 10 - 4)
    torch.testing.assert_close(
        y.mean(-1), torch.zeros(5, dtype=F64), atol=1e-12, rtol=0
    )
    torch.testing.assert_close(
        y.var(-1, unbiased=False), torch.ones(5, dtype=F64), atol=1e-5, rtol=0
    )
    x = randn(
        2,
        8,
        seed=3,
    ).requires_grad_()
    assert torch.autograd.gradcheck(norm, (x,))


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_feed_forward(activation):
    ff = FeedForward(BlockConfig(4, 1, 16, norm_first=False, activation=activation))
    ff = ff.double()
    x = randn(2, 3, 4, seed=4)
    act = F.relu if activation == "relu" else F.gelu
    expected = (
        act(x @ ff.linear1.weight.T + ff.linear1.bias) @ ff.linear2.weight.T
        + ff.linear2.bias
    )
    torch.testing.assert_close(ff(x), expected)


# --- blocks equal PyTorch's layers --------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_block_equals_torch(norm_first, activation):
    torch.manual_seed(0)
    theirs = (
        nn.TransformerEncoderLayer(
            12,
            3,
            24,
            dropout=0.0,
            activation=activation,
            batch_first=True,
            norm_first=norm_first,
        )
        .double()
        .eval()
    )
    ours = encoder_block_from_torch(theirs).eval()
    assert all(residual.norm_first is norm_first for residual in ours.residuals)
    x = randn(2, 5, 12, seed=1)
    pad = padding_mask_from_lengths(torch.tensor([5, 3]), 5)
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(
        ours(x, padding_to_attention_mask(pad, heads=True)),
        theirs(x, src_key_padding_mask=to_torch_mha_mask(pad)),
        rtol=1e-10,
        atol=1e-10,
    )
    mask = causal_mask(5)
    torch.testing.assert_close(
        ours(x, mask=mask),
        theirs(x, src_mask=to_torch_mha_mask(mask)),
        rtol=1e-10,
        atol=1e-10,
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_causal_block_equals_torch_encoder_layer_with_causal_mask(norm_first):
    """GPT's block is PyTorch's encoder layer with the causal mask; same weights, same numbers."""
    torch.manual_seed(0)
    theirs = nn.TransformerEncoderLayer(
        12, 3, 24, dropout=0.0, batch_first=True, norm_first=norm_first
    )
    theirs = theirs.double().eval()
    ours = CausalBlock(BlockConfig(12, 3, 24, norm_first=norm_first)).double().eval()
    ours.load_state_dict(encoder_block_from_torch(theirs).state_dict())
    x = randn(2, 5, 12, seed=1)
    expected = theirs(x, src_mask=to_torch_mha_mask(causal_mask(5)))
    torch.testing.assert_close(ours(x), expected, rtol=1e-10, atol=1e-10)
    # and it is not the bidirectional encoder block
    assert not torch.allclose(ours(x), theirs(x))


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_equals_torch(norm_first):
    torch.manual_seed(0)
    theirs = (
        nn.TransformerDecoderLayer(
            12, 4, 20, dropout=0.0, batch_first=True, norm_first=norm_first
        )
        .double()
        .eval()
    )
    ours = decoder_block_from_torch(theirs).eval()
    x, memory = randn(2, 5, 12, seed=1), randn(2, 7, 12, seed=2)
    tgt_pad = padding_mask_from_lengths(torch.tensor([5, 4]), 5)
    mem_pad = padding_mask_from_lengths(torch.tensor([7, 2]), 7)
    expected = theirs(
        x, memory,
        tgt_mask=to_torch_mha_mask(causal_mask(5)),
        tgt_key_padding_mask=to_torch_mha_mask(tgt_pad),
        memory_key_padding_mask=to_torch_mha_mask(mem_pad),
    )  # fmt: skip
    tgt_mask, memory_mask = (
        padding_to_attention_mask(pad, heads=True) for pad in (tgt_pad, mem_pad)
    )
    got = ours(x, memory, tgt_mask, memory_mask)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    # without padding, too
    expected = theirs(x, memory, tgt_mask=to_torch_mha_mask(causal_mask(5)))
    torch.testing.assert_close(ours(x, memory), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("block", [Residual, EncoderBlock, CausalBlock, DecoderBlock])
def test_every_block_is_told_where_the_norm_goes(block):
    """No default for ``norm_first``: post-norm (the paper, BERT) and pre-norm (GPT) are both the book's;
    every block takes it from its :class:`BlockConfig`."""
    with raises(TypeError, "norm_first"):
        BlockConfig(8, 2, 16)
    with raises(TypeError, "norm_first", "must be a bool"):
        BlockConfig(8, 2, 16, norm_first=1)
    assert block(BlockConfig(8, 2, 16, norm_first=True))


def test_blocks_train_with_dropout_and_differ_from_eval():
    block = EncoderBlock(BlockConfig(8, 2, 16, dropout=0.5, norm_first=False))
    x = torch.randn(2, 4, 8)
    torch.manual_seed(0)
    train_out = block(x)
    block.eval()
    assert not torch.allclose(train_out, block(x))
    torch.testing.assert_close(block(x), block(x))


def test_decoder_block_is_causal():
    torch.manual_seed(0)
    block = DecoderBlock(BlockConfig(8, 2, 16, norm_first=False)).double().eval()
    x, memory = randn(1, 6, 8, seed=1), randn(1, 4, 8, seed=2)
    y = x.clone()
    y[:, 3:] = randn(1, 3, 8, seed=3)
    torch.testing.assert_close(block(x, memory)[:, :3], block(y, memory)[:, :3])
    assert not torch.allclose(block(x, memory)[:, 3:], block(y, memory)[:, 3:])


# --- the encoder–decoder ------------------------------------------------------------------------------------


def small_config(**overrides):
    base = dict(src_vocab_size=12, tgt_vocab_size=12, d_model=32, n_heads=4, n_encoder_layers=2,
                n_decoder_layers=2, d_ff=64, dropout=0.0, context_length=16)  # fmt: skip
    base.update(overrides)
    return TransformerConfig(**base)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_encoder_decoder_shapes_and_padding_invariance(norm_first, positional):
    """Padding changes nothing: a padded batch gives the same logits as each sequence on its own."""
    torch.manual_seed(0)
    model = (
        EncoderDecoder(small_config(norm_first=norm_first, positional=positional))
        .double()
        .eval()
    )
    src = torch.tensor([[5, 6, 7, 8], [9, 4, 0, 0]])
    tgt = torch.tensor([[1, 3, 4], [1, 5, 0]])
    logits = model(src, tgt)
    assert logits.shape == (2, 3, 12)
    alone = model(src[1:, :2], tgt[1:, :2])
    torch.testing.assert_close(logits[1:, :2], alone)


def test_encoder_decoder_is_causal_in_the_target():
    torch.manual_seed(0)
    model = EncoderDecoder(small_config()).double().eval()
    src = torch.randint(1, 12, (2, 5))
    tgt = torch.randint(1, 12, (2, 6))
    changed = tgt.clone()
    changed[:, 4:] = (changed[:, 4:] % 11) + 1
    torch.testing.assert_close(model(src, tgt)[:, :4], model(src, changed)[:, :4])


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
def test_encoder_decoder_matches_torch_transformer_pre_norm():
    """With pre-norm, our model's blocks and final norms are exactly nn.Transformer's."""
    torch.manual_seed(0)
    config = small_config(norm_first=True)
    ours = EncoderDecoder(config).double().eval()
    theirs = (
        nn.Transformer(32, 4, 2, 2, 64, dropout=0.0, batch_first=True, norm_first=True)
        .double()
        .eval()
    )
    ours.encoder = nn.ModuleList(
        encoder_block_from_torch(layer) for layer in theirs.encoder.layers
    )
    ours.decoder = nn.ModuleList(
        decoder_block_from_torch(layer) for layer in theirs.decoder.layers
    )
    ours.encoder_norm = layer_norm_from_torch(theirs.encoder.norm)
    ours.decoder_norm = layer_norm_from_torch(theirs.decoder.norm)
    src, tgt = torch.randint(1, 12, (2, 5)), torch.randint(1, 12, (2, 4))
    embed = lambda ids, table, pos: pos(table(ids) * 32**0.5)
    hidden = theirs(embed(src, ours.src_embed, ours.src_pos), embed(tgt, ours.tgt_embed, ours.tgt_pos),
                    tgt_mask=to_torch_mha_mask(causal_mask(4)))  # fmt: skip
    torch.testing.assert_close(
        ours(src, tgt), ours.lm_head(hidden), rtol=1e-10, atol=1e-10
    )


def test_seq2seq_loss_ignores_padding():
    torch.manual_seed(0)
    model = EncoderDecoder(small_config()).eval()
    src = torch.tensor([[4, 5, 6]])
    tgt = torch.tensor([[1, 7, 8, 2]])
    padded = torch.tensor([[1, 7, 8, 2, 0, 0]])
    torch.testing.assert_close(
        seq2seq_loss(model, (src, tgt)), seq2seq_loss(model, (src, padded))
    )


def smoothed_loss_by_loop(logits, y, epsilon, ignore_index=-100):
    """-Σ_v q_v log p_v row by row, q_v = 1 - ε + ε/V on y and ε/V elsewhere, averaged over the kept rows."""
    total, kept = 0.0, 0
    for row, target in zip(logits.tolist(), y.tolist(), strict=True):
        if target == ignore_index:
            continue
        top = max(row)
        log_z = top + math.log(sum(math.exp(v - top) for v in row))
        n = len(row)
        total -= sum(
            ((1 - epsilon) * (v == target) + epsilon / n) * (row[v] - log_z)
            for v in range(n)
        )
        kept += 1
    return total / kept


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.5, 0.9])
def test_label_smoothed_cross_entropy_equals_torch_and_a_loop(epsilon):
    logits = 3 * randn(20, 7, seed=1)
    y = torch.randint(0, 7, (20,), generator=torch.Generator().manual_seed(2))
    y[[3, 8, 9]] = 0  # <pad>, left out below
    ours = label_smoothed_cross_entropy(logits, y, epsilon, ignore_index=0)
    torch.testing.assert_close(
        ours, F.cross_entropy(logits, y, ignore_index=0, label_smoothing=epsilon)
    )
    assert (
        abs(ours.item() - smoothed_loss_by_loop(logits, y, epsilon, ignore_index=0))
        < 1e-12
    )
    # the default ignores -100 only
    everything = label_smoothed_cross_entropy(logits, y, epsilon)
    torch.testing.assert_close(
        everything, F.cross_entropy(logits, y, label_smoothing=epsilon)
    )
    # the padded rows did count there
    assert abs(everything.item() - ours.item()) > 1e-6


def test_smoothed_targets_and_their_floor():
    y = torch.tensor([2, 0])
    q = smoothed_targets(y, 5, 0.1)
    torch.testing.assert_close(q.sum(dim=1), torch.ones(2, dtype=F64))
    assert q[0, 2].item() == pytest.approx(0.9 + 0.02) and q[0, 0].item() == q[
        1, 4
    ].item() == pytest.approx(0.02)
    assert q.dtype == F64  # the loss casts q to the logits' dtype
    # the loss is smallest, at the entropy of q, when softmax(logits) = q; a sure one-hot guess pays ε/V · 100
    best = label_smoothed_cross_entropy(q.log(), y, 0.1)
    torch.testing.assert_close(best, -(q * q.log()).sum(dim=1).mean())
    for noise in (0.1, 1.0):
        assert (
            label_smoothed_cross_entropy(q.log() + noise * randn(2, 5, seed=3), y, 0.1)
            > best
        )
    assert (
        label_smoothed_cross_entropy(100 * F.one_hot(y, 5).double(), y, 0.1)
        > 4 * 0.02 * 100 - 1e-9
    )


def test_seq2seq_loss_with_label_smoothing_is_the_companion_loss():
    torch.manual_seed(0)
    model = EncoderDecoder(small_config(pad_id=0)).eval()
    src, tgt = (
        torch.tensor([[4, 5, 6], [7, 8, 0]]),
        torch.tensor([[1, 7, 8, 2, 0], [1, 9, 2, 0, 0]]),
    )
    logits = model(src, tgt[:, :-1]).flatten(0, 1)
    ours = label_smoothed_cross_entropy(
        logits, tgt[:, 1:].flatten(), 0.1, ignore_index=0
    )
    torch.testing.assert_close(
        seq2seq_loss(model, (src, tgt), label_smoothing=0.1), ours
    )


@pytest.mark.slow
def test_copy_task_learns_and_greedy_decode_has_the_right_shape():
    """A few dozen steps on copying 4 random tokens: the loss falls, and decoding has shape (batch, 1 + 5)."""
    torch.manual_seed(0)
    bos, eos = 1, 2
    config = small_config(
        d_model=32, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, dropout=0.0
    )
    model = EncoderDecoder(config)

    def batch(step):
        src = torch.randint(3, 12, (32, 4))
        tgt = torch.cat(
            [torch.full((32, 1), bos), src, torch.full((32, 1), eos)], dim=1
        )
        return src, tgt

    history = train(
        model, batch, seq2seq_loss, steps=60, lr=3e-3, seed=0, progress=False
    )
    assert len(history) == 60
    first, last = sum(history[:5]) / 5, sum(history[-5:]) / 5
    assert last < 0.6 * first, (first, last)
    src, _ = batch(0)
    out = greedy_decode(model, src[:3], Sampling(5, temperature=0))
    assert out.shape == (3, 6) and out.dtype == torch.long and (out[:, 0] == bos).all()
    assert model.training  # restored


def test_greedy_decode_stops_at_eos_and_pads():
    torch.manual_seed(0)
    model = EncoderDecoder(small_config()).eval()
    with torch.no_grad():  # make the model always predict EOS = 2
        model.lm_head.weight.zero_()
        model.lm_head.bias.zero_()
        model.lm_head.bias[2] = 10.0
    out = greedy_decode(model, torch.randint(1, 12, (2, 3)), Sampling(8, 0, eos_id=2))
    assert out.tolist() == [[1, 2], [1, 2]]

    def fake_decode(tgt, memory, src=None):
        """Sequence 0 says EOS at once; sequence 1 says 7 forever."""
        logits = torch.zeros(tgt.shape[0], tgt.shape[1], 12)
        logits[0, :, 2] = 1.0
        logits[1, :, 7] = 1.0
        return logits

    model.decode = fake_decode
    out = greedy_decode(model, torch.randint(1, 12, (2, 3)), Sampling(4, 0, eos_id=2))
    # padded with pad_id = 0 after EOS
    assert out.tolist() == [[1, 2, 0, 0, 0], [1, 7, 7, 7, 7]]


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda: TransformerConfig(10, 10, d_model=30, n_heads=4),
            ValueError,
            ("d_model = 30", "divisible"),
        ),
        (
            lambda: TransformerConfig(10, 10, positional="rope"),
            ValueError,
            ("positional must be",),
        ),
        (
            lambda: TransformerConfig(10, 10, pad_id=10),
            ValueError,
            ("pad_id", "[0, 9]", "got 10"),
        ),
        (
            lambda: TransformerConfig(10, 10, dropout=1.0),
            ValueError,
            ("dropout", "[0, 1)"),
        ),
        (
            lambda: EncoderDecoder(small_config())(
                torch.randint(0, 12, (2, 20)), torch.zeros(2, 3, dtype=torch.long)
            ),
            ValueError,
            (
                "src has 20 positions (shape (2, 20)), more than the context length T = 16",
            ),
        ),
        (
            lambda: EncoderDecoder(small_config())(
                torch.tensor([[1, 12]]), torch.zeros(1, 3, dtype=torch.long)
            ),
            ValueError,
            ("src must lie in [0, 11]",),
        ),
        (
            lambda: EncoderDecoder(small_config())(
                torch.randn(2, 3), torch.zeros(2, 3, dtype=torch.long)
            ),
            TypeError,
            ("src", "integer"),
        ),
        (
            lambda: EncoderDecoder(small_config())(
                torch.tensor([1, 2]), torch.zeros(2, 3, dtype=torch.long)
            ),
            ValueError,
            ("src", "dimensions", "got shape (2,)"),
        ),
        (
            lambda: EncoderBlock(BlockConfig(8, 2, 16, norm_first=False))(
                torch.randn(2, 3, 6)
            ),
            ValueError,
            ("x must have last dimension d_model = 8", "got shape (2, 3, 6)"),
        ),
        (
            lambda: DecoderBlock(BlockConfig(8, 2, 16, norm_first=True))(
                torch.randn(2, 3, 8), torch.randn(3, 3, 8)
            ),
            ValueError,
            ("memory must have shape (2, n_k, 8)", "got shape (3, 3, 8)"),
        ),
        (lambda: LayerNorm(0), ValueError, ("d_model", ">= 1", "got 0")),
        (
            lambda: BlockConfig(4, 1, 8, norm_first=True, activation="tanh"),
            ValueError,
            ("activation must be one of",),
        ),
        (
            lambda: greedy_decode(
                EncoderDecoder(small_config()),
                torch.ones(1, 2, dtype=torch.long),
                Sampling(16, temperature=0),
            ),
            ValueError,
            ("exceeds the model's context length T = 16",),
        ),
        (
            lambda: TransformerConfig(12, 12, bos_id=12),
            ValueError,
            ("bos_id", "[0, 11]", "got 12"),
        ),
        (
            lambda: greedy_decode(
                EncoderDecoder(small_config()),
                torch.ones(1, 2, dtype=torch.long),
                Sampling(4),
            ),
            ValueError,
            ("greedy_decode takes the argmax", "temperature must be 0", "got 1.0"),
        ),
    ],
)
def test_bad_input_is_named(call, error, match):
    with raises(error, *match):
        call()
