"""The Transformer (chapter 5): layer normalisation, feed-forward, residual sublayers, blocks and the encoder–decoder.

- :class:`LayerNorm`, :class:`FeedForward`: the two position-wise pieces;
- :class:`Residual`: the one place that decides where the norm goes, post-norm ``norm(x + f(x))`` (the
  original paper) or pre-norm ``x + f(norm(x))`` (GPT-2 and most later models, easier to train when deep);
- :class:`EncoderBlock` (BERT's block), :class:`CausalBlock` (GPT's: the same with causal self-attention) and
  :class:`DecoderBlock` (with cross-attention to the encoder's ``memory``);
- :class:`EncoderDecoder` (configured by a :class:`TransformerConfig`) with :func:`seq2seq_loss` and
  :func:`greedy_decode` (the book's one generation loop, :func:`companion.decoding.decode`, with the
  argmax for the sampler). The decoder-only model is :class:`companion.gpt.GPT`, a stack of :class:`CausalBlock` s.

Where the norm goes is every block's required ``norm_first`` argument (the companion's two block-built models
choose it in their configurations: :class:`TransformerConfig` and BERT's post-norm encoder).

Every block takes the attention function as ``attention=`` (see :class:`companion.attention.MultiHeadAttention`).
The blocks compute the same numbers as ``nn.LayerNorm``, ``nn.TransformerEncoderLayer`` and
``nn.TransformerDecoderLayer`` (``batch_first=True``) holding the same weights (:mod:`companion.interop`).
Masks follow :mod:`companion.masks`: boolean, ``True`` = may attend.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import AttentionFn, KVCache, MultiHeadAttention
from .attention import scaled_dot_product_attention as sdpa
from .decoding import Beam, Sampling, beam_search, decode
from .masks import Mask, padding_to_attention_mask
from .positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
)
from .validation import (
    describe,
    door,
    require_choice,
    require_context,
    require_floats,
    require_heads,
    require_ids,
    require_instance,
    require_int,
    require_number,
    require_tensor,
    skip_checks,
)

__all__ = [
    "LayerNorm",
    "FeedForward",
    "Residual",
    "BlockConfig",
    "EncoderBlock",
    "CausalBlock",
    "DecoderBlock",
    "TransformerConfig",
    "EncoderDecoder",
    "seq2seq_loss",
    "smoothed_targets",
    "label_smoothed_cross_entropy",
    "greedy_decode",
    "beam_decode",
]

# gelu_tanh: GPT-2
ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": partial(F.gelu, approximate="tanh"),
}


class LayerNorm(nn.Module):
    """y = (x - μ) / √(σ² + eps) · γ + β, biased μ, σ² over the last axis: (..., d)."""

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        require_int(d_model, "d_model", low=1)
        self.weight = nn.Parameter(torch.ones(d_model))  # γ
        self.bias = nn.Parameter(torch.zeros(d_model))  # β

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


@dataclass
class BlockConfig:
    """The options of a block and its layers, as nanoGPT's GPTConfig."""

    d_model: int  # the width of every position's vector
    n_heads: int  # h, the attention heads
    d_ff: int  # the feed-forward network's hidden width
    dropout: float = 0.0  # on the attention weights and each sub-layer's output
    norm_first: bool = field(kw_only=True)  # pre-norm; no default: the book uses both
    activation: str = "relu"  # the feed-forward network's: relu, gelu or gelu_tanh
    eps: float = 1e-5  # of every LayerNorm

    def __post_init__(self) -> None:
        require_heads(self.d_model, self.n_heads)
        require_int(self.d_ff, "d_ff", low=1)
        require_number(self.dropout, "dropout", low=0, high=1, high_open=True)
        require_instance(self.norm_first, bool, "norm_first")
        require_choice(self.activation, "activation", sorted(ACTIVATIONS))


class FeedForward(nn.Module):
    """FFN(x) = W₂ act(W₁ x + b₁) + b₂, position-wise: (…, d) → (…, d_ff) → (…, d)."""

    def __init__(self, c: BlockConfig) -> None:
        super().__init__()
        self.activation = ACTIVATIONS[c.activation]
        self.linear1 = nn.Linear(c.d_model, c.d_ff)
        self.linear2 = nn.Linear(c.d_ff, c.d_model)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


