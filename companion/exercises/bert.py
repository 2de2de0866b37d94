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
"""

from __future__ import annotations

import string
from collections import Counter

import torch
import torch.nn.functional as F

from .. import bert
from .. import wordpiece as wp
from ..data import metrics
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


# --- the span head and its loss -----------------------------------------------------------------------------


def _span_loss_variant(h, W, b, starts, ends, context_mask, *, mask="both", fill=float("-inf"), rows=(0, 1),
                       pair="mean", batch="mean", probabilities=False):  # fmt: skip
    """The span head's loss with one rule changed: the typical mistakes of :data:`check_span_head_loss`."""
    logits = h @ W.T + b  # (B, n, 2)
    start, end = logits[..., rows[0]], logits[..., rows[1]]
    outside = ~context_mask
    if mask in ("both", "start"):
        start = start.masked_fill(outside, fill)
    if mask in ("both", "end"):
        end = end.masked_fill(outside, fill)
    if probabilities:
        start, end = torch.softmax(start, dim=-1), torch.softmax(end, dim=-1)
    loss_start = F.cross_entropy(start, starts, reduction=batch)
    loss_end = F.cross_entropy(end, ends, reduction=batch)
    return (loss_start + loss_end) / (2 if pair == "mean" else 1)


def _span_loss_reference(h, W, b, starts, ends, context_mask):
    return _span_loss_variant(h, W, b, starts, ends, context_mask)


def _span_loss_case(
    batch, n_question, n_context, n_pad, d, *, dtype=torch.float32, why=""
):
    """[CLS] question [SEP] context [SEP] padding rows: hidden states, a head, gold spans inside the context."""
    n = n_question + n_context + 3 + n_pad
    h = torch.randn(batch, n, d, dtype=dtype)
    W, b = torch.randn(2, d, dtype=dtype), torch.randn(2, dtype=dtype)
    first = n_question + 2
    mask = torch.zeros(batch, n, dtype=torch.bool)
    mask[:, first : first + n_context] = True
    i, j = (first + torch.randint(n_context, (batch,)) for _ in range(2))
    starts, ends = torch.minimum(i, j), torch.maximum(i, j)
    return case(h, W, b, starts, ends, mask, why=why or f"{batch} row(s): question {n_question} tokens, context "
                f"{n_context}, padding {n_pad}, d = {d}")  # fmt: skip


def _span_loss_cases() -> list:
    h = torch.tensor(
        [[[1.0, 0.0], [0.0, 1.0], [2.0, 0.0], [0.0, 2.0], [1.0, 1.0], [3.0, -1.0]]]
    )
    mask = torch.tensor([[False, False, True, True, True, False]])
    small = case(h, torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.zeros(2), torch.tensor([2]), torch.tensor([3]),
                 mask, why="d = 2: start logit h[:, 0], end logit h[:, 1]; the context is positions 2-4, and the "
                 "largest start logit (3.0, at 5) lies outside it")  # fmt: skip
    return [
        small,
        _span_loss_case(2, 3, 6, 0, 8),
        _span_loss_case(
            3, 4, 5, 4, 6, why="3 rows with padding after the second [SEP]"
        ),
        _span_loss_case(1, 2, 1, 1, 4, why="a context of one token: the loss is 0"),
        _span_loss_case(2, 5, 7, 2, 5, dtype=torch.float64),
    ]


def _random_span_losses() -> list:
    out = []
    for _ in range(3):
        q, c, pad, d = (
            int(torch.randint(low, high, ()))
            for low, high in ((1, 6), (1, 10), (0, 5), (2, 9))
        )
        out.append(_span_loss_case(int(torch.randint(1, 5, ())), q, c, pad, d))
    return out


