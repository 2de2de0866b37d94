"""SQuAD's span head and span decoding (companion.bert), the generated span task, and the best_span checker."""

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from checker_testing import assert_passes, assert_wrong, correct_answers, stub
from raising import raises

from companion import bert
from companion.data import span_task
from companion.exercises.bert import check_best_span

# --- the companion's best_span against a brute-force loop -----------------------------------------------------


def brute_force(start, end, mask, max_len):
    """Every allowed (i, j), in row-major order; the first with the largest score."""
    out = []
    for s, e, m in zip(start.tolist(), end.tolist(), mask.tolist(), strict=True):
        pairs = [(i, j) for i, j in itertools.product(range(len(s)), repeat=2)
                 if i <= j < i + max_len and m[i] and m[j]]  # fmt: skip
        out.append(max(pairs, key=lambda p: (s[p[0]] + e[p[1]], -p[0], -p[1])))
    return torch.tensor(out)


@pytest.mark.parametrize("seed", range(6))
def test_best_span_is_the_brute_force_maximum(seed):
    g = torch.Generator().manual_seed(seed)
    B, n = 5, int(torch.randint(2, 20, (), generator=g))
    integers = seed % 2 == 1  # ties everywhere: the first in row-major order wins
    start, end = (torch.randint(-2, 3, (B, n), generator=g).float() if integers else torch.randn(B, n, generator=g)
                  for _ in range(2))  # fmt: skip
    mask = torch.rand(B, n, generator=g) < 0.6
    # at least one context token per row
    mask[:, int(torch.randint(n, (), generator=g))] = True
    for max_len in (1, 2, 5, n + 3):
        assert torch.equal(
            bert.best_span(start, end, mask, max_len),
            brute_force(start, end, mask, max_len),
        )


def test_best_span_edge_cases():
    s, e = torch.tensor([[0.0, 1, 5, 0]]), torch.tensor([[0.0, 3, 0, 2]])
    everywhere = torch.ones(1, 4, dtype=torch.bool)
    # not (2, 1): the end is never before the start
    assert bert.best_span(s, e, everywhere, 4).tolist() == [[2, 3]]
    # max_len 1: single tokens only
    assert bert.best_span(s, e, everywhere, 1).tolist() == [[2, 2]]
    only_one = torch.tensor([[False, False, False, True]])
    # a one-token context
    assert bert.best_span(s, e, only_one, 30).tolist() == [[3, 3]]
    assert bert.best_span(s.double(), e.double(), everywhere, 2).dtype == torch.long
    with raises(ValueError, "at least one context token; row 0"):
        bert.best_span(s, e, torch.zeros(1, 4, dtype=torch.bool), 3)
    with raises(ValueError, "context_mask", "(1, 4)"):
        bert.best_span(s, e, everywhere.long(), 3)
    with raises(ValueError, "same shape"):
        bert.best_span(s, e[:, :3], everywhere, 3)
    with raises(ValueError, "max_len", ">= 1", "got 0"):
        bert.best_span(s, e, everywhere, 0)
    with raises(ValueError, "start_logits", "floating-point"):
        bert.best_span(s.long(), e, everywhere, 3)


def test_span_head_and_loss():
    torch.manual_seed(0)
    head, h = bert.SpanHead(8), torch.randn(3, 5, 8)
    start, end = head(h)
    W, b = head.linear.weight, head.linear.bias  # (2, d), (2,)
    assert torch.allclose(start, h @ W[0] + b[0]) and torch.allclose(
        end, h @ W[1] + b[1]
    )
    starts, ends = torch.tensor([0, 2, 4]), torch.tensor([1, 2, 4])
    by_hand = (
        sum(
            -F.log_softmax(start[k], 0)[starts[k]] - F.log_softmax(end[k], 0)[ends[k]]
            for k in range(3)
        )
        / 6
    )
    assert torch.allclose(bert.span_loss(start, end, starts, ends), by_hand)
    with raises(TypeError, "d_model", ">= 1"):
        bert.SpanHead(8.0)


# --- the generated task -----------------------------------------------------------------------------------------


class _WordTokenizer:
    """Splits on spaces and punctuation; 'Buenos' becomes two pieces, to exercise multi-piece words."""

    cls_id, sep_id, pad_id = 1, 2, 0

    def encode(self, text):
        words = text.replace(".", " .").replace(",", " ,").replace("?", " ?").split()
        return [
            p
            for w in words
            for p in ([hash(w) % 97 + 3, 100] if w == "Buenos" else [hash(w) % 97 + 3])
        ]


