"""The chapter-2 checkers accept the reference answers, reject plausible wrong ones saying why, report a
stub as not attempted, and turn any crash, garbage, NaN or wrong shape into a 'wrong' verdict."""

import math

import pytest
import torch
from checker_testing import (
    assert_passes,
    assert_wrong,
    correct_answers,
    stub,
    unwithheld,
)

from companion import embedding_lm as lm
from companion.exercises.embedding_lm import (
    check_bigram_counts,
    check_bigram_probabilities,
    check_next_token_probabilities,
)

# the companion's functions, as other objects than those the checkers withhold
lm = unwithheld(lm)


@pytest.mark.parametrize(
    "checker", [check_next_token_probabilities, check_bigram_counts]
)
def test_stub_is_not_attempted(checker):
    verdict = checker.verdict(stub)
    assert verdict.status == "not attempted" and str(verdict).startswith(
        "NOT ATTEMPTED YET"
    )


# --- next_token_probabilities -----------------------------------------------------------------------------


def test_probabilities_reference_passes(capsys):
    assert check_next_token_probabilities.verdict(lm.next_token_probabilities).passed

    def own(scores, temperature):
        if temperature == 0:
            return torch.nn.functional.one_hot(scores.argmax(-1), scores.shape[-1]).to(
                scores.dtype
            )
        e = torch.exp(
            scores / temperature - (scores / temperature).max(-1, keepdim=True).values
        )
        return e / e.sum(-1, keepdim=True)

    assert check_next_token_probabilities.verdict(own).passed
    check_next_token_probabilities(own)
    assert "PASSED  next_token_probabilities" in capsys.readouterr().out


def _soft(fn):
    def student(scores, temperature):
        if temperature == 0:
            return lm.next_token_probabilities(scores, 0)
        return fn(scores, temperature)

    return student


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (_soft(lambda s, t: torch.softmax(s, -1)), ["no effect", "temperature=2.0"]),
        (_soft(lambda s, t: torch.softmax(s * t, -1)), ["you multiplied"]),
        (_soft(lambda s, t: torch.softmax(s / t, 0)), ["last dimension", "(3, 5)"]),
        (
            lambda s, t: torch.softmax(s / t, -1),
            ["NaN", "temperature == 0", "temperature=0.0"],
        ),
        (
            _soft(
                lambda s, t: torch.exp(s / t) / torch.exp(s / t).sum(-1, keepdim=True)
            ),
            ["NaN", "overflows", "around 100"],
        ),
        (
            lambda s, t: s.argmax(-1) if t == 0 else torch.softmax(s / t, -1),
            ["not the index", "temperature=0.0"],
        ),
        (
            lambda s, t: (
                (s == s.max(-1, keepdim=True).values).float()
                if t == 0
                else torch.softmax(s / t, -1)
            ),
            ["a tie", "only the first largest score"],
        ),
        (
            lambda s, t: (
                lm.next_token_probabilities(s.flip(-1), 0).flip(-1)
                if t == 0
                else torch.softmax(s / t, -1)
            ),
            ["a tie", "not the last"],
        ),
        (
            lambda s, t: (
                lm.next_token_probabilities(s, t)
                if s.ndim == 1 or t
                else torch.zeros_like(s)
            ),
            ["a batch at temperature 0"],
        ),
        (_soft(lambda s, t: torch.exp(s / t)), ["wrong values", "sum to 1"]),
        (_soft(lambda s, t: torch.softmax(s / t, -1)[..., :-1]), ["wrong shape"]),
        (
            _soft(lambda s, t: torch.softmax(s / t, -1).tolist()),
            ["should be a torch.Tensor"],
        ),
        (lambda s, t: 1 / 0, ["raised ZeroDivisionError"]),
    ],
)
def test_probabilities_reject_wrong_answers(student, fragments):
    assert_wrong(check_next_token_probabilities.verdict(student), *fragments)


# --- bigram_counts ----------------------------------------------------------------------------------------


def test_counts_reference_passes():
    assert check_bigram_counts.verdict(lm.bigram_counts).passed

    def loop(ids, n):
        c = torch.zeros(n, n, dtype=torch.long)
        for a, b in zip(ids[:-1].tolist(), ids[1:].tolist(), strict=True):
            c[a, b] += 1
        return c

    assert check_bigram_counts.verdict(loop).passed


