"""Chapter 6's checkers: independently written correct answers pass, typical wrong ones get their hint."""

import math
from itertools import pairwise

import pytest
import torch
import torch.nn.functional as F
from checker_testing import assert_passes, assert_wrong, correct_answers, stub

from companion import bpe, gpt
from companion.exercises import generation
from companion.exercises.generation import (
    check_kv_attention_step,
    check_top_k_logits,
    check_top_p_logits,
)
from companion.exercises.gpt import (
    check_gpt_forward,
    check_learn_merges,
    check_merge,
    check_next_token_loss,
    check_sliding_windows,
)

CHECKERS = [
    check_merge,
    check_learn_merges,
    check_sliding_windows,
    check_next_token_loss,
    check_top_k_logits,
    check_top_p_logits,
    check_gpt_forward,
    check_kv_attention_step,
]


@pytest.mark.parametrize("checker", CHECKERS)
def test_stub_is_not_attempted(checker):
    verdict = checker.verdict(stub)
    assert verdict.status == "not attempted" and str(verdict).startswith(
        "NOT ATTEMPTED YET"
    )


@pytest.mark.parametrize("checker", CHECKERS)
def test_garbage_never_escapes(checker):
    for student in (
        lambda *a: None,
        lambda *a: 1 / 0,
        lambda *a: "text",
        lambda *a: torch.full((2,), float("nan")),
    ):
        assert checker.verdict(student).status == "wrong"
    assert checker.verdict(42).status == "wrong"


# --- independently written correct answers ------------------------------------------------------------------------


