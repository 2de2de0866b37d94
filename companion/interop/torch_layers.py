"""PyTorch's layers and masks ↔ the companion's (re-exported by :mod:`companion.interop`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import MultiHeadAttention
from ..transformer import BlockConfig, DecoderBlock, EncoderBlock, LayerNorm
from ..validation import (
    describe,
    require_tensor,
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


def _copy(ours: nn.Parameter | None, theirs: torch.Tensor | None) -> None:
    if ours is not None and theirs is not None:
        with torch.no_grad():
            ours.copy_(theirs)


def mha_from_torch(mha: nn.MultiheadAttention, **options: object) -> MultiHeadAttention:
    """A :class:`~companion.attention.MultiHeadAttention` with copies of the weights of an ``nn.MultiheadAttention``.

    PyTorch stacks ``W_Q, W_K, W_V`` in one ``in_proj_weight`` ``(3·d_model, d_model)``; they are copied into
    ``q_proj``, ``k_proj`` and ``v_proj``. Only key and value of width ``d_model`` and no
    ``add_bias_kv``/``add_zero_attn`` are supported. ``options`` (e.g. ``attention=``, ``rotary=``) go to
    :class:`~companion.attention.MultiHeadAttention`.
    """
    if not isinstance(mha, nn.MultiheadAttention):
        raise TypeError(
            f"mha must be a torch.nn.MultiheadAttention, got {describe(mha)}"
        )
    if mha.in_proj_weight is None or mha.bias_k is not None or mha.add_zero_attn:
        raise ValueError(
            "only nn.MultiheadAttention with kdim = vdim = embed_dim and no bias_kv/zero_attn is supported"
        )
    bias = mha.in_proj_bias is not None
    ours = MultiHeadAttention(
        mha.embed_dim, mha.num_heads, dropout=mha.dropout, bias=bias, **options
    )
    ours.to(device=mha.in_proj_weight.device, dtype=mha.in_proj_weight.dtype)
    projections = (ours.q_proj, ours.k_proj, ours.v_proj)
    for layer, w in zip(projections, mha.in_proj_weight.chunk(3), strict=True):
        _copy(layer.weight, w)
    _copy(ours.out_proj.weight, mha.out_proj.weight)
    if bias:
        for layer, b in zip(projections, mha.in_proj_bias.chunk(3), strict=True):
            _copy(layer.bias, b)
        _copy(ours.out_proj.bias, mha.out_proj.bias)
    return ours


def layer_norm_from_torch(norm: nn.LayerNorm) -> LayerNorm:
    """A :class:`~companion.transformer.LayerNorm` with the ``eps``, ``weight`` and ``bias`` of an ``nn.LayerNorm``."""
    if (
        not isinstance(norm, nn.LayerNorm)
        or len(norm.normalized_shape) != 1
        or norm.weight is None
    ):
        raise TypeError(
            f"norm must be an nn.LayerNorm over one dimension with weights, got {describe(norm)}"
        )
    ours = LayerNorm(norm.normalized_shape[0], eps=norm.eps).to(norm.weight)
    _copy(ours.weight, norm.weight)
    _copy(ours.bias, norm.bias)
    return ours


def _activation_name(layer: nn.Module) -> str:
    act = layer.activation
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or isinstance(act, nn.GELU):
        return "gelu"
    raise ValueError(
        f"unsupported activation {act!r}: only relu and gelu are supported"
    )


def _block(cls: type, layer: nn.Module, attentions: dict[str, str]) -> nn.Module:
    """A companion block with the configuration and weights of a PyTorch Transformer layer; ``attentions`` maps
    the block's attention layers to the PyTorch layer's."""
    config = BlockConfig(
        layer.self_attn.embed_dim,
        layer.self_attn.num_heads,
        layer.linear1.out_features,
        layer.dropout.p,
        norm_first=layer.norm_first,
        activation=_activation_name(layer),
        eps=layer.norm1.eps,
    )
    ours = cls(config).to(layer.linear1.weight)
    for ours_name, theirs_name in attentions.items():
        causal = getattr(
            ours, ours_name
        ).causal  # the block's: a decoder's self-attention
        setattr(
            ours, ours_name, mha_from_torch(getattr(layer, theirs_name), causal=causal)
        )
    for ours_linear, theirs_linear in (
        (ours.ff.linear1, layer.linear1),
        (ours.ff.linear2, layer.linear2),
    ):
        _copy(ours_linear.weight, theirs_linear.weight)
        _copy(ours_linear.bias, theirs_linear.bias)
    for i, residual in enumerate(ours.residuals, start=1):
        residual.norm = layer_norm_from_torch(getattr(layer, f"norm{i}"))
    return ours


def encoder_block_from_torch(layer: nn.TransformerEncoderLayer) -> EncoderBlock:
    """A :class:`~companion.transformer.EncoderBlock` with the settings and weights of a ``TransformerEncoderLayer``."""
    if not isinstance(layer, nn.TransformerEncoderLayer):
        raise TypeError(
            f"layer must be an nn.TransformerEncoderLayer, got {describe(layer)}"
        )
    return _block(EncoderBlock, layer, {"self_attn": "self_attn"})


def decoder_block_from_torch(layer: nn.TransformerDecoderLayer) -> DecoderBlock:
    """A :class:`~companion.transformer.DecoderBlock` with the settings and weights of a ``TransformerDecoderLayer``."""
    if not isinstance(layer, nn.TransformerDecoderLayer):
        raise TypeError(
            f"layer must be an nn.TransformerDecoderLayer, got {describe(layer)}"
        )
    return _block(
        DecoderBlock, layer, {"self_attn": "self_attn", "cross_attn": "multihead_attn"}
    )


def to_torch_mha_mask(mask: torch.Tensor) -> torch.Tensor:
    """A companion mask (``True`` = may attend) in ``nn.MultiheadAttention``'s convention (``True`` = masked
    out): ``~mask``, same shape."""
    return ~require_tensor(mask, "mask", "bool")


def from_torch_mha_mask(mask: torch.Tensor) -> torch.Tensor:
    """An ``nn.MultiheadAttention`` boolean mask (negated) or float mask (``0`` allowed, ``-inf`` forbidden) in
    the companion's ``True`` = may attend convention, same shape."""
    mask = require_tensor(mask, "mask")
    if mask.dtype == torch.bool:
        return ~mask
    if mask.dtype.is_floating_point:
        if not bool(((mask == 0) | (mask == float("-inf"))).all()):
            raise ValueError(
                "a float mask must contain only 0 (allowed) and -inf (forbidden) to be converted"
            )
        return mask == 0
    raise TypeError(
        f"mask must be a boolean or floating-point tensor, got dtype {mask.dtype}"
    )


def to_additive_mask(
    mask: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """A companion boolean mask as the additive float mask ``0`` (allowed) / ``-inf`` (forbidden) of
    ``torch.nn.Transformer.generate_square_subsequent_mask``, same shape."""
    mask = require_tensor(mask, "mask", "bool")
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
        ~mask, float("-inf")
    )
