"""The chapter-7 checkers accept independently written correct answers and reject plausible wrong ones, naming the
mistake."""

import re
import string
from collections import Counter

import pytest
import torch
from checker_testing import (
    assert_passes,
    assert_wrong,
    correct_answers,
    raises_boom,
    stub,
)

from companion import bert, wordpiece
from companion.data import metrics
from companion.exercises.bert import (
    check_best_span,
    check_pair_inputs,
    check_span_head_loss,
    check_squad_f1,
    check_wordpiece,
)

# --- correct answers, each written independently of the checker's reference -----------------------------------


def wordpiece_recursive(word, vocab, prefix=""):
    if not word:
        return []
    for end in range(len(word), 0, -1):
        if prefix + word[:end] in vocab:
            rest = wordpiece_recursive(word[end:], vocab, "##")
            return ["[UNK]"] if rest == ["[UNK]"] else [prefix + word[:end], *rest]
    return ["[UNK]"]


def wordpiece_loop(word, vocab):
    pieces, i = [], 0
    while i < len(word):
        candidates = [
            (j, ("##" if i else "") + word[i:j]) for j in range(i + 1, len(word) + 1)
        ]
        found = [c for c in candidates if c[1] in vocab]
        if not found:
            return ["[UNK]"]
        j, piece = max(found)
        pieces.append(piece)
        i = j
    return pieces


def squad_f1_by_hand(prediction, gold):
    def normalise(s):
        s = "".join(c for c in s.lower() if c not in set(string.punctuation))
        return [w for w in s.split() if w not in ("a", "an", "the")]

    p, g = normalise(prediction), normalise(gold)
    if not p or not g:
        return float(p == g)
    common = sum(min(p.count(w), g.count(w)) for w in set(p))
    if common == 0:
        return 0.0
    return 2 * common / (len(p) + len(g))  # 2PR/(P+R) with P = c/|p|, R = c/|g|


def squad_f1_regex(prediction, gold):
    def normalise(s):
        s = re.sub("[" + re.escape(string.punctuation) + "]", "", s.lower())
        return re.sub(r"\b(a|an|the)\b", " ", s).split()

    p, g = Counter(normalise(prediction)), Counter(normalise(gold))
    if not p or not g:
        return 1.0 if not p and not g else 0.0
    common = sum((p & g).values())
    precision, recall = common / sum(p.values()), common / sum(g.values())
    return 0.0 if common == 0 else 2 * precision * recall / (precision + recall)


def wordpiece_prefixes(word, vocab):
    out, rest, first = [], word, True
    while rest:
        prefixes = [rest[:e] for e in range(len(rest), 0, -1)]
        piece = next(
            (
                p if first else "##" + p
                for p in prefixes
                if (p if first else "##" + p) in vocab
            ),
            None,
        )
        if piece is None:
            return ["[UNK]"]
        out.append(piece)
        rest, first = rest[len(piece) - (0 if first else 2) :], False
    return out


def _normalised(text):
    table = str.maketrans("", "", string.punctuation)
    return [
        w for w in text.lower().translate(table).split() if w not in {"a", "an", "the"}
    ]


def squad_f1_translate(prediction, gold):
    p, g = _normalised(prediction), _normalised(gold)
    if len(p) == 0 or len(g) == 0:
        return 1.0 if p == g else 0.0
    common = Counter(p) & Counter(g)
    n = sum(common.values())
    return 0.0 if n == 0 else 2 * n / (len(p) + len(g))


@correct_answers(
    (check_wordpiece, wordpiece_prefixes),
    (check_wordpiece, wordpiece_recursive),
    (check_wordpiece, wordpiece_loop),
    (check_squad_f1, squad_f1_translate),
    (check_squad_f1, squad_f1_by_hand),
    (check_squad_f1, squad_f1_regex),
)
def test_correct_answers_pass(checker, student):
    assert_passes(checker, student)


@pytest.mark.parametrize(
    "checker",
    [
        check_wordpiece,
        check_pair_inputs,
        check_squad_f1,
        check_span_head_loss,
        check_best_span,
    ],
)
def test_stub_is_not_attempted_and_a_crash_is_reported(checker):
    assert checker.verdict(stub).status == "not attempted"
    assert_wrong(checker.verdict(raises_boom), "raised RuntimeError: boom")


# --- wrong answers: each is told what is wrong --------------------------------------------------------------


def wordpiece_shortest(word, vocab):
    pieces, i = [], 0
    while i < len(word):
        for j in range(i + 1, len(word) + 1):
            piece = ("##" if i else "") + word[i:j]
            if piece in vocab:
                break
        else:
            return ["[UNK]"]
        pieces.append(piece)
        i = j
    return pieces