def _wrapped(ids, n):
    c = torch.zeros(n, n, dtype=torch.long)
    for a, b in zip(ids.tolist(), torch.roll(ids, -1).tolist(), strict=True):
        c[a, b] += 1
    return c


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (
            lambda ids, n: lm.bigram_counts(ids, n).T,
            ["yours is C.T", "ids=tensor([0, 1, 0, 1, 2])"],
        ),
        (_wrapped, ["n - 1 bigrams", "do not wrap around"]),
        # it calls bigram_counts
        (lambda ids, n: lm.bigram_probabilities(ids, n), ["write this one yourself"]),
        (lambda ids, n: lm.bigram_counts(ids, n).float(), ["integer tensor"]),
        (lambda ids, n: lm.bigram_counts(ids, n)[:, :-1], ["wrong shape"]),
        (
            lambda ids, n: torch.bincount(ids, minlength=n),
            ["wrong shape", "expected: shape (3, 3)"],
        ),
        (
            lambda ids, n: lm.bigram_counts(ids, n) + 1,
            ["wrong values", "ids[t + 1] = j"],
        ),
        (lambda ids, n: None, ["should be a torch.Tensor"]),
        (lambda ids, n: 1 / 0, ["raised ZeroDivisionError"]),
    ],
)
def test_counts_reject_wrong_answers(student, fragments):
    assert_wrong(check_bigram_counts.verdict(student), *fragments)


def test_garbage_never_escapes():
    odd = [
        lambda *a: torch.zeros(2, dtype=torch.complex64),
        lambda *a: torch.full((8,), math.nan, dtype=torch.float64),
        lambda *a: object(),
        lambda *a: torch.ones(3, 3, dtype=torch.float64),
    ]
    for checker in (check_next_token_probabilities, check_bigram_counts):
        for student in odd:
            assert checker.verdict(student).status == "wrong"


# --- several independently written correct answers pass -----------------------------------------------------


def probabilities_loop(scores, temperature):
    flat = scores.reshape(-1, scores.shape[-1])
    out = torch.zeros_like(flat)
    for r, row in enumerate(flat.tolist()):
        if temperature == 0:
            out[r, row.index(max(row))] = 1.0
            continue
        top = max(row)
        e = [math.exp((s - top) / temperature) for s in row]
        out[r] = torch.tensor([x / sum(e) for x in e])
    return out.reshape(scores.shape)


def probabilities_log_softmax(scores, temperature):
    if not temperature:
        return torch.zeros_like(scores).scatter(
            -1, scores.argmax(-1, keepdim=True), 1.0
        )
    return (scores.double() / temperature).log_softmax(-1).exp()  # float64 is fine


def probabilities_numpy(scores, temperature):
    import numpy as np

    s = scores.numpy()
    if temperature == 0:
        return torch.from_numpy(np.eye(s.shape[-1], dtype=np.float32)[s.argmax(-1)])
    z = s / temperature
    e = np.exp(z - z.max(-1, keepdims=True))
    return torch.from_numpy(e / e.sum(-1, keepdims=True))


def counts_index_put(ids, n):
    c = torch.zeros(n, n, dtype=torch.long)
    c.index_put_(
        (ids[:-1], ids[1:]), torch.ones(len(ids) - 1, dtype=torch.long), accumulate=True
    )
    return c


def counts_bincount(ids, n):
    return torch.bincount(ids[:-1] * n + ids[1:], minlength=n * n).reshape(n, n)


def counts_numpy(ids, n):
    import numpy as np

    c = np.zeros((n, n), dtype=np.int32)
    np.add.at(c, (ids[:-1].numpy(), ids[1:].numpy()), 1)
    return torch.tensor(c)


@correct_answers(
    (check_next_token_probabilities, probabilities_loop),
    (check_next_token_probabilities, probabilities_log_softmax),
    (check_next_token_probabilities, probabilities_numpy),
    (check_bigram_counts, counts_index_put),
    (check_bigram_counts, counts_bincount),
    (check_bigram_counts, counts_numpy),
)
def test_independent_correct_answers_pass(checker, student):
    assert_passes(checker, student)


# --- bigram_probabilities: the exercise written with compare() in about ten lines ---------------------------


def probabilities_loop(ids, n):
    c = [[0] * n for _ in range(n)]
    for a, b in zip(ids[:-1].tolist(), ids[1:].tolist(), strict=True):
        c[a][b] += 1
    return torch.tensor([[x / sum(row) if sum(row) else 0.0 for x in row] for row in c])


def probabilities_nan_to_num(ids, n):
    c = lm.bigram_counts(ids, n).float()
    return (c / c.sum(1, keepdim=True)).nan_to_num(0.0)


