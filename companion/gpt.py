"""GPT (chapter 6): the book's decoder-only language model, built from chapter 5's blocks, and how to sample from it.

- :class:`GPTConfig`: the hyperparameters (as in nanoGPT), with GPT-2's four sizes and GPT-3's largest; the
  defaults are GPT-2's choices (learned positions, tied output layer, tanh-GELU, GPT-2's initialisation), and
  chapters 8 and 9 train the same model with rotary positions, an untied output layer, ReLU and PyTorch's
  initialisation;
- :func:`parameter_count`: the number of parameters from the configuration alone, by formula;
- :class:`GPT`: token embedding + positions → pre-norm :class:`~companion.transformer.CausalBlock` s →
  final :class:`~companion.transformer.LayerNorm` → output layer, *tied* to the token embedding or its own;
- :func:`next_token_loss`: the pretraining objective, cross-entropy of position t predicting token t + 1;
- :func:`generate`: sampling from the model, with or without the key/value cache, by the book's one loop and
  one sampler, :func:`companion.decoding.decode` and :func:`companion.decoding.sample_next`, with the options of
  a :class:`~companion.decoding.Sampling` (how many tokens, temperature, top-k and top-p, EOS), reproducible with a
  :class:`torch.Generator`; also importable from here, as are :class:`~companion.decoding.Sampling`,
  :func:`~companion.decoding.top_k_logits` and :func:`~companion.decoding.top_p_logits`).

With the same weights (:func:`companion.interop.hf_gpt.gpt_from_hf`) :class:`GPT` computes the logits of Hugging
Face's ``GPT2LMHeadModel``; GPT-2 ties the output layer to the embedding and uses the tanh approximation of GELU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import AttentionFn, KVCache
from .attention import scaled_dot_product_attention as sdpa
from .decoding import Sampling as Sampling
from .decoding import decode

# re-exported: documented in companion.decoding
from .decoding import sample_next as sample_next
from .decoding import top_k_logits as top_k_logits
from .decoding import top_p_logits as top_p_logits
from .positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
)
from .transformer import ACTIVATIONS, BlockConfig, CausalBlock, LayerNorm, eval_mode
from .validation import (
    describe,
    door,
    require_choice,
    require_context,
    require_heads,
    require_ids,
    require_instance,
    require_int,
    require_number,
    require_positive_ints,
    skip_checks,
)

__all__ = [
    "GPTConfig",
    "GPT2_SIZES",
    "parameter_count",
    "GPT",
    "next_token_loss",
    "generate",
]

#: The four published sizes of GPT-2, name → (n_layers, n_heads, d_model), all with V = 50,257 and T = 1,024.
GPT2_SIZES = {
    "gpt2": (12, 12, 768),
    "gpt2-medium": (24, 16, 1024),
    "gpt2-large": (36, 20, 1280),
    "gpt2-xl": (48, 25, 1600),
}

#: The positions added to the token embeddings, by :attr:`GPTConfig.positional`; the third choice, ``"rope"``,
#: adds none: every block rotates its queries and keys (:class:`~companion.positional.RotaryEmbedding`).
POSITIONAL = {
    "learned": LearnedPositionalEmbedding,
    "sinusoidal": SinusoidalPositionalEncoding,
}


def _check_gpt_config(c: GPTConfig) -> int:
    """Check the fields of a :class:`GPTConfig`; return ``d_ff`` (4 d when it is None)."""
    require_positive_ints(
        vocab_size=c.vocab_size, context_length=c.context_length, n_layers=c.n_layers
    )
    require_heads(c.d_model, c.n_heads)
    require_number(c.dropout, "dropout", low=0, high=1, high_open=True)
    require_number(c.eps, "eps", low=0, low_open=True)
    require_choice(c.positional, "positional", [*POSITIONAL, "rope"])
    require_choice(c.activation, "activation", sorted(ACTIVATIONS))
    require_choice(c.init, "init", ["gpt2", "pytorch"])
    require_instance(c.tie_weights, bool, "tie_weights")
    return 4 * c.d_model if c.d_ff is None else require_int(c.d_ff, "d_ff", low=1)


@dataclass
class GPTConfig:
    """The hyperparameters of a :class:`GPT`; the defaults are GPT-2 small's."""

    vocab_size: int = 50257  # V
    context_length: int = 1024  # T, the most positions the model reads
    n_layers: int = 12  # L
    n_heads: int = 12  # h
    d_model: int = 768  # d
    d_ff: int | None = None  # the feed-forward width; None: 4d, as in GPT-2 and GPT-3
    dropout: float = 0.0  # on the embeddings, attention weights, residual branches
    eps: float = 1e-5  # of every layer norm
    positional: str = "learned"  # P: "learned", "sinusoidal" or "rope" (rotary)
    activation: str = "gelu_tanh"  # "gelu_tanh" (GPT-2), "gelu" or "relu"
    tie_weights: bool = True  # output layer Eᵀ; False: its own (V, d) matrix and bias
    init: str = "gpt2"  # "gpt2": N(0, 0.02²), residual outputs less; or "pytorch"

    def __post_init__(self) -> None:
        self.d_ff = _check_gpt_config(self)

    def block(self) -> BlockConfig:
        """The configuration of each block: pre-norm, as in GPT-2."""
        c = self
        options = dict(activation=c.activation, eps=c.eps, norm_first=True)
        return BlockConfig(c.d_model, c.n_heads, c.d_ff, c.dropout, **options)

    @classmethod
    def gpt2(cls, size: str = "gpt2", **overrides: object) -> GPTConfig:
        """GPT-2 of a size in GPT2_SIZES ("gpt2": small); overrides replace fields."""
        require_choice(size, "size", list(GPT2_SIZES))
        L, h, d = GPT2_SIZES[size]
        return cls(**(dict(n_layers=L, n_heads=h, d_model=d) | overrides))

    @classmethod
    def gpt3(cls) -> GPTConfig:
        """GPT-3 175B (Brown et al., 2020): L = h = 96, d = 12,288, T = 2,048."""
        return cls(context_length=2048, n_layers=96, n_heads=96, d_model=12288)


