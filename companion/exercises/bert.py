"""Checkers for chapter 7, *BERT, and using pretrained models*.

==========================  =========================================================================================
checker                     what the student writes
==========================  =========================================================================================
``check_wordpiece``         ``wordpiece(word, vocab) -> list[str]``: greedy longest match, ``##`` continuations,
                            ``["[UNK]"]`` when the word cannot be split completely
``check_mlm_masking``       ``mlm_masking(ids, chosen, u, random_ids, mask_id) -> (inputs, labels)``: 80/10/10
``check_bert_embeddings``   ``bert_embeddings(ids, token_types, E, P, E_type, gamma, beta) -> (B, n, d)``
``check_squad_f1``          ``squad_f1(prediction, gold) -> float``: F1 of the bags of normalised tokens
``check_best_span``         ``best_span(start_logits, end_logits, context_mask, max_len) -> (B, 2)``: the best
                            start ≤ end within the context, at most ``max_len`` tokens long
==========================  =========================================================================================
"""

from __future__ import annotations

import string
from collections import Counter

import torch

from .. import bert
from .. import wordpiece as wp
from ..data import metrics
from .checking import case, compare

__all__ = ["check_wordpiece", "check_mlm_masking", "check_bert_embeddings", "check_squad_f1", "check_best_span"]


# --- WordPiece ----------------------------------------------------------------------------------------------

_VOCAB = {t: i for i, t in enumerate(["[UNK]", "un", "##aff", "##able", "a", "##ff", "##a", "##b", "##le", "play",
                                       "##ing", "##in", "##g", "p", "##ay", "u", "##n", "the"])}  # fmt: skip


def _wordpiece_reference(word: str, vocab: dict[str, int]) -> list[str]:
    return wp.wordpiece(word, vocab, "[UNK]")


def _wordpiece_variant(word: str, vocab: dict[str, int], *, shortest=False, hashes=True, partial=False) -> list[str]:
    pieces, start = [], 0
    while start < len(word):
        ends = range(start + 1, len(word) + 1) if shortest else range(len(word), start, -1)
        for end in ends:
            piece = word[start:end] if start == 0 or not hashes else "##" + word[start:end]
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
        case("unplayable", _VOCAB, why="no piece starts with 'unp' or '##p...': the whole word is unknown"),
        case("aaaaa", small, why="longest match: aa, ##aa, ##a"),
        case("ab", small, why="'b' exists only at the start of a word, not as '##b'"),
        case("the", _VOCAB),
    ]


def _random_words() -> list:
    """Random words over the letters of the vocabularies: some split, some do not."""
    small = {"[UNK]": 0, "a": 1, "##a": 2, "##aa": 3, "aa": 4, "b": 5, "##b": 6, "ab": 7}
    out = []
    for vocab, letters in ((_VOCAB, "unafbleping"), (small, "ab"), (small, "abc")):
        for _ in range(3):
            n = int(torch.randint(1, 9, ()))
            word = "".join(letters[i] for i in torch.randint(len(letters), (n,)).tolist())
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


# --- masked-LM masking --------------------------------------------------------------------------------------


def _mlm_reference(ids, chosen, u, random_ids, mask_id):
    inputs = torch.where(chosen & (u < 0.8), torch.full_like(ids, mask_id), ids)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_ids, inputs)
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    return inputs, labels


def _mlm_variant(ids, chosen, u, random_ids, mask_id, *, labels_everywhere=False, ignore=-100, all_masked=False,
                 random_high=False):  # fmt: skip
    if all_masked:
        inputs = torch.where(chosen, torch.full_like(ids, mask_id), ids)
    else:
        inputs = torch.where(chosen & (u < 0.8), torch.full_like(ids, mask_id), ids)
        band = (u >= 0.9) if random_high else ((u >= 0.8) & (u < 0.9))
        inputs = torch.where(chosen & band, random_ids, inputs)
    labels = ids.clone() if labels_everywhere else torch.where(chosen, ids, torch.full_like(ids, ignore))
    return inputs, labels


def _mlm_cases() -> list:
    out = []
    for shape, mask_id in (((2, 10), 4), ((1, 30), 103), ((3, 7), 1)):
        ids = torch.randint(5, 200, shape)
        chosen = torch.rand(shape) < 0.5
        u = torch.rand(shape, dtype=torch.float64)
        u[0, :4] = torch.tensor([0.79, 0.8, 0.9, 0.89], dtype=torch.float64)  # the boundaries of the bands
        chosen[0, :4] = True
        out.append(case(ids, chosen, u, torch.randint(5, 200, shape), mask_id, why=f"shape {shape}"))
    return out


