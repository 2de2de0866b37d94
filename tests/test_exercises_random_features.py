"""The chapter-10 checkers accept independently written right answers, reject plausible wrong ones saying why,
report a stub as not attempted, and give the same verdict on every run (the random matrices are arguments)."""

import math

import pytest
import torch
from checker_testing import assert_passes, assert_wrong, correct_answers, stub

from companion import random_features as rf
from companion.exercises.random_features import (
    check_monte_carlo_kernel,
    check_positive_softmax_features,
    check_random_fourier_features,
    check_random_fourier_features_cos_sin,
)

CHECKERS = [
    check_monte_carlo_kernel,
    check_random_fourier_features,
    check_random_fourier_features_cos_sin,
    check_positive_softmax_features,
]


@pytest.mark.parametrize("checker", CHECKERS)
def test_stub_is_not_attempted(checker):
    verdict = checker.verdict(stub)
    assert verdict.status == "not attempted" and str(verdict).startswith("NOT ATTEMPTED YET")


@pytest.mark.parametrize("checker", CHECKERS)
def test_verdicts_do_not_depend_on_the_global_random_state(checker):
    wrong = {
        "monte_carlo_kernel": lambda delta, w: torch.cos(delta @ w).sum(-1),
        "random_fourier_features": lambda x, w, b: torch.cos(x @ w + b),
        "random_fourier_features_cos_sin": lambda x, w: torch.cos(x @ w),
        "positive_softmax_features": lambda x, w: torch.exp(x @ w),
    }[checker.exercise]
    torch.manual_seed(1)
    first = str(checker.verdict(wrong))
    torch.manual_seed(2)
    assert str(checker.verdict(wrong)) == first


# --- monte_carlo_kernel ----------------------------------------------------------------------------------------


def mc_loop(delta, w):
    """A loop over the R frequencies, as the seed writes the sum."""
    total = torch.zeros(delta.shape[:-1], dtype=delta.dtype)
    for r in range(w.shape[1]):
        total = total + torch.cos((delta * w[:, r]).sum(-1))
    return total / w.shape[1]


def mc_complex(delta, w):
    """The real part of the average of exp(i w_rᵀΔ)."""
    return torch.exp(1j * torch.einsum("...d,dr->...r", delta, w)).mean(-1).real


def mc_product(delta, w):
    """cos(a) = cos(wᵀx)cos(wᵀy) + sin sin with y = 0: through the [cos, sin] features of Δ and of 0."""
    zx = rf.random_fourier_features_cos_sin(delta, w)
    z0 = rf.random_fourier_features_cos_sin(torch.zeros_like(delta), w)
    return (zx * z0).sum(-1)


# --- random_fourier_features -------------------------------------------------------------------------------------


def cos_loop(x, w, b):
    R = w.shape[1]
    cols = [math.sqrt(2) * torch.cos((x * w[:, r]).sum(-1) + b[r]) / math.sqrt(R) for r in range(R)]
    return torch.stack(cols, -1)


def cos_einsum(x, w, b):
    return torch.cos(torch.einsum("...d,dr->...r", x, w) + b) * (2 / w.shape[1]) ** 0.5


def cos_from_sin(x, w, b):
    """cos(t) = sin(t + π/2)."""
    return math.sqrt(2 / w.shape[1]) * torch.sin(x @ w + b + math.pi / 2)


# --- random_fourier_features_cos_sin -----------------------------------------------------------------------------


def cos_sin_loop(x, w):
    R = w.shape[1]
    cos = [torch.cos((x * w[:, r]).sum(-1)) for r in range(R)]
    sin = [torch.sin((x * w[:, r]).sum(-1)) for r in range(R)]
    return torch.stack(cos + sin, -1) / math.sqrt(R)


def cos_sin_complex(x, w):
    e = torch.exp(1j * (x @ w))
    return torch.cat([e.real, e.imag], -1) / w.shape[1] ** 0.5


# --- positive_softmax_features -----------------------------------------------------------------------------------


def positive_loop(x, w):
    m = w.shape[1]
    sq = (x**2).sum(-1)
    return torch.stack([torch.exp((x * w[:, r]).sum(-1) - sq / 2) for r in range(m)], -1) / math.sqrt(m)


def positive_factored(x, w):
    """exp(xw) · exp(−‖x‖²/2) / √m, the two factors computed apart."""
    return torch.exp(x @ w) * torch.exp(-0.5 * x.norm(dim=-1, keepdim=True) ** 2) * w.shape[1] ** -0.5


def positive_log(x, w):
    """exp(xw − ‖x‖²/2 − log √m)."""
    return torch.exp(x @ w - torch.einsum("...d,...d->...", x, x)[..., None] / 2 - 0.5 * math.log(w.shape[1]))


def cos_sin_shifted(x, w):
    a = x @ w
    return torch.cat([torch.cos(a), torch.cos(a - math.pi / 2)], -1) / math.sqrt(w.shape[1])


@correct_answers(
    (check_monte_carlo_kernel, mc_loop),
    (check_monte_carlo_kernel, mc_complex),
    (check_monte_carlo_kernel, mc_product),
    (check_random_fourier_features, cos_loop),
    (check_random_fourier_features, cos_einsum),
    (check_random_fourier_features, cos_from_sin),
    (check_random_fourier_features_cos_sin, cos_sin_shifted),
    (check_random_fourier_features_cos_sin, cos_sin_loop),
    (check_random_fourier_features_cos_sin, cos_sin_complex),
    (check_positive_softmax_features, positive_loop),
    (check_positive_softmax_features, positive_factored),
    (check_positive_softmax_features, positive_log),
)
def test_correct_answers_pass(checker, student):
    assert_passes(checker, student)