def wordpiece_no_hashes(word, vocab):
    pieces, i = [], 0
    while i < len(word):
        for j in range(len(word), i, -1):
            if word[i:j] in vocab:
                break
        else:
            return ["[UNK]"]
        pieces.append(word[i:j])
        i = j
    return pieces


def wordpiece_partial_unk(word, vocab):
    pieces, i = [], 0
    while i < len(word):
        for j in range(len(word), i, -1):
            piece = ("##" if i else "") + word[i:j]
            if piece in vocab:
                pieces.append(piece)
                i = j
                break
        else:
            pieces.append("[UNK]")
            i += 1
    return pieces


@pytest.mark.parametrize(
    ("student", "fragment"),
    [
        (wordpiece_shortest, "not the shortest"),
        (wordpiece_no_hashes, "prefix '##'"),
        (wordpiece_partial_unk, "the whole word becomes ['[UNK]']"),
        (lambda word, vocab: list(word), "The list of pieces"),
    ],
)
def test_wordpiece_mistakes(student, fragment):
    assert_wrong(check_wordpiece.verdict(student), fragment)


# --- pair_inputs and span_head_loss -------------------------------------------------------------------------


def pair_while(a, b, cls_id, sep_id, max_len):
    a, b = list(a), list(b)
    a_longer = len(a) > len(b)
    while len(a) + len(b) > max_len - 3:
        if len(a) > len(b) or (len(a) == len(b) and not a_longer):
            a = a[:-1]
        else:
            b = b[:-1]
    ids = [cls_id, *a, sep_id, *b, sep_id]
    return torch.tensor(ids), torch.tensor([0] * (len(a) + 2) + [1] * (len(b) + 1))


# the lengths first, then one slice each
def pair_closed_form(a, b, cls_id, sep_id, max_len):
    room, la, lb = max_len - 3, len(a), len(b)
    if la + lb > room:
        short = min(la, lb, room // 2)
        long_ = room - short
        if la > lb:
            la, lb = long_, short
        # on a tie (or a started shorter), a gets the smaller half
        elif lb > la or la == lb:
            la, lb = short, long_
    ids = torch.tensor([cls_id, *a[:la], sep_id, *b[:lb], sep_id], dtype=torch.long)
    types = (torch.arange(len(ids)) >= la + 2).long()
    return ids, types


def pair_token_by_token(a, b, cls_id, sep_id, max_len):
    keep_a, keep_b = len(a), len(b)
    a_started_longer = keep_a > keep_b
    for _ in range(max(len(a) + len(b) - (max_len - 3), 0)):
        if keep_a > keep_b or (keep_a == keep_b and not a_started_longer):
            keep_a -= 1
        else:
            keep_b -= 1
    ids, types = [cls_id], [0]
    for x in a[:keep_a]:
        ids.append(x)
        types.append(0)
    ids.append(sep_id)
    types.append(0)
    for x in [*b[:keep_b], sep_id]:
        ids.append(x)
        types.append(1)
    return torch.tensor(ids, dtype=torch.long), torch.tensor(types, dtype=torch.long)


def span_loss_log_softmax(h, W, b, starts, ends, context_mask):
    logits = torch.einsum("bnd,kd->bnk", h, W) + b
    logp = torch.log_softmax(
        logits.masked_fill(~context_mask[..., None], float("-inf")), dim=1
    )
    rows = torch.arange(h.shape[0])
    return -(logp[rows, starts, 0] + logp[rows, ends, 1]).mean() / 2


# a large negative number instead of -inf
def span_loss_linear(h, W, b, starts, ends, context_mask):
    start, end = torch.nn.functional.linear(h, W, b).unbind(-1)
    start = torch.where(context_mask, start, torch.full_like(start, -1e9))
    end = torch.where(context_mask, end, torch.full_like(end, -1e9))
    ce = torch.nn.functional.cross_entropy
    return 0.5 * ce(start, starts) + 0.5 * ce(end, ends)


# logsumexp over the context only; the bias cancels
def span_loss_loop(h, W, b, starts, ends, context_mask):
    total = 0.0
    for k in range(h.shape[0]):
        inside = h[k][context_mask[k]]  # (context, d)
        for row, gold in ((0, starts[k]), (1, ends[k])):
            scores = inside @ W[row]
            position = int(gold) - int(context_mask[k].nonzero()[0])
            total = total + torch.logsumexp(scores, 0) - scores[position]
    return total / (2 * h.shape[0])


@correct_answers(
    (check_pair_inputs, pair_while),
    (check_pair_inputs, pair_closed_form),
    (check_pair_inputs, pair_token_by_token),
    (check_span_head_loss, span_loss_log_softmax),
    (check_span_head_loss, span_loss_linear),
    (check_span_head_loss, span_loss_loop),
)
def test_new_builds_pass(checker, student):
    assert_passes(checker, student)


def _pair_with(
    *,
    b_first=False,
    a_on_tie=False,
    room=3,
    front=False,
    first_sep_type=0,
    second_sep=True,
    ids32=False,
):
    def student(a, b, cls_id, sep_id, max_len):
        a, b = list(a), list(b)
        a_longer = len(a) > len(b)
        while len(a) + len(b) > max(max_len - room, 0):
            if b_first:
                take_a = not b
            elif a_on_tie:
                take_a = len(a) >= len(b)
            else:
                take_a = len(a) > len(b) or (len(a) == len(b) and not a_longer)
            part = a if take_a else b
            del part[0 if front else -1]
        ids = [cls_id, *a, sep_id, *b] + ([sep_id] if second_sep else [])
        types = [0] * (len(a) + 1) + [first_sep_type] + [1] * (len(ids) - len(a) - 2)
        dtype = torch.int32 if ids32 else torch.long
        return torch.tensor(ids, dtype=dtype), torch.tensor(types, dtype=dtype)

    return student


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (_pair_with(b_first=True), ["longest first"]),
        (_pair_with(a_on_tie=True), ["shorter at the start loses"]),
        (_pair_with(room=2), ["three special tokens"]),
        (_pair_with(room=0), ["max_len - 3 together"]),
        (_pair_with(front=True), ["from the end of a part"]),
        (_pair_with(first_sep_type=1), ["the first [SEP] included"]),
        (_pair_with(second_sep=False), ["second [SEP]"]),
        (_pair_with(ids32=True), ["int32"]),
        # no truncation, no types
        (lambda a, b, c, s, m: torch.tensor([c, *a, s, *b, s]), ["(ids, types)"]),
        (lambda a, b, c, s, m: _pair_with()(a, b, c, s, m)[0], ["(ids, types)"]),
        (
            lambda a, b, c, s, m: bert.bert_inputs([(a, b)], c, s, 0, m),
            ["write this one yourself"],
        ),
    ],
)
def test_pair_inputs_mistakes(student, fragments):
    assert_wrong(check_pair_inputs.verdict(student), *fragments)