check_mlm_masking = compare(
    "mlm_masking",
    _mlm_reference,
    _mlm_cases,
    ids=True,
    mistakes=[
        (
            lambda *a: _mlm_variant(*a, labels_everywhere=True),
            "The labels are -100 (ignored by the loss) at every position that was not chosen.",
        ),
        (
            lambda *a: _mlm_variant(*a, ignore=0),
            "Positions that were not chosen get the label -100, cross-entropy's ignore_index, not 0 (a real id).",
        ),
        (
            lambda *a: _mlm_variant(*a, all_masked=True),
            "Only 80 % of the chosen positions become [MASK] (u < 0.8); 10 % get a random id, 10 % stay as they are.",
        ),
        (
            lambda *a: _mlm_variant(*a, random_high=True),
            "The random id goes where 0.8 <= u < 0.9; where u >= 0.9 the token stays unchanged.",
        ),
    ],
    hint="inputs: mask_id where chosen and u < 0.8, random_ids where chosen and 0.8 <= u < 0.9, ids elsewhere; "
    "labels: ids where chosen, -100 elsewhere.",
    what="(inputs, labels)",
    atol=0,
    rtol=0,
)


# --- BERT's embedding layer ---------------------------------------------------------------------------------


def _embeddings_variant(
    ids, token_types, E, P, E_type, gamma, beta, *, types=True, norm=True, offset=0, axis=-1, eps=1e-12
):
    x = E[ids] + P[offset : offset + ids.shape[1]] + (E_type[token_types] if types else 0)
    if not norm:
        return x
    mean = x.mean(axis, keepdim=True)
    var = x.var(axis, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


def _embeddings_reference(ids, token_types, E, P, E_type, gamma, beta):
    return _embeddings_variant(ids, token_types, E, P, E_type, gamma, beta)


def _embeddings_cases() -> list:
    out = []
    for B, n, V, d, n_pos in ((2, 5, 11, 8, 9), (1, 9, 30, 16, 9), (3, 1, 7, 4, 4)):
        out.append(
            case(
                torch.randint(V, (B, n)),
                torch.randint(2, (B, n)),
                torch.randn(V, d),
                torch.randn(n_pos, d),
                torch.randn(2, d),
                1 + 0.5 * torch.randn(d),
                0.5 * torch.randn(d),
                why=f"B={B}, n={n}, vocabulary {V}, d={d}",
            )
        )
    d = 8  # nearly constant rows: their variance (1e-10) is far below 1e-5, so the LayerNorm's eps decides
    E = 1.0 + 1e-5 * torch.randn(5, d, dtype=torch.float64)
    zeros = torch.zeros(4, d, dtype=torch.float64)
    small = case(
        torch.randint(5, (2, 3)), torch.zeros(2, 3, dtype=torch.long), E, zeros, zeros[:2], zeros[0] + 1, zeros[0],
        why="float64, nearly constant rows (variance ~1e-10): eps = 1e-12 matters",
    )  # fmt: skip
    return [*out, small]


check_bert_embeddings = compare(
    "bert_embeddings",
    _embeddings_reference,
    _embeddings_cases,
    withhold=["companion.bert.BertEmbeddings.forward"],
    mistakes=[
        (
            lambda *a: _embeddings_variant(*a, types=False),
            "Add the token-type (segment) embedding E_type[token_types] too.",
        ),
        (lambda *a: _embeddings_variant(*a, norm=False), "BERT normalises the sum with LayerNorm (γ, β)."),
        (lambda *a: _embeddings_variant(*a, offset=1), "Positions start at 0: position t uses row P[t]."),
        (
            lambda *a: _embeddings_variant(*a, eps=1e-5),
            "BERT's LayerNorm uses eps = 1e-12, not PyTorch's default 1e-5 (it matters when a row is nearly "
            "constant): F.layer_norm(x, (d,), gamma, beta, eps=1e-12).",
        ),
        (
            lambda *a: _embeddings_variant(*a, axis=1),
            "LayerNorm takes the mean and variance over the features (the last axis), not over the positions.",
        ),
    ],
    hint="x = E[ids] + P[:n] + E_type[token_types]; then (x - mean) / sqrt(var + 1e-12) · gamma + beta over the last "
    "axis (biased variance).",
    what="The embeddings",
    atol=1e-4,
)


# --- SQuAD F1 -----------------------------------------------------------------------------------------------


def _squad_variant(prediction: str, gold: str, *, normalise=True, sets=False, score="f1") -> float:
    if normalise:
        pred, true = metrics.normalize_answer(prediction).split(), metrics.normalize_answer(gold).split()
    else:
        pred, true = prediction.split(), gold.split()
    if not pred or not true:
        return float(pred == true)
    same = len(set(pred) & set(true)) if sets else sum((Counter(pred) & Counter(true)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(true)
    return {"f1": 2 * precision * recall / (precision + recall), "precision": precision, "recall": recall}[score]


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
        p, g = (torch.randint(len(_WORDS), (int(torch.randint(0, 5, ())),)).tolist() for _ in range(2))
        out.append(case(" ".join(_WORDS[i] for i in p), " ".join(_WORDS[i] for i in g), why="random answers"))
    return out


def _squad_reference(prediction: str, gold: str) -> float:
    return metrics.squad_f1(prediction, gold)


check_squad_f1 = compare(
    "squad_f1",
    _squad_reference,
    [
        case("the Eiffel Tower", "Eiffel Tower", why="articles are dropped"),
        case("in Paris, France.", "Paris", why="punctuation and case are dropped"),
        case("Denver Broncos", "The Denver Broncos!", why="an exact match after normalisation"),
        case("one one two", "one two two three"),
        case("ha ha ha", "ha ha", why="tokens are counted with their multiplicity"),
        case("the cat sat", "a dog ran", why="nothing in common"),
        case("New York City in the USA", "new york", why="precision 2/5, recall 1"),
        case("The", "an", why="both empty after normalisation: 1"),
        case("The", "Paris", why="only the prediction is empty after normalisation: 0"),
        case("Paris", "a", why="only the gold answer is empty after normalisation: 0"),
        case("don't stop", "dont stop", why="punctuation inside a word is removed, not split on: dont"),
        case("U.S. army", "the US Army", why="U.S. becomes us"),
    ],
    hidden=_random_answers,
    withhold=["companion.data.metrics.squad_f1", "companion.data.metrics.normalize_answer"],
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
        (lambda p, g: _squad_variant(p, g, score="precision"), "F1 = 2PR/(P + R), not the precision alone."),
        (lambda p, g: _squad_variant(p, g, score="recall"), "F1 = 2PR/(P + R), not the recall alone."),
    ],
    hint="Normalise (lower-case, drop punctuation and a/an/the, split on whitespace); common = size of the "
    "Counter intersection; P = common/len(pred), R = common/len(gold), F1 = 2PR/(P+R); 1 if both are empty.",
    what="The F1",
)


# --- SQuAD's span decoding ----------------------------------------------------------------------------------


def _best_span_reference(start_logits, end_logits, context_mask, max_len):
    return bert.best_span(start_logits, end_logits, context_mask, max_len)


def _span_variant(start_logits, end_logits, context_mask, max_len, *, reverse=False, mask="both", length="<",
                  separate=False, relative=False, last_tie=False, swapped=False):  # fmt: skip
    """Loops over every (i, j), with one rule changed: the named mistakes of the exercise."""
    out = []
    for s, e, m in zip(start_logits.tolist(), end_logits.tolist(), context_mask.tolist(), strict=True):
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
                    if length == "<" and gap >= max_len or length == "<=" and gap > max_len:
                        continue
                    if mask == "both" and not (m[a] and m[b]) or mask == "start" and not m[a]:
                        continue
                    score = s[a] + e[b]
                    if best is None or score > best or last_tie and score == best:
                        best, i, j = score, a, b
        if relative:
            i, j = i - context[0], j - context[0]
        out.append([j, i] if swapped else [i, j])
    return torch.tensor(out, dtype=torch.long)


def _span_case(n_question, n_context, n_pad, max_len, *, integers=False, batch=1, why=""):
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
    big = torch.tensor([[0.0, 0, 0, 0, 9, 0, 0, 0, 0]])  # a large start logit at 4, a large end logit at 2
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
        q, c, pad = (int(torch.randint(low, high, ())) for low, high in ((1, 8), (1, 15), (0, 6)))
        max_len = int(torch.randint(1, c + 2, ()))
        out.append(_span_case(q, c, pad, max_len, integers=bool(torch.rand(()) < 0.5), batch=3))
    return out


check_best_span = compare(
    "best_span",
    _best_span_reference,
    _best_span_cases,
    hidden=_random_spans,
    withhold=["companion.bert.best_span"],
    ids=True,
    mistakes=[
        (lambda *a: _span_variant(*a, reverse=True), "The end cannot come before the start: only spans with i <= j."),
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
        (lambda *a: _span_variant(*a, length="none"), "A span has at most max_len tokens: require j - i < max_len."),
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
        (lambda *a: _span_variant(*a, swapped=True), "Each row is [start, end], in that order."),
    ],
    hint="For each row: among the pairs (i, j) with i <= j, j - i < max_len and context_mask True at i and at j, "
    "take the one with the largest start_logits[i] + end_logits[j] (the first in row-major order on a tie); "
    "return a LongTensor of shape (B, 2).",
    what="The spans",
    atol=0,
    rtol=0,
)
