"""The chapter-1 checkers accept the reference answers and reject plausible wrong ones, saying why."""

import pytest
import torch

# --- encode -----------------------------------------------------------------------------------------------
from checker_testing import (
    assert_passes,
    assert_wrong,
    correct_answers,
    stub,
    unwithheld,
)
from torch import nn

from companion import embeddings as ref
from companion.exercises.words_to_vectors import (
    check_cosine,
    check_embedding,
    check_encode,
    check_one_hot,
)

# the companion's functions, as other objects than those the checkers withhold
ref = unwithheld(ref)


def good_encode(tokens, stoi):
    return torch.tensor([stoi.get(t, stoi["<unk>"]) for t in tokens], dtype=torch.long)


def test_encode_passes_reference_and_prints(capsys):
    verdict = check_encode.verdict(good_encode)
    assert verdict.passed and verdict.cases == 7 and verdict.hidden == 3
    check_encode(good_encode)
    assert (
        "PASSED  encode: your code agrees with the reference (7 checks, 3 of them on hidden"
        in capsys.readouterr().out
    )


_SHOWN = {
    ("the", "dog", "barks", "."): [1, 2, 3, 4],
    ("the", "cat", "barks", "."): [1, 0, 3, 4],
    ("zebra",): [0],
}


@pytest.mark.parametrize(
    ("student", "fragment"),
    [
        (
            lambda tokens, stoi: torch.tensor(
                _SHOWN.get(tuple(tokens), []), dtype=torch.long
            ),
            "hidden random",
        ),
        (
            lambda tokens, stoi: torch.tensor(
                [stoi.get(t, 0) for t in tokens], dtype=torch.long
            ),
            "need not be 0",
        ),
        (
            lambda tokens, stoi: torch.tensor(
                [stoi.get(t.lower(), stoi["<unk>"]) for t in tokens], dtype=torch.long
            ),
            "case-sensitive",
        ),
        (
            lambda tokens, stoi: torch.tensor(
                [stoi.get(t, stoi["<unk>"]) for t in dict.fromkeys(tokens)]
            ).long(),
            "hidden random",
        ),
    ],
)
def test_encode_hidden_cases_exercise_the_rule(student, fragment):
    for _ in range(3):  # new hidden cases on every run
        assert_wrong(check_encode.verdict(student), fragment)


def test_encode_not_attempted():
    assert check_encode.verdict(stub).status == "not attempted"
    assert str(check_encode.verdict(stub)).startswith("NOT ATTEMPTED YET  encode")


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (
            lambda tokens, stoi: torch.tensor(
                [stoi[t] for t in tokens], dtype=torch.long
            ),
            ["raised KeyError: 'cat'", "tokens=['the', 'cat', 'barks', '.']"],
        ),
        (
            lambda tokens, stoi: [stoi.get(t, 0) for t in tokens],
            ["should be a torch.Tensor", "got:", "list"],
        ),
        (
            lambda tokens, stoi: torch.tensor(
                [stoi.get(t, 0) for t in tokens], dtype=torch.float32
            ),
            [
                "should be an integer tensor",
                "got:      dtype torch.float32",
                "dtype=torch.int64",
            ],
        ),
        (
            lambda tokens, stoi: torch.tensor(
                [stoi[t] for t in tokens if t in stoi], dtype=torch.long
            ),
            [
                "wrong shape",
                "expected: shape (4,)",
                "got:      shape (3,)",
                "id of '<unk>'",
            ],
        ),
        (
            lambda tokens, stoi: torch.tensor(
                [stoi.get(t, len(stoi)) for t in tokens], dtype=torch.long
            ),
            [
                "wrong values",
                "tokens=['the', 'cat', 'barks', '.']",
                "'cat' is unknown",
                "id of '<unk>'",
            ],
        ),
    ],
)
def test_encode_rejects_wrong_answers(student, fragments):
    assert_wrong(check_encode.verdict(student), *fragments)


# --- one_hot ----------------------------------------------------------------------------------------------


def test_one_hot_not_attempted():
    assert check_one_hot.verdict(stub).status == "not attempted"


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        # transposed: the first case is square, so it shows up as wrong values rather than a wrong shape
        (
            lambda ids, v: ref.one_hot(ids, v).T,
            ["wrong values", "ids=tensor([2, 0, 1])", "not the other way"],
        ),
        (
            lambda ids, v: torch.nn.functional.one_hot(ids, v),
            ["floating-point tensor", "torch.int64", "returns integers"],
        ),
        (
            lambda ids, v: torch.zeros(len(ids), v).scatter_(
                1, (ids.unsqueeze(1) + 1) % v, 1.0
            ),
            [
                "wrong values",
                "input:    ids=tensor([2, 0, 1]), vocab_size=3",
                "single 1.0 in column ids[i]",
            ],
        ),
        (
            lambda ids, v: torch.nn.functional.one_hot(ids, v + 1).float(),
            ["wrong shape", "expected: shape (3, 3)", "got:      shape (3, 4)"],
        ),
        (lambda ids, v: 1 / 0, ["raised ZeroDivisionError"]),
    ],
)
def test_one_hot_rejects_wrong_answers(student, fragments):
    assert_wrong(check_one_hot.verdict(student), *fragments)