def merge_while(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def merge_iterator(ids, pair, new_id):
    out, it = [], iter(ids)
    pending = next(it, None)
    while pending is not None:
        nxt = next(it, None)
        if (pending, nxt) == tuple(pair):
            out.append(new_id)
            pending = next(it, None)
        else:
            out.append(pending)
            pending = nxt
    return out


# through a string of symbols: replace() is left to right, non-overlapping
def merge_bytes(ids, pair, new_id):
    symbols = "".join(chr(0x4E00 + i) for i in ids)
    merged = symbols.replace(
        chr(0x4E00 + pair[0]) + chr(0x4E00 + pair[1]), chr(0x4E00 + new_id)
    )
    return [ord(c) - 0x4E00 for c in merged]


def loss_full_logits(model, ids):
    # causal: the first n - 1 positions do not see the last token
    logits = model(ids)[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def loss_log_softmax(model, ids):
    logp = torch.log_softmax(model(ids[:, :-1]), dim=-1)
    return -logp.gather(-1, ids[:, 1:].unsqueeze(-1)).mean()


def loss_loop(model, ids):
    total, count = 0.0, 0
    logits = model(ids[:, :-1])
    for b in range(ids.shape[0]):
        for t in range(ids.shape[1] - 1):
            total = total - torch.log_softmax(logits[b, t], -1)[ids[b, t + 1]]
            count += 1
    return total / count


def top_k_sort(logits, k):
    kth = logits.sort(dim=-1, descending=True).values[..., k - 1 : k]
    return torch.where(logits >= kth, logits, torch.full_like(logits, float("-inf")))


def top_k_kthvalue(logits, k):
    kth = torch.kthvalue(logits, logits.shape[-1] - k + 1, dim=-1, keepdim=True).values
    out = logits.clone()
    out[out < kth] = float("-inf")
    return out


def top_k_topk(logits, k):
    """The k-th largest from torch.topk, every logit below it masked (ties with it kept)."""
    kth = logits.topk(k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, -math.inf)


def forward_loop(model, ids):
    positions = torch.arange(ids.shape[1])
    x = model.embed(ids) + model.pos.embedding(positions)
    for block in model.blocks:
        x = block(x)
    return model.lm_head(model.norm(x))


def forward_lm_head(model, ids):
    x = model.pos(model.embed(ids))
    for i in range(len(model.blocks)):
        x = model.blocks[i](x)
    return torch.nn.functional.linear(model.norm(x), model.embed.weight)


def forward_einsum(model, ids):
    x = model.embed.weight[ids] + model.pos.embedding.weight[: ids.shape[1]]
    for block in model.blocks:
        x = block(x)
    return torch.einsum("bnd,vd->bnv", model.norm(x), model.embed.weight)


def windows_loop(ids, length, stride):
    inputs, targets, i = [], [], 0
    while i + length + 1 <= len(ids):
        inputs.append(ids[i : i + length])
        targets.append(ids[i + 1 : i + length + 1])
        i += stride
    return torch.stack(inputs), torch.stack(targets)


def windows_index(ids, length, stride):
    starts = torch.arange(0, len(ids) - length, stride)
    rows = starts[:, None] + torch.arange(length)  # (K, n) positions
    return ids[rows], ids[rows + 1]


def windows_strided(ids, length, stride):
    k = (len(ids) - length - 1) // stride + 1
    w = ids.contiguous().as_strided((k, length + 1), (stride, 1))
    return w[:, :length].clone(), w[:, 1:].clone()


@correct_answers(
    (check_sliding_windows, windows_loop),
    (check_sliding_windows, windows_index),
    (check_sliding_windows, windows_strided),
    (check_merge, merge_while),
    (check_merge, merge_iterator),
    (check_merge, merge_bytes),
    (check_next_token_loss, loss_full_logits),
    (check_next_token_loss, loss_log_softmax),
    (check_next_token_loss, loss_loop),
    (check_top_k_logits, top_k_sort),
    (check_top_k_logits, top_k_topk),
    (check_top_k_logits, top_k_kthvalue),
    (check_gpt_forward, forward_lm_head),
    (check_gpt_forward, forward_loop),
    (check_gpt_forward, forward_einsum),
)
def test_correct_answers_pass(checker, student):
    assert_passes(checker, student)


# --- wrong answers get the hint that names their mistake ----------------------------------------------------------


def merge_overlapping(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
            i += 1  # forgets to skip the second id of the pair
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
                continue
            i += 1
        else:
            out.append(ids[i])
            i += 1
    return out


def merge_first(ids, pair, new_id):
    ids = list(ids)
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == tuple(pair):
            return ids[:i] + [new_id] + ids[i + 2 :]
    return ids


def merge_in_place(ids, pair, new_id):
    result = merge_while(ids, pair, new_id)
    ids[:] = result
    return result


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (merge_overlapping, ["may not overlap", "aaabdaaabac"]),
        (merge_first, ["every occurrence"]),
        (
            lambda ids, pair, new_id: merge_while(ids, pair[::-1], new_id),
            ["The pair is ordered"],
        ),
        (merge_in_place, ["changed its argument `ids` in place"]),
        (
            lambda ids, pair, new_id: merge_while(ids, pair, new_id)[:-1],
            ["The merged list"],
        ),
    ],
)
def test_merge_rejects_wrong_answers(student, fragments):
    assert_wrong(check_merge.verdict(student), *fragments)


def loss_no_shift(model, ids):
    return F.cross_entropy(model(ids).flatten(0, 1), ids.flatten())


def loss_backwards(model, ids):
    return F.cross_entropy(model(ids[:, 1:]).flatten(0, 1), ids[:, :-1].flatten())


def loss_sum(model, ids):
    return F.cross_entropy(
        model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten(), reduction="sum"
    )


def loss_probs(model, ids):
    return F.cross_entropy(
        torch.softmax(model(ids[:, :-1]), -1).flatten(0, 1), ids[:, 1:].flatten()
    )


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (loss_no_shift, ["Shift: position t predicts token t + 1"]),
        (loss_backwards, ["The shift goes the other way"]),
        (loss_sum, ["do not sum"]),
        (loss_probs, ["takes the logits"]),
        (lambda model, ids: model(ids[:, :-1]).mean(), ["The loss", "wrong"]),
    ],
)
def test_loss_rejects_wrong_answers(student, fragments):
    assert_wrong(check_next_token_loss.verdict(student), *fragments)


