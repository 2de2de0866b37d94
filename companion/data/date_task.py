"""The task chapter 5's Transformer learns: dates written in words → ISO dates.

    "twenty-third of march nineteen ninety-one"   →   "1991-03-23"
    "june first, two thousand and five"            →   "2005-06-01"

The data is generated here, offline and deterministically from a seed: every date between 1900-01-01 and
2099-12-31 can be written in four templates (:data:`TEMPLATES`). The held-out dates never appear in
training, in any template, so held-out exact-match accuracy measures whether the model learned the rules
(days, months, years, and the reordering of "month day, year") rather than memorised the pairs.

The source is tokenised by words (default) or characters, the target by characters. Both vocabularies start
with the same four special tokens ``<pad>=0, <bos>=1, <eos>=2, <unk>=3``, so one ``pad_id = 0`` serves both.

The model and its training (the recipe) are :mod:`companion.training.date_recipe`.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ..text import BOS, EOS, PAD, UNK, Vocabulary
from ..validation import (
    describe,
    require_int,
)

__all__ = [
    "TEMPLATES",
    "date_to_words",
    "date_to_iso",
    "Vocab",
    "DateDataset",
    "make_date_dataset",
    "date_batches",
    "source_vocab",
    "target_vocab",
]

SPECIALS = (PAD, BOS, EOS, UNK)

MONTHS = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip
_ONES = ("", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_TEENS = (
    "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen",
)  # fmt: skip
_TENS = (
    "",
    "",
    "twenty",
    "thirty",
    "forty",
    "fifty",
    "sixty",
    "seventy",
    "eighty",
    "ninety",
)
_ORDINAL_ONES = (
    "",
    "first",
    "second",
    "third",
    "fourth",
    "fifth",
    "sixth",
    "seventh",
    "eighth",
    "ninth",
)
_ORDINAL_TEENS = (
    "tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth", "seventeenth",
    "eighteenth", "nineteenth",
)  # fmt: skip

#: The four ways a date is written; ``{day}`` is an ordinal ("twenty-third"), ``{year}`` spoken ("nineteen
#: ninety-one"). The last two put the month first, so the model must reorder.
TEMPLATES = (
    "{day} of {month} {year}",
    "the {day} of {month} {year}",
    "{month} {day}, {year}",
    "{month} the {day} {year}",
)

FIRST_DATE = dt.date(1900, 1, 1)
LAST_DATE = dt.date(2099, 12, 31)


def _cardinal(n: int) -> str:
    """1 … 99 in words: "seven", "thirteen", "ninety-one"."""
    if n < 10:
        return _ONES[n]
    if n < 20:
        return _TEENS[n - 10]
    tens, ones = divmod(n, 10)
    return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")


def _ordinal(n: int) -> str:
    """1 … 31 as an ordinal: "first", "twelfth", "twenty-third", "thirtieth"."""
    if n < 10:
        return _ORDINAL_ONES[n]
    if n < 20:
        return _ORDINAL_TEENS[n - 10]
    tens, ones = divmod(n, 10)
    if ones == 0:
        return _TENS[tens][:-1] + "ieth"  # twenty → twentieth, thirty → thirtieth
    return f"{_TENS[tens]}-{_ORDINAL_ONES[ones]}"


def _year_words(year: int) -> str:
    """1900 … 2099 as spoken: "nineteen hundred", "nineteen oh five", "two thousand and five", "twenty ten"."""
    century, rest = divmod(year, 100)
    if century == 19:
        if rest == 0:
            return "nineteen hundred"
        return "nineteen " + (f"oh {_ONES[rest]}" if rest < 10 else _cardinal(rest))
    if rest == 0:
        return "two thousand"
    if rest < 10:
        return f"two thousand and {_ONES[rest]}"
    return "twenty " + _cardinal(rest)


def _require_date(date: object) -> dt.date:
    if not isinstance(date, dt.date) or isinstance(date, dt.datetime):
        raise TypeError(f"date must be a datetime.date, got {describe(date)}")
    if not FIRST_DATE <= date <= LAST_DATE:
        raise ValueError(
            f"date must lie between {FIRST_DATE} and {LAST_DATE}, got {date}"
        )
    return date


def date_to_words(date: dt.date, template: int = 0) -> str:
    """Write ``date`` in words with one of the :data:`TEMPLATES`.

    ``date_to_words(date(1991, 3, 23))`` is ``"twenty-third of march nineteen ninety-one"``.
    """
    _require_date(date)
    require_int(template, "template", low=0, high=len(TEMPLATES) - 1)
    return TEMPLATES[template].format(
        day=_ordinal(date.day),
        month=MONTHS[date.month - 1],
        year=_year_words(date.year),
    )


def date_to_iso(date: dt.date) -> str:
    """The ISO 8601 form ``"YYYY-MM-DD"`` of ``date``."""
    return _require_date(date).isoformat()


def _words(text: str) -> list[str]:
    """Split on spaces, with the comma as a token of its own."""
    return text.replace(",", " ,").split()


class Vocab(Vocabulary):
    """The task's :class:`~companion.text.Vocabulary`: ``<pad>=0, <bos>=1, <eos>=2, <unk>=3``, then the tokens in
    order of first appearance; it also turns text into ids and back, by ``level`` ``"word"`` (split on spaces,
    a comma is its own token) or ``"char"``."""

    # the same in every Vocab, so readable from the class
    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, tokens: Sequence[str], level: str = "char") -> None:
        if level not in ("word", "char"):
            raise ValueError(f"level must be 'word' or 'char', got {level!r}")
        super().__init__(tokens, specials=SPECIALS, order="appearance")
        self.level = level

    def tokenize(self, text: str) -> list[str]:
        """``text`` → its tokens (words or characters)."""
        return _words(text) if self.level == "word" else list(text)

    def encode_text(
        self, text: str, *, bos: bool = False, eos: bool = False
    ) -> list[int]:
        """``text`` → ids, optionally framed by ``<bos>``/``<eos>``; unknown tokens become ``<unk>``."""
        ids = [self.stoi.get(t, self.unk_id) for t in self.tokenize(text)]
        return ([self.bos_id] if bos else []) + ids + ([self.eos_id] if eos else [])

    def decode_text(self, ids: Sequence[int] | torch.Tensor) -> str:
        """ids → text, stopping at the first ``<eos>`` and skipping ``<pad>`` and ``<bos>``."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        out = []
        for i in ids:
            if i == self.eos_id:
                break
            if i in (self.pad_id, self.bos_id):
                continue
            out.append(self.itos[i] if 0 <= i < len(self.itos) else UNK)
        joined = " ".join(out) if self.level == "word" else "".join(out)
        return joined.replace(" ,", ",")

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens, level={self.level!r})"