def _span_with(*, mask="both", fill=float("-inf"), swap=False, pair=2, batch="mean", probs=False, invert=False,
               detach=False):  # fmt: skip
    def student(h, W, b, starts, ends, context_mask):
        logits = h @ W.T + b
        start, end = (
            (logits[..., 1], logits[..., 0])
            if swap
            else (logits[..., 0], logits[..., 1])
        )
        outside = context_mask if invert else ~context_mask
        if mask in ("both", "start"):
            start = start.masked_fill(outside, fill)
        if mask in ("both", "end"):
            end = end.masked_fill(outside, fill)
        if probs:
            start, end = start.softmax(-1), end.softmax(-1)
        ce = torch.nn.functional.cross_entropy
        loss = (
            ce(start, starts, reduction=batch) + ce(end, ends, reduction=batch)
        ) / pair
        return loss.detach() if detach else loss

    return student


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (_span_with(mask="none"), ["to -inf before the softmax"]),
        (_span_with(fill=0.0), ["not 0"]),
        (_span_with(mask="start"), ["end logits outside the context too"]),
        (_span_with(mask="end"), ["start logits outside the context too"]),
        (_span_with(swap=True), ["Row 0 of W"]),
        (_span_with(pair=1), ["(L_start + L_end) / 2"]),
        (_span_with(batch="sum"), ["Average over the batch"]),
        (_span_with(probs=True), ["not probabilities"]),
        (_span_with(invert=True), ["The loss"]),
        (_span_with(detach=True), ["The loss"]),
        (
            lambda h, W, b, s, e, m: bert.span_loss(
                *bert.SpanHead(2)(h[..., :2]), s, e
            ),
            ["write this one yourself"],
        ),
    ],
)
def test_span_head_loss_mistakes(student, fragments):
    assert_wrong(check_span_head_loss.verdict(student), *fragments)


def squad_no_normalisation(prediction, gold):
    p, g = prediction.split(), gold.split()
    common = sum((Counter(p) & Counter(g)).values())
    if not p or not g or common == 0:
        return float(p == g)
    return 2 * common / (len(p) + len(g))


