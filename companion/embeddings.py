"""One-hot vectors, the embedding lookup table, and how to compare vectors.

Notation (chapter 1): ``V`` is the vocabulary size, ``D`` the embedding width, ``E`` the ``(V, D)``
embedding matrix whose row ``i`` is the vector of token ``i``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .validation import (
    check_pair,
    require_ids,
    require_int,
    require_ndim,
    require_positive_ints,
    require_tensor,
)

__all__ = [
    "one_hot",
    "Embedding",
    "dot_similarity",
    "cosine_similarity",
    "pairwise_cosine",
    "nearest_neighbours",
    "parameter_count",
]


def one_hot(ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``out[..., j] = 1 if ids[...] == j else 0``: ids ``(*)`` → float32 ``(*, V)``."""
    require_ids(ids, "ids", vocab_size, ndim=None)
    out = ids.new_zeros(*ids.shape, vocab_size, dtype=torch.float32)  # (*, V)
    return out.scatter_(-1, ids.long().unsqueeze(-1), 1.0)  # a 1 at each id


class Embedding(nn.Module):
    """``weight[ids] = one_hot(ids) @ weight``: ``(*)`` → ``(*, D)``, weight (V, D)."""

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__()
        V, D = num_embeddings, embedding_dim
        require_positive_ints(num_embeddings=V, embedding_dim=D)
        self.num_embeddings, self.embedding_dim = V, D
        self.weight = nn.Parameter(torch.randn(V, D))  # N(0, 1) entries

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        require_ids(ids, "ids", self.num_embeddings, ndim=None)
        return self.weight[ids.long()]  # the gradient reaches only the rows looked up

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


def dot_similarity(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Dot-product similarity ``uᵀv`` along the last dimension.

    Args:
        u, v: float tensors of shapes ``(*, D)`` that broadcast against each other.

    Returns:
        tensor of the broadcast shape without the last dimension.
    """
    check_pair(u, v, ("u", "v"), same_dtype=False, width="D")
    return (u * v).sum(-1)


def cosine_similarity(
    u: torch.Tensor, v: torch.Tensor, eps: float = 1e-8
) -> torch.Tensor:
    """Cosine similarity ``uᵀv / (‖u‖ ‖v‖)`` along the last dimension, a number in ``[-1, 1]``.

    Args:
        u, v: float tensors of shapes ``(*, D)`` that broadcast against each other.
        eps: the norms are clamped below at ``eps``, so a zero vector gives similarity 0, not NaN.

    Returns:
        tensor of the broadcast shape without the last dimension.
    """
    check_pair(u, v, ("u", "v"), same_dtype=False, width="D")
    return dot_similarity(u, v) / (
        u.norm(dim=-1).clamp_min(eps) * v.norm(dim=-1).clamp_min(eps)
    )


def pairwise_cosine(vectors: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """All cosine similarities between the rows of a ``(N, D)`` matrix, as an ``(N, N)`` matrix."""
    require_tensor(vectors, "vectors", "float")
    require_ndim(vectors, "vectors", 2, "(N, D)")
    unit = vectors / vectors.norm(dim=-1, keepdim=True).clamp_min(eps)
    return unit @ unit.T


def nearest_neighbours(
    vectors: torch.Tensor, query: int, k: int = 5
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` rows of ``vectors`` (shape ``(N, D)``) most cosine-similar to row ``query``, itself excluded.

    Returns:
        ``(ids, similarities)``, each of shape ``(k,)``, most similar first.
    """
    require_tensor(vectors, "vectors", "float")
    require_ndim(vectors, "vectors", 2, "(N, D)")
    n = vectors.shape[0]
    require_int(query, "query", low=0, high=n - 1)
    require_int(k, "k", low=1, high=n - 1)  # at most the other rows
    sims = cosine_similarity(vectors, vectors[query])
    sims[query] = -math.inf
    top = sims.topk(k)
    return top.indices, top.values


def parameter_count(vocab_size: int, width: int) -> int:
    """The number of parameters of an embedding table: ``V × D``."""
    return require_int(vocab_size, "vocab_size", low=1) * require_int(
        width, "width", low=1
    )
