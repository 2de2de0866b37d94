"""A small generated span task in SQuAD's format (chapter 7): a question, a short context, the answer a span of it.

Every context is a few sentences (two by default), each about a different person, city, year and event::

    Mira Okafor moved to Lisbon in 1974. In 1931, Tom Reyes was born in Cape Town.
    Who was born in Cape Town?                         answer: Tom Reyes
    When did Mira Okafor move to Lisbon?               answer: 1974
    Where was Tom Reyes born?                          answer: Cape Town

The people, cities, years and events of a context are all different, so each question has exactly one answer,
and finding it needs the question: every context holds as many names, cities and years as sentences. The
data is generated here, offline and deterministically from a seed; it is not a published data set. The people
and cities of the ``"test"`` split never occur in the ``"train"`` split, so held-out exact match measures whether
a model learned to find the kind of span a question asks for, not the names it saw.

:func:`make_span_examples` draws the examples; :func:`span_inputs` tokenises them for BERT (question as segment A,
context as segment B) with the answer's token positions and the map from tokens back to context words.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..bert import bert_inputs
from ..validation import (
    describe,
    require_int,
)

__all__ = ["EVENTS", "SpanExample", "make_span_examples", "span_inputs"]

FIRST = ("Mira", "Tom", "Ana", "Jonas", "Leila", "Omar", "Sofia", "Ravi", "Elena", "Kofi", "Yuki", "Pablo",
         "Ingrid", "Tariq", "Nadia", "Felix", "Amara", "Lucas", "Hana", "Diego", "Priya", "Marco", "Zara",
         "Emil")  # fmt: skip
LAST = ("Okafor", "Reyes", "Berg", "Novak", "Haddad", "Silva", "Tanaka", "Moreau", "Kowalski", "Mensah",
        "Larsen", "Costa", "Nakamura", "Ibrahim", "Schmidt", "Rossi", "Petrova", "Lindqvist", "Achebe",
        "Duarte")  # fmt: skip
CITIES = ("Lisbon", "Oslo", "Cape Town", "Nairobi", "Kyoto", "Lima", "Vienna", "Hanoi", "Dublin", "Quito",
          "Krakow", "Accra", "Buenos Aires", "Helsinki", "Porto", "Seoul", "New Delhi", "Cairo", "Bergen",
          "Tunis", "Montreal", "Riga", "Santiago", "Manila")  # fmt: skip

EVENTS = (  # (what the sentence says, where-question, when-question, who-question)
    ("was born in", "Where was {p} born?", "When was {p} born?", "Who was born in {c}?"),
    ("moved to", "Where did {p} move to?", "When did {p} move to {c}?", "Who moved to {c}?"),
    ("opened a bakery in", "Where did {p} open a bakery?", "When did {p} open a bakery?",
     "Who opened a bakery in {c}?"),
    ("studied music in", "Where did {p} study music?", "When did {p} study music?", "Who studied music in {c}?"),
    ("married in", "Where did {p} marry?", "In which year did {p} marry?", "Who married in {c}?"),
)  # fmt: skip


@dataclass(frozen=True)
class SpanExample:
    """One question, its context as a list of words (punctuation a word of its own), and the answer:
    ``words[start : end + 1]`` (word indices, inclusive)."""

    question: str
    words: tuple[str, ...]
    start: int
    end: int

    @property
    def answer(self) -> str:
        return " ".join(self.words[self.start : self.end + 1])

    @property
    def context(self) -> str:
        """The context as text, its words joined by spaces, with no space before punctuation."""
        return " ".join(self.words).replace(" .", ".").replace(" ,", ",")


def _halves(items: Sequence[str], split: str) -> tuple[str, ...]:
    """Every other item for training and the rest for testing: the two splits share no item."""
    return tuple(items[0::2] if split == "train" else items[1::2])


def make_span_examples(
    n: int, seed: int = 0, split: str = "train", facts: int = 2
) -> list[SpanExample]:
    """``n`` examples drawn with ``random.Random(seed)`` from the people and cities of ``split`` ("train" or
    "test"), each context ``facts`` sentences long (at most 5); the question asks where, when or who, each a third
    of the time."""
    require_int(n, "n", low=1)
    if require_int(facts, "facts", low=1) > len(EVENTS):
        raise ValueError(
            f"facts must be at most {len(EVENTS)} (one event each), got {facts}"
        )
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    rng = random.Random(f"{split}-{seed}")
    first, last, cities = (
        _halves(FIRST, split),
        _halves(LAST, split),
        _halves(CITIES, split),
    )
    out = []
    for _ in range(n):
        events = rng.sample(EVENTS, facts)
        people = [
            f"{f} {s}"
            for f, s in zip(
                rng.sample(first, facts), rng.sample(last, facts), strict=True
            )
        ]
        places, years = (
            rng.sample(cities, facts),
            [str(y) for y in rng.sample(range(1900, 2021), facts)],
        )
        words: list[str] = []
        spans = []  # (person, city, year) word spans of each sentence
        for event, person, city, year in zip(
            events, people, places, years, strict=True
        ):
            p, c, y = person.split(), city.split(), [year]
            if rng.random() < 0.5:  # "P <event> C in Y ."
                sentence = [*p, *event[0].split(), *c, "in", *y, "."]
                where = (0, len(p) + len(event[0].split()))
                when = len(sentence) - 2
            else:  # "In Y , P <event> C ."
                sentence = ["In", *y, ",", *p, *event[0].split(), *c, "."]
                where = (3, 3 + len(p) + len(event[0].split()))
                when = 1
            offset = len(words)
            spans.append(((offset + where[0], offset + where[0] + len(p) - 1),
                          (offset + where[1], offset + where[1] + len(c) - 1),
                          (offset + when, offset + when)))  # fmt: skip
            words.extend(sentence)
        # which sentence, and where (0), when (1) or who (2)
        k, kind = rng.randrange(facts), rng.randrange(3)
        question = events[k][1 + kind].format(p=people[k], c=places[k])
        start, end = spans[k][(1, 2, 0)[kind]]
        out.append(SpanExample(question, tuple(words), start, end))
    return out


def span_inputs(
    examples: Sequence[SpanExample], tokenizer: object, max_len: int = 128
) -> dict[str, torch.Tensor]:
    """BERT's inputs ``[CLS] question [SEP] context [SEP]`` for a list of examples, and what a span head needs.

    Returns ``input_ids``, ``token_type_ids``, ``attention_mask`` (B, n) as
    :func:`~companion.bert.bert_inputs` makes them; ``context_mask`` (B, n), True on the context's
    tokens; ``starts`` and ``ends`` (B,), the positions of the answer's first and last tokens; ``word_of`` (B, n),
    the context word each token comes from (-1 outside the context). ``tokenizer`` is a
    :class:`~companion.wordpiece.WordPieceTokenizer`.
    """
    if isinstance(examples, str) or not isinstance(examples, Sequence) or not examples:
        raise TypeError(
            f"examples must be a non-empty list of SpanExample, got {describe(examples)}"
        )
    pairs, word_lists, answers = [], [], []
    for ex in examples:
        if not isinstance(ex, SpanExample):
            raise TypeError(
                f"examples must hold SpanExample objects, got {describe(ex)}"
            )
        pieces = [tokenizer.encode(w) for w in ex.words]
        context = [i for p in pieces for i in p]
        word = [w for w, p in enumerate(pieces) for _ in p]
        question = tokenizer.encode(ex.question)
        if len(question) + len(context) + 3 > max_len:
            raise ValueError(
                f"an example needs {len(question) + len(context) + 3} tokens, more than max_len={max_len}"
            )
        first = len(question) + 2  # [CLS] question [SEP], then the context
        answers.append(
            (
                first + word.index(ex.start),
                first + len(word) - 1 - word[::-1].index(ex.end),
            )
        )
        pairs.append((question, context))
        word_lists.append((first, word))
    batch = bert_inputs(
        pairs, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, max_len
    )
    word_of = torch.full_like(batch["input_ids"], -1)
    for b, (first, word) in enumerate(word_lists):
        word_of[b, first : first + len(word)] = torch.tensor(word)
    batch["context_mask"] = word_of >= 0
    batch["starts"] = torch.tensor([s for s, _ in answers])
    batch["ends"] = torch.tensor([e for _, e in answers])
    batch["word_of"] = word_of
    return batch
