"""The chapter-7 checkers accept independently written correct answers and reject plausible wrong ones, naming the
mistake."""

import re
import string
from collections import Counter

import pytest
import torch
from checker_testing import assert_passes, assert_wrong, correct_answers, raises_boom, stub

from companion import wordpiece
from companion.data import bert_pretraining, metrics
from companion.exercises.bert import check_bert_embeddings, check_mlm_masking, check_squad_f1, check_wordpiece
from companion.transformer import LayerNorm

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
        candidates = [(j, ("##" if i else "") + word[i:j]) for j in range(i + 1, len(word) + 1)]
        found = [c for c in candidates if c[1] in vocab]
        if not found:
            return ["[UNK]"]
        j, piece = max(found)
        pieces.append(piece)
        i = j
    return pieces


def mlm_with_indexing(ids, chosen, u, random_ids, mask_id):
    inputs, labels = ids.clone(), torch.full_like(ids, -100)
    labels[chosen] = ids[chosen]
    inputs[chosen & (u < 0.8)] = mask_id
    rnd = chosen & (u >= 0.8) & (u < 0.9)
    inputs[rnd] = random_ids[rnd]
    return inputs, labels


def mlm_loop(ids, chosen, u, random_ids, mask_id):
    inputs, labels = ids.tolist(), ids.tolist()
    for b in range(ids.shape[0]):
        for t in range(ids.shape[1]):
            if not chosen[b, t]:
                labels[b][t] = -100
            elif u[b, t] < 0.8:
                inputs[b][t] = mask_id
            elif u[b, t] < 0.9:
                inputs[b][t] = int(random_ids[b, t])
    return torch.tensor(inputs), torch.tensor(labels)


def embeddings_with_layer_norm_module(ids, token_types, E, P, T, gamma, beta):
    norm = LayerNorm(E.shape[1], eps=1e-12)
    with torch.no_grad():
        norm.weight.copy_(gamma)
        norm.bias.copy_(beta)
        return norm(E[ids] + P[: ids.shape[1]].unsqueeze(0) + T[token_types])


def embeddings_with_torch(ids, token_types, E, P, T, gamma, beta):
    positions = torch.arange(ids.shape[1]).expand_as(ids)
    x = torch.nn.functional.embedding(ids, E) + P[positions] + torch.nn.functional.embedding(token_types, T)
    return torch.nn.functional.layer_norm(x, (E.shape[1],), gamma, beta, eps=1e-12)


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
        piece = next((p if first else "##" + p for p in prefixes if (p if first else "##" + p) in vocab), None)
        if piece is None:
            return ["[UNK]"]
        out.append(piece)
        rest, first = rest[len(piece) - (0 if first else 2) :], False
    return out


def _normalised(text):
    table = str.maketrans("", "", string.punctuation)
    return [w for w in text.lower().translate(table).split() if w not in {"a", "an", "the"}]


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
    (check_mlm_masking, mlm_with_indexing),
    (check_mlm_masking, mlm_loop),
    (check_bert_embeddings, embeddings_with_layer_norm_module),
    (check_bert_embeddings, embeddings_with_torch),
    (check_squad_f1, squad_f1_translate),
    (check_squad_f1, squad_f1_by_hand),
    (check_squad_f1, squad_f1_regex),
)
def test_correct_answers_pass(checker, student):
    assert_passes(checker, student)


@pytest.mark.parametrize("checker", [check_wordpiece, check_mlm_masking, check_bert_embeddings, check_squad_f1])
def test_stub_is_not_attempted_and_a_crash_is_reported(checker):
    assert checker.verdict(stub).status == "not attempted"
    assert_wrong(checker.verdict(raises_boom), "raised RuntimeError: boom")


