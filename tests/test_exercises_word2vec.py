"""The chapter-3 checkers accept the reference answers, reject plausible wrong ones saying why, report a
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

from companion import embeddings, glove
from companion import word2vec as w2v
from companion.exercises.word2vec import (
    check_glove_weight,
    check_nearest_neighbours,
    check_negative_sampling_loss,
    check_skipgram_pairs,
)

ref_neighbours = unwithheld(embeddings).nearest_neighbours

glove = unwithheld(glove)
# the companion's functions, as other objects than those the checkers withhold
w2v = unwithheld(w2v)


def _garbage_students(shape_fn):
    """Students that crash, return the wrong type, NaN, or the wrong shape."""
    return [
        (lambda *a: 1 / 0, "raised ZeroDivisionError"),
        (lambda *a: "a string", "should be"),
        (lambda *a: None, "should be"),
        (lambda *a: torch.full(shape_fn(*a), math.nan), "NaN"),
        (lambda *a: torch.zeros(*shape_fn(*a), 3), "wrong shape"),
    ]


CHECKERS = [
    check_skipgram_pairs,
    check_negative_sampling_loss,
    check_nearest_neighbours,
    check_glove_weight,
]


@pytest.mark.parametrize("checker", CHECKERS, ids=lambda c: c.exercise)
def test_stub_is_not_attempted(checker):
    verdict = checker.verdict(stub)
    assert verdict.status == "not attempted"
    assert str(verdict).startswith(f"NOT ATTEMPTED YET  {checker.exercise}")


@pytest.mark.parametrize("checker", CHECKERS, ids=lambda c: c.exercise)
def test_not_a_function_is_wrong(checker):
    assert checker.verdict(42).status == "wrong"


# --- skipgram_pairs ---------------------------------------------------------------------------------------


def test_pairs_reference_passes_in_any_order(capsys):
    assert check_skipgram_pairs.verdict(w2v.skipgram_pairs).passed

    # a correct answer ordered by offset rather than by position
    def by_offset(ids, window):
        centres, contexts = [], []
        for d in [*range(-window, 0), *range(1, window + 1)]:
            lo, hi = max(0, -d), min(len(ids), len(ids) - d)
            centres.append(ids[lo:hi])
            contexts.append(ids[lo + d : hi + d])
        return torch.cat(centres), torch.cat(contexts)

    assert check_skipgram_pairs.verdict(by_offset).passed
    check_skipgram_pairs(by_offset)
    assert "PASSED  skipgram_pairs" in capsys.readouterr().out


def _with_self(ids, window):
    c, x = w2v.skipgram_pairs(ids, window)
    return torch.cat([c, ids]), torch.cat([x, ids])


def _rolled(ids, window):
    centres, contexts = [], []
    for d in [*range(-window, 0), *range(1, window + 1)]:
        if len(ids) > 1:
            centres.append(ids)
            contexts.append(torch.roll(ids, -d))
    if not centres:
        return torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    return torch.cat(centres), torch.cat(contexts)


def _deduplicated(ids, window):
    pairs = sorted(
        set(zip(*(t.tolist() for t in w2v.skipgram_pairs(ids, window)), strict=True))
    )
    return torch.tensor([c for c, _ in pairs], dtype=torch.long), torch.tensor(
        [x for _, x in pairs], dtype=torch.long
    )


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (_with_self, ["The pairs are wrong", "not its own context"]),
        (lambda ids, w: w2v.skipgram_pairs(ids, w - 1) if w > 1 else w2v.skipgram_pairs(ids[:0], 1),
         ["offsets ±window themselves", "window=1"]),
        (_rolled, ["do not wrap around", "expected: 8 pairs"]),
        (_deduplicated, ["do not de-duplicate", "(4, 7) occurs twice"]),
        (lambda ids, w: torch.stack(w2v.skipgram_pairs(ids, w)), ["expected: (centres, contexts)", "got:"]),
        (lambda ids, w: w2v.skipgram_pairs(ids, w)[0], ["should return (centres, contexts)"]),
        (lambda ids, w: tuple(t.float() for t in w2v.skipgram_pairs(ids, w)), ["integer ids"]),
        (lambda ids, w: 1 / 0, ["raised ZeroDivisionError"]),
        (lambda ids, w: (torch.zeros(2, 2, dtype=torch.long), torch.zeros(2, 2, dtype=torch.long)), ["1-D"]),
    ],
)  # fmt: skip
def test_pairs_reject_wrong_answers(student, fragments):
    assert_wrong(check_skipgram_pairs.verdict(student), *fragments)


# --- negative_sampling_loss -------------------------------------------------------------------------------


def test_loss_log_of_sigmoid_is_named():
    # log(sigmoid()) is -inf once sigmoid rounds to 0, as the chapter warns
    def naive(v, u_pos, u_neg):
        pos = torch.log(torch.sigmoid((u_pos * v).sum(-1)))
        neg = torch.log(torch.sigmoid(-torch.einsum("bkd,bd->bk", u_neg, v))).sum(-1)
        return -(pos + neg).mean()

    assert_wrong(
        check_negative_sampling_loss.verdict(naive),
        "The loss is infinite",
        "logsigmoid stays finite",
        "-200",
    )


def _loss_variant(sign_neg=-1.0, reduce_k="sum", flip=False, batch="mean"):
    def student(v, u_pos, u_neg):
        ls = torch.nn.functional.logsigmoid
        pos = ls((u_pos * v).sum(-1))
        negs = ls(sign_neg * torch.einsum("bkd,bd->bk", u_neg, v))
        neg = negs.sum(-1) if reduce_k == "sum" else negs.mean(-1)
        per = (pos + neg) if flip else -(pos + neg)
        return per.mean() if batch == "mean" else per.sum() if batch == "sum" else per

    return student


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (_loss_variant(sign_neg=1.0), ["The loss is wrong", "σ(-u·v)", "1.1333"]),
        (_loss_variant(reduce_k="mean"), ["Sum the K negative terms"]),
        (_loss_variant(flip=True), ["minus the log-likelihood"]),
        (_loss_variant(batch="sum"), ["Average over the batch"]),
        (
            _loss_variant(batch="none"),
            ["wrong shape", "one number, the mean over the batch"],
        ),
        (lambda v, p, n: v.sum() * math.nan, ["NaN"]),
        (lambda v, p, n: "0.5", ["should be a single number"]),
        (lambda v, p, n: torch.zeros(2, 2), ["wrong shape"]),
        (lambda v, p, n: 1 / 0, ["raised ZeroDivisionError"]),
    ],
)
def test_loss_rejects_wrong_answers(student, fragments):
    assert_wrong(check_negative_sampling_loss.verdict(student), *fragments)


# --- nearest_neighbours -----------------------------------------------------------------------------------


def _cosine_ids(vectors, query, k):
    return ref_neighbours(vectors, query, k)[0]


def _dot(vectors, query, k):
    s = vectors @ vectors[query]
    s[query] = -math.inf
    return s.topk(k).indices


def _normalising_in_place(vectors, query, k):
    vectors /= vectors.norm(dim=1, keepdim=True)
    s = vectors @ vectors[query]
    s[query] = -2
    return s.topk(k).indices


def _with_query(vectors, query, k):
    unit = vectors / vectors.norm(dim=1, keepdim=True)
    return (unit @ unit[query]).topk(k).indices


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (_dot, ["wrong values", "Use the cosine", "query=0"]),
        (_with_query, ["Leave the query itself out"]),
        (lambda v, q, k: _cosine_ids(v, q, k).flip(0), ["best first"]),
        (
            lambda v, q, k: _cosine_ids(v, q, k + 1),
            ["wrong shape", "expected: shape (3,)"],
        ),
        (lambda v, q, k: _cosine_ids(v, q, k).float(), ["integer tensor"]),
        (lambda v, q, k: [0, 1, 2], ["should be a torch.Tensor"]),
        (_normalising_in_place, ["changed its argument `vectors` in place"]),
        (lambda v, q, k: 1 / 0, ["raised ZeroDivisionError"]),
    ],
)
def test_neighbours_reject_wrong_answers(student, fragments):
    assert_wrong(check_nearest_neighbours.verdict(student), *fragments)


# --- glove_weight -----------------------------------------------------------------------------------------


def test_weight_reference_passes():
    assert check_glove_weight.verdict(glove.glove_weight).passed
    assert check_glove_weight.verdict(
        lambda x, m, a: (x / m).clamp(max=1).pow(a)
    ).passed


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (lambda x, m, a: (x / m).pow(a), ["Cap the weight at 1", "x_max=100.0"]),
        (
            lambda x, m, a: x.div_(m).pow_(a).clamp_(max=1),
            ["changed its argument `x` in place", "x / n"],
        ),
        (lambda x, m, a: (x / m).clamp(max=1), ["to the power alpha"]),
        (
            lambda x, m, a: torch.where(x < m, torch.ones_like(x), (x / m).pow(a)),
            ["not the other way round"],
        ),
        (
            lambda x, m, a: (m / x).clamp(max=1).pow(a),
            ["wrong values", "f(x) = (x / x_max)^alpha"],
        ),
        (lambda x, m, a: torch.full_like(x, math.nan), ["NaN"]),
        (lambda x, m, a: x.sum(), ["wrong shape"]),
        (lambda x, m, a: (x / m).tolist(), ["should be a torch.Tensor"]),
        (lambda x, m, a: 1 / 0, ["raised ZeroDivisionError"]),
    ],
)
def test_weight_rejects_wrong_answers(student, fragments):
    assert_wrong(check_glove_weight.verdict(student), *fragments)


def test_garbage_never_escapes():
    odd = [
        lambda *a: torch.zeros(2, dtype=torch.complex64),
        lambda *a: torch.zeros(0),
        lambda *a: object(),
        lambda *a: (
            torch.zeros(3, dtype=torch.float64),
            torch.ones(3, dtype=torch.float64),
        ),
        lambda *a: torch.ones(3, dtype=torch.float64),
    ]
    for checker in CHECKERS:
        for student in odd:
            assert checker.verdict(student).status == "wrong"


# --- several independently written correct answers pass -----------------------------------------------------


# returns a list [centres, contexts] rather than a tuple
def pairs_loop_lists(ids, window):
    centres, contexts = [], []
    n = len(ids)
    for i in range(n):
        for j in range(max(0, i - window), min(n, i + window + 1)):
            if j != i:
                centres.append(int(ids[i]))
                contexts.append(int(ids[j]))
    return [
        torch.tensor(centres, dtype=torch.long),
        torch.tensor(contexts, dtype=torch.long),
    ]


def pairs_unfold(ids, window):
    n = len(ids)
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    keep = ((i - j).abs() <= window) & (i != j)
    return ids[i[keep]], ids[j[keep]]


def loss_loop(v, u_pos, u_neg):
    total = 0.0
    for b in range(v.shape[0]):
        loss = -torch.nn.functional.logsigmoid(u_pos[b] @ v[b])
        for k in range(u_neg.shape[1]):
            loss = loss - torch.nn.functional.logsigmoid(-(u_neg[b, k] @ v[b]))
        total = total + loss
    return total / v.shape[0]


def loss_softplus(v, u_pos, u_neg):  # -log σ(s) = softplus(-s)
    pos = torch.einsum("bd,bd->b", u_pos, v)
    neg = torch.einsum("bkd,bd->bk", u_neg, v)
    return (
        torch.nn.functional.softplus(-pos) + torch.nn.functional.softplus(neg).sum(1)
    ).mean()


def loss_bce_with_logits(v, u_pos, u_neg):
    """As logistic regression: target 1 for the true context, 0 for each negative (PyTorch's BCE on logits)."""
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    pos = torch.bmm(u_pos[:, None, :], v[:, :, None]).reshape(-1)
    neg = torch.bmm(u_neg, v[:, :, None]).squeeze(-1)
    per_pair = bce(pos, torch.ones_like(pos), reduction="none")
    return (per_pair + bce(neg, torch.zeros_like(neg), reduction="none").sum(1)).mean()


def neighbours_loop(vectors, query, k):
    q = vectors[query]
    sims = []
    for i, row in enumerate(vectors):
        if i != query:
            sims.append((float(row @ q / (row.norm() * q.norm())), i))
    return torch.tensor([i for _, i in sorted(sims, reverse=True)[:k]])


def neighbours_argsort(vectors, query, k):
    unit = torch.nn.functional.normalize(vectors, dim=1)
    sims = unit @ unit[query]
    order = sims.argsort(descending=True)
    return order[order != query][:k]


def weight_where(x, x_max, alpha):
    return torch.where(x >= x_max, torch.ones_like(x), (x / x_max) ** alpha)


def weight_numpy(x, x_max, alpha):
    import numpy as np

    return torch.from_numpy(
        np.minimum(1.0, (x.numpy().astype(np.float64) / x_max) ** alpha)
    )


@correct_answers(
    (check_skipgram_pairs, pairs_loop_lists),
    (check_skipgram_pairs, pairs_unfold),
    (check_negative_sampling_loss, loss_loop),
    (check_negative_sampling_loss, loss_softplus),
    (check_negative_sampling_loss, loss_bce_with_logits),
    (check_nearest_neighbours, neighbours_loop),
    (check_nearest_neighbours, neighbours_argsort),
    (check_glove_weight, weight_where),
    (check_glove_weight, weight_numpy),
)
def test_independent_correct_answers_pass(checker, student):
    assert_passes(checker, student)


# ==========================================================================================================
# glove_loss (issue 7): kept in a section of its own to ease merging.
# ==========================================================================================================

from companion.exercises.word2vec import check_glove_loss  # noqa: E402


def _loss_with_where(e, u, b, b_tilde, c, x_max, alpha):
    residual = (e * u).sum(dim=1) + b + b_tilde - torch.log(c)
    weight = torch.where(c < x_max, (c / x_max) ** alpha, torch.ones_like(c))
    return (weight * residual**2).sum()


def _loss_with_loop(e, u, b, b_tilde, c, x_max, alpha):
    total = 0.0
    for n in range(len(c)):
        x = float(c[n])
        f = (x / x_max) ** alpha if x < x_max else 1.0
        total = total + f * (e[n] @ u[n] + b[n] + b_tilde[n] - math.log(x)) ** 2
    return total  # a tensor that carries gradient (a Python float cannot train: WRONG)


def _loss_with_einsum(e, u, b, b_tilde, c, x_max, alpha):
    f = (c / x_max).pow(alpha).clamp(max=1.0)
    return torch.einsum(
        "n,n->", f, (torch.einsum("nd,nd->n", e, u) + b + b_tilde - c.log()).square()
    )


def _loss_with_companion_weight(e, u, b, b_tilde, c, x_max, alpha):
    return (
        glove.glove_weight(c, x_max, alpha)
        * ((e * u).sum(-1) + b + b_tilde - c.log()) ** 2
    ).sum()


@pytest.mark.parametrize(
    "student",
    [_loss_with_where, _loss_with_loop, _loss_with_einsum, _loss_with_companion_weight],
)
def test_glove_loss_correct_answers_pass(student):
    verdict = check_glove_loss.verdict(student)
    assert verdict.passed, str(verdict)


def test_glove_loss_stub_is_not_attempted():
    assert check_glove_loss.verdict(stub).status == "not attempted"


def _in_place(e, u, b, b_tilde, c, x_max, alpha):
    c.log_()  # modifies the caller's tensor
    return (
        glove.glove_weight(c.exp(), x_max, alpha)
        * ((e * u).sum(-1) + b + b_tilde - c) ** 2
    ).sum()


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (
            lambda e, u, b, bt, c, m, a: (
                glove.glove_weight(c, m, a) * ((e * u).sum(1) + b + bt - c.log()) ** 2
            ).mean(),
            ["you took the mean", "x_max=100.0"],
        ),
        (
            lambda e, u, b, bt, c, m, a: (
                ((e * u).sum(1) + b + bt - c.log()) ** 2
            ).sum(),
            ["its weight f(c)"],
        ),
        (
            lambda e, u, b, bt, c, m, a: (
                glove.glove_weight(c, m, a) * ((e * u).sum(1) + b + bt - c.log())
            ).sum(),
            ["Square the residual"],
        ),
        (
            lambda e, u, b, bt, c, m, a: (
                glove.glove_weight(c, m, a) * ((e * u).sum(1) + b + bt - c) ** 2
            ).sum(),
            ["log c, not c"],
        ),
        (
            lambda e, u, b, bt, c, m, a: (
                glove.glove_weight(c, m, a) * ((e * u).sum(1) - c.log()) ** 2
            ).sum(),
            ["Add both biases"],
        ),
        (
            lambda e, u, b, bt, c, m, a: (
                glove.glove_weight(c, m, a) * ((e * u).sum(1) + b + bt - c.log()) ** 2
            ),
            ["Return one number"],
        ),
        (
            lambda e, u, b, bt, c, m, a: (
                (c / m).pow(a) * ((e * u).sum(1) + b + bt - c.log()) ** 2
            ).sum(),
            ["The loss is wrong", "f(x) = min(1, (x/x_max)^alpha)"],
        ),
        (_in_place, ["changed its argument"]),
        (lambda *args: "a string", ["should be a single number"]),
        (lambda *args: 1 / 0, ["raised ZeroDivisionError"]),
    ],
)
def test_glove_loss_rejects_wrong_answers(student, fragments):
    assert_wrong(check_glove_loss.verdict(student), *fragments)