def test_span_examples_have_one_answer_and_disjoint_splits():
    train, test = (
        span_task.make_span_examples(300, 0, "train"),
        span_task.make_span_examples(300, 0, "test"),
    )
    # deterministic
    assert span_task.make_span_examples(5, 1) == span_task.make_span_examples(5, 1)
    for ex in train + test:
        assert ex.answer in ex.context and ex.context.count(ex.answer) == 1, ex
        assert ex.words.count(".") == 2
    names = {w for ex in train for w in ex.words if w[0].isupper()}
    test_names = {w for ex in test for w in ex.answer.split() if not w.isdigit()}
    assert not names & test_names - {"In"}
    kinds = [ex.answer.isdigit() for ex in train]
    assert 0.25 < np.mean(kinds) < 0.42  # about a third ask "when"
    assert all(
        ex.words.count(".") == 4 for ex in span_task.make_span_examples(20, facts=4)
    )
    with raises(ValueError, "facts must be at most 5"):
        span_task.make_span_examples(3, facts=6)
    with raises(ValueError, "split must be 'train' or 'test'"):
        span_task.make_span_examples(3, split="dev")


def test_span_inputs_point_at_the_answer_tokens():
    examples = span_task.make_span_examples(40, 3, "test")
    tok = _WordTokenizer()
    batch = span_task.span_inputs(examples, tok)
    for k, ex in enumerate(examples):
        ids, mask = batch["input_ids"][k], batch["context_mask"][k]
        question = tok.encode(ex.question)
        context = [i for w in ex.words for i in tok.encode(w)]
        assert ids[1 : 1 + len(question)].tolist() == question
        assert ids[mask].tolist() == context
        assert (batch["token_type_ids"][k][mask] == 1).all()
        s, e = int(batch["starts"][k]), int(batch["ends"][k])
        assert ids[s : e + 1].tolist() == [
            i for w in ex.answer.split() for i in tok.encode(w)
        ]
        w = batch["word_of"][k]
        assert " ".join(ex.words[w[s] : w[e] + 1]) == ex.answer
    with raises(ValueError, "more than max_len=20"):
        span_task.span_inputs(examples, tok, max_len=20)
    with raises(TypeError, "SpanExample"):
        span_task.span_inputs(["a question"], tok)


# --- the checker -------------------------------------------------------------------------------------------------


def spans_by_loops(start_logits, end_logits, context_mask, max_len):
    rows = []
    for b in range(start_logits.shape[0]):
        best, span = -float("inf"), None
        for i in range(start_logits.shape[1]):
            if not context_mask[b, i]:
                continue
            for j in range(i, min(i + max_len, start_logits.shape[1])):
                if context_mask[b, j] and start_logits[b, i] + end_logits[b, j] > best:
                    best, span = float(start_logits[b, i] + end_logits[b, j]), [i, j]
        rows.append(span)
    return torch.tensor(rows)