def _windows_from(starts, ids, length, shift=1):
    return torch.stack([ids[i : i + length] for i in starts]), torch.stack(
        [ids[i + shift : i + shift + length] for i in starts]
    )


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (
            lambda ids, n, s: _windows_from(range(0, len(ids) - n, s), ids, n, shift=0),
            ["shifted by one"],
        ),
        (
            lambda ids, n, s: _windows_from(range(0, len(ids) - n, s), ids, n)[::-1],
            ["Input first"],
        ),
        (
            lambda ids, n, s: _windows_from(range(0, len(ids) - n + 1, s), ids, n - 1),
            ["n + 1 ids"],
        ),
        (lambda ids, n, s: _windows_from(range(0, len(ids) - n), ids, n), ["not one"]),
        (lambda ids, n, s: _windows_from(range(0, len(ids) - n, n), ids, n), ["not n"]),
        (
            lambda ids, n, s: _windows_from(range(0, len(ids) - n - 1, s), ids, n),
            ["may end on the last id"],
        ),
        (
            lambda ids, n, s: _windows_from(range(s, len(ids) - n, s), ids, n),
            ["starts at position 0"],
        ),
        (lambda ids, n, s: (ids.unfold(0, n + 1, s),) * 2, ["each (K, n)"]),
        (lambda ids, n, s: tuple(w.int() for w in windows_loop(ids, n, s)), ["int64"]),
        (lambda ids, n, s: windows_loop(ids, n, s)[0], ["WRONG"]),
        (
            lambda ids, n, s: (
                windows_loop(ids, n, s)[0],
                windows_loop(ids, n, s)[1].flip(-1),
            ),
            ["The windows"],
        ),
    ],
)
def test_sliding_windows_rejects_wrong_answers(student, fragments):
    assert_wrong(check_sliding_windows.verdict(student), *fragments)


def top_k_zero(logits, k):
    kth = torch.topk(logits, k).values[..., -1:]
    return torch.where(logits >= kth, logits, torch.zeros_like(logits))


def top_k_smallest(logits, k):
    kth = torch.topk(logits, k, largest=False).values[..., -1:]
    return logits.masked_fill(logits > kth, float("-inf"))


def top_k_indices(logits, k):
    out = torch.full_like(logits, float("-inf"))
    idx = logits.topk(k).indices
    return out.scatter(-1, idx, logits.gather(-1, idx))


def top_k_keep_k_plus_one(logits, k):
    return top_k_sort(logits, min(k + 1, logits.shape[-1]))


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (top_k_zero, ["-inf", "not 0"]),
        (top_k_smallest, ["not the k smallest"]),
        (
            top_k_indices,
            ["tied with the k-th largest", "a tie at the k-th largest: keep both"],
        ),
        (top_k_keep_k_plus_one, ["The filtered logits", "torch.topk"]),
    ],
)
def test_top_k_rejects_wrong_answers(student, fragments):
    assert_wrong(check_top_k_logits.verdict(student), *fragments)


def forward_no_final_norm(model, ids):
    x = model.pos(model.embed(ids))
    for block in model.blocks:
        x = block(x)
    return x @ model.embed.weight.T


def forward_no_positions(model, ids):
    x = model.embed(ids)
    for block in model.blocks:
        x = block(x)
    return model.norm(x) @ model.embed.weight.T


def forward_no_blocks(model, ids):
    return model.norm(model.pos(model.embed(ids))) @ model.embed.weight.T


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (forward_no_final_norm, ["final layer norm"]),
        (forward_no_positions, ["Add the positions"]),
        (forward_no_blocks, ["every block"]),
        (
            lambda model, ids: model.norm(model.pos(model.embed(ids))),
            ["wrong shape", "(2, 6, 13)"],
        ),
        (
            lambda model, ids: forward_loop(model, ids).softmax(-1),
            ["The logits have the wrong values"],
        ),
    ],
)
def test_forward_rejects_wrong_answers(student, fragments):
    assert_wrong(check_gpt_forward.verdict(student), *fragments)


# --- issue 17: each class of gap, with answers written to slip through it -------------------------------------


# digits of other ids can contain the pair's
def merge_string_replace(ids, pair, new_id):
    text = " " + " ".join(map(str, ids)) + " "
    text = text.replace(f"{pair[0]} {pair[1]}", str(new_id))
    return [int(t) for t in text.split()]


def merge_lookup(ids, pair, new_id):  # a table of the shown cases' expected answers
    shown = {
        (97, 97): [256, 97, 98, 100, 256, 97, 98, 97, 99],
        (97, 98): [256, 257, 100, 256, 257, 97, 99],
    }
    return shown.get(tuple(pair), list(ids))