class Residual(nn.Module):
    """x + dropout(f(norm(x))) if norm_first (pre-norm) else norm(x + dropout(f(x)))."""

    def __init__(self, c: BlockConfig) -> None:
        super().__init__()
        self.norm = LayerNorm(c.d_model, c.eps)
        self.dropout = nn.Dropout(c.dropout)
        self.norm_first = c.norm_first

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderBlock(nn.Module):
    """x = x + attn(x); x = x + ff(x), each a :class:`Residual`: (B, n, d) → same."""

    def __init__(self, c: BlockConfig, attention: AttentionFn = sdpa) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(
            c.d_model, c.n_heads, dropout=c.dropout, attention=attention
        )
        self.ff = FeedForward(c)
        self.residuals = nn.ModuleList(Residual(c) for _ in range(2))

    def forward(self, x: Tensor, mask: Mask = None) -> Tensor:
        x = self.residuals[0](x, lambda h: self.self_attn(h, mask=mask))
        return self.residuals[1](x, self.ff)


class CausalBlock(EncoderBlock):
    """GPT's block: an :class:`EncoderBlock` whose self-attention is causal (position i sees positions j <= i)."""

    def __init__(
        self,
        c: BlockConfig,
        attention: AttentionFn = sdpa,
        rotary: RotaryEmbedding | None = None,
    ) -> None:
        """The arguments of :class:`EncoderBlock`, and ``rotary``: RoPE on every head's queries and keys."""
        super().__init__(c, attention)
        self.self_attn.causal, self.self_attn.rotary = True, rotary

    def forward(
        self, x: Tensor, mask: Mask = None, cache: KVCache | None = None
    ) -> Tensor:
        """``cache`` (a :class:`~companion.attention.KVCache`) holds the earlier positions' keys and values."""
        x = self.residuals[0](x, lambda h: self.self_attn(h, mask=mask, cache=cache))
        return self.residuals[1](x, self.ff)


class DecoderBlock(nn.Module):
    """x += attn(x, causal); x += attn(x, memory); x += ff(x), via :class:`Residual`."""

    def __init__(self, c: BlockConfig, attention: AttentionFn = sdpa) -> None:
        super().__init__()
        mha = partial(MultiHeadAttention, dropout=c.dropout, attention=attention)
        self.self_attn = mha(c.d_model, c.n_heads, causal=True)
        self.cross_attn = mha(c.d_model, c.n_heads)
        self.ff = FeedForward(c)
        self.residuals = nn.ModuleList(Residual(c) for _ in range(3))

    def forward(
        self, x: Tensor, memory: Tensor, mask: Mask = None, memory_mask: Mask = None
    ) -> Tensor:
        x = self.residuals[0](x, lambda h: self.self_attn(h, mask=mask))
        x = self.residuals[1](x, lambda h: self.cross_attn(h, memory, mask=memory_mask))
        return self.residuals[2](x, self.ff)


# ----------------------------------------------------------------------------------------------------
# The encoder–decoder model


@dataclass
class TransformerConfig:
    """The hyperparameters of an :class:`EncoderDecoder`.

    The paper's base model is ``d_model=512, n_heads=8, d_ff=2048, n_encoder_layers=n_decoder_layers=6,
    dropout=0.1, norm_first=False``; the defaults here are a small model that trains on a CPU.
    ``positional`` is ``"sinusoidal"`` (the paper) or ``"learned"``; ``pad_id`` is the padding id of both
    vocabularies (masked out of every attention), ``None`` if there is no padding; ``bos_id`` is the target
    vocabulary's beginning-of-sequence id, the decoder's first input when it generates.
    """

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 128
    n_heads: int = 4
    n_encoder_layers: int = 2
    n_decoder_layers: int = 2
    d_ff: int = 512
    dropout: float = 0.1
    context_length: int = 256  # T, the most positions the encoder or the decoder reads
    norm_first: bool = True
    positional: str = "sinusoidal"
    activation: str = "relu"
    pad_id: int | None = 0
    bos_id: int = 1
    eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "d_ff", "context_length"):
            require_int(getattr(self, name), name, low=1)
        for name in ("n_encoder_layers", "n_decoder_layers"):
            require_int(getattr(self, name), name, low=0)
        require_heads(self.d_model, self.n_heads)
        require_number(self.dropout, "dropout", low=0, high=1, high_open=True)
        require_choice(self.positional, "positional", ("sinusoidal", "learned"))
        require_choice(self.activation, "activation", sorted(ACTIVATIONS))
        if self.pad_id is not None:
            require_int(
                self.pad_id,
                "pad_id",
                low=0,
                high=(min(self.src_vocab_size, self.tgt_vocab_size)) - 1,
            )
        last = self.tgt_vocab_size - 1
        require_int(self.bos_id, "bos_id", low=0, high=last, why="a token id")

    def block(self) -> BlockConfig:
        """The configuration of each encoder and decoder block."""
        c = self
        options = dict(activation=c.activation, eps=c.eps, norm_first=c.norm_first)
        return BlockConfig(c.d_model, c.n_heads, c.d_ff, c.dropout, **options)