@pytest.mark.parametrize(
    ("checker", "student", "fragments"),
    [
        (
            check_monte_carlo_kernel,
            lambda d, w: torch.cos(d @ w).sum(-1),
            ["divide by R", "The estimate is wrong", "R = 8"],
        ),
        (check_monte_carlo_kernel, lambda d, w: torch.sin(d @ w).mean(-1), ["sin is the imaginary part"]),
        (check_monte_carlo_kernel, lambda d, w: 2 * torch.cos(d @ w).mean(-1), ["No factor 2"]),
        (check_monte_carlo_kernel, lambda d, w: torch.cos(d @ w).mean(0), ["not over the differences"]),
        (check_monte_carlo_kernel, lambda d, w: torch.exp(-((d @ w) ** 2) / 2).mean(-1), ["real part"]),
        (check_monte_carlo_kernel, lambda d, w: torch.cos(d @ w), ["shape"]),
        (check_monte_carlo_kernel, lambda d, w: 1 / 0, ["raised ZeroDivisionError"]),
        (check_random_fourier_features, lambda x, w, b: torch.cos(x @ w + b) / w.shape[1] ** 0.5, ["√(2/R)"]),
        (check_random_fourier_features, lambda x, w, b: 2**0.5 * torch.cos(x @ w + b), ["Divide by √R"]),
        (check_random_fourier_features, lambda x, w, b: (2 / w.shape[1]) ** 0.5 * torch.cos(x @ w), ["phase b"]),
        (
            check_random_fourier_features,
            lambda x, w, b: (2 / w.shape[1]) ** 0.5 * torch.sin(x @ w + b),
            ["a cos, not a sin"],
        ),
        (
            check_random_fourier_features,
            lambda x, w, b: (2 / w.shape[1]) ** 0.5 * torch.cos(x @ w) + b,
            ["inside the cos"],
        ),
        (check_random_fourier_features, lambda x, w, b: torch.cos(x @ w.T + b), ["raised RuntimeError"]),
        (
            check_random_fourier_features_cos_sin,
            lambda x, w: torch.cat([torch.cos(x @ w), torch.sin(x @ w)], -1) / (2 * w.shape[1]) ** 0.5,
            ["not by √(2R')"],
        ),
        (
            check_random_fourier_features_cos_sin,
            lambda x, w: torch.stack([torch.cos(x @ w), torch.sin(x @ w)], -1).flatten(-2) / w.shape[1] ** 0.5,
            ["interleaved"],
        ),
        (check_random_fourier_features_cos_sin, lambda x, w: torch.cos(x @ w) / w.shape[1] ** 0.5, ["2R' features"]),
        (
            check_random_fourier_features_cos_sin,
            lambda x, w: torch.cat([torch.cos(x @ w), torch.sin(x @ w)], -1),
            ["averages the R' terms"],
        ),
        (check_positive_softmax_features, lambda x, w: torch.exp(x @ w) / w.shape[1] ** 0.5, ["Subtract ‖x‖²/2"]),
        (
            check_positive_softmax_features,
            lambda x, w: torch.exp(x @ w + (x * x).sum(-1, keepdim=True) / 2) / w.shape[1] ** 0.5,
            ["do not add it"],
        ),
        (
            check_positive_softmax_features,
            lambda x, w: torch.exp(x @ w - x.norm(dim=-1, keepdim=True) / 2) / w.shape[1] ** 0.5,
            ["squared norm"],
        ),
        (
            check_positive_softmax_features,
            lambda x, w: torch.exp(x @ w - (x * x).sum(-1, keepdim=True) / 2),
            ["Divide by √m"],
        ),
        (
            check_positive_softmax_features,
            lambda x, w: torch.exp(x @ w - (x * x).sum(-1, keepdim=True) / 2) / w.shape[1],
            ["not by m"],
        ),
        (
            check_positive_softmax_features,
            lambda x, w: torch.exp(x @ w - (x * x).sum() / 2) / w.shape[1] ** 0.5,
            ["its own ‖x‖²", "5 points"],
        ),
    ],
)
def test_wrong_answers_are_named(checker, student, fragments):
    assert_wrong(checker.verdict(student), *fragments)


def test_an_answer_that_changes_its_input_is_told():
    def in_place(x, w, b):
        x.mul_(1.0)
        x += 0.0
        x[..., 0] = 0.0
        return cos_einsum(x, w, b)

    assert_wrong(check_random_fourier_features.verdict(in_place), "changed its argument `x` in place")


# --- issue 17 -----------------------------------------------------------------------------------------------------


def test_two_over_r_is_not_named_one_over_root_r():
    """2/R equals 1/√R at R = 4 only: the mistake 1/√R must not be named for it (confirmed on every case)."""
    verdict = check_random_fourier_features.verdict(lambda x, w, b: 2 / w.shape[1] * torch.cos(x @ w + b))
    assert verdict.status == "wrong" and "not 1/√R" not in (verdict.hint or "")
    verdict = check_random_fourier_features.verdict(lambda x, w, b: torch.cos(x @ w + b) / math.sqrt(w.shape[1]))
    assert_wrong(verdict, "not 1/√R")


@pytest.mark.parametrize(
    ("checker", "student"),
    [
        (check_monte_carlo_kernel, rf.monte_carlo_kernel),
        (check_random_fourier_features, lambda x, w, b: rf.random_fourier_features(x, w, b)),
        (check_positive_softmax_features, lambda x, w: rf.positive_softmax_features(x, w)),
    ],
)
def test_the_companions_own_functions_are_withheld(checker, student):
    verdict = checker.verdict(student)
    assert verdict.status == "wrong" and ("companion's own" in verdict.problem or "yourself" in verdict.problem)