# every shown case's answer; the input unchanged otherwise
def merge_full_table(ids, pair, new_id):
    shown = {
        ((97, 97, 97, 98, 100, 97, 97, 97, 98, 97, 99), (97, 97)): [
            256,
            97,
            98,
            100,
            256,
            97,
            98,
            97,
            99,
        ],
        ((256, 97, 98, 100, 256, 97, 98, 97, 99), (97, 98)): [
            256,
            257,
            100,
            256,
            257,
            97,
            99,
        ],
        ((7, 7, 7, 7, 7), (7, 7)): [9, 9, 7],
        ((3, 4, 3, 4, 4, 3), (4, 3)): [3, 300, 4, 300],
        ((12, 3, 1, 23, 2, 3, 123), (2, 3)): [12, 3, 1, 23, 7, 123],
        ((1, 12, 21, 2, 1), (1, 2)): [1, 12, 21, 2, 1],
    }
    return shown.get((tuple(ids), tuple(pair)), list(ids))


def test_merge_table_of_the_shown_cases_fails_the_hidden_ones():
    # the hidden pair is drawn from the list, so that a case merges something: a table fails every run
    for _ in range(20):
        assert check_merge.verdict(merge_full_table).status == "wrong"


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (bpe.merge, ["the companion's own `companion.bpe.merge`"]),
        (
            lambda ids, pair, new_id: bpe.merge(ids, pair, new_id),
            ["write this one yourself"],
        ),
        (merge_string_replace, ["The merged list", "digits"]),
        (merge_lookup, ["The merged list"]),
    ],
)
def test_merge_closes_issue_17(student, fragments):
    assert_wrong(check_merge.verdict(student), *fragments)


def forward_blocks_not_chained(model, ids):
    x = model.pos(model.embed(ids))
    out = x
    for block in model.blocks:
        out = block(x)
    return model.norm(out) @ model.embed.weight.T


def forward_corrupts_weights(model, ids):
    with torch.no_grad():
        model.norm.weight.mul_(2)
    return forward_loop(model, ids)


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (lambda model, ids: model(ids), ["not call model(ids)"]),
        (lambda model, ids: gpt.GPT.forward(model, ids), ["write this one yourself"]),
        (forward_blocks_not_chained, ["Chain the blocks", "3-layer"]),
        (forward_corrupts_weights, ["changed its argument `model` in place"]),
    ],
)
def test_forward_closes_issue_17(student, fragments):
    assert_wrong(check_gpt_forward.verdict(student), *fragments)


def loss_item(model, ids):
    return loss_log_softmax(model, ids).item()


def loss_no_grad(model, ids):
    with torch.no_grad():
        return loss_log_softmax(model, ids)


def loss_corrupts_weights(model, ids):
    with torch.no_grad():
        model.embed.weight.zero_()
    return loss_log_softmax(model, ids)


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (gpt.next_token_loss, ["the companion's own"]),
        (
            lambda model, ids: gpt.next_token_loss(model, ids),
            ["write this one yourself"],
        ),
        (loss_item, ["is a plain number", ".item()"]),
        (loss_no_grad, ["carries no gradient", "torch.no_grad()"]),
        (
            lambda model, ids: loss_log_softmax(model, ids).detach(),
            ["carries no gradient"],
        ),
        (loss_corrupts_weights, ["changed its argument `model` in place"]),
    ],
)
def test_loss_closes_issue_17(student, fragments):
    assert_wrong(check_next_token_loss.verdict(student), *fragments)


# drops one of the k largest: -inf where a finite logit is expected
def top_k_minus_inf_in_kept(logits, k):
    return top_k_sort(logits, max(k - 1, 1)) if k > 1 else top_k_sort(logits, k)


def test_top_k_messages_tell_minus_inf_from_nan():
    verdict = check_top_k_logits.verdict(top_k_minus_inf_in_kept)
    assert_wrong(
        verdict,
        "The filtered logits contain an infinity where a finite value is expected",
    )
    assert "NaN" not in verdict.problem
    assert_wrong(check_top_k_logits.verdict(gpt.top_k_logits), "the companion's own")


