"""Checkers for chapter 7, *BERT, and using pretrained models*.

==========================  =========================================================================================
checker                     what the student writes
==========================  =========================================================================================
``check_wordpiece``         ``wordpiece(word, vocab) -> list[str]``: greedy longest match, ``##`` continuations,
                            ``["[UNK]"]`` when the word cannot be split completely
``check_pair_inputs``       ``pair_inputs(a, b, cls_id, sep_id, max_len) -> (ids, types)``: longest-first
                            truncation, ``[CLS] a [SEP] b [SEP]`` and its token types
``check_squad_f1``          ``squad_f1(prediction, gold) -> float``: F1 of the bags of normalised tokens
``check_span_head_loss``    ``span_head_loss(h, W, b, starts, ends, context_mask) -> loss``: the span
                            head's logits, masked outside the context, and their cross-entropy
``check_best_span``         ``best_span(start_logits, end_logits, context_mask, max_len) -> (B, 2)``: the best
                            start ≤ end within the context, at most ``max_len`` tokens long
==========================  =========================================================================================

The two span exercises are checked in ``companion.exercises.bert_spans`` and re-exported here.
"""

from __future__ import annotations

import string
from collections import Counter

import torch

from .. import bert
from .. import wordpiece as wp
from ..data import metrics
from .bert_spans import check_best_span, check_span_head_loss
from .checking import case, compare

__all__ = [
    "check_wordpiece",
    "check_pair_inputs",
    "check_squad_f1",
    "check_span_head_loss",
    "check_best_span",
]


# --- WordPiece ----------------------------------------------------------------------------------------------

_VOCAB = {t: i for i, t in enumerate(["[UNK]", "un", "##aff", "##able", "a", "##ff", "##a", "##b", "##le", "play",
                                       "##ing", "##in", "##g", "p", "##ay", "u", "##n", "the"])}  # fmt: skip


def _wordpiece_reference(word: str, vocab: dict[str, int]) -> list[str]:
    return wp.wordpiece(word, vocab, "[UNK]")


def _wordpiece_variant(
    word: str, vocab: dict[str, int], *, shortest=False, hashes=True, partial=False
) -> list[str]:
    pieces, start = [], 0
    while start < len(word):
        ends = (
            range(start + 1, len(word) + 1) if shortest else range(len(word), start, -1)
        )
        for end in ends:
            piece = (
                word[start:end] if start == 0 or not hashes else "##" + word[start:end]
            )
            if piece in vocab:
                break
        else:
            if partial:  # only the piece that does not fit becomes [UNK]
                pieces.append("[UNK]")
                start += 1
                continue
            return ["[UNK]"]
        pieces.append(piece)
        start = end
    return pieces


def _wordpiece_cases() -> list:
    small = {"[UNK]": 0, "a": 1, "##a": 2, "##aa": 3, "aa": 4, "b": 5}
    return [
        case("unaffable", _VOCAB, why="the classic example"),
        case("playing", _VOCAB),
        case("play", _VOCAB, why="a whole word in the vocabulary"),
        case(
            "unplayable",
            _VOCAB,
            why="no piece starts with 'unp' or '##p...': the whole word is unknown",
        ),
        case("aaaaa", small, why="longest match: aa, ##aa, ##a"),
        case("ab", small, why="'b' exists only at the start of a word, not as '##b'"),
        case("the", _VOCAB),
    ]


def _random_words() -> list:
    """Random words over the letters of the vocabularies: some split, some do not."""
    small = {
        "[UNK]": 0,
        "a": 1,
        "##a": 2,
        "##aa": 3,
        "aa": 4,
        "b": 5,
        "##b": 6,
        "ab": 7,
    }
    out = []
    for vocab, letters in ((_VOCAB, "unafbleping"), (small, "ab"), (small, "abc")):
        for _ in range(3):
            n = int(torch.randint(1, 9, ()))
            word = "".join(
                letters[i] for i in torch.randint(len(letters), (n,)).tolist()
            )
            out.append(case(word, vocab, why="a random word"))
    return out


check_wordpiece = compare(
    "wordpiece",
    _wordpiece_reference,
    _wordpiece_cases,
    hidden=_random_words,
    withhold=["companion.wordpiece.wordpiece"],
    mistakes=[
        (
            lambda w, v: _wordpiece_variant(w, v, shortest=True),
            "Take the longest piece in the vocabulary at each step, not the shortest: shrink the end from len(word).",
        ),
        (
            lambda w, v: _wordpiece_variant(w, v, hashes=False),
            "A piece that does not start the word is looked up with the prefix '##' (and returned with it).",
        ),
        (
            lambda w, v: _wordpiece_variant(w, v, partial=True),
            "When no piece fits, the whole word becomes ['[UNK]'], not just the part that did not fit.",
        ),
    ],
    hint="From start = 0: find the largest end with word[start:end] (prefixed '##' unless start == 0) in vocab, "
    "append it, continue from end; if nothing fits, return ['[UNK]'].",
    what="The list of pieces",
)