check_span_head_loss = compare(
    "span_head_loss",
    _span_loss_reference,
    _span_loss_cases,
    hidden=_random_span_losses,
    differentiable=True,
    withhold=["companion.bert.span_loss", "companion.bert.SpanHead.forward"],
    mistakes=[
        (
            lambda *a: _span_loss_variant(*a, mask="none"),
            "Set the logits outside the context (question, [CLS], [SEP], padding) to -inf before the softmax: the "
            "answer can only lie in the paragraph.",
        ),
        (
            lambda *a: _span_loss_variant(*a, fill=0.0),
            "Outside the context the logits must be -inf (probability 0), not 0: a logit of 0 still has probability.",
        ),
        (
            lambda *a: _span_loss_variant(*a, mask="start"),
            "Mask the end logits outside the context too, not only the start logits.",
        ),
        (
            lambda *a: _span_loss_variant(*a, mask="end"),
            "Mask the start logits outside the context too, not only the end logits.",
        ),
        (
            lambda *a: _span_loss_variant(*a, rows=(1, 0)),
            "Row 0 of W (and b[0]) gives the start logits, row 1 the end logits.",
        ),
        (
            lambda *a: _span_loss_variant(*a, pair="sum"),
            "Average the two cross-entropies, (L_start + L_end) / 2.",
        ),
        (
            lambda *a: _span_loss_variant(*a, batch="sum"),
            "Average over the batch (F.cross_entropy's default), do not sum.",
        ),
        (
            lambda *a: _span_loss_variant(*a, probabilities=True),
            "F.cross_entropy takes the logits (it applies log-softmax itself), not probabilities.",
        ),
    ],
    hint="logits = h @ W.T + b, (B, n, 2); start = logits[..., 0], end = logits[..., 1], each "
    "masked_fill(~context_mask, float('-inf')); "
    "loss = (F.cross_entropy(start, starts) + F.cross_entropy(end, ends)) / 2.",
    what="The loss",
)


# --- SQuAD's span decoding ----------------------------------------------------------------------------------


def _best_span_reference(start_logits, end_logits, context_mask, max_len):
    return bert.best_span(start_logits, end_logits, context_mask, max_len)


def _span_variant(start_logits, end_logits, context_mask, max_len, *, reverse=False, mask="both", length="<",
                  separate=False, relative=False, last_tie=False, swapped=False):  # fmt: skip
    """Loops over every (i, j), with one rule changed: the named mistakes of the exercise."""
    out = []
    for s, e, m in zip(
        start_logits.tolist(), end_logits.tolist(), context_mask.tolist(), strict=True
    ):
        n, context = len(s), [t for t, inside in enumerate(m) if inside]
        if separate:  # the best start and the best end, each on its own
            i = max(context, key=lambda t: (s[t], -t))
            j = max(context, key=lambda t: (e[t], -t))
        else:
            best, i, j = None, 0, 0
            for a in range(n):
                for b in range(n):
                    if not reverse and b < a:
                        continue
                    gap = abs(b - a)
                    if (
                        length == "<"
                        and gap >= max_len
                        or length == "<="
                        and gap > max_len
                    ):
                        continue
                    if (
                        mask == "both"
                        and not (m[a] and m[b])
                        or mask == "start"
                        and not m[a]
                    ):
                        continue
                    score = s[a] + e[b]
                    if best is None or score > best or last_tie and score == best:
                        best, i, j = score, a, b
        if relative:
            i, j = i - context[0], j - context[0]
        out.append([j, i] if swapped else [i, j])
    return torch.tensor(out, dtype=torch.long)


def _span_case(
    n_question, n_context, n_pad, max_len, *, integers=False, batch=1, why=""
):
    """A batch of [CLS] question [SEP] context [SEP] padding rows, with random logits everywhere."""
    n = n_question + n_context + 3 + n_pad
    if integers:  # small integers: many ties, summed exactly in any floating dtype
        start, end = (torch.randint(-3, 4, (batch, n)).float() for _ in range(2))
    else:
        start, end = torch.randn(batch, n), torch.randn(batch, n)
    mask = torch.zeros(batch, n, dtype=torch.bool)
    mask[:, n_question + 2 : n_question + 2 + n_context] = True
    return case(start, end, mask, max_len, why=why or f"{batch} row(s): question {n_question} tokens, context "
                f"{n_context}, padding {n_pad}, max_len {max_len}")  # fmt: skip