def test_the_kv_cache_question_states_gpt3s_numbers():
    """Chapter 6's pen-and-paper answer: its byte counts, recomputed from the companion's GPT-3 configuration."""
    from tools import notebooks

    text = (notebooks.BOOK / "06_gpt.md").read_text()
    answer = text[text.index("{solution-start} ex-kv-cache-bytes") :].split(
        "{solution-end}"
    )[0]
    config = gpt.GPTConfig.gpt3()
    # keys and values, every block, 2 bytes a number
    per_token = 2 * config.n_layers * config.d_model * 2
    assert (config.n_layers, config.d_model) == (96, 12288)
    assert f"{per_token:,}".replace(",", "{,}") in answer
    assert f"{per_token * 2048:,}".replace(",", "{,}") in answer
    assert (
        f"{per_token * 2048 / 2**30:.1f} GiB" in answer
        and f"{per_token / 2**20:.1f} MiB" in answer
    )
    assert f" {round(175e9 * 2 / (per_token * 2048))} full sequences" in answer


# --- BPE training (issue 17: an exercise that builds the chapter's main algorithm) ----------------------------------


def learn_counter(words, num_merges):
    """Counter-based: recount every pair of every word after each merge."""
    from collections import Counter

    seqs = [list(w.encode("utf-8")) for w in words]
    merges = []
    for k in range(num_merges):
        counts = Counter()
        for s in seqs:
            counts.update(pairwise(s))
        if not counts:
            break
        best = max(counts.values())
        pair = min(p for p, c in counts.items() if c == best)
        seqs = [merge_while(s, pair, 256 + k) for s in seqs]
        merges.append(pair)
    return merges


def learn_dict_loops(words, num_merges):
    """Plain dicts and index loops over distinct words with their frequencies; ties by sorting."""
    freq = {}
    for w in words:
        key = tuple(w.encode("utf-8"))
        freq[key] = freq.get(key, 0) + 1
    vocab = [(list(k), n) for k, n in freq.items()]
    merges = []
    new_id = 256
    while len(merges) < num_merges:
        counts = {}
        for ids, n in vocab:
            for i in range(len(ids) - 1):
                counts[(ids[i], ids[i + 1])] = counts.get((ids[i], ids[i + 1]), 0) + n
        if not counts:
            break
        pair = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[0][0]
        vocab = [(merge_iterator(ids, pair, new_id), n) for ids, n in vocab]
        merges.append(pair)
        new_id += 1
    return merges


def learn_incremental(words, num_merges):
    """Incremental: count once, then after each merge subtract the changed words' old pairs and add their new ones."""
    from collections import Counter, defaultdict

    seqs = [list(w.encode("utf-8")) for w in words]
    counts = Counter()
    where = defaultdict(set)
    for j, s in enumerate(seqs):
        for p in pairwise(s):
            counts[p] += 1
            where[p].add(j)
    merges = []
    for k in range(num_merges):
        counts = +counts
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))
        for j in sorted(where.pop(pair, ())):
            old = seqs[j]
            counts.subtract(pairwise(old))
            seqs[j] = new = merge_bytes(old, pair, 256 + k)
            counts.update(pairwise(new))
            for p in pairwise(new):
                where[p].add(j)
        merges.append(pair)
    return merges


@pytest.mark.parametrize(
    "student", [learn_counter, learn_dict_loops, learn_incremental]
)
def test_learn_merges_correct_answers_pass(student):
    for _ in range(3):  # hidden cases are new on every run
        assert_passes(check_learn_merges, student)


def test_the_correct_answers_agree_with_the_companion_on_a_real_text():
    """The three answers above learn the companion's merges (themselves equal to Hugging Face's) on real words."""
    import re

    from companion.training import gpt_pretraining

    text = gpt_pretraining.pydoc_text()[:20_000]
    words = re.findall(bpe.GPT2_SPLIT_PATTERN, text)
    expected = list(bpe.train_bpe(text, 256 + 40))
    for student in (learn_counter, learn_dict_loops, learn_incremental):
        assert student(words, 40) == expected


def _wrong_learner(
    *,
    tie="min",
    joined=False,
    recount=True,
    overlap=False,
    shift=0,
    distinct=False,
    ords=False,
):
    """A student's BPE training with one mistake, written independently of the checker's own list of mistakes."""
    from collections import Counter

    def learn(words, num_merges):
        ws = list(dict.fromkeys(words)) if distinct else list(words)
        seqs = [[ord(c) for c in w] if ords else list(w.encode("utf-8")) for w in ws]
        if joined:
            seqs = [sum(seqs, [])]
        merges = []
        counts = Counter(p for s in seqs for p in pairwise(s))
        for k in range(max(num_merges + shift, 0)):
            if recount:
                counts = Counter(p for s in seqs for p in pairwise(s))
            if not counts:
                break
            best = max(counts.values())
            tied = [p for p, c in counts.items() if c == best]
            pair = {"min": min(tied), "max": max(tied), "first": tied[0]}[tie]
            if not recount:
                del counts[pair]
            merges.append(pair)
            if overlap:
                seqs = [merge_overlapping(s, pair, 256 + k) for s in seqs]
            else:
                seqs = [merge_while(s, pair, 256 + k) for s in seqs]
        return merges

    return learn