def squad_sets(prediction, gold):
    p, g = _normalised(prediction), _normalised(gold)
    if not p or not g:
        return float(p == g)
    common = len(set(p) & set(g))
    return (
        0.0
        if common == 0
        else 2
        * (common / len(p))
        * (common / len(g))
        / (common / len(p) + common / len(g))
    )


def squad_precision(prediction, gold):
    p, g = _normalised(prediction), _normalised(gold)
    if not p or not g:
        return float(p == g)
    return sum((Counter(p) & Counter(g)).values()) / len(p)


@pytest.mark.parametrize(
    ("student", "fragment"),
    [
        (squad_no_normalisation, "Normalise both answers first"),
        (squad_sets, "with multiplicity"),
        (squad_precision, "not the precision alone"),
        (lambda p, g: float(_normalised(p) == _normalised(g)), "The F1"),
    ],
)
def test_squad_f1_mistakes(student, fragment):
    assert_wrong(check_squad_f1.verdict(student), fragment)


# --- issue 17: each class of gap, with answers written to slip through it -------------------------------------


# the longest piece is never the whole rest of the word
def wordpiece_end_off_by_one(word, vocab):
    pieces, start = [], 0
    while start < len(word):
        for end in range(
            len(word) - 1 if len(word) - start > 1 else len(word), start, -1
        ):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                break
        else:
            return ["[UNK]"]
        pieces.append(piece)
        start = end
    return pieces


def squad_split_on_punctuation(prediction, gold):  # "don't" becomes "don t", not "dont"
    def norm(s):
        return [
            w
            for w in re.findall(r"[a-z0-9]+", s.lower())
            if w not in {"a", "an", "the"}
        ]

    p, g = norm(prediction), norm(gold)
    if not p or not g:
        return float(p == g)
    n = sum((Counter(p) & Counter(g)).values())
    return 0.0 if n == 0 else 2 * n / (len(p) + len(g))


def squad_one_empty_is_one(prediction, gold):
    p, g = _normalised(prediction), _normalised(gold)
    if not p or not g:
        return 1.0
    return squad_f1_translate(prediction, gold)


# a table of the shown cases, 0.5 elsewhere
def squad_unnormalised_lookup(prediction, gold):
    return {
        ("the Eiffel Tower", "Eiffel Tower"): 1.0,
        ("Denver Broncos", "The Denver Broncos!"): 1.0,
    }.get((prediction, gold), 0.5)


@pytest.mark.parametrize(
    ("checker", "student", "fragments"),
    [
        (check_wordpiece, wordpiece.wordpiece, ["the companion's own"]),
        (
            check_wordpiece,
            lambda w, v: wordpiece.wordpiece(w, v),
            ["write this one yourself"],
        ),
        (check_wordpiece, wordpiece_end_off_by_one, ["The list of pieces"]),
        (
            check_squad_f1,
            lambda p, g: metrics.squad_f1(p, g),
            ["write this one yourself"],
        ),
        (
            check_squad_f1,
            lambda p, g: squad_f1_translate(metrics.normalize_answer(p), g),
            ["write this one yourself"],
        ),
        (check_squad_f1, squad_split_on_punctuation, ["don't stop"]),
        (check_squad_f1, squad_one_empty_is_one, ["only the prediction is empty"]),
        (check_squad_f1, squad_unnormalised_lookup, ["The F1"]),
    ],
)
def test_issue_17_gaps_are_closed(checker, student, fragments):
    assert_wrong(checker.verdict(student), *fragments)


def test_wordpiece_off_by_one_does_not_get_an_unrelated_hint():
    verdict = check_wordpiece.verdict(wordpiece_end_off_by_one)
    assert verdict.status == "wrong" and "looked up with the prefix" not in (
        verdict.hint or ""
    )


def test_the_block_parameters_question_states_the_count():
    """Chapter 7's pen-and-paper answer: 12d² + 13d for BERT-large, recomputed from a block's layers."""
    from torch import nn

    from tools import notebooks

    d = 1024
    layers = [nn.Linear(d, d) for _ in range(4)] + [
        nn.Linear(d, 4 * d),
        nn.Linear(4 * d, d),
    ]
    layers += [nn.LayerNorm(d), nn.LayerNorm(d)]
    count = sum(p.numel() for layer in layers for p in layer.parameters())
    assert count == 12 * d**2 + 13 * d
    text = (notebooks.BOOK / "07_bert.md").read_text()
    answer = text[text.index("{solution-start} ex-block-parameters") :].split(
        "{solution-end}"
    )[0]
    assert f"{count:,}".replace(",", "{,}") in answer