@pytest.mark.parametrize(
    "student", [lm.bigram_probabilities, probabilities_loop, probabilities_nan_to_num]
)
def test_bigram_probabilities_correct_answers_pass(student):
    assert check_bigram_probabilities.verdict(student).passed


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (
            lambda ids, n: lm.bigram_counts(ids, n) / lm.bigram_counts(ids, n).sum(),
            ["its own total"],
        ),
        (
            lambda ids, n: (
                lm.bigram_counts(ids, n) / lm.bigram_counts(ids, n).sum(1, keepdim=True)
            ),
            ["NaN", "0 / 0", "token 2 only occurs last"],
        ),
        (lambda ids, n: lm.bigram_counts(ids, n), ["floating-point tensor"]),
        (
            lambda ids, n: lm.bigram_probabilities(ids, n).T,
            ["wrong values", "Σ_k C[i, k]"],
        ),
        (stub, ["NOT ATTEMPTED YET"]),
    ],
)
def test_bigram_probabilities_wrong_answers(student, fragments):
    text = str(check_bigram_probabilities.verdict(student))
    assert all(f in text for f in fragments), text


# ==========================================================================================================
# The training loop (issue 7): kept in a section of its own to ease merging.
# ==========================================================================================================

from companion.exercises.embedding_lm import check_train_loop  # noqa: E402


def _loop_plain(model, ids, steps, lr):
    prev, nxt = ids[:-1], ids[1:]
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    out = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(prev), nxt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def _loop_log_softmax(model, ids, steps, lr):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        logp = torch.log_softmax(model(ids[:-1]), dim=-1)
        loss = -logp[torch.arange(len(ids) - 1), ids[1:]].mean()
        loss.backward()
        opt.step()
        # float(), not .item(): a Python float either way
        losses.append(float(loss.detach()))
    return losses


def _loop_manual_zero(model, ids, steps, lr):
    opt = torch.optim.Adam(list(model.parameters()), lr)
    history = []
    step = 0
    while step < steps:
        for p in model.parameters():
            p.grad = None
        scores = model(ids[:-1])
        loss = torch.nn.functional.nll_loss(torch.log_softmax(scores, 1), ids[1:])
        history.append(float(loss.detach()))
        loss.backward()
        opt.step()
        step += 1
    return history


@pytest.mark.parametrize("student", [_loop_plain, _loop_log_softmax, _loop_manual_zero])
def test_train_loop_correct_answers_pass(student):
    verdict = check_train_loop.verdict(student)
    assert verdict.passed, str(verdict)


def test_train_loop_stub_and_reference():
    assert check_train_loop.verdict(stub).status == "not attempted"
    assert check_train_loop.verdict(
        lambda m, i, s, lr: lm.train_embedding_lm(m, i, lm.Training(s, lr, False))
    )


def test_train_loop_withholds_the_companions_loop():
    """The companion's own training loop is the answer: while the checker runs the student's code it is withheld."""
    import companion.embedding_lm as library

    own = check_train_loop.verdict(
        lambda m, i, s, lr: library.train_embedding_lm(
            m, i, library.Training(s, lr, False)
        )
    )
    assert_wrong(own, "companion's own answer")


def _no_zero_grad(model, ids, steps, lr):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    out = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(ids[:-1]), ids[1:])
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def _sgd(model, ids, steps, lr):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    out = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(ids[:-1]), ids[1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def _no_step(model, ids, steps, lr):
    return [torch.nn.functional.cross_entropy(model(ids[:-1]), ids[1:]).item()] * steps


def _shifted_wrong(model, ids, steps, lr):
    return _loop_plain_pairs(model, ids[1:], ids[:-1], steps, lr)


def _loop_plain_pairs(model, prev, nxt, steps, lr):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    out = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(prev), nxt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def _new_optimiser_each_step(model, ids, steps, lr):
    out = []
    for _ in range(steps):
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        loss = torch.nn.functional.cross_entropy(model(ids[:-1]), ids[1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (_no_zero_grad, ["zero_grad", "differ from the reference"]),
        (_sgd, ["torch.optim.Adam", "steps=30"]),
        (_new_optimiser_each_step, ["one torch.optim.Adam", "before the loop"]),
        (_no_step, ["did not change", "optimiser.step()"]),
        (_shifted_wrong, ["The first loss is wrong", "ids[1:]"]),
        (
            lambda m, i, s, lr: _loop_plain(m, i, s - 1, lr),
            ["wrong length", "30 losses"],
        ),
        (lambda m, i, s, lr: 3.0, ["list of losses"]),
        (lambda m, i, s, lr: 1 / 0, ["raised ZeroDivisionError"]),
    ],
)
def test_train_loop_rejects_wrong_answers(student, fragments):
    assert_wrong(check_train_loop.verdict(student), *fragments)
