"""Chapters 1-5: an answer that hands the exercise to the companion in one call is WRONG (issue 30).

Each exercise's companion function (or class) is withheld while the student's code runs (the checker's
``withhold``), and the shared check sees through what replacing names cannot reach: a subclass of the companion's
class, or the companion's function held in a default argument or a closure cell since the answer was defined."""

import pytest
import torch
import torch.nn.functional as F
from checker_testing import assert_wrong
from torch import nn

from companion import embeddings, glove, masks, positional, transformer
from companion import word2vec as w2v
from companion.exercises.attention import (
    check_causal_mask,
    check_scaled_dot_product_attention,
    check_weightless_self_attention,
)
from companion.exercises.transformer import (
    check_encoder_block,
    check_label_smoothed_cross_entropy,
    check_layer_norm,
    check_layer_norm_module,
    check_rope,
    check_sinusoidal_positional_encoding,
)
from companion.exercises.word2vec import (
    check_glove_loss,
    check_nearest_neighbours,
    check_skipgram_pairs,
)
from companion.exercises.words_to_vectors import check_cosine, check_embedding

CALLED = "write this one yourself"
HELD = "hands the work to the companion's own"


def closure(function):
    """The companion's function captured in a closure cell when the answer is made."""
    return lambda *args, **kwargs: function(*args, **kwargs)


def layer_norm_by_module(x, weight, bias, eps):
    layer = transformer.LayerNorm(x.shape[-1], eps=eps).to(x.dtype)
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)
    return layer(x)


class EmbeddingSubclass(embeddings.Embedding):
    pass


class EmbeddingWrapper(nn.Module):  # holds a companion Embedding and forwards to it
    def __init__(self, num_embeddings, embedding_dim):
        super().__init__()
        self.inner = embeddings.Embedding(num_embeddings, embedding_dim)
        self.weight = self.inner.weight

    def forward(self, ids):
        return self.inner(ids)


class EmbeddingHeld(nn.Module):  # the companion's class held in a default argument
    def __init__(self, num_embeddings, embedding_dim, _make=embeddings.Embedding):
        super().__init__()
        self.inner = _make(num_embeddings, embedding_dim)
        self.weight = self.inner.weight

    def forward(self, ids):
        return self.inner(ids)


class LayerNormSubclass(transformer.LayerNorm):
    pass