def parameter_count(config: GPTConfig) -> int:
    """P = V·d + T·d + L·(4d² + 2·d·d_ff + d_ff + 9d) + 2d: embeddings, L blocks, the final norm (tied output).

    A block holds W_Q, W_K, W_V, W_O with their biases (4d² + 4d), the feed-forward layer (2·d·d_ff + d_ff + d)
    and two layer norms (4d). With d_ff = 4d a block has 12d² + 13d parameters. Sinusoidal and rotary positions
    have no parameters (no T·d); an untied output layer adds its matrix and bias, V·d + V.
    """
    if not isinstance(config, GPTConfig):
        raise TypeError(f"config must be a GPTConfig, got {describe(config)}")
    V, T, L, d, d_ff = (
        config.vocab_size,
        config.context_length,
        config.n_layers,
        config.d_model,
        config.d_ff,
    )
    assert d_ff is not None  # set by __post_init__
    positions = T * d if config.positional == "learned" else 0
    output = 0 if config.tie_weights else V * d + V
    return (
        V * d
        + positions
        + L * (4 * d * d + 2 * d * d_ff + d_ff + 9 * d)
        + 2 * d
        + output
    )


def _check_forward(self: GPT, ids: object, caches: list | None) -> None:
    c, offset = self.config, 0 if caches is None else len(caches[0])
    require_ids(ids, "ids", c.vocab_size, min_length=1)
    require_context(ids, "ids", c.context_length, offset=offset)


def _check_gpt(config: object) -> None:
    require_instance(config, GPTConfig, "config")