def test_mlm_masking_agrees_with_the_companions_masking():
    """The exercise's rule is the one bert_pretraining.mask_tokens applies: the same draws give the same result."""
    ids = torch.randint(5, 100, (4, 30), generator=torch.Generator().manual_seed(0))
    inputs, labels = bert_pretraining.mask_tokens(ids, 100, 4, [0, 1, 2, 3], generator=torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(1)  # replay mask_tokens' draws
    chosen = torch.rand(ids.shape, generator=g) < 0.15
    u = torch.rand(ids.shape, generator=g)
    candidates = torch.arange(5, 100)
    random_ids = candidates[torch.randint(len(candidates), ids.shape, generator=g)]
    ours = mlm_loop(ids, chosen, u, random_ids, 4)
    assert torch.equal(ours[0], inputs) and torch.equal(ours[1], labels)


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


def mlm_labels_everywhere(ids, chosen, u, random_ids, mask_id):
    inputs, _ = mlm_with_indexing(ids, chosen, u, random_ids, mask_id)
    return inputs, ids.clone()


def mlm_labels_zero(ids, chosen, u, random_ids, mask_id):
    inputs, labels = mlm_with_indexing(ids, chosen, u, random_ids, mask_id)
    return inputs, torch.where(chosen, labels, torch.zeros_like(labels))


def mlm_mask_all(ids, chosen, u, random_ids, mask_id):
    _, labels = mlm_with_indexing(ids, chosen, u, random_ids, mask_id)
    return torch.where(chosen, torch.full_like(ids, mask_id), ids), labels


def mlm_random_in_top_band(ids, chosen, u, random_ids, mask_id):
    inputs, labels = ids.clone(), torch.where(chosen, ids, torch.full_like(ids, -100))
    inputs[chosen & (u < 0.8)] = mask_id
    inputs[chosen & (u >= 0.9)] = random_ids[chosen & (u >= 0.9)]
    return inputs, labels


def mlm_off_by_boundary(ids, chosen, u, random_ids, mask_id):
    inputs, labels = ids.clone(), torch.where(chosen, ids, torch.full_like(ids, -100))
    inputs[chosen & (u <= 0.8)] = mask_id  # u = 0.8 belongs to the random band
    rnd = chosen & (u > 0.8) & (u < 0.9)
    inputs[rnd] = random_ids[rnd]
    return inputs, labels


@pytest.mark.parametrize(
    ("student", "fragment"),
    [
        (mlm_labels_everywhere, "-100 (ignored by the loss)"),
        (mlm_labels_zero, "not 0 (a real id)"),
        (mlm_mask_all, "Only 80 %"),
        (mlm_random_in_top_band, "0.8 <= u < 0.9"),
        (mlm_off_by_boundary, "(inputs, labels)"),
        (lambda ids, chosen, u, r, m: ids, "(inputs, labels)"),
    ],
)
def test_mlm_masking_mistakes(student, fragment):
    assert_wrong(check_mlm_masking.verdict(student), fragment)


def embeddings_without_types(ids, token_types, E, P, T, gamma, beta):
    return embeddings_with_torch(ids, torch.zeros_like(token_types), E, P, T - T[0], gamma, beta)


def embeddings_without_norm(ids, token_types, E, P, T, gamma, beta):
    return E[ids] + P[: ids.shape[1]] + T[token_types]


def embeddings_from_position_one(ids, token_types, E, P, T, gamma, beta):
    x = E[ids] + P[1 : ids.shape[1] + 1] + T[token_types]
    return torch.nn.functional.layer_norm(x, (E.shape[1],), gamma, beta, eps=1e-12)


@pytest.mark.parametrize(
    ("student", "fragment"),
    [
        (embeddings_without_types, "token-type"),
        (embeddings_without_norm, "normalises the sum with LayerNorm"),
        (embeddings_from_position_one, "Positions start at 0"),
        (lambda ids, tt, E, P, T, g, b: E[ids], "The embeddings"),
    ],
)
def test_bert_embeddings_mistakes(student, fragment):
    assert_wrong(check_bert_embeddings.verdict(student), fragment)


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
    return 0.0 if common == 0 else 2 * (common / len(p)) * (common / len(g)) / (common / len(p) + common / len(g))


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


def wordpiece_end_off_by_one(word, vocab):  # the longest piece is never the whole rest of the word
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word) - 1 if len(word) - start > 1 else len(word), start, -1):
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
        return [w for w in re.findall(r"[a-z0-9]+", s.lower()) if w not in {"a", "an", "the"}]

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


def squad_unnormalised_lookup(prediction, gold):  # a table of the shown cases, 0.5 elsewhere
    return {("the Eiffel Tower", "Eiffel Tower"): 1.0, ("Denver Broncos", "The Denver Broncos!"): 1.0}.get(
        (prediction, gold), 0.5
    )


def embeddings_default_eps(ids, token_types, E, P, T, gamma, beta):
    x = E[ids] + P[: ids.shape[1]] + T[token_types]
    return torch.nn.functional.layer_norm(x, (E.shape[1],), gamma, beta)  # eps = 1e-5


def mlm_float32(ids, chosen, u, random_ids, mask_id):  # compares a float32 copy of u: 0.8 rounds up
    return mlm_with_indexing(ids, chosen, u.float(), random_ids, mask_id)


@pytest.mark.parametrize(
    ("checker", "student", "fragments"),
    [
        (check_wordpiece, wordpiece.wordpiece, ["the companion's own"]),
        (check_wordpiece, lambda w, v: wordpiece.wordpiece(w, v), ["write this one yourself"]),
        (check_wordpiece, wordpiece_end_off_by_one, ["The list of pieces"]),
        (check_squad_f1, lambda p, g: metrics.squad_f1(p, g), ["write this one yourself"]),
        (check_squad_f1, lambda p, g: squad_f1_translate(metrics.normalize_answer(p), g), ["write this one yourself"]),
        (check_squad_f1, squad_split_on_punctuation, ["don't stop"]),
        (check_squad_f1, squad_one_empty_is_one, ["only the prediction is empty"]),
        (check_squad_f1, squad_unnormalised_lookup, ["The F1"]),
        (check_bert_embeddings, embeddings_default_eps, ["nearly constant rows", "eps = 1e-12"]),
    ],
)
def test_issue_17_gaps_are_closed(checker, student, fragments):
    assert_wrong(checker.verdict(student), *fragments)


def test_wordpiece_off_by_one_does_not_get_an_unrelated_hint():
    verdict = check_wordpiece.verdict(wordpiece_end_off_by_one)
    assert verdict.status == "wrong" and "looked up with the prefix" not in (verdict.hint or "")


def test_mlm_boundaries_are_exact_and_shown():
    verdict = check_mlm_masking.verdict(lambda ids, chosen, u, r, m: (ids, ids))
    assert_wrong(verdict, "u = tensor(", "0.8000", "0.9000")
    assert check_mlm_masking.verdict(mlm_float32).passed  # float32 or float64, the bands come out the same


def test_the_block_parameters_question_states_the_count():
    """Chapter 7's pen-and-paper answer: 12d² + 13d for BERT-large, recomputed from a block's layers."""
    from torch import nn

    from tools import notebooks

    d = 1024
    layers = [nn.Linear(d, d) for _ in range(4)] + [nn.Linear(d, 4 * d), nn.Linear(4 * d, d)]
    layers += [nn.LayerNorm(d), nn.LayerNorm(d)]
    count = sum(p.numel() for layer in layers for p in layer.parameters())
    assert count == 12 * d**2 + 13 * d
    text = (notebooks.BOOK / "07_bert.md").read_text()
    answer = text[text.index("{solution-start} ex-block-parameters") :].split("{solution-end}")[0]
    assert f"{count:,}".replace(",", "{,}") in answer