def learn_mutating(words, num_merges):
    result = learn_counter(words, num_merges)
    words.sort()
    return result


# the companion's format, {pair: new_id}, where the task asks for a list
def learn_dict(words, num_merges):
    return {p: 256 + k for k, p in enumerate(learn_counter(words, num_merges))}


# a table of the shown cases, copied from WRONG messages
def learn_lookup(words, num_merges):
    shown = {
        ("aaabdaaabac",): [(97, 97), (97, 98), (256, 257)],
        ("ab", "ab", "ab"): [(97, 98)],
    }
    return shown.get(tuple(words), [])


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (
            _wrong_learner(tie="max"),
            ["Ties go to the smallest pair: among", "aaabdaaabac", "expected: list"],
        ),
        (_wrong_learner(tie="first"), ["not to the pair counted first"]),
        (
            _wrong_learner(joined=True),
            ["Count pairs inside each word only", "['ab', 'ab', 'ab']"],
        ),
        (
            _wrong_learner(recount=False),
            ["Count the pairs again after every merge", "(256, 257)"],
        ),
        (_wrong_learner(overlap=True), ["Merge left to right without overlaps"]),
        (_wrong_learner(shift=-1), ["one too few"]),
        (_wrong_learner(shift=+1), ["one too many"]),
        (_wrong_learner(distinct=True), ["Every occurrence of a word counts"]),
        (_wrong_learner(ords=True), ["UTF-8 bytes", "café"]),
        (learn_mutating, ["changed its argument `words` in place"]),
        (learn_dict, ["The merges", "expected: list"]),
        (learn_lookup, ["The merges"]),
        (
            lambda words, n: list(bpe.train_bpe("\n".join(words), 256 + n, r"[^\n]+")),
            ["write this one yourself"],
        ),
        (
            lambda words, n: list(
                bpe.BPETokenizer.train("".join(words), 257 + n).merges
            ),
            ["write this one yourself"],
        ),
    ],
)
def test_learn_merges_rejects_wrong_answers(student, fragments):
    assert_wrong(check_learn_merges.verdict(student), *fragments)


def test_learn_merges_names_a_mistake_only_when_every_case_agrees():
    """Ties broken the wrong way AND words joined: neither hint fits every case, so neither is named."""
    verdict = check_learn_merges.verdict(_wrong_learner(tie="max", joined=True))
    assert_wrong(verdict, "The merges")
    assert "Ties go" not in str(verdict) and "inside each word" not in str(verdict)


_SHOWN_MERGES = [
    (["aaabdaaabac"], 3),
    (["low", "low", "lower", "newest", "newest", "widest"], 6),
    (["ab", "ab", "ab"], 3),
    (["aaaa", "aaa"], 3),
    (["café", "é", "naïve"], 3),
    ([" the", "the", " then", " cat", " the"], 5),
    (["xy", "yx", "xy", "yx"], 2),
    (["abc", "bca"], 0),
    ([], 2),
    (["", "a", "b"], 2),
]


def test_learn_merges_shows_a_failing_hidden_case_with_its_seed():
    """A table of every shown case's answer passes the shown cases and fails a hidden one, shown with its seed."""
    table = {(tuple(w), n): learn_counter(w, n) for w, n in _SHOWN_MERGES}

    def lookup(words, num_merges):
        return table.get((tuple(words), num_merges), [(0, 0)])

    verdict = check_learn_merges.verdict(lookup)
    assert_wrong(verdict, "a hidden random case, seed", "random words")


# --- top-p filtering and one step with the key/value cache ---------------------------------------------------------


def top_p_loop(logits, p):  # row by row, the probabilities added from the largest down
    out = logits.clone()
    for row in out.reshape(-1, out.shape[-1]):
        probs = torch.softmax(row, dim=-1)
        total = 0.0
        for value in sorted(probs.tolist(), reverse=True):
            total += value
            if total >= p:
                break
        row[probs < value] = float("-inf")
    return out


