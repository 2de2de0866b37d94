"""PyTorch interop: copy the weights of PyTorch's layers into the companion's, and convert masks.

The companion's classes compute the same numbers as PyTorch's when they hold the same weights; the tests and
chapters 4-5 prove it with these helpers:

- :func:`mha_from_torch`: :class:`torch.nn.MultiheadAttention` → :class:`companion.attention.MultiHeadAttention`;
- :func:`layer_norm_from_torch`: :class:`torch.nn.LayerNorm` → :class:`companion.transformer.LayerNorm`;
- :func:`encoder_block_from_torch`, :func:`decoder_block_from_torch`: ``nn.TransformerEncoderLayer`` /
  ``nn.TransformerDecoderLayer`` (``batch_first=True``) → :class:`~companion.transformer.EncoderBlock` /
  :class:`~companion.transformer.DecoderBlock`;
- :func:`to_torch_mha_mask`, :func:`from_torch_mha_mask`, :func:`to_additive_mask`: masks.

**Masks.** The companion's boolean masks mean ``True`` = may attend (the convention of
``torch.nn.functional.scaled_dot_product_attention``). :class:`torch.nn.MultiheadAttention` and
:class:`torch.nn.Transformer` read a boolean ``True`` in ``attn_mask`` and ``key_padding_mask`` the other way
round, "masked out"; their float masks hold ``0`` (allowed) and ``-inf`` (forbidden).

Hugging Face's models: :mod:`companion.interop.hf_gpt` (GPT-2) and :mod:`companion.interop.hf_bert` (BERT).
"""

from .torch_layers import (
    decoder_block_from_torch,
    encoder_block_from_torch,
    from_torch_mha_mask,
    layer_norm_from_torch,
    mha_from_torch,
    to_additive_mask,
    to_torch_mha_mask,
)

__all__ = [
    "mha_from_torch",
    "layer_norm_from_torch",
    "encoder_block_from_torch",
    "decoder_block_from_torch",
    "to_torch_mha_mask",
    "from_torch_mha_mask",
    "to_additive_mask",
]
