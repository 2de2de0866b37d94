"""BERT's pretraining data: masked-language-model inputs and next-sentence pairs.

*Masked LM*: each position (other than the special tokens ``[CLS] [SEP] [PAD] ...``) is chosen with
probability 15 %. A chosen position is replaced by ``[MASK]`` 80 % of the time, by a random (non-special)
token 10 % of the time, and left unchanged 10 % of the time; the model must predict the original token
there. The labels hold the original ids at the chosen positions and ``-100`` (PyTorch's ``ignore_index`` for
cross-entropy) everywhere else, so only chosen positions count in the loss.

Positions are chosen independently (a Bernoulli draw each), as Hugging Face's data collator and RoBERTa do;
BERT's original script instead chose exactly ``round(0.15 n)`` positions of each sequence.

*Next-sentence prediction*: pairs of sentences (A, B); half the time B is the sentence that follows A, half
the time it is a sentence from a *different* document. Labels follow Hugging Face's ``BertForPreTraining``:
0 = B follows A (:data:`IS_NEXT`), 1 = B is random (:data:`NOT_NEXT`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

import torch
from torch import Tensor

from ..bert import IGNORE_INDEX
from ..validation import (
    describe,
    require_int,
    require_number,
    require_tensor,
)

__all__ = ["IS_NEXT", "NOT_NEXT", "mask_tokens", "next_sentence_pairs"]

IS_NEXT = 0
"""The next-sentence label when B is the sentence that follows A."""
NOT_NEXT = 1
"""The next-sentence label when B is a sentence from another document."""

S = TypeVar("S")


def mask_tokens(
    input_ids: Tensor,
    vocab_size: int,
    mask_id: int,
    special_ids: Iterable[int],
    generator: torch.Generator | None = None,
    mlm_probability: float = 0.15,
    mask_fraction: float = 0.8,
    random_fraction: float = 0.1,
) -> tuple[Tensor, Tensor]:
    """Masked-LM inputs and labels (each the shape of ``input_ids``, any shape of integer ids).

    Of the non-special positions, each is chosen with probability ``mlm_probability``; a chosen one becomes
    ``mask_id`` with probability ``mask_fraction``, a random non-special id with probability
    ``random_fraction``, and stays as it is otherwise. ``mask_id`` always counts as special.
    """
    require_tensor(input_ids, "input_ids", "int")
    require_int(vocab_size, "vocab_size", low=1)
    special = sorted({int(i) for i in special_ids} | {mask_id})
    for i in special:
        require_int(i, "mask_id and special_ids", low=0, high=vocab_size - 1)
    if input_ids.numel() and not (
        0 <= int(input_ids.min()) and int(input_ids.max()) < vocab_size
    ):
        raise ValueError(
            f"input_ids must lie in [0, {vocab_size}), got values from {int(input_ids.min())} to {int(input_ids.max())}"
        )
    mlm_probability = require_number(
        mlm_probability, "mlm_probability", low=0, high=1, why="a probability"
    )
    mask_fraction = require_number(
        mask_fraction, "mask_fraction", low=0, high=1, why="a probability"
    )
    random_fraction = require_number(
        random_fraction, "random_fraction", low=0, high=1, why="a probability"
    )
    if mask_fraction + random_fraction > 1:
        raise ValueError(
            f"mask_fraction + random_fraction must be <= 1, got {mask_fraction} + {random_fraction}"
        )
    is_candidate = torch.ones(vocab_size, dtype=torch.bool)
    is_candidate[special] = False
    # the ids a random replacement may take
    candidates = is_candidate.nonzero().squeeze(1)
    if random_fraction > 0 and len(candidates) == 0:
        raise ValueError(
            "every id is special: there is no token to use as a random replacement"
        )

    is_special = torch.isin(input_ids, torch.tensor(special, dtype=input_ids.dtype))
    chosen = (
        torch.rand(input_ids.shape, generator=generator) < mlm_probability
    ) & ~is_special
    # one uniform draw per position decides what happens
    action = torch.rand(input_ids.shape, generator=generator)
    to_mask = chosen & (action < mask_fraction)
    to_random = (
        chosen & (action >= mask_fraction) & (action < mask_fraction + random_fraction)
    )
    random_ids = candidates[
        torch.randint(len(candidates), input_ids.shape, generator=generator)
    ]

    inputs = torch.where(to_mask, torch.full_like(input_ids, mask_id), input_ids)
    inputs = torch.where(to_random, random_ids.to(input_ids.dtype), inputs)
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    return inputs, labels


def next_sentence_pairs(
    documents: Sequence[Sequence[S]],
    generator: torch.Generator | None = None,
    p_next: float = 0.5,
) -> list[tuple[S, S, int]]:
    """``(A, B, label)`` for every sentence A that has a successor: B the next sentence (label 0) with
    probability ``p_next``, else a uniformly drawn sentence of a uniformly drawn *other* document (label 1)."""
    if isinstance(documents, str) or not isinstance(documents, Sequence):
        raise TypeError(
            f"documents must be a list of documents, each a list of sentences, got {describe(documents)}"
        )
    for d, doc in enumerate(documents):
        if isinstance(doc, str) or not isinstance(doc, Sequence):
            raise TypeError(
                f"document {d} must be a list of sentences, got {describe(doc)}"
            )
    p_next = require_number(p_next, "p_next", low=0, high=1, why="a probability")
    non_empty = [d for d, doc in enumerate(documents) if len(doc) > 0]
    if len(non_empty) < 2:
        raise ValueError(
            f"need at least 2 non-empty documents to draw random sentences from, got {len(non_empty)}"
        )

    def draw(n: int) -> int:
        return int(torch.randint(n, (1,), generator=generator))

    pairs = []
    for d, doc in enumerate(documents):
        others = [e for e in non_empty if e != d]
        for i in range(len(doc) - 1):
            if float(torch.rand(1, generator=generator)) < p_next:
                pairs.append((doc[i], doc[i + 1], IS_NEXT))
            else:
                other = documents[others[draw(len(others))]]
                pairs.append((doc[i], other[draw(len(other))], NOT_NEXT))
    return pairs