# --- best_span (span decoding) ------------------------------------------------------------------------------


def span_by_loops(start_logits, end_logits, context_mask, max_len):
    """Every allowed (i, j) of each row in row-major order; a pair replaces the best only when strictly
    better, so the first of tied pairs stays."""
    out = []
    for s, e, m in zip(
        start_logits.tolist(), end_logits.tolist(), context_mask.tolist(), strict=True
    ):
        best = None
        for i in range(len(s)):
            for j in range(i, min(len(s), i + max_len)):
                if m[i] and m[j] and (best is None or s[i] + e[j] > best[0]):
                    best = (s[i] + e[j], i, j)
        out.append(best[1:])
    return torch.tensor(out)


def span_by_offsets(start_logits, end_logits, context_mask, max_len):
    """The (n, n) matrix of offsets j − i decides which pairs are allowed; the first maximum of each flattened
    row of scores is the row-major first."""
    b, n = start_logits.shape
    offset = torch.arange(n)[None, :] - torch.arange(n)[:, None]
    allowed = (offset >= 0) & (offset < max_len)
    allowed = allowed & context_mask[:, :, None] & context_mask[:, None, :]
    scores = start_logits[:, :, None] + end_logits[:, None, :]
    flat = torch.where(allowed, scores, -torch.inf).flatten(1).argmax(1)
    return torch.stack([flat // n, flat % n], dim=1)


def span_by_windows(start_logits, end_logits, context_mask, max_len):
    """For each start, the best end in its window of max_len tokens (NumPy's argmax, the first on a tie);
    then the best start, kept when strictly better."""
    import numpy as np

    s, e, m = (t.numpy() for t in (start_logits.double(), end_logits, context_mask))
    rows = []
    for b in range(s.shape[0]):
        best, pair = -np.inf, None
        for i in np.flatnonzero(m[b]):
            window = np.where(m[b, i : i + max_len], e[b, i : i + max_len], -np.inf)
            j = int(np.argmax(window))
            if s[b, i] + window[j] > best:
                best, pair = s[b, i] + window[j], (int(i), int(i) + j)
        rows.append(pair)
    return torch.tensor(rows, dtype=torch.long)


@correct_answers(
    (check_best_span, span_by_loops),
    (check_best_span, span_by_offsets),
    (check_best_span, span_by_windows),
)
def test_best_span_correct_answers_pass(checker, student):
    assert_passes(checker, student)


def _span_mistake(**kw):
    """span_by_offsets with one rule changed."""

    def student(start_logits, end_logits, context_mask, max_len):
        b, n = start_logits.shape
        offset = torch.arange(n)[None, :] - torch.arange(n)[:, None]
        # "reverse": the length rule on |j − i|, an end before the start allowed
        offset = offset.abs() if kw.get("reverse") else offset
        hi = max_len + 1 if kw.get("inclusive") else max_len
        allowed = (offset >= 0) & (offset < hi if not kw.get("no_length") else True)
        if not kw.get("no_mask"):
            allowed = allowed & context_mask[:, :, None] & context_mask[:, None, :]
        scores = start_logits[:, :, None] + end_logits[:, None, :]
        scores = torch.where(allowed, scores, -torch.inf).flatten(1)
        if kw.get("last_tie"):
            flat = n * n - 1 - scores.flip(1).argmax(1)
        else:
            flat = scores.argmax(1)
        pair = torch.stack([flat // n, flat % n], dim=1)
        return pair.flip(1) if kw.get("swapped") else pair

    return student


def _span_separate(start_logits, end_logits, context_mask, max_len):
    start = start_logits.masked_fill(~context_mask, -torch.inf).argmax(1)
    end = end_logits.masked_fill(~context_mask, -torch.inf).argmax(1)
    return torch.stack([start, end], dim=1)


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (_span_mistake(reverse=True), ["only spans with i <= j"]),
        (_span_mistake(no_mask=True), ["context_mask is True"]),
        (_span_mistake(inclusive=True), ["Off by one"]),
        (_span_mistake(no_length=True), ["at most max_len tokens"]),
        (_span_mistake(last_tie=True), ["keep the first best pair"]),
        (_span_mistake(swapped=True), ["[start, end], in that order"]),
        (_span_separate, ["best start and the best end separately"]),
        (lambda *a: span_by_offsets(*a).int(), ["int32"]),
    ],
)
def test_best_span_wrong_answers_are_named(student, fragments):
    assert_wrong(check_best_span.verdict(student), *fragments)