def top_p_threshold(logits, p):
    values = logits.sort(dim=-1, descending=True).values
    probs = values.softmax(dim=-1)
    kept = probs.cumsum(dim=-1) - probs < p
    threshold = values.masked_fill(~kept, float("inf")).amin(dim=-1, keepdim=True)
    return torch.where(logits >= threshold, logits, float("-inf"))


# a token stays when the tokens strictly more likely hold less than p
def top_p_mass_above(logits, p):
    probs = logits.softmax(dim=-1)
    above = (probs[..., None, :] * (probs[..., None, :] > probs[..., :, None])).sum(
        dim=-1
    )
    return logits.masked_fill(above >= p, float("-inf"))


def kv_step_einsum(x, W_q, W_k, W_v, K, V):
    q, k, v = x @ W_q.T, x @ W_k.T, x @ W_v.T
    K, V = torch.cat([K, k[:, None]], dim=1), torch.cat([V, v[:, None]], dim=1)
    w = torch.softmax(
        torch.einsum("bd,btd->bt", q, K) / math.sqrt(W_k.shape[0]), dim=-1
    )
    return torch.einsum("bt,btd->bd", w, V), K, V


def kv_step_sdpa(x, W_q, W_k, W_v, K, V):
    K = torch.cat([K, (x @ W_k.T).unsqueeze(1)], dim=1)
    V = torch.cat([V, (x @ W_v.T).unsqueeze(1)], dim=1)
    y = F.scaled_dot_product_attention((x @ W_q.T).unsqueeze(1), K, V)
    return y.squeeze(1), K, V


def kv_step_loop(x, W_q, W_k, W_v, K, V):
    K = torch.cat([K, F.linear(x, W_k)[:, None]], dim=1)
    V = torch.cat([V, F.linear(x, W_v)[:, None]], dim=1)
    ys = []
    for b in range(x.shape[0]):
        q = F.linear(x[b], W_q)
        scores = (
            torch.stack([q @ K[b, j] for j in range(K.shape[1])]) / W_q.shape[0] ** 0.5
        )
        weights = scores.exp() / scores.exp().sum()
        ys.append(sum(weights[j] * V[b, j] for j in range(K.shape[1])))
    return torch.stack(ys), K, V


@correct_answers(
    (check_top_p_logits, top_p_loop),
    (check_top_p_logits, top_p_threshold),
    (check_top_p_logits, top_p_mass_above),
    (check_kv_attention_step, kv_step_einsum),
    (check_kv_attention_step, kv_step_sdpa),
    (check_kv_attention_step, kv_step_loop),
)
def test_new_builds_pass(checker, student):
    assert_passes(checker, student)


def _top_p_with(
    *,
    boundary=True,
    ties=True,
    ascending=False,
    on_logits=False,
    fill=float("-inf"),
    unsorted=False,
):
    def student(logits, p):
        values, order = logits.sort(dim=-1, descending=not ascending)
        mass = values if on_logits else values.softmax(dim=-1)
        if unsorted:
            values, order = logits, torch.arange(logits.shape[-1]).expand_as(logits)
            mass = logits.softmax(dim=-1)
        kept = (mass.cumsum(dim=-1) - (mass if boundary else 0)) < p
        kept[..., 0] = True
        if ties and not unsorted:
            big = float("-inf") if ascending else float("inf")
            edge = values.masked_fill(~kept, big)
            edge = (
                edge.amax(-1, keepdim=True)
                if ascending
                else edge.amin(-1, keepdim=True)
            )
            keep = logits <= edge if ascending else logits >= edge
        else:
            keep = torch.zeros_like(kept).scatter(-1, order, kept)
        return logits.masked_fill(~keep, fill)

    return student


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (_top_p_with(boundary=False), ["makes the sum reach p"]),
        (_top_p_with(ties=False), ["tied with the last one kept"]),
        (_top_p_with(ascending=True), ["most likely token down"]),
        (_top_p_with(on_logits=True), ["not logits"]),
        (_top_p_with(fill=0.0), ["-inf", "not 0"]),
        (_top_p_with(unsorted=True), ["Sort first"]),
        (
            lambda x, p: x.masked_fill(x.softmax(-1) < 1 - p, float("-inf")),
            ["The filtered logits"],
        ),
        (lambda x, p: top_p_threshold(x, p).softmax(-1), ["not probabilities"]),
        (
            lambda x, p: gpt.top_k_logits(x, max(1, round(p * x.shape[-1]))),
            ["The filtered logits"],
        ),
        (lambda x, p: gpt.top_p_logits(x, p), ["the companion's own"]),
    ],
)
def test_top_p_rejects_wrong_answers(student, fragments):
    assert_wrong(check_top_p_logits.verdict(student), *fragments)