# --- BERT's input for a pair: truncation, [CLS] and [SEP], token types ----------------------------------------


def _pair_reference(a, b, cls_id, sep_id, max_len):
    a, b = bert.truncate_pair(a, b, max_len - 3)
    ids = torch.tensor([cls_id, *a, sep_id, *b, sep_id], dtype=torch.long)
    types = torch.tensor([0] * (len(a) + 2) + [1] * (len(b) + 1), dtype=torch.long)
    return ids, types


def _pair_variant(
    a,
    b,
    cls_id,
    sep_id,
    max_len,
    *,
    rule="longest",
    room=3,
    front=False,
    types="ab",
    second_sep=True,
):
    """The pair's input with one rule changed: the typical mistakes of :data:`check_pair_inputs`."""
    a, b = list(a), list(b)
    a_was_longer = len(a) > len(b)
    while len(a) + len(b) > max(max_len - room, 0):
        if rule == "b_first":  # BERT's original script: always from b
            take_a = not b
        elif rule == "a_on_tie":
            take_a = len(a) >= len(b)
        else:
            take_a = len(a) > len(b) or (len(a) == len(b) and not a_was_longer)
        part = a if take_a else b
        part.pop(0) if front else part.pop()
    tail = [sep_id] if second_sep else []
    ids = [cls_id, *a, sep_id, *b, *tail]
    n_a = len(a) + 2 if types == "ab" else len(a) + 1
    return torch.tensor(ids, dtype=torch.long), torch.tensor(
        [0] * n_a + [1] * (len(ids) - n_a), dtype=torch.long
    )


def _pair_case(n_a, n_b, max_len, why=""):
    a, b = (
        torch.randint(5, 100, (n_a,)).tolist(),
        torch.randint(5, 100, (n_b,)).tolist(),
    )
    return case(
        a, b, 1, 2, max_len, why=why or f"a of {n_a} ids, b of {n_b}, max_len {max_len}"
    )


def _pair_cases() -> list:
    return [
        case([7, 8, 9], [10, 11], 101, 102, 16, why="it fits: nothing is dropped"),
        case([7, 8, 9], [10, 11], 101, 102, 8, why="exactly max_len = 8 tokens: nothing is dropped"),
        case([7, 8, 9, 10, 11, 12], [20, 21], 101, 102, 8, why="a is longer: its last tokens go"),
        case([7, 8], [20, 21, 22, 23, 24, 25, 26], 101, 102, 9, why="b is longer: its last tokens go"),
        case([7, 8, 9, 10, 11], [20, 21, 22], 101, 102, 8,
             why="a goes down to b's length, then the tie: b loses (a was the longer at the start)"),
        case([7, 8, 9], [20, 21, 22, 23, 24], 101, 102, 8,
             why="b goes down to a's length, then the tie: a loses (a was the shorter at the start)"),
        case([7, 8, 9, 10], [20, 21, 22, 23], 101, 102, 8, why="equal lengths at the start: a loses first"),
        case([], [20, 21, 22], 101, 102, 6, why="an empty a"),
        _pair_case(12, 30, 20),
    ]  # fmt: skip


def _random_pairs() -> list:
    out = []
    for _ in range(6):
        n_a, n_b = int(torch.randint(0, 15, ())), int(torch.randint(0, 15, ()))
        out.append(_pair_case(n_a, n_b, int(torch.randint(3, n_a + n_b + 5, ()))))
    return out


check_pair_inputs = compare(
    "pair_inputs",
    _pair_reference,
    _pair_cases,
    hidden=_random_pairs,
    ids=True,
    withhold=["companion.bert.truncate_pair", "companion.bert.bert_inputs"],
    mistakes=[
        (
            lambda *x: _pair_variant(*x, rule="b_first"),
            "Take tokens from the longer part (BERT's original script always cut b; this exercise follows "
            "longest first).",
        ),
        (
            lambda *x: _pair_variant(*x, rule="a_on_tie"),
            "On a tie the part that was the shorter at the start loses the token (a only if a was not longer).",
        ),
        (
            lambda *x: _pair_variant(*x, room=2),
            "Leave room for three special tokens: [CLS] and two [SEP].",
        ),
        (
            lambda *x: _pair_variant(*x, room=0),
            "The whole input, [CLS] and both [SEP] included, has at most max_len tokens: truncate a and b to "
            "max_len - 3 together.",
        ),
        (
            lambda *x: _pair_variant(*x, front=True),
            "Drop tokens from the end of a part, not from its start.",
        ),
        (
            lambda *x: _pair_variant(*x, types="a_only"),
            "Token type 0 covers [CLS] a [SEP], the first [SEP] included; type 1 covers b [SEP].",
        ),
        (
            lambda *x: _pair_variant(*x, second_sep=False),
            "End the input with a second [SEP] after b.",
        ),
    ],
    hint="While len(a) + len(b) > max_len - 3, pop the last token of the longer part (on a tie: of the part that "
    "was the shorter at the start, a if they started equal); ids = [cls] + a + [sep] + b + [sep], types 0 for "
    "the first len(a) + 2 positions and 1 for the rest, both torch.long.",
    what="(ids, types)",
    atol=0,
    rtol=0,
)


