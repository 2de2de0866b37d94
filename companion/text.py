"""Tokens and vocabularies: turning text into integer ids.

A *tokenizer* splits text into tokens; a *vocabulary* numbers the distinct tokens ``0 .. V-1``. Tokens the
vocabulary has never seen map to one reserved id, the *unknown token* ``<unk>``. One :class:`Vocabulary` type
serves every chapter: special tokens first (``<unk>``, ``<pad>``, ``<bos>``, ``<eos>``, BERT's ``[CLS]``,
``[SEP]``, ``[MASK]``, as a task needs them), then the ordinary tokens by frequency or by first appearance.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

import torch

from .validation import (
    describe,
    require_choice,
    require_int,
)

__all__ = ["UNK", "PAD", "BOS", "EOS", "CLS", "SEP", "MASK", "tokenize", "Vocabulary"]

UNK = "<unk>"
"""The unknown token, whose id encodes every token outside a vocabulary that has it."""
PAD = "<pad>"
"""Padding, to fill the end of the shorter sequences of a batch."""
BOS = "<bos>"
"""The begin-of-sequence token, the first input of a generating decoder."""
EOS = "<eos>"
"""The end-of-sequence token, after which a generating decoder stops."""
CLS = "[CLS]"
"""BERT's classification token, in front of every input."""
SEP = "[SEP]"
"""BERT's separator, after each of the (one or two) segments of an input."""
MASK = "[MASK]"
"""BERT's mask token, which replaces the tokens the model must predict."""

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?|[^\sa-z0-9]")