def _check_source(self: EncoderDecoder, src: object) -> None:
    require_ids(src, "src", self.config.src_vocab_size)
    require_context(src, "src", self.config.context_length)


def _check_target(self: EncoderDecoder, tgt: object) -> None:
    require_ids(tgt, "tgt", self.config.tgt_vocab_size)
    require_context(tgt, "tgt", self.config.context_length)


class EncoderDecoder(nn.Module):
    """memory = encoder(src_embed(src)·√d_model + positions), logits = lm_head(decoder(tgt_embed(tgt)·√d_model
    + positions, memory)): src (B, n_src), tgt (B, n_tgt) → logits (B, n_tgt, tgt_vocab_size)."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise TypeError(
                f"config must be a TransformerConfig, got {describe(config)}"
            )
        self.config = c = config
        self.src_embed = nn.Embedding(c.src_vocab_size, c.d_model)
        self.tgt_embed = nn.Embedding(c.tgt_vocab_size, c.d_model)
        positions = (
            SinusoidalPositionalEncoding
            if c.positional == "sinusoidal"
            else LearnedPositionalEmbedding
        )
        self.src_pos = positions(c.d_model, c.context_length)
        self.tgt_pos = positions(c.d_model, c.context_length)
        self.dropout = nn.Dropout(c.dropout)
        block = c.block()
        self.encoder = nn.ModuleList(
            EncoderBlock(block) for _ in range(c.n_encoder_layers)
        )
        self.decoder = nn.ModuleList(
            DecoderBlock(block) for _ in range(c.n_decoder_layers)
        )
        # with pre-norm a last LayerNorm closes the encoder and the decoder (as in nn.Transformer)
        self.encoder_norm = (
            LayerNorm(c.d_model, c.eps) if c.norm_first else nn.Identity()
        )
        self.decoder_norm = (
            LayerNorm(c.d_model, c.eps) if c.norm_first else nn.Identity()
        )
        self.lm_head = nn.Linear(c.d_model, c.tgt_vocab_size)
        # Xavier-uniform matrices, as in nn.Transformer
        for name, p in self.named_parameters():
            if p.dim() > 1 and "pos" not in name:
                nn.init.xavier_uniform_(p)

    def padding_mask(self, ids: torch.Tensor) -> torch.Tensor | None:
        """(B, 1, 1, n): True at the keys that are not ``pad_id``; ``None`` if none are."""
        if self.config.pad_id is None or bool((ids != self.config.pad_id).all()):
            return None
        return padding_to_attention_mask(ids != self.config.pad_id, heads=True)

    @door(_check_source)
    def encode(self, src: torch.Tensor) -> torch.Tensor:
        """Source ids (B, n_src) → memory (B, n_src, d_model)."""
        x = self.dropout(
            self.src_pos(self.src_embed(src) * math.sqrt(self.config.d_model))
        )
        mask = self.padding_mask(src)
        for block in self.encoder:
            x = block(x, mask)
        return self.encoder_norm(x)

    @door(_check_target)
    def decode(self, tgt: Tensor, memory: Tensor, src: Tensor | None = None) -> Tensor:
        """tgt (B, n_tgt), memory (B, n_src, d) → logits (B, n_tgt, V); t predicts t + 1."""
        x = self.dropout(
            self.tgt_pos(self.tgt_embed(tgt) * math.sqrt(self.config.d_model))
        )
        mask = self.padding_mask(tgt)
        memory_mask = None if src is None else self.padding_mask(src)
        for block in self.decoder:
            x = block(x, memory, mask, memory_mask)
        return self.lm_head(self.decoder_norm(x))

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        return self.decode(tgt, self.encode(src), src)

    def num_parameters(self) -> int:
        """The number of trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


def _check_seq2seq_batch(batch: object) -> tuple[Tensor, Tensor]:
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise TypeError(
            f"batch must be a pair (src, tgt) of id tensors, got {describe(batch)}"
        )
    src, tgt = batch
    # BOS and one token at least
    return src, require_ids(tgt, "tgt", min_length=2)


def seq2seq_loss(
    model: EncoderDecoder, batch: tuple[Tensor, Tensor], *, label_smoothing: float = 0.0
) -> Tensor:
    """Mean cross-entropy of tgt[:, 1:] given src, tgt[:, :-1]: batch = (src, tgt)."""
    src, tgt = _check_seq2seq_batch(batch)  # tgt = [BOS, y_1 … y_T, EOS, PAD …]
    logits = model(src, tgt[:, :-1]).flatten(0, 1)  # (B (n_tgt-1), V): teacher forcing
    pad = -100 if model.config.pad_id is None else model.config.pad_id  # excluded
    y = tgt[:, 1:].flatten()  # (B (n_tgt-1),): the next tokens
    return F.cross_entropy(logits, y, ignore_index=pad, label_smoothing=label_smoothing)