def _best_span_cases() -> list:
    # a large start logit at 4, a large end logit at 2
    big = torch.tensor([[0.0, 0, 0, 0, 9, 0, 0, 0, 0]])
    reverse = case(big.clone(), torch.tensor([[0.0, 0, 9, 0, 0, 1, 0, 0, 0]]),
                   torch.tensor([[False, False, True, True, True, True, True, True, False]]), 4,
                   why="the largest end logit lies before the largest start logit")  # fmt: skip
    question = case(torch.tensor([[0.0, 5, 0, 0, 1, 0, 0]]), torch.tensor([[0.0, 0, 6, 0, 0, 1, 0]]),
                    torch.tensor([[False, False, False, True, True, True, False]]), 3,
                    why="the question (1, 2) scores highest, but the answer lies in the context 3 … 5")  # fmt: skip
    longest = case(torch.tensor([[0.0, 0, 4, 0, 0, 0, 0, 0]]), torch.tensor([[0.0, 0, 0, 0, 0, 2, 3, 0]]),
                   torch.ones(1, 8, dtype=torch.bool), 4,
                   why="max_len = 4: the span (2, 5) has 4 tokens and is allowed, (2, 6) has 5 and is not")  # fmt: skip
    ties = case(torch.tensor([[0.0, 0, 2, 1, 2, 0, 1, 0]]), torch.tensor([[0.0, 0, 1, 2, 0, 2, 1, 0]]),
                torch.tensor([[False, True, True, True, True, True, True, False]]), 8,
                why="ties: (2, 3), (2, 5) and (4, 5) all score 4; the first in row-major order wins")  # fmt: skip
    return [
        reverse, question, longest, ties,
        _span_case(4, 9, 0, 30, batch=3),
        _span_case(6, 12, 5, 3, batch=4),
        _span_case(3, 8, 2, 5, integers=True, batch=4, why="integer logits: ties everywhere"),
    ]  # fmt: skip


def _random_spans() -> list:
    out = []
    for _ in range(4):
        q, c, pad = (
            int(torch.randint(low, high, ())) for low, high in ((1, 8), (1, 15), (0, 6))
        )
        max_len = int(torch.randint(1, c + 2, ()))
        out.append(
            _span_case(q, c, pad, max_len, integers=bool(torch.rand(()) < 0.5), batch=3)
        )
    return out


check_best_span = compare(
    "best_span",
    _best_span_reference,
    _best_span_cases,
    hidden=_random_spans,
    withhold=["companion.bert.best_span"],
    ids=True,
    mistakes=[
        (
            lambda *a: _span_variant(*a, reverse=True),
            "The end cannot come before the start: only spans with i <= j.",
        ),
        (
            lambda *a: _span_variant(*a, mask="none"),
            "The answer lies in the context: both i and j must be positions where context_mask is True (not the "
            "question, [CLS], [SEP] or padding).",
        ),
        (
            lambda *a: _span_variant(*a, mask="start"),
            "The end must be a context token too, not only the start: require context_mask[j] as well.",
        ),
        (
            lambda *a: _span_variant(*a, separate=True),
            "Taking the best start and the best end separately can give j < i or a span longer than max_len: "
            "maximise start_logits[i] + end_logits[j] over the allowed pairs together.",
        ),
        (
            lambda *a: _span_variant(*a, length="<="),
            "Off by one: a span of max_len tokens has j - i = max_len - 1, so require j - i < max_len.",
        ),
        (
            lambda *a: _span_variant(*a, length="none"),
            "A span has at most max_len tokens: require j - i < max_len.",
        ),
        (
            lambda *a: _span_variant(*a, relative=True),
            "Return positions in the whole input (indices into start_logits), not counted from the first context "
            "token.",
        ),
        (
            lambda *a: _span_variant(*a, last_tie=True),
            "On a tie keep the first best pair (smallest i, then smallest j), as argmax does: replace the best only "
            "when a score is strictly larger.",
        ),
        (
            lambda *a: _span_variant(*a, swapped=True),
            "Each row is [start, end], in that order.",
        ),
    ],
    hint="For each row: among the pairs (i, j) with i <= j, j - i < max_len and context_mask True at i and at j, "
    "take the one with the largest start_logits[i] + end_logits[j] (the first in row-major order on a tie); "
    "return a LongTensor of shape (B, 2).",
    what="The spans",
    atol=0,
    rtol=0,
)