# --- cosine similarity ------------------------------------------------------------------------------------


def test_cosine_passes_reference_and_python_float():
    assert check_cosine.verdict(ref.cosine_similarity).passed
    assert check_cosine.verdict(
        lambda u, v: float(u @ v / (u.norm() * v.norm()))
    ).passed


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (lambda u, v: u @ v, ["That is the dot product"]),
        (lambda u, v: u @ v / u.norm(), ["wrong", "Divide by both norms"]),
        (
            lambda u, v: u @ v / (u.norm() ** 2 * v.norm() ** 2),
            ["The cosine similarity is wrong", "uᵀv / (‖u‖ ‖v‖)"],
        ),
        (
            lambda u, v: u * v / (u.norm() * v.norm()),
            ["wrong shape", "expected: shape ()", "got:      shape (2,)"],
        ),
        (lambda u, v: "0.5", ["should be a single number", "str: '0.5'"]),
        (
            lambda u, v: torch.tensor(float("nan")),
            ["got:      nan", "NaN", "division by zero"],
        ),
    ],
)
def test_cosine_rejects_wrong_answers(student, fragments):
    assert_wrong(check_cosine.verdict(student), *fragments)


# --- Embedding (the seeds' homework) ----------------------------------------------------------------------


def test_embedding_stub_class_is_not_attempted():
    class Stub(nn.Module):
        def __init__(self, num_embeddings, embedding_dim):
            super().__init__()
            raise NotImplementedError

        def forward(self, ids):
            raise NotImplementedError

    assert check_embedding.verdict(Stub).status == "not attempted"


class Validating(nn.Module):
    """A right answer written in the test, the base of the wrong ones below (subclassing the companion's
    Embedding is itself WRONG: that answer hands the work to the companion)."""

    def __init__(self, num_embeddings, embedding_dim):
        super().__init__()
        self.num_embeddings = num_embeddings
        self.weight = nn.Parameter(torch.randn(num_embeddings, embedding_dim))

    def forward(self, ids):
        if ids.is_floating_point():
            raise TypeError("ids must be integers")
        if ((ids < 0) | (ids >= self.num_embeddings)).any():
            raise ValueError("id out of range")
        return self.weight[ids]


class NoValidation(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, d))

    def forward(self, ids):
        return self.weight[ids]


class Detached(NoValidation):
    def forward(self, ids):
        if not 0 <= int(ids.min()) and int(ids.max()) < self.weight.shape[0]:
            raise ValueError("bad id")
        return self.weight.detach()[ids]


class PlainTensorWeight(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.weight = torch.randn(n, d)

    def forward(self, ids):
        return self.weight[ids]


class Transposed(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d, n))

    def forward(self, ids):
        return self.weight.T[ids]


class OffByOne(Validating):
    def forward(self, ids):
        return super().forward((ids + 1) % self.num_embeddings)


class WrongErrorType(Validating):
    def forward(self, ids):
        if ids.dtype.is_floating_point:
            raise ValueError("ids must be integers")
        return super().forward(ids)


class NotAModule:
    def __init__(self, n, d):
        self.weight = torch.randn(n, d)


class ZeroInit(Validating):
    def __init__(self, n, d):
        super().__init__(n, d)
        nn.init.zeros_(self.weight)


class UniformInit(Validating):
    # std 1 and mean 0, but uniform on [-√3, √3]: nothing beyond ±2
    def __init__(self, n, d):
        super().__init__(n, d)
        nn.init.uniform_(self.weight, -(3**0.5), 3**0.5)