class LayerNormWrapper(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.inner = transformer.LayerNorm(d_model, eps)
        self.weight, self.bias = self.inner.weight, self.inner.bias

    def forward(self, x):
        return self.inner(x)


class EncoderSubclass(transformer.EncoderBlock):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__(
            transformer.BlockConfig(d_model, n_heads, d_ff, norm_first=False)
        )


class EncoderWrapper(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        config = transformer.BlockConfig(d_model, n_heads, d_ff, norm_first=False)
        self.inner = transformer.EncoderBlock(config)

    def forward(self, x, mask=None):
        return self.inner(x, mask)


@pytest.mark.parametrize(
    ("checker", "student", "fragment"),
    [
        (check_embedding, EmbeddingSubclass, HELD),
        (check_embedding, EmbeddingWrapper, CALLED),
        (check_embedding, EmbeddingHeld, HELD),
        (
            check_skipgram_pairs,
            lambda ids, window: w2v.skipgram_pairs(ids, window),
            CALLED,
        ),
        (
            check_skipgram_pairs,
            lambda ids, window, _f=w2v.skipgram_pairs: _f(ids, window),
            HELD,
        ),
        (check_skipgram_pairs, closure(w2v.skipgram_pairs_loop), HELD),
        (
            check_nearest_neighbours,
            lambda v, q, k: embeddings.nearest_neighbours(v, q, k)[0],
            CALLED,
        ),
        (
            check_nearest_neighbours,
            lambda v, q, k, _f=embeddings.nearest_neighbours: _f(v, q, k)[0],
            HELD,
        ),
        (
            check_glove_loss,
            lambda *a: glove.glove_loss(*a[:5], x_max=a[5], alpha=a[6]),
            CALLED,
        ),
        (check_glove_loss, closure(glove.glove_loss), HELD),
        (
            check_causal_mask,
            masks.causal_mask,
            "the companion's own `companion.masks.causal_mask`",
        ),
        (check_causal_mask, lambda n: masks.causal_mask(n), CALLED),
        (check_causal_mask, closure(masks.causal_mask), HELD),
        (
            check_sinusoidal_positional_encoding,
            lambda n, d: positional.sinusoidal_positional_encoding(n, d),
            CALLED,
        ),
        (
            check_sinusoidal_positional_encoding,
            lambda n, d: positional.SinusoidalPositionalEncoding(d, n).pe,
            CALLED,
        ),
        (
            check_sinusoidal_positional_encoding,
            closure(positional.sinusoidal_positional_encoding),
            HELD,
        ),
        (check_rope, lambda x: positional.apply_rope(x), CALLED),
        (check_rope, lambda x: positional.RotaryEmbedding(x.shape[-1])(x), CALLED),
        (check_rope, lambda x, _f=positional.apply_rope: _f(x), CALLED),
        (check_rope, lambda x, _f=positional._rotate: _f(x, x, x), HELD),
        (check_layer_norm, layer_norm_by_module, CALLED),
        (check_layer_norm_module, LayerNormSubclass, HELD),
        (check_layer_norm_module, LayerNormWrapper, CALLED),
        (check_encoder_block, EncoderSubclass, HELD),
        (check_encoder_block, EncoderWrapper, CALLED),
    ],
)
def test_one_call_answers_are_wrong(checker, student, fragment):
    assert_wrong(checker.verdict(student), fragment)


# --- PyTorch's own one-call answers ---------------------------------------------------------------------------
# Where one call of PyTorch's computes the whole exercise and the exercise asks the student to build it, that
# call is withheld like the companion's answer, and the verdict names it (Checker's one_call). The right answers
# that use smaller torch operations (F.cross_entropy without label_smoothing among them) are in each chapter's
# test file.

ONE_CALL = "which computes this whole exercise in one call"
PYTORCH_OWN = "hands the work to PyTorch's own"


class TorchLayerNormSubclass(nn.LayerNorm):
    pass


class TorchLayerNormFunctional(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


class TorchEmbeddingWrapper(nn.Module):
    def __init__(self, num_embeddings, embedding_dim):
        super().__init__()
        self.inner = nn.Embedding(num_embeddings, embedding_dim)
        self.weight = self.inner.weight

    def forward(self, ids):
        if ids.is_floating_point():
            raise TypeError("ids must be integers")
        if ((ids < 0) | (ids >= self.weight.shape[0])).any():
            raise ValueError("id out of range")
        return self.inner(ids)


class TorchEncoderWrapper(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.inner = nn.TransformerEncoderLayer(
            d_model, n_heads, d_ff, dropout=0.0, batch_first=True
        )

    def forward(self, x):
        return self.inner(x)


class TorchEncoderSubclass(nn.TransformerEncoderLayer):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__(d_model, n_heads, d_ff, dropout=0.0, batch_first=True)


def _imported_layer_norm():
    """``from torch.nn.functional import layer_norm`` in the notebook, called under its bare name."""
    from torch.nn.functional import layer_norm

    return lambda x, w, b, eps=1e-5: layer_norm(x, x.shape[-1:], w, b, eps)


@pytest.mark.parametrize(
    ("checker", "student", "fragments"),
    [
        (
            check_layer_norm,
            lambda x, w, b, eps=1e-5: F.layer_norm(x, x.shape[-1:], w, b, eps),
            ["`torch.nn.functional.layer_norm`", ONE_CALL, "mean, var, sqrt"],
        ),
        (
            check_layer_norm,
            lambda x, w, b, eps=1e-5: torch.layer_norm(x, x.shape[-1:], w, b, eps),
            ["`torch.layer_norm`", ONE_CALL],
        ),
        (check_layer_norm, _imported_layer_norm(), [PYTORCH_OWN, "layer_norm"]),
        (
            check_layer_norm,
            lambda x, w, b, eps=1e-5: (
                nn.LayerNorm(x.shape[-1], eps).to(x.dtype)(x) * w + b
            ),
            ["`torch.nn.LayerNorm`", ONE_CALL],
        ),
        (check_layer_norm_module, nn.LayerNorm, ["That is PyTorch's own"]),
        (check_layer_norm_module, TorchLayerNormSubclass, [PYTORCH_OWN, "LayerNorm"]),
        (
            check_layer_norm_module,
            TorchLayerNormFunctional,
            ["`torch.nn.functional.layer_norm`", ONE_CALL],
        ),
        (
            check_scaled_dot_product_attention,
            lambda q, k, v, mask=None: F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask
            ),
            ["`torch.nn.functional.scaled_dot_product_attention`", ONE_CALL],
        ),
        (
            check_weightless_self_attention,
            lambda x: F.scaled_dot_product_attention(x, x, x, scale=1.0),
            ["`torch.nn.functional.scaled_dot_product_attention`", ONE_CALL],
        ),
        (
            check_label_smoothed_cross_entropy,
            lambda logits, y, epsilon, ignore_index=-100: F.cross_entropy(
                logits, y, ignore_index=ignore_index, label_smoothing=epsilon
            ),
            ["`torch.nn.functional.cross_entropy` with label_smoothing", ONE_CALL],
        ),
        (
            check_label_smoothed_cross_entropy,
            lambda logits, y, epsilon, ignore_index=-100: nn.CrossEntropyLoss(
                ignore_index=ignore_index, label_smoothing=epsilon
            )(logits, y),
            ["with label_smoothing", ONE_CALL],
        ),
        (
            check_cosine,
            lambda u, v: F.cosine_similarity(u, v, dim=0),
            ["`torch.nn.functional.cosine_similarity`", ONE_CALL],
        ),
        (
            check_cosine,
            lambda u, v: torch.cosine_similarity(u, v, dim=0),
            ["cosine_similarity`", ONE_CALL],
        ),
        (
            check_cosine,
            lambda u, v: nn.CosineSimilarity(dim=0)(u, v),
            ["cosine_similarity`", ONE_CALL],
        ),
        (check_embedding, nn.Embedding, ["That is PyTorch's own `torch.nn.Embedding`"]),
        (check_embedding, TorchEmbeddingWrapper, ["`torch.nn.Embedding`", ONE_CALL]),
        (
            check_encoder_block,
            TorchEncoderWrapper,
            ["`torch.nn.TransformerEncoderLayer`", ONE_CALL],
        ),
        (
            check_encoder_block,
            TorchEncoderSubclass,
            [PYTORCH_OWN, "TransformerEncoderLayer"],
        ),
    ],
)
def test_pytorch_one_call_answers_are_wrong(checker, student, fragments):
    assert_wrong(checker.verdict(student), *fragments)


def test_pytorch_calls_are_put_back():
    """After a check, PyTorch's calls are PyTorch's again."""
    before = (F.layer_norm, torch.layer_norm, nn.LayerNorm, F.cross_entropy)

    def by_torch(x, w, b, eps=1e-5):
        return F.layer_norm(x, x.shape[-1:], w, b, eps)

    assert not check_layer_norm.verdict(by_torch).passed
    assert not check_label_smoothed_cross_entropy.verdict(
        lambda logits, y, epsilon, ignore_index=-100: F.cross_entropy(
            logits, y, ignore_index=ignore_index, label_smoothing=epsilon
        )
    ).passed
    assert (F.layer_norm, torch.layer_norm, nn.LayerNorm, F.cross_entropy) == before
