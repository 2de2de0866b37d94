"""Byte-level byte-pair encoding (BPE), the tokeniser of GPT-2.

Text is first turned into its UTF-8 bytes, so the 256 byte values are the starting vocabulary and *every*
string can be encoded: there is no unknown token. Training then repeats one step: count every pair of
adjacent ids, take the most frequent pair, give it a new id and replace the pair by that id everywhere. The
list of merges, in the order they were learned, *is* the tokeniser: encoding applies them in that order, and
decoding concatenates the bytes each id stands for.

Ties (two pairs with the same count) are broken by taking the smallest pair as a tuple of ids,
``min((a, b))``. Hugging Face ``tokenizers`` does the same with *its* ids, which number the 256 bytes in
GPT-2's order (printable bytes first) rather than by byte value; the two orders agree on the bytes 33-126
(printable ASCII without the space), so the merges agree exactly on text made of those.

GPT-2 first splits text into chunks (words with their leading space, runs of digits, runs of punctuation,
runs of whitespace) with a regular expression and never merges across chunks. GPT-2's pattern needs the
``regex`` package's Unicode classes ``\\p{L}`` (letter) and ``\\p{N}`` (number); :data:`GPT2_SPLIT_PATTERN`
approximates them with Python's ``re``: a letter is ``[^\\W\\d_]`` and a number is ``\\d``. The two differ
only on characters that Unicode calls numbers but not decimal digits (``²``, ``½``, Roman numerals ``Ⅻ``),
which count as letters here, and on the control characters ``\\x1c``-``\\x1f``, which Python's ``\\s`` calls
whitespace.
"""

from __future__ import annotations

import heapq
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from itertools import pairwise

from .validation import describe, require_instance, require_int

__all__ = [
    "GPT2_SPLIT_PATTERN",
    "ENDOFTEXT",
    "get_pair_counts",
    "merge",
    "train_bpe_naive",
    "train_bpe",
    "BPETokenizer",
]

GPT2_SPLIT_PATTERN = (
    r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""
)
"""GPT-2's pre-tokenisation pattern written for Python's ``re`` (see the module docstring for the difference)."""

ENDOFTEXT = "<|endoftext|>"
"""The only special token of GPT-2, which separates documents."""

Pair = tuple[int, int]


def get_pair_counts(
    ids: Sequence[int], counts: Counter | None = None, weight: int = 1
) -> Counter:
    """Count each pair of adjacent ids in ``ids`` (adding ``weight`` per occurrence to ``counts``)."""
    counts = Counter() if counts is None else counts
    for pair in pairwise(ids):
        counts[pair] += weight
    return counts