class MisspeltForward(NoValidation):
    # what a class gets when its `def forwrad` (or a mis-indented forward) is not found
    forward = nn.Module.forward

    def forwrad(self, ids):
        return self.weight[ids]


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (NoValidation, ["ids=[[10]]", "expected: ValueError", "IndexError"]),
        (Detached, ["does not carry gradients"]),
        (PlainTensorWeight, ["needs an attribute `weight` that is an nn.Parameter"]),
        (
            Transposed,
            [
                "shape of weight is wrong",
                "expected: tuple: (10, 4)",
                "got:      tuple: (4, 10)",
            ],
        ),
        (OffByOne, ["The output has the wrong values", "weight[ids[b, t]]"]),
        (
            WrongErrorType,
            ["ids=[[1.0, 2.0]]", "expected: TypeError", "got:      ValueError"],
        ),
        (NotAModule, ["should create an nn.Module"]),
        (ZeroInit, ["not drawn from a standard normal", "std 0"]),
        (UniformInit, ["not drawn from a standard normal", "share beyond ±2 0\n"]),
        (MisspeltForward, ["has no method `forward`", "spelt exactly `forward`"]),
        (
            ref.Embedding(10, 4),
            ["Expected the class Embedding itself", "not Embedding(...)"],
        ),
    ],
)
def test_embedding_rejects_wrong_answers(student, fragments):
    assert_wrong(check_embedding.verdict(student), *fragments)


def test_checker_rejects_a_non_callable_without_crashing():
    verdict = check_embedding.verdict(None)
    assert_wrong(verdict, "Expected the class Embedding itself, got NoneType")
    assert_wrong(
        check_one_hot.verdict(None),
        "Expected a function or class to check, got NoneType",
    )


def test_checker_does_not_disturb_the_students_random_state():
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    check_one_hot.verdict(ref.one_hot)
    assert torch.equal(torch.rand(3), before)


# --- several independently written correct answers pass -----------------------------------------------------


def encode_loop(tokens, stoi):
    out = torch.empty(len(tokens), dtype=torch.long)
    for i, t in enumerate(tokens):
        out[i] = stoi[t] if t in stoi else stoi["<unk>"]
    return out


def encode_get(tokens, stoi):  # ids as torch.long, as the task states (int32 is WRONG)
    return torch.tensor([stoi.get(t, stoi["<unk>"]) for t in tokens], dtype=torch.long)


def encode_numpy(tokens, stoi):
    import numpy as np

    return torch.from_numpy(
        np.array([stoi.get(t, stoi["<unk>"]) for t in tokens], dtype=np.int64)
    )


def one_hot_eye(ids, vocab_size):
    return torch.eye(vocab_size)[ids]


def one_hot_loop(ids, vocab_size):
    rows = []
    for i in ids.tolist():
        row = [0.0] * vocab_size
        row[i] = 1.0
        rows.append(row)
    # float64 is fine
    return torch.tensor(rows, dtype=torch.float64).reshape(len(ids), vocab_size)


def one_hot_compare(ids, vocab_size):
    return (ids[:, None] == torch.arange(vocab_size)).float()


def cosine_loop(u, v):
    dot = sum(a * b for a, b in zip(u.tolist(), v.tolist(), strict=True))
    nu = sum(a * a for a in u.tolist()) ** 0.5
    nv = sum(b * b for b in v.tolist()) ** 0.5
    return dot / (nu * nv)


def cosine_numpy(u, v):  # returns a numpy.float32, a single number
    import numpy as np

    a, b = u.numpy(), v.numpy()
    return np.float32(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def cosine_linalg(u, v):
    return torch.dot(u, v) / (torch.linalg.vector_norm(u) * torch.linalg.vector_norm(v))


class EmbeddingOneHot(nn.Module):  # looks up by multiplying one-hot rows with the table
    def __init__(self, num_embeddings, embedding_dim):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim))
        nn.init.normal_(self.weight)

    def forward(self, ids):
        if ids.is_floating_point():
            raise TypeError("ids must be integers")
        if ((ids < 0) | (ids >= self.weight.shape[0])).any():
            raise ValueError("id out of range")
        return (
            nn.functional.one_hot(ids, self.weight.shape[0]).to(self.weight.dtype)
            @ self.weight
        )


class EmbeddingFunctional(nn.Module):
    def __init__(self, num_embeddings, embedding_dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(num_embeddings, embedding_dim))

    def forward(self, ids):
        if torch.is_floating_point(ids):
            raise TypeError(f"float ids: {ids.dtype}")
        bad = ids[(ids < 0) | (ids >= len(self.weight))]
        if len(bad):
            raise ValueError(f"ids out of range: {bad.tolist()}")
        return nn.functional.embedding(ids, self.weight)


@correct_answers(
    (check_encode, encode_loop),
    (check_encode, encode_get),
    (check_encode, encode_numpy),
    (check_one_hot, one_hot_eye),
    (check_one_hot, one_hot_loop),
    (check_one_hot, one_hot_compare),
    (check_cosine, cosine_loop),
    (check_cosine, cosine_numpy),
    (check_cosine, cosine_linalg),
    (check_embedding, EmbeddingOneHot),
    (check_embedding, EmbeddingFunctional),
)
def test_independent_correct_answers_pass(checker, student):
    assert_passes(checker, student)