def _kv_with(
    *, scale="d_k", append=True, query="q", value="v", returned="new", prepend=False
):
    def student(x, W_q, W_k, W_v, K, V):
        q, k = x @ (W_k if query == "k" else W_q).T, x @ W_k.T
        v = x @ (W_k if value == "k" else W_v).T
        parts_k, parts_v = [K, k[:, None]], [V, v[:, None]]
        K_new = torch.cat(parts_k[::-1] if prepend else parts_k, dim=1)
        V_new = torch.cat(parts_v[::-1] if prepend else parts_v, dim=1)
        keys, values = (K_new, V_new) if append else (K, V)
        scores = torch.einsum("bd,btd->bt", q, keys)
        scores = (
            scores
            / {
                "d_k": math.sqrt(W_q.shape[0]),
                "d": math.sqrt(x.shape[-1]),
                "none": 1.0,
            }[scale]
        )
        y = torch.einsum("bt,btd->bd", scores.softmax(-1), values)
        return (y, K_new, V_new) if returned == "new" else (y, K, V)

    return student


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (_kv_with(scale="none"), ["√d_k"]),
        (_kv_with(scale="d"), ["not √d"]),
        (_kv_with(append=False), ["attends to itself too"]),
        (_kv_with(returned="old"), ["the next step needs them"]),
        (_kv_with(query="k"), ["not the key"]),
        # d_v ≠ d_k: the cache of values cannot grow
        (_kv_with(value="k"), ["raised RuntimeError"]),
        (_kv_with(prepend=True), ["at the end"]),
        (
            lambda x, Wq, Wk, Wv, K, V: kv_step_einsum(x, Wq, Wk, Wv, K, V)[0],
            ["(y, K, V)"],
        ),
        (
            lambda x, Wq, Wk, Wv, K, V: (
                kv_step_einsum(x, Wq, Wk, Wv, K, V)[0],
                K.clone(),
                V.clone(),
            ),
            ["(y, K, V)"],
        ),
    ],
)
def test_kv_step_rejects_wrong_answers(student, fragments):
    assert_wrong(check_kv_attention_step.verdict(student), *fragments)


def test_a_step_that_ignores_its_cache_fails_the_chained_steps():
    # right for the given caches, but keeps no cache of its own
    def no_history(x, W_q, W_k, W_v, K, V):
        y, K_new, V_new = kv_step_einsum(x, W_q, W_k, W_v, K, V)
        return y, K_new[:, -1:], V_new[:, -1:]

    assert_wrong(check_kv_attention_step.verdict(no_history))


def test_kv_reference_step_equals_the_full_recomputation_at_every_position():
    torch.manual_seed(0)
    X = torch.randn(2, 7, 6, dtype=torch.float64)
    W_q, W_k, W_v = (torch.randn(m, 6, dtype=torch.float64) for m in (4, 4, 3))
    K, V = (
        torch.zeros(2, 0, 4, dtype=torch.float64),
        torch.zeros(2, 0, 3, dtype=torch.float64),
    )
    for t in range(7):  # the full recomputation by hand: position t attends to 0 … t
        y, K, V = generation._kv_reference(X[:, t], W_q, W_k, W_v, K, V)
        for b in range(2):
            scores = (
                torch.stack(
                    [(X[b, t] @ W_q.T) @ (X[b, j] @ W_k.T) for j in range(t + 1)]
                )
                / 2.0
            )
            expected = sum(
                w * (X[b, j] @ W_v.T) for j, w in enumerate(torch.softmax(scores, 0))
            )
            assert torch.allclose(y[b], expected, atol=1e-12)
    full = generation._full_attention(X, W_q, W_k, W_v)
    assert torch.allclose(full[:, -1], y, atol=1e-12)
