"""Attention masks: which keys each query may look at.

**One convention, everywhere in the companion: a boolean mask, ``True`` = "may attend".** Entry ``[i, j]``
of a mask is ``True`` when query ``i`` is allowed to look at key ``j``. This is the convention of
``torch.nn.functional.scaled_dot_product_attention``.

:class:`torch.nn.MultiheadAttention` and :class:`torch.nn.Transformer` use the *opposite* convention for
their boolean ``attn_mask`` and ``key_padding_mask``: there ``True`` means "may **not** attend" (the
position is masked out). :mod:`companion.interop` converts between the two.

Shapes. An *attention mask* has shape ``(n_queries, n_keys)`` or anything that broadcasts against the
attention scores ``(..., n_queries, n_keys)``. A *padding mask* has shape ``(batch, seq)`` and says which
positions hold real tokens (``True``) and which hold padding (``False``);
:func:`padding_to_attention_mask` turns it into an attention mask over the keys.
"""

from __future__ import annotations

import torch

from .validation import (
    require_int,
    require_ndim,
    require_tensor,
)

__all__ = [
    "Mask",
    "causal_mask",
    "padding_mask_from_lengths",
    "padding_mask_from_ids",
    "padding_to_attention_mask",
    "combine_masks",
]

# An optional boolean mask, True = may attend; None lets every query see every key.
Mask = torch.Tensor | None


def causal_mask(
    n_queries: int,
    n_keys: int | None = None,
    *,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The causal (look-ahead) mask: query ``i`` may attend to key ``j`` exactly when ``j <= i + n_keys - n_queries``.

    For a square mask ``mask[i, j] = (j <= i)``, a lower-triangular matrix of ``True`` including the diagonal.
    With more keys than queries the queries are the *last* ``n_queries`` positions (aligned at the end): the
    earlier keys are their past, as when new queries attend to a key/value cache. This is the alignment of the
    ``causal=True`` flag of every attention function of the companion, so ``mask=causal_mask(n_q, n_k)`` and
    ``causal=True`` give the same result. (PyTorch's ``is_causal=True`` aligns top-left instead; for a square
    mask the two agree.)

    Args:
        n_queries: number of queries (rows).
        n_keys: number of keys (columns); defaults to ``n_queries``.
        device: where to build the mask.

    Returns:
        A boolean tensor of shape ``(n_queries, n_keys)``.
    """
    require_int(n_queries, "n_queries", low=1)
    if n_keys is None:
        n_keys = n_queries
    require_int(n_keys, "n_keys", low=1)
    return torch.ones(n_queries, n_keys, dtype=torch.bool, device=device).tril(
        n_keys - n_queries
    )


def padding_mask_from_lengths(
    lengths: torch.Tensor, max_len: int | None = None
) -> torch.Tensor:
    """A padding mask from sequence lengths: ``mask[b, t] = (t < lengths[b])``.

    Args:
        lengths: integer tensor of shape ``(batch,)``, each length in ``[0, max_len]``.
        max_len: width of the mask; defaults to ``lengths.max()``.

    Returns:
        A boolean tensor of shape ``(batch, max_len)``, ``True`` at real tokens, ``False`` at padding.
    """
    require_tensor(lengths, "lengths", "int")
    require_ndim(lengths, "lengths", 1, "(batch,)")
    if max_len is None:
        max_len = int(lengths.max()) if lengths.numel() else 0
    else:
        require_int(max_len, "max_len", low=1)
    if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > max_len):
        raise ValueError(
            f"lengths must lie in [0, {max_len}] (max_len), got {lengths.tolist()}"
        )
    positions = torch.arange(max_len, device=lengths.device)
    return positions.unsqueeze(0) < lengths.unsqueeze(1)


def padding_mask_from_ids(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """A padding mask from token ids: ``mask[b, t] = (ids[b, t] != pad_id)``.

    Args:
        ids: integer tensor of token ids, shape ``(batch, seq)``.
        pad_id: the id of the padding token.

    Returns:
        A boolean tensor of shape ``(batch, seq)``, ``True`` at real tokens.
    """
    require_tensor(ids, "ids", "int")
    require_ndim(ids, "ids", 2, "(batch, seq)")
    return ids != require_int(pad_id, "pad_id")


def padding_to_attention_mask(
    padding_mask: torch.Tensor, *, heads: bool = False
) -> torch.Tensor:
    """Turn a key padding mask ``(batch, n_keys)`` into an attention mask that broadcasts over the queries.

    Every query may attend to exactly the real (non-padding) keys of its own sequence.

    Args:
        padding_mask: boolean tensor of shape ``(batch, n_keys)``, ``True`` at real tokens.
        heads: also insert a head dimension.

    Returns:
        A boolean tensor of shape ``(batch, 1, n_keys)`` (broadcasts against scores ``(batch, n_q, n_k)``),
        or ``(batch, 1, 1, n_keys)`` with ``heads=True`` (against ``(batch, heads, n_q, n_k)``).
    """
    require_tensor(padding_mask, "padding_mask", "bool")
    require_ndim(padding_mask, "padding_mask", 2, "(batch, n_keys)")
    mask = padding_mask.unsqueeze(-2)
    return mask.unsqueeze(1) if heads else mask


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Combine attention masks: a key is allowed only if *every* mask allows it (logical AND).

    ``None`` entries mean "no restriction" and are skipped; the masks broadcast against each other, e.g.
    ``combine_masks(causal_mask(n), padding_to_attention_mask(pad))`` has shape ``(batch, n, n)``.

    Returns:
        The broadcast AND of the given masks, or ``None`` when all of them are ``None``.
    """
    result: torch.Tensor | None = None
    for index, mask in enumerate(masks):
        if mask is None:
            continue
        require_tensor(mask, f"mask #{index}", "bool")
        if result is None:
            result = mask
            continue
        try:
            torch.broadcast_shapes(result.shape, mask.shape)
        except RuntimeError:
            raise ValueError(
                f"masks must broadcast against each other, got shapes {tuple(result.shape)} and "
                f"{tuple(mask.shape)} (mask #{index})"
            ) from None
        result = result & mask
    return result
