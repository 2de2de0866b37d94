"""Banded attention: FMMformer's near field, softmax over the k nearest keys, in O(N·k) time and memory.

Notation (chapter 9): queries ``q`` of shape ``(..., n_q, d_k)``, keys ``k`` of shape ``(..., n_k, d_k)``, values
``v`` of shape ``(..., n_k, d_v)`` and a bandwidth ``k_band`` (``bandwidth`` in the code). The near-field attention
matrix is

    D = softmax(band_k(Q Kᵀ / √d_k)),       near field = D V,

where ``band_k`` keeps the scores inside the band and sets the others to −∞ (they get weight 0).

**The band.** Query ``i`` sits at position ``p_i = i + (n_k − n_q)`` among the keys (aligned at the end, as for
``causal=True`` in the attention-function seam; ``p_i = i`` in self-attention). Two conventions, both in the
official FMMformer code:

- **causal (the book's main one)**: the ``k`` keys ``p_i − k + 1 … p_i``, the query's own position included.
  This is the convention of the official code's causal experiments (``causal-copy/``, the copy task, run through
  its ``fast_transformers`` package, whose ``CausalFMMAttention`` masks ``tril(·, −bandwidth)`` on top of the
  causal mask: ``bandwidth`` keys, itself included).
- **bidirectional** (``causal=False``): the ``2k − 1`` keys with ``abs(p_i − j) < k``, a band of diagonals on both
  sides: the convention of the official code's Long Range Arena experiments (``LRA/``, ``--diag_size 5``).

With ``k ≥ n_k`` the band covers every allowed key and banded attention is softmax attention.

**O(N·k) without the N × N matrix.** The queries are cut into blocks of ``B`` rows. Every query of block ``c``
(positions ``cB … cB + B − 1``) finds its band inside one window of ``W = B + L + R`` consecutive keys, with
``L`` keys of band to the left (``k − 1``) and ``R`` to the right (0 causal, ``k − 1`` bidirectional). The keys,
padded with ``L`` zero rows in front, are cut into these overlapping windows by ``Tensor.unfold`` (a
view), and each block computes a ``B × W`` matrix of scores: ``N·W`` numbers in all instead of ``N²``. Row ``r``
of a block sees window columns ``r … r + L + R``, the same for every block, so one ``B × W`` mask serves all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .masks import Mask
from .validation import (
    check_attention_inputs,
    check_mask,
    require_int,
    require_keys_cover_queries,
    require_number,
    require_positive_ints,
    require_tensor,
)

__all__ = [
    "DEFAULT_BANDWIDTH",
    "band_mask",
    "band_matrix",
    "banded_attention_dense",
    "BandedAttention",
    "banded_attention",
]

DEFAULT_BANDWIDTH = 32
"""The bandwidth k, the number of keys a query sees in the causal band (itself and the k − 1 before it)."""


# ----------------------------------------------------------------------------------------------------
# Input checks


def _check_band(n_q: int, n_k: int, bandwidth: object) -> None:
    require_positive_ints(n_q=n_q, n_k=n_k, bandwidth=bandwidth)
    require_keys_cover_queries(n_q, n_k, "band_mask")


# ----------------------------------------------------------------------------------------------------
# The band as a dense mask (the definition, and the reference)


def band_mask(n_q: int, n_k: int, bandwidth: int, *, causal: bool = False) -> Tensor:
    """The band (n_q, n_k): ``p_i − k < j ≤ p_i`` if causal, else ``|p_i − j| < k``."""
    _check_band(n_q, n_k, bandwidth)
    # query i sits at key position p_i = i + n_k − n_q (aligned with the last keys)
    p = torch.arange(n_q).unsqueeze(1) + (n_k - n_q)  # (n_q, 1)
    j = torch.arange(n_k)  # (n_k,)
    offset = p - j  # how far back key j lies from query i
    if causal:
        return (offset >= 0) & (offset < bandwidth)
    return offset.abs() < bandwidth


def band_matrix(a: Tensor, bandwidth: int, *, causal: bool = False) -> Tensor:
    """band_k(A): the entries of A (..., n_q, n_k) inside the band of :func:`band_mask`, zeros elsewhere."""
    require_tensor(a, "a", "float")
    if a.ndim < 2:
        raise ValueError(
            f"a must be a matrix (..., n_q, n_k), got shape {tuple(a.shape)}"
        )
    return a * band_mask(a.shape[-2], a.shape[-1], bandwidth, causal=causal).to(
        a.device
    )


def banded_attention_dense(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Mask = None,
    *,
    causal: bool = False,
    bandwidth: int = DEFAULT_BANDWIDTH,
    return_weights: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """D V with D = softmax(band_k(QKᵀ/√d_k)) formed as an N × N matrix: the reference, O(N²).

    ``causal`` picks the band (see the module docstring); ``mask`` (True = may attend) is applied on top. A query
    with no allowed key gets zero weights and a zero output. ``return_weights`` also returns D (..., n_q, n_k).
    """
    q, k, v = check_attention_inputs(q, k, v, keys_cover_queries=True)
    bandwidth = require_int(bandwidth, "bandwidth", low=1)
    n_q, n_k = q.shape[-2], k.shape[-2]
    allowed = band_mask(n_q, n_k, bandwidth, causal=causal).to(q.device)
    if mask is not None:
        allowed = allowed & check_mask(mask, (*q.shape[:-2], n_q, n_k))
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=-1).nan_to_num(
        0.0
    )
    out = weights @ v
    return (out, weights) if return_weights else out


# ----------------------------------------------------------------------------------------------------
# O(N·k): blocks of queries against windows of keys


def _masked_softmax(scores: Tensor, allowed: Tensor) -> Tensor:
    """softmax over the last dimension of the allowed scores; a row with nothing allowed gets zeros (not NaN)."""
    scores = scores.masked_fill(~allowed, -math.inf)
    row_max = scores.amax(dim=-1, keepdim=True).detach()
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    e = torch.exp(scores - row_max)  # exactly 0 outside the band
    return e / e.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(e.dtype).tiny)


def _in_windows(mask: Tensor, n_pre: int, b: int, key: Tensor) -> Tensor:
    """mask[..., i, j] (..., n_q, n_k) read at the blocks' entries (..., n_blocks, B, W): row r of block c is query
    i = cB + r − n_pre and ``key`` (n_blocks, 1, W) holds j; rows and keys that are padding read False."""
    (n_q, n_k), n_blocks, w = mask.shape[-2:], key.shape[0], key.shape[-1]
    row = (torch.arange(n_blocks * b, device=key.device) - n_pre).view(n_blocks, b, 1)
    ok_row = (row >= 0) & (row < n_q)  # row: query index i
    i, j = row.clamp(0, n_q - 1), key.clamp(0, n_k - 1).expand(n_blocks, b, w)
    return ok_row & mask[..., i, j]


@dataclass(frozen=True)
class BandedAttention:
    """Banded attention's options; ``BandedAttention(k)(q, k, v)`` attends."""

    bandwidth: int = DEFAULT_BANDWIDTH  # b, the keys of the causal band
    block_size: int | None = None  # B, queries per block; None: max(b, 16)

    def __post_init__(self) -> None:
        require_int(self.bandwidth, "bandwidth", low=1)
        if self.block_size is not None:
            require_int(self.block_size, "block_size", low=1)

    def __call__(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Mask = None,
        *,
        causal: bool = False,
        dropout_p: float = 0.0,
    ) -> Tensor:
        """The attention function of :mod:`companion.attention`: the inputs checked, then :meth:`attend`."""
        q, k, v = check_attention_inputs(q, k, v, mask, keys_cover_queries=True)
        p = require_number(dropout_p, "dropout_p", low=0, high=1, high_open=True)
        return self.attend(q, k, v, mask, causal=causal, p=p)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Mask, *, causal: bool, p: float
    ) -> Tensor:
        """softmax(band_k(QKᵀ/√d_k)) V in O(N·k): q (..., n_q, d), k, v (..., n_k, d)."""
        lead, (n_q, d_k), n_k = q.shape[:-2], q.shape[-2:], k.shape[-2]
        bw = self.bandwidth  # b
        b = self.block_size or max(bw, 16)  # B; fastest when B = the bandwidth = 32
        left, right = bw - 1, 0 if causal else bw - 1  # L, R keys around p_i
        # Queries padded in front to n_k rows (row = key position), then to blocks.
        n_pre, n_blocks, n_pad = n_k - n_q, -(-n_k // b), -n_k % b
        q_pad = F.pad(q, (0, 0, n_pre, n_pad))  # (..., n_blocks·B, d_k)
        q_blocks = q_pad.unflatten(-2, (n_blocks, b))  # (..., n_blocks, B, d_k)
        # Window c: padded keys cB … cB + W − 1, original keys cB − L … cB + B − 1 + R.
        w, pad = b + left + right, (0, 0, left, right + n_pad)
        k_win = F.pad(k, pad).unfold(-2, w, b)  # (..., n_blocks, d_k, W): a view
        v_win = F.pad(v, pad).unfold(-2, w, b)  # (..., n_blocks, d_v, W)
        scores = (q_blocks @ k_win) / math.sqrt(d_k)  # (..., n_blocks, B, W)
        # Allowed: in the band (the same B × W pattern in every block) and a real key.
        r = torch.arange(b, device=q.device).unsqueeze(1)  # (B, 1)
        s = torch.arange(w, device=q.device)  # (W,)
        in_band = (s >= r) & (s <= r + left + right)  # (B, W)
        start = torch.arange(n_blocks, device=q.device).view(-1, 1, 1) * b - left
        key = start + s  # (n_blocks, 1, W): key index j = cB − L + s
        allowed = in_band & (key >= 0) & (key < n_k)  # (n_blocks, B, W)
        if mask is not None:  # only the mask's entries inside the band are read
            allowed = allowed & _in_windows(mask.expand(*lead, n_q, n_k), n_pre, b, key)
        weights = _masked_softmax(scores, allowed)
        weights = F.dropout(weights, p=p) if p > 0.0 else weights
        out = weights @ v_win.transpose(-2, -1)  # (..., n_blocks, B, d_v)
        return out.flatten(-3, -2)[..., n_pre : n_pre + n_q, :]


banded_attention = BandedAttention()
"""Banded attention with the defaults (k = 32, blocks of max(k, 16)), as an attention function."""