def spans_with_triu(start_logits, end_logits, context_mask, max_len):
    n = start_logits.shape[1]
    scores = start_logits.unsqueeze(2) + end_logits.unsqueeze(1)
    band = torch.triu(torch.ones(n, n), 0) - torch.triu(torch.ones(n, n), max_len)
    ok = (band > 0) & context_mask.unsqueeze(2) & context_mask.unsqueeze(1)
    flat = torch.where(ok, scores, torch.full_like(scores, -1e30)).flatten(1).argmax(1)
    return torch.stack((flat // n, flat % n), 1)


def spans_window_then_start(start_logits, end_logits, context_mask, max_len):
    """For each start, the best end in its window (unfold), then the best start."""
    B, n = start_logits.shape
    neg = torch.finfo(end_logits.dtype).min
    end = torch.where(context_mask, end_logits, neg)
    # (B, n, max_len): end[i + k]
    windows = F.pad(end, (0, max_len - 1), value=neg).unfold(1, max_len, 1)
    best_k = windows.argmax(dim=2)
    total = torch.where(context_mask, start_logits + windows.max(dim=2).values, neg)
    total = torch.where(windows.max(dim=2).values > neg, total, neg)
    i = total.argmax(dim=1)
    return torch.stack([i, i + best_k[torch.arange(B), i]], dim=1)


def spans_numpy(start_logits, end_logits, context_mask, max_len):
    s, e, m = start_logits.numpy(), end_logits.numpy(), context_mask.numpy()
    i, j = np.indices((s.shape[1], s.shape[1]))
    out = []
    for b in range(s.shape[0]):
        total = np.where((j >= i) & (j - i < max_len) & m[b][:, None] & m[b][None, :], s[b][:, None] + e[b][None, :],
                         -np.inf)  # fmt: skip
        out.append(np.unravel_index(np.argmax(total), total.shape))
    return torch.from_numpy(np.array(out, dtype=np.int64))


@correct_answers(
    (check_best_span, spans_by_loops),
    (check_best_span, spans_with_triu),
    (check_best_span, spans_window_then_start),
    (check_best_span, spans_numpy),
)
def test_correct_answers_pass(checker, student):
    assert_passes(checker, student)


def test_stub_and_crash():
    assert check_best_span.verdict(stub).status == "not attempted"

    def crash(*args):
        raise RuntimeError("boom")

    assert_wrong(check_best_span.verdict(crash), "raised RuntimeError: boom")


def wrong_end_before_start(start_logits, end_logits, context_mask, max_len):
    n = start_logits.shape[1]
    scores = start_logits[:, :, None] + end_logits[:, None, :]
    gap = torch.arange(n)[None, :] - torch.arange(n)[:, None]
    ok = (gap.abs() < max_len) & context_mask[:, :, None] & context_mask[:, None, :]
    flat = scores.masked_fill(~ok, -torch.inf).flatten(1).argmax(1)
    return torch.stack([flat // n, flat % n], 1)


def wrong_no_mask(start_logits, end_logits, context_mask, max_len):
    return spans_by_loops(
        start_logits, end_logits, torch.ones_like(context_mask), max_len
    )


def wrong_start_mask_only(start_logits, end_logits, context_mask, max_len):
    n = start_logits.shape[1]
    scores = start_logits[:, :, None] + end_logits[:, None, :]
    ok = torch.triu(torch.ones(n, n, dtype=torch.bool)) & ~torch.triu(
        torch.ones(n, n, dtype=torch.bool), max_len
    )
    ok = ok & context_mask[:, :, None]
    flat = scores.masked_fill(~ok, -torch.inf).flatten(1).argmax(1)
    return torch.stack([flat // n, flat % n], 1)


def wrong_separate_argmax(start_logits, end_logits, context_mask, max_len):
    i = start_logits.masked_fill(~context_mask, -torch.inf).argmax(1)
    j = end_logits.masked_fill(~context_mask, -torch.inf).argmax(1)
    return torch.stack([i, j], 1)


def wrong_length_off_by_one(start_logits, end_logits, context_mask, max_len):
    return spans_with_triu(start_logits, end_logits, context_mask, max_len + 1)


def wrong_no_max_len(start_logits, end_logits, context_mask, max_len):
    return spans_with_triu(
        start_logits, end_logits, context_mask, start_logits.shape[1]
    )


def wrong_relative_to_context(start_logits, end_logits, context_mask, max_len):
    spans = spans_with_triu(start_logits, end_logits, context_mask, max_len)
    first = context_mask.long().argmax(1, keepdim=True)
    return spans - first


def wrong_last_tie(start_logits, end_logits, context_mask, max_len):
    rows = []
    for b in range(start_logits.shape[0]):
        best, span = -float("inf"), None
        for i in range(start_logits.shape[1]):
            for j in range(i, min(i + max_len, start_logits.shape[1])):
                if (
                    context_mask[b, i]
                    and context_mask[b, j]
                    and start_logits[b, i] + end_logits[b, j] >= best
                ):
                    best, span = float(start_logits[b, i] + end_logits[b, j]), [i, j]
        rows.append(span)
    return torch.tensor(rows)


def wrong_end_first(start_logits, end_logits, context_mask, max_len):
    return spans_by_loops(start_logits, end_logits, context_mask, max_len).flip(1)


def wrong_float_result(start_logits, end_logits, context_mask, max_len):
    return spans_by_loops(start_logits, end_logits, context_mask, max_len).float()


def wrong_in_place(start_logits, end_logits, context_mask, max_len):
    start_logits.masked_fill_(~context_mask, -1e9)
    end_logits.masked_fill_(~context_mask, -1e9)
    return spans_by_loops(start_logits, end_logits, context_mask, max_len)


def wrong_calls_the_companion(start_logits, end_logits, context_mask, max_len):
    return bert.best_span(start_logits, end_logits, context_mask, max_len)


_SHOWN = {}


def wrong_table_of_shown_answers(start_logits, end_logits, context_mask, max_len):
    """Right on the shown cases (a table filled from the checker's messages), a guess elsewhere."""
    key = (tuple(start_logits.flatten().tolist()), max_len)
    if not _SHOWN:
        from companion.exercises.bert_spans import _best_span_cases

        with torch.random.fork_rng():
            torch.manual_seed(0)
            for c in _best_span_cases():
                _SHOWN[(tuple(c.args[0].flatten().tolist()), c.args[3])] = (
                    spans_by_loops(*c.args)
                )
    if key in _SHOWN:
        return _SHOWN[key]
    first = context_mask.long().argmax(1)
    return torch.stack([first, first], 1)


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (
            wrong_end_before_start,
            ["largest end logit lies before", "only spans with i <= j"],
        ),
        (
            wrong_no_mask,
            [
                "the answer lies in the context",
                "both i and j must be positions where context_mask",
            ],
        ),
        (wrong_start_mask_only, ["The spans", "require context_mask[j] as well"]),
        (wrong_separate_argmax, ["Taking the best start and the best end separately"]),
        (wrong_length_off_by_one, ["(2, 6) has 5 and is not", "Off by one"]),
        (wrong_no_max_len, ["max_len = 4", "A span has at most max_len tokens"]),
        (wrong_relative_to_context, ["not counted from the first context token"]),
        (
            wrong_last_tie,
            ["ties: (2, 3), (2, 5) and (4, 5)", "On a tie keep the first best pair"],
        ),
        (wrong_end_first, ["Each row is [start, end]"]),
        (wrong_float_result, ["should be an integer tensor"]),
        (wrong_in_place, ["changed its argument `start_logits` in place"]),
        (wrong_calls_the_companion, ["write this one yourself"]),
        (wrong_table_of_shown_answers, ["a hidden random case, seed"]),
    ],
)
def test_wrong_answers_are_rejected_with_their_message(student, fragments):
    assert_wrong(check_best_span.verdict(student), *fragments)


def test_a_named_mistake_is_not_given_to_an_unrelated_error():
    """A wrong answer that agrees with 'separately' on the first case only does not get that hint."""

    def first_case_separate_else_garbage(
        start_logits, end_logits, context_mask, max_len
    ):
        if start_logits.shape == (1, 9):
            return wrong_separate_argmax(
                start_logits, end_logits, context_mask, max_len
            )
        return torch.zeros(start_logits.shape[0], 2, dtype=torch.long)

    verdict = check_best_span.verdict(first_case_separate_else_garbage)
    assert verdict.status == "wrong" and "separately" not in str(verdict)


# --- the grader, on chapter 7's homework ---------------------------------------------------------------------


@pytest.mark.slow
def test_the_grader_passes_a_right_best_span_and_fails_a_wrong_one(tmp_path):
    """Chapter 7's homework with best_span answered right (a loop) and wrong (start and end taken separately)."""
    import inspect
    import json
    import textwrap
    from pathlib import Path

    from grading_support import gradebook, run_grader

    homework = json.loads(
        (
            Path(__file__).resolve().parents[1] / "book/homework/07_bert.ipynb"
        ).read_text()
    )
    stub = next(
        k
        for k, c in enumerate(homework["cells"])
        if "exercise-stub" in c["metadata"].get("tags", [])
        and "def best_span(" in "".join(c["source"])
    )
    answers = {
        "right": inspect.getsource(spans_by_loops).replace(
            "spans_by_loops", "best_span"
        ),
        "wrong": inspect.getsource(wrong_separate_argmax).replace(
            "wrong_separate_argmax", "best_span"
        ),
    }
    (tmp_path / "class").mkdir()
    for student, code in answers.items():
        nb = json.loads(json.dumps(homework))
        nb["cells"][stub]["source"] = "import torch\n\n\n" + textwrap.dedent(code)
        (tmp_path / "class" / f"{student}.ipynb").write_text(json.dumps(nb))
    run_grader(
        tmp_path / "class",
        tmp_path / "out",
        "--chapter",
        "7",
        "--timeout",
        "60",
        timeout=600,
    )
    book = gradebook(tmp_path / "out")
    assert book["right"]["best_span"] == "passed", book["right"]
    assert book["wrong"]["best_span"] == "wrong", book["wrong"]
    feedback = (tmp_path / "out" / "feedback" / "wrong.md").read_text()
    assert "Taking the best start and the best end separately" in feedback
    # the other exercises are left as stubs
    assert book["right"]["wordpiece"] == "not attempted"