# --- SQuAD F1 -----------------------------------------------------------------------------------------------


def _squad_variant(
    prediction: str, gold: str, *, normalise=True, sets=False, score="f1"
) -> float:
    if normalise:
        pred, true = (
            metrics.normalize_answer(prediction).split(),
            metrics.normalize_answer(gold).split(),
        )
    else:
        pred, true = prediction.split(), gold.split()
    if not pred or not true:
        return float(pred == true)
    same = (
        len(set(pred) & set(true))
        if sets
        else sum((Counter(pred) & Counter(true)).values())
    )
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(true)
    return {
        "f1": 2 * precision * recall / (precision + recall),
        "precision": precision,
        "recall": recall,
    }[score]


def _no_articles_kept(prediction: str, gold: str) -> float:
    """Normalises case and punctuation but keeps the articles."""

    def norm(s: str) -> list[str]:
        return "".join(ch for ch in s.lower() if ch not in string.punctuation).split()

    pred, true = norm(prediction), norm(gold)
    same = sum((Counter(pred) & Counter(true)).values())
    if not pred or not true or same == 0:
        return float(pred == true) if not pred or not true else 0.0
    p, r = same / len(pred), same / len(true)
    return 2 * p * r / (p + r)


_WORDS = ["the", "a", "an", "The", "Paris", "paris,", "don't", "dont", "U.S.", "us", "new-york", "newyork", "ha",
          "ha!", "cat", "(cat)", "A", "sat."]  # fmt: skip


def _random_answers() -> list:
    """Random pairs of answers over words with articles, capitals and punctuation inside and around them."""
    out = []
    for _ in range(8):
        p, g = (
            torch.randint(len(_WORDS), (int(torch.randint(0, 5, ())),)).tolist()
            for _ in range(2)
        )
        out.append(
            case(
                " ".join(_WORDS[i] for i in p),
                " ".join(_WORDS[i] for i in g),
                why="random answers",
            )
        )
    return out


def _squad_reference(prediction: str, gold: str) -> float:
    return metrics.squad_f1(prediction, gold)


check_squad_f1 = compare(
    "squad_f1",
    _squad_reference,
    [
        case("the Eiffel Tower", "Eiffel Tower", why="articles are dropped"),
        case("in Paris, France.", "Paris", why="punctuation and case are dropped"),
        case(
            "Denver Broncos",
            "The Denver Broncos!",
            why="an exact match after normalisation",
        ),
        case("one one two", "one two two three"),
        case("ha ha ha", "ha ha", why="tokens are counted with their multiplicity"),
        case("the cat sat", "a dog ran", why="nothing in common"),
        case("New York City in the USA", "new york", why="precision 2/5, recall 1"),
        case("The", "an", why="both empty after normalisation: 1"),
        case("The", "Paris", why="only the prediction is empty after normalisation: 0"),
        case("Paris", "a", why="only the gold answer is empty after normalisation: 0"),
        case(
            "don't stop",
            "dont stop",
            why="punctuation inside a word is removed, not split on: dont",
        ),
        case("U.S. army", "the US Army", why="U.S. becomes us"),
    ],
    hidden=_random_answers,
    withhold=[
        "companion.data.metrics.squad_f1",
        "companion.data.metrics.normalize_answer",
    ],
    mistakes=[
        (
            lambda p, g: _squad_variant(p, g, normalise=False),
            "Normalise both answers first: lower-case, remove punctuation and the articles a, an, the.",
        ),
        (
            _no_articles_kept,
            "SQuAD's normalisation also removes the articles a, an and the.",
        ),
        (
            lambda p, g: _squad_variant(p, g, sets=True),
            "Count common tokens with multiplicity (a Counter intersection), not as sets.",
        ),
        (
            lambda p, g: _squad_variant(p, g, score="precision"),
            "F1 = 2PR/(P + R), not the precision alone.",
        ),
        (
            lambda p, g: _squad_variant(p, g, score="recall"),
            "F1 = 2PR/(P + R), not the recall alone.",
        ),
    ],
    hint="Normalise (lower-case, drop punctuation and a/an/the, split on whitespace); common = size of the "
    "Counter intersection; P = common/len(pred), R = common/len(gold), F1 = 2PR/(P+R); 1 if both are empty.",
    what="The F1",
)