def tokenize(text: str) -> list[str]:
    """Split ``text`` into lower-case word and punctuation tokens.

    Words are runs of letters and digits (with an optional apostrophe suffix, as in "dog's"); every other
    non-space character is a token of its own:

    >>> tokenize("The dog barks. It's loud!")
    ['the', 'dog', 'barks', '.', "it's", 'loud', '!']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {describe(text)}")
    return _TOKEN.findall(text.lower())


class Vocabulary:
    """token ↔ id: the special tokens first (ids 0, 1, …), then every token seen ``min_count`` times or more.

    Args:
        tokens: the training tokens (a sequence of str; repeated tokens are counted).
        min_count: a token enters the vocabulary only if it occurs at least this often.
        specials: the special tokens, in id order; default ``(<unk>,)``. Any of :data:`UNK`, :data:`PAD`,
            :data:`BOS`, :data:`EOS`, :data:`CLS`, :data:`SEP`, :data:`MASK` (or others) may be used.
        order: ``"frequency"`` (decreasing count) or ``"appearance"`` (order of first appearance).
        ties: among tokens of equal count with ``order="frequency"``: ``"alphabetical"`` or ``"appearance"``.

    Attributes:
        itos: the tokens by id; ``stoi``: the ids by token.
        counts: ``(V,)`` ``torch.long`` corpus counts by id (0 for the special tokens); ``total``: their sum.
        unk_id, pad_id, bos_id, eos_id, cls_id, sep_id, mask_id: the special tokens' ids (``None`` if absent).

    ``vocab[i]`` is the token of id ``i`` and ``vocab[token]`` the id of a token (``KeyError`` if absent), so a
    vocabulary also serves as the list of its tokens; :meth:`id` and :meth:`encode` map unknown tokens to
    ``<unk>``.
    """

    def __init__(
        self,
        tokens: Iterable[str],
        min_count: int = 1,
        *,
        specials: Sequence[str] = (UNK,),
        order: str = "frequency",
        ties: str = "alphabetical",
    ) -> None:
        tokens = _check_tokens(tokens, min_count, order, ties)
        counts = Counter(tokens)
        # in order of appearance
        kept = [t for t in counts if counts[t] >= min_count and t not in specials]
        if order == "frequency":
            kept.sort(
                key=(lambda t: (-counts[t], t))
                if ties == "alphabetical"
                else (lambda t: -counts[t])
            )
        if not kept:
            raise ValueError(
                f"min_count={min_count} removes every token (the most frequent one occurs {max(counts.values())} times)"
            )
        self.min_count = min_count
        self.specials = tuple(specials)
        self.itos: list[str] = [*self.specials, *kept]
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(self.itos)}
        self.counts = torch.tensor(
            [0] * len(self.specials) + [counts[t] for t in kept], dtype=torch.long
        )
        self.unk_id, self.pad_id, self.bos_id, self.eos_id = (
            self.stoi.get(t) for t in (UNK, PAD, BOS, EOS)
        )
        self.cls_id, self.sep_id, self.mask_id = (
            self.stoi.get(t) for t in (CLS, SEP, MASK)
        )

    @property
    def total(self) -> int:
        """The number of training tokens that are in the vocabulary (special tokens excluded)."""
        return int(self.counts.sum())

    @property
    def words(self) -> tuple[str, ...]:
        """The tokens by id, as a tuple."""
        return tuple(self.itos)

    def __len__(self) -> int:
        return len(self.itos)

    def __iter__(self) -> Iterator[str]:
        return iter(self.itos)

    def __contains__(self, token: object) -> bool:
        return token in self.stoi

    @overload
    def __getitem__(self, key: int) -> str: ...
    @overload
    def __getitem__(self, key: str) -> int: ...
    def __getitem__(self, key: int | str) -> str | int:
        """``vocab[i]``: the token of id ``i``; ``vocab[token]``: its id, ``KeyError`` if it is not there."""
        if isinstance(key, str):
            if key not in self.stoi:
                raise KeyError(
                    f"{key!r} is not in the vocabulary ({len(self)} tokens, min_count={self.min_count})"
                )
            return self.stoi[key]
        return self.itos[key]

    def index(self, token: str) -> int:
        """The id of ``token`` (as ``list.index``); ``KeyError`` if it is not in the vocabulary."""
        return self[token]

    def __repr__(self) -> str:
        head = ", ".join(self.itos[:8])
        more = ", ..." if len(self) > 8 else ""
        return f"Vocabulary(size={len(self)}: {head}{more})"

    def id(self, token: str) -> int:
        """The id of ``token``, or ``unk_id`` if it is not in the vocabulary (``KeyError`` if there is no ``<unk>``)."""
        if not isinstance(token, str):
            raise TypeError(f"token must be a str, got {describe(token)}")
        return (
            self.stoi.get(token, self.unk_id)
            if self.unk_id is not None
            else self[token]
        )

    def encode(self, tokens: Sequence[str]) -> torch.Tensor:
        """Map a sequence of tokens to a ``(len(tokens),)`` tensor of ``torch.long`` ids."""
        if isinstance(tokens, str):
            raise TypeError(
                "encode takes a list of tokens, got one str (call tokenize() first)"
            )
        return torch.tensor([self.id(t) for t in tokens], dtype=torch.long)

    def decode(self, ids: torch.Tensor | Sequence[int]) -> list[str]:
        """Map ids back to tokens; raises ``ValueError`` for an id outside ``[0, len(self))``."""
        if isinstance(ids, torch.Tensor):
            if ids.dtype.is_floating_point or ids.dtype == torch.bool:
                raise TypeError(f"ids must be integers, got dtype {ids.dtype}")
            ids = ids.flatten().tolist()
        out = []
        for i in ids:
            out.append(self.itos[require_int(i, "ids", low=0, high=len(self) - 1)])
        return out


def _check_tokens(
    tokens: object, min_count: object, order: str, ties: str
) -> list[str]:
    if isinstance(tokens, str):
        raise TypeError(
            "tokens must be a sequence of str tokens, got one str (did you forget tokenize()?)"
        )
    require_int(min_count, "min_count", low=1)
    require_choice(order, "order", ("frequency", "appearance"))
    require_choice(ties, "ties", ("alphabetical", "appearance"))
    tokens = list(tokens)
    for t in tokens:
        if not isinstance(t, str):
            raise TypeError(f"every token must be a str, got {describe(t)}")
    if not tokens:
        raise ValueError("cannot build a vocabulary from an empty list of tokens")
    return tokens