def _pad(rows: list[list[int]], pad_id: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor(
        [r + [pad_id] * (width - len(r)) for r in rows], dtype=torch.long
    )


@dataclass
class DateDataset:
    """Train and held-out pairs (text and tensors) of the dates task.

    Attributes:
        train_pairs: training ``(words, iso)`` string pairs.
        test_pairs: held-out ``(words, iso)`` string pairs (dates never seen in training).
        src_vocab: the source :class:`Vocab` (words or characters).
        tgt_vocab: the target :class:`Vocab` (digits and ``-``).
        train_src: training source ids ``(N, n_src)``, padded with 0.
        train_tgt: training target ids ``(N, 12)``: ``<bos>``, the 10 characters of ``YYYY-MM-DD``, ``<eos>``.
        test_src: held-out source ids.
        test_tgt: held-out target ids.
    """

    train_pairs: list[tuple[str, str]]
    test_pairs: list[tuple[str, str]]
    src_vocab: Vocab
    tgt_vocab: Vocab
    train_src: torch.Tensor = field(repr=False)
    train_tgt: torch.Tensor = field(repr=False)
    test_src: torch.Tensor = field(repr=False)
    test_tgt: torch.Tensor = field(repr=False)

    def encode_source(self, texts: Sequence[str]) -> torch.Tensor:
        """Source ids ``(len(texts), n)`` for new phrases, padded with 0."""
        return _pad(
            [self.src_vocab.encode_text(t) for t in texts], self.src_vocab.pad_id
        )


def _all_source_tokens(level: str) -> list[str]:
    """Every token any date in any template can produce (so the vocabulary does not depend on the seed)."""
    texts = [" ".join(TEMPLATES)]
    texts += (
        list(MONTHS)
        + [_ordinal(d) for d in range(1, 32)]
        + [_year_words(y) for y in range(1900, 2100)]
    )
    tokens: list[str] = []
    for text in texts:
        text = text.replace("{day}", "").replace("{month}", "").replace("{year}", "")
        tokens += _words(text) if level == "word" else list(text)
    return sorted(set(tokens))


def source_vocab(level: str = "word") -> Vocab:
    """The source :class:`Vocab` of ``level`` (``"word"`` or ``"char"``): every token any date can produce."""
    return Vocab(_all_source_tokens(level), level)


def target_vocab() -> Vocab:
    """The target :class:`Vocab`: the characters of ``YYYY-MM-DD``."""
    return Vocab(list("0123456789-"), "char")


def make_date_dataset(
    n_train: int = 20000, n_test: int = 1000, *, seed: int = 0, level: str = "word"
) -> DateDataset:
    """Generate the dates task: ``n_train`` training and ``n_test`` held-out pairs.

    Dates are drawn uniformly from 1900-01-01 … 2099-12-31 with ``random.Random(seed)``; the held-out dates
    are disjoint from the training dates, and each pair uses a random template. Same seed, same data.

    Args:
        n_train: number of training pairs.
        n_test: number of held-out pairs.
        seed: the random seed.
        level: tokenise the source by ``"word"`` or ``"char"``.

    Returns:
        A :class:`DateDataset`.
    """
    require_int(n_train, "n_train", low=1)
    require_int(n_test, "n_test", low=1)
    n_days = (LAST_DATE - FIRST_DATE).days + 1
    if n_train + n_test > n_days:
        raise ValueError(
            f"n_train + n_test must be at most {n_days} (the number of dates), got {n_train + n_test}"
        )
    if level not in ("word", "char"):
        raise ValueError(f"level must be 'word' or 'char', got {level!r}")
    rng = random.Random(seed)
    offsets = rng.sample(range(n_days), n_train + n_test)
    dates = [FIRST_DATE + dt.timedelta(days=o) for o in offsets]

    def pairs(chunk: list[dt.date]) -> list[tuple[str, str]]:
        return [
            (date_to_words(d, rng.randrange(len(TEMPLATES))), date_to_iso(d))
            for d in chunk
        ]

    train_pairs, test_pairs = pairs(dates[n_test:]), pairs(dates[:n_test])
    src_vocab, tgt_vocab = source_vocab(level), target_vocab()

    def tensors(ps: list[tuple[str, str]]) -> tuple[torch.Tensor, torch.Tensor]:
        src = _pad([src_vocab.encode_text(s) for s, _ in ps], Vocab.pad_id)
        tgt = _pad(
            [tgt_vocab.encode_text(t, bos=True, eos=True) for _, t in ps], Vocab.pad_id
        )
        return src, tgt

    train_src, train_tgt = tensors(train_pairs)
    test_src, test_tgt = tensors(test_pairs)
    return DateDataset(
        train_pairs,
        test_pairs,
        src_vocab,
        tgt_vocab,
        train_src,
        train_tgt,
        test_src,
        test_tgt,
    )


def date_batches(
    data: DateDataset, batch_size: int, *, seed: int = 0
) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    """A function ``step → (src, tgt)`` drawing random training batches, reproducibly from ``seed``.

    The source is cut to the longest sequence of the batch (less padding, faster steps).
    """
    require_int(batch_size, "batch_size", low=1)
    generator = torch.Generator().manual_seed(seed)
    n = data.train_src.shape[0]

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        index = torch.randint(n, (batch_size,), generator=generator)
        src, tgt = data.train_src[index], data.train_tgt[index]
        width = int((src != Vocab.pad_id).sum(dim=1).max())
        return src[:, :width], tgt

    return batch