def merge(ids: Sequence[int], pair: Pair, new_id: int) -> list[int]:
    """Replace every occurrence of ``pair`` in ``ids``, left to right, by ``new_id``."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _check_training_args(text: object, vocab_size: object, pattern: object) -> None:
    require_instance(text, str, "text")
    require_int(vocab_size, "vocab_size", low=256, why="the byte alphabet")
    if pattern is not None and not isinstance(pattern, str):
        raise TypeError(
            f"pattern must be a regular expression (str) or None, got {describe(pattern)}"
        )


def _chunks(text: str, pattern: str | None) -> list[str]:
    return (
        re.findall(pattern, text) if pattern is not None else ([text] if text else [])
    )


def train_bpe_naive(
    text: str, vocab_size: int, pattern: str = GPT2_SPLIT_PATTERN
) -> dict[Pair, int]:
    """Learn ``vocab_size - 256`` merges, recounting all pairs after each one (slow)."""
    _check_training_args(text, vocab_size, pattern)
    chunks = [list(chunk.encode("utf-8")) for chunk in _chunks(text, pattern)]
    merges: dict[Pair, int] = {}
    for new_id in range(256, vocab_size):
        counts = Counter()
        for ids in chunks:
            get_pair_counts(ids, counts)
        if not counts:
            break  # every chunk is a single token: nothing left to merge
        pair = min(counts, key=lambda p: (-counts[p], p))  # commonest, ties: smallest
        chunks = [merge(ids, pair, new_id) for ids in chunks]
        merges[pair] = new_id
    return merges


def train_bpe(
    text: str, vocab_size: int, pattern: str | None = GPT2_SPLIT_PATTERN
) -> dict[Pair, int]:
    """Learn the same merges as :func:`train_bpe_naive`, updating the pair counts only where a merge changed them.

    Equal chunks are merged once (weighted by how often they occur); ``where[pair]`` remembers which chunks
    contain a pair; a heap of ``(-count, pair)`` finds the most frequent pair. Counts of old pairs only go
    down, so a heap entry whose count is out of date is pushed back with its current count.
    """
    _check_training_args(text, vocab_size, pattern)
    chunk_counts = Counter(_chunks(text, pattern))
    words = [list(chunk.encode("utf-8")) for chunk in chunk_counts]
    weights = list(chunk_counts.values())
    counts: Counter = Counter()
    where: dict[Pair, set[int]] = defaultdict(set)
    for w, ids in enumerate(words):
        get_pair_counts(ids, counts, weights[w])
        for pair in pairwise(ids):
            where[pair].add(w)
    heap = [(-n, pair) for pair, n in counts.items()]
    heapq.heapify(heap)
    merges: dict[Pair, int] = {}
    for new_id in range(256, vocab_size):
        # 1. the most frequent pair (skipping heap entries whose count has gone down since they were pushed)
        while heap:
            neg_count, pair = heapq.heappop(heap)
            if counts.get(pair, 0) == -neg_count:
                break
            if counts.get(pair, 0) > 0:
                heapq.heappush(heap, (-counts[pair], pair))
        else:
            break  # nothing left to merge
        # 2. merge it in every chunk that contains it: remove the chunk's old pairs, add its new ones
        new_pairs = set()
        for w in sorted(where.pop(pair)):
            ids = words[w]
            get_pair_counts(ids, counts, -weights[w])
            words[w] = ids = merge(ids, pair, new_id)
            get_pair_counts(ids, counts, weights[w])
            for p in pairwise(ids):
                where[p].add(w)
                if new_id in p:
                    new_pairs.add(p)
        for p in new_pairs:
            heapq.heappush(heap, (-counts[p], p))
        # 3. record the merge
        merges[pair] = new_id
    return merges


class BPETokenizer:
    """A byte-level BPE tokeniser: ``encode(str) -> list[int]`` and ``decode(list[int]) -> str``.

    Args:
        merges: ``{(a, b): new_id}`` in the order learned, as returned by :func:`train_bpe`; new ids must be
            ``256, 257, ...``.
        pattern: the pre-tokenisation pattern the merges were trained with (or None for no splitting).
        special_tokens: strings that get their own ids after the merges (GPT-2 has one, ``<|endoftext|>``).

    ``vocab[i]`` holds the bytes id ``i`` stands for; :attr:`vocab_size` counts bytes, merges and special
    tokens.
    """

    def __init__(
        self,
        merges: dict[Pair, int],
        pattern: str | None = GPT2_SPLIT_PATTERN,
        special_tokens: Iterable[str] = (ENDOFTEXT,),
    ) -> None:
        if not isinstance(merges, dict):
            raise TypeError(
                f"merges must be a dict {{(a, b): new_id}}, got {describe(merges)}"
            )
        vocab = {i: bytes([i]) for i in range(256)}
        for k, ((a, b), new_id) in enumerate(merges.items()):
            if new_id != 256 + k:
                raise ValueError(
                    f"merge number {k} must create id {256 + k}, got {new_id!r}"
                )
            if a not in vocab or b not in vocab:
                raise ValueError(
                    f"merge {(a, b)} -> {new_id} uses an id that does not exist yet"
                )
            vocab[new_id] = vocab[a] + vocab[b]
        if pattern is not None and not isinstance(pattern, str):
            raise TypeError(
                f"pattern must be a regular expression (str) or None, got {describe(pattern)}"
            )
        special_tokens = list(special_tokens)
        if len(set(special_tokens)) != len(special_tokens) or not all(
            isinstance(s, str) and s for s in special_tokens
        ):
            raise ValueError(
                f"special_tokens must be distinct non-empty strings, got {special_tokens!r}"
            )
        self.merges = dict(merges)
        self.pattern = pattern
        self.vocab = vocab
        self.special_tokens = {s: len(vocab) + k for k, s in enumerate(special_tokens)}
        for s, i in self.special_tokens.items():
            vocab[i] = s.encode("utf-8")
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def train(
        cls,
        text: str,
        vocab_size: int,
        pattern: str | None = GPT2_SPLIT_PATTERN,
        special_tokens: Iterable[str] = (ENDOFTEXT,),
    ) -> BPETokenizer:
        """Train on ``text`` so that the vocabulary (bytes, merges and special tokens) has ``vocab_size`` ids."""
        special_tokens = list(special_tokens)
        n = len(special_tokens)
        require_int(
            vocab_size, "vocab_size", low=256 + n, why=f"256 bytes + {n} special tokens"
        )
        return cls(
            train_bpe(text, vocab_size - len(special_tokens), pattern),
            pattern,
            special_tokens,
        )

    @property
    def vocab_size(self) -> int:
        """The number of ids, 256 bytes + one per merge + one per special token."""
        return len(self.vocab)

    def encode_chunk(self, chunk: str) -> list[int]:
        """A chunk's ids: merge the earliest-learned pair present until none is a merge."""
        ids = list(chunk.encode("utf-8"))
        while len(ids) >= 2:
            pair = min(pairwise(ids), key=lambda p: self.merges.get(p, float("inf")))
            if pair not in self.merges:
                break  # no adjacent pair can be merged any more
            ids = merge(ids, pair, self.merges[pair])
        return ids

    def encode(self, text: str, allowed_special: bool = False) -> list[int]:
        """Token ids of ``text``; special-token strings become their ids only if ``allowed_special``."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {describe(text)}")
        if allowed_special and self.special_tokens:
            split = "(" + "|".join(re.escape(s) for s in self.special_tokens) + ")"
            parts = re.split(split, text)
        else:
            parts = [text]
        ids: list[int] = []
        for part in parts:
            if part in self.special_tokens and allowed_special:
                ids.append(self.special_tokens[part])
                continue
            for chunk in _chunks(part, self.pattern):
                if chunk not in self._cache:
                    self._cache[chunk] = self.encode_chunk(chunk)
                ids.extend(self._cache[chunk])
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``: their bytes, concatenated and decoded as UTF-8 (invalid bytes become U+FFFD)."""
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
            raise TypeError(
                f"ids must be a sequence of int token ids, got {describe(ids)}"
            )
        ids = [int(i) for i in ids]
        bad = [i for i in ids if i not in self.vocab]
        if bad:
            raise ValueError(
                f"token ids must lie in [0, {self.vocab_size}), got {bad[0]}"
            )
        return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")

    def token_bytes(self, i: int) -> bytes:
        """The bytes that id ``i`` stands for."""
        if i not in self.vocab:
            raise ValueError(f"token id must lie in [0, {self.vocab_size}), got {i!r}")
        return self.vocab[i]