class GPT(nn.Module):
    """logits = lm_head(norm(blocks(E[ids] + P))), Eᵀ if tied: (B, n) → (B, n, V)."""

    @door(_check_gpt)
    def __init__(self, config: GPTConfig, *, attention: AttentionFn = sdpa) -> None:
        super().__init__()
        self.config = c = config
        d, h, T = c.d_model, c.n_heads, c.context_length
        self.embed = nn.Embedding(c.vocab_size, d)  # E
        rotary = c.positional == "rope"  # no P: the blocks rotate q and k
        self.pos = None if rotary else POSITIONAL[c.positional](d, T)  # P
        rope = RotaryEmbedding(d // h, T) if rotary else None
        self.dropout = nn.Dropout(c.dropout)
        block = partial(CausalBlock, c.block(), attention, rope)
        self.blocks = nn.ModuleList(block() for _ in range(c.n_layers))  # pre-norm
        self.norm = LayerNorm(c.d_model, c.eps)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=not c.tie_weights)
        if c.tie_weights:
            self.lm_head.weight = self.embed.weight  # tied: one (V, d) table in and out
        if c.init == "gpt2":
            self._init_gpt2()

    @door(_check_forward)  # model(ids) checks ids; generate's loop does not
    def forward(self, ids: Tensor, caches: list[KVCache] | None = None) -> Tensor:
        offset = 0 if caches is None else len(caches[0])  # the position of ids[:, 0]
        x = self.embed(ids)  # (B, n, d)
        if self.pos is not None:  # with RoPE the blocks rotate q and k instead
            x = self.pos(x, offset)
        x = self.dropout(x)
        caches = caches or [None] * len(self.blocks)  # one KVCache per block, or none
        for block, cache in zip(self.blocks, caches, strict=True):
            x = block(x, cache=cache)
        return self.lm_head(self.norm(x))  # (B, n, V)

    def new_caches(self) -> list[KVCache]:
        """One empty key/value cache per block."""
        return [KVCache() for _ in self.blocks]

    def num_parameters(self) -> int:
        """The number of distinct parameters (a tied table counts once), as :func:`parameter_count` predicts."""
        return sum(p.numel() for p in self.parameters())

    def _init_gpt2(self) -> None:
        """GPT-2's initialisation: weights N(0, 0.02²), biases 0, and the two layers of each block that write
        into the residual stream (W_O and the feed-forward's W₂) N(0, 0.02²/2L): the stream adds up 2L of them."""
        self.apply(self._init_weights)
        for b in self.blocks:
            for layer in (b.self_attn.out_proj, b.ff.linear2):
                nn.init.normal_(
                    layer.weight, std=0.02 / math.sqrt(2 * self.config.n_layers)
                )

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)


def next_token_loss(model: nn.Module, ids: Tensor) -> Tensor:
    """L = -1/(B(n-1)) Σ_b Σ_{t<n} log p(x_{t+1} | x_1 … x_t), nats: ids (B, n ≥ 2)."""
    require_ids(ids, "ids", min_length=2)
    logits = model(ids[:, :-1])  # (B, n-1, V): position t is scored on ids[:, t + 1]
    return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())


def _check_generate(model: object, ids: object, s: object) -> None:
    require_instance(model, GPT, "model")
    vocab_size, context_length = model.config.vocab_size, model.config.context_length
    require_ids(ids, "ids", vocab_size, 2, "(batch, t)", min_length=1)
    require_instance(s, Sampling, "s").check_vocabulary(vocab_size)
    max_new_tokens = s.max_new_tokens
    if ids.shape[1] + max_new_tokens > context_length:
        raise ValueError(
            f"prompt length {ids.shape[1]} + max_new_tokens {max_new_tokens} = {ids.shape[1] + max_new_tokens} "
            f"exceeds the context length T = {context_length}"
        )


@torch.no_grad()
def generate(
    model: GPT,
    ids: Tensor,
    s: Sampling,
    *,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> Tensor:
    """x_{t+1} ~ sample_next(logits(x_1 … x_t)[t]): prompt ids (B, n) → (B, n + s.max_new_tokens).

    The loop is :func:`companion.decoding.decode`, the one the encoder–decoder's
    :func:`~companion.transformer.greedy_decode` runs, with its one sampler,
    :func:`~companion.decoding.sample_next`, and the options of ``s``, a :class:`~companion.decoding.Sampling`
    (``Sampling(40, temperature=0)``: 40 greedy tokens; ``top_k``, ``top_p``, ``eos_id``), drawn with
    ``generator``. With ``use_cache`` the prompt is read once and each new token attends to the cached keys
    and values; without, every step reruns the whole sequence. Both give the same tokens. With ``s.eos_id``, a
    sequence that has written it is continued with ``eos_id``, and generation stops early (fewer than
    ``max_new_tokens`` new columns) once every sequence has. The model is in eval mode during the call;
    n + max_new_tokens must not exceed the context length T.
    """
    _check_generate(model, ids, s)  # once: the loop below does not re-check
    caches = model.new_caches() if use_cache else None

    def next_logits(ids: Tensor) -> Tensor:  # (B, t) → (B, V)
        if caches is None:
            return model(ids)[:, -1]  # rerun the whole sequence
        new = ids[:, len(caches[0]) :]  # not cached yet: the prompt, then one token
        return model(new, caches)[:, -1]

    with eval_mode(model), skip_checks():  # checked above, not again at each step
        return decode(next_logits, ids, s, generator)