def _check_smoothing(logits: object, y: object, epsilon: object) -> None:
    logits = require_floats(logits, "logits", "(N, V)", ndim=2)
    y = require_tensor(y, "y", "int")
    if y.shape != logits.shape[:1]:
        raise ValueError(
            f"y must hold one class per row of logits, shape ({logits.shape[0]},), got {describe(y)}"
        )
    require_number(epsilon, "epsilon", low=0, high=1, high_open=True)


def _check_smoothed_targets(y: object, n_classes: object, epsilon: object) -> None:
    require_number(epsilon, "epsilon", low=0, high=1, high_open=True)
    require_int(n_classes, "n_classes", low=1)
    require_tensor(y, "y", "int")


@door(_check_smoothed_targets)
def smoothed_targets(y: Tensor, n_classes: int, epsilon: float) -> Tensor:
    """q = (1 - ε) one_hot(y) + ε / V: (N,) → (N, V), every row summing to 1."""
    one_hot = F.one_hot(y, n_classes).double()  # (N, V), in float64: q exactly
    return (1 - epsilon) * one_hot + epsilon / n_classes


def label_smoothed_cross_entropy(
    logits: Tensor, y: Tensor, epsilon: float, *, ignore_index: int = -100
) -> Tensor:
    """mean over y != ignore_index of -Σ_v q_v log softmax(logits)_v: (N, V), (N,)."""
    _check_smoothing(logits, y, epsilon)
    kept = y != ignore_index  # (N,): padding does not count
    logits, y = logits[kept], y[kept]
    q = smoothed_targets(y, logits.shape[-1], epsilon).to(logits.dtype)  # (N', V)
    return -(q * F.log_softmax(logits, dim=-1)).sum(dim=-1).mean()


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Put ``model`` in eval mode for the block, then back in the mode it was in."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def _check_decoding(
    model: object, src: object, s: object, cls: type, name: str
) -> None:
    require_instance(model, EncoderDecoder, "model")
    _check_source(model, src)
    require_instance(s, cls, name)
    if 1 + s.max_new_tokens > model.config.context_length:
        raise ValueError(
            f"1 + max_new_tokens = {1 + s.max_new_tokens} exceeds the model's context length T = "
            f"{model.config.context_length}"
        )
    if s.eos_id is not None:
        last = model.config.tgt_vocab_size - 1
        require_int(s.eos_id, "eos_id", low=0, high=last, why="a token id")


def _check_greedy_decode(model: object, src: object, s: object) -> None:
    _check_decoding(model, src, s, Sampling, "s")
    if s.temperature != 0:
        raise ValueError(
            f"greedy_decode takes the argmax: s.temperature must be 0, got {s.temperature}"
        )


def greedy_decode(model: EncoderDecoder, src: Tensor, s: Sampling) -> Tensor:
    """y_0 = BOS, y_{t+1} = argmax logits(src, y_0 … y_t)[t]: (B, n_src) → (B, 1+T)."""
    _check_greedy_decode(model, src, s)
    c = model.config
    bos = torch.full((src.shape[0], 1), c.bos_id, dtype=torch.long, device=src.device)
    filler = c.pad_id if c.pad_id is not None else s.eos_id  # what follows EOS
    with torch.no_grad(), eval_mode(model), skip_checks():  # checked above, once
        memory = model.encode(src)  # once
        logits = lambda y: model.decode(y, memory, src)[:, -1]  # (B, 1 + t) → (B, V)
        return decode(logits, bos, replace(s, filler=filler))  # temperature 0: argmax


def _check_beam_decode(model: object, src: object, b: object) -> None:
    _check_decoding(model, src, b, Beam, "b")
    if src.shape[0] != 1:
        raise ValueError(
            f"beam_decode translates one source: src must have shape (1, n_src), got {describe(src)}"
        )


def beam_decode(model: EncoderDecoder, src: Tensor, b: Beam) -> tuple[Tensor, float]:
    """Beam search of one source: (1, n_src) → ((1, 1 + m), log p); k and α from b."""
    _check_beam_decode(model, src, b)
    bos = torch.full((1, 1), model.config.bos_id, dtype=torch.long, device=src.device)
    with torch.no_grad(), eval_mode(model), skip_checks():  # checked above, once
        memory = model.encode(src)  # (1, n_src, d), once

        def logits(y: Tensor) -> Tensor:  # (k, 1 + t) → (k, V): prefixes share memory
            k = y.shape[0]
            return model.decode(y, memory.expand(k, -1, -1), src.expand(k, -1))[:, -1]

        return beam_search(logits, bos, b)
