"""In-context learning in miniature (chapter 6): an induction head forming in a two-layer attention-only model.

An *induction head* (Olsson et al., 2022) completes a pattern it has seen earlier in its context: at a token
``A`` it looks back for the previous ``A``, takes the token that followed it, ``B``, and predicts ``B``. One
attention layer cannot do it, since the key must carry *the token before it*; two can: a head of the first
layer copies each position's previous token into that position (a *previous-token head*), and a head of the
second layer matches the current token against those copies (the induction head).

- :func:`repeated_segments`: sequences that are a random segment repeated, with a period that varies from
  sequence to sequence (so that counting positions cannot replace looking at the tokens);
- :class:`AttentionOnlyTransformer`: token + learned position embeddings, ``n_layers`` residual causal
  multi-head attention layers, no feed-forward layers and no layer norms, and an output layer;
- :func:`first_and_repeat_loss`: the next-token loss on the segment's first occurrence and on its repeats.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadAttention, scaled_dot_product_attention
from .positional import LearnedPositionalEmbedding
from .validation import (
    describe,
    require_context,
    require_heads,
    require_ids,
    require_instance,
    require_int,
)

__all__ = ["repeated_segments", "AttentionOnlyTransformer", "first_and_repeat_loss"]


def repeated_segments(
    batch_size: int,
    length: int,
    vocab_size: int,
    periods: tuple[int, int],
    *,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ids[b, t] = s_b[t mod p_b]: ``batch_size`` sequences of ``length`` tokens → ids (B, length), p (B,).

    Each sequence repeats a segment s_b of p_b *distinct* random tokens (drawn without replacement from
    ``vocab_size``), with the period p_b drawn uniformly from ``periods = (lowest, highest)``, both included.
    """
    for name, value in (
        ("batch_size", batch_size),
        ("length", length),
        ("vocab_size", vocab_size),
    ):
        require_int(value, name, low=1)
    why = (
        "periods = (lowest, highest), 1 <= lowest <= highest <= min(length, vocab_size)"
    )
    require_int(
        len(require_instance(periods, tuple, "periods")),
        "len(periods)",
        low=2,
        high=2,
        why=why,
    )
    lowest, highest = periods
    require_int(
        highest,
        "highest",
        low=require_int(lowest, "lowest", low=1, why=why),
        high=min(length, vocab_size),
        why=why,
    )
    p = torch.randint(periods[0], periods[1] + 1, (batch_size,), generator=generator)
    # a random order of V
    segments = torch.rand(batch_size, vocab_size, generator=generator).argsort(dim=-1)
    t = torch.arange(length)
    return segments.gather(1, t % p[:, None]), p


def _check_ids(model: AttentionOnlyTransformer, ids: object) -> None:
    require_ids(ids, "ids", model.vocab_size)
    require_context(ids, "ids", model.context_length)


class AttentionOnlyTransformer(nn.Module):
    """logits = (x + Σ_layers attention) W_U + b, x = E[ids] + P[positions]: ids (B, n) → logits (B, n, V).

    Every layer adds causal multi-head attention of the residual stream to it, ``x ← x + MHA(x)``; there are no
    feed-forward layers and no layer norms, so that all that moves information between positions, and all
    there is to look at, is attention. ``attention`` is every layer's attention function (chapter 4's seam).
    """

    def __init__(
        self,
        vocab_size: int,
        context_length: int,
        d_model: int = 32,
        n_heads: int = 1,
        n_layers: int = 2,
        *,
        attention: Callable[..., torch.Tensor] = scaled_dot_product_attention,
    ) -> None:
        super().__init__()
        for name, value in (
            ("vocab_size", vocab_size),
            ("context_length", context_length),
            ("n_layers", n_layers),
        ):
            require_int(value, name, low=1)
        require_heads(d_model, n_heads)
        self.vocab_size, self.context_length = vocab_size, context_length
        self.embed = nn.Embedding(vocab_size, d_model)  # E
        self.pos = LearnedPositionalEmbedding(d_model, context_length, std=0.1)  # P
        self.layers = nn.ModuleList(
            MultiHeadAttention(d_model, n_heads, causal=True, attention=attention)
            for _ in range(n_layers)
        )  # fmt: skip
        self.unembed = nn.Linear(d_model, vocab_size)  # W_U, b

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        _check_ids(self, ids)
        x = self.pos(self.embed(ids))  # (B, n, d)
        for attention in self.layers:
            x = x + attention(x)  # causal: each position reads itself and those before
        return self.unembed(x)  # (B, n, V)


def first_and_repeat_loss(
    model: nn.Module, ids: torch.Tensor, periods: torch.Tensor
) -> tuple[float, float]:
    """The mean next-token loss (nats) on targets t ≤ p (first occurrence) and t > p (repeats): ids (B, n), p (B,).

    Target t is the token ``ids[:, t]`` predicted at position t - 1. The tokens up to t = p - 1 are new; the
    token at t = p starts the repeat but cannot be foreseen from the context yet (the period is not known before
    the segment has been read once), so it counts with the first occurrence; every target after it has an
    earlier occurrence of its previous token, followed by it.
    """
    if not isinstance(ids, torch.Tensor) or ids.ndim != 2 or ids.shape[1] < 2:
        raise ValueError(
            f"ids must be a (batch, n) tensor of token ids with n >= 2, got {describe(ids)}"
        )
    if not isinstance(periods, torch.Tensor) or periods.shape != ids.shape[:1]:
        raise ValueError(
            f"periods must be a tensor of shape ({ids.shape[0]},), got {describe(periods)}"
        )
    with torch.no_grad():
        logits = model(ids[:, :-1])  # (B, n - 1, V)
        # (B, n - 1)
        losses = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    targets = torch.arange(1, ids.shape[1])  # the position of each target
    repeat = targets[None, :] > periods[:, None]
    return float(losses[~repeat].mean()), float(losses[repeat].mean())
