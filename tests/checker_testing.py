"""Helpers shared by the tests: seeded float64 draws (any test), and the checker tests' students and assertions
(tests/test_exercises_*.py)."""

import torch

F64 = torch.float64
"""The tests compare with independent computations in float64, where rounding is far below any tolerance."""


def randn(*shape, seed, dtype=F64):
    """``torch.randn(*shape)`` drawn from a generator of its own seeded with ``seed``: the same numbers whatever ran
    before (a test that means the global generator, seeded for every test by conftest.py, calls torch.randn)."""
    return torch.randn(
        *shape, dtype=dtype, generator=torch.Generator().manual_seed(seed)
    )


def stub(*args, **kwargs):
    """What a student starts from: a function that still raises NotImplementedError."""
    raise NotImplementedError


def raises_boom(*args, **kwargs):
    """A student's function that crashes: its checker must say so, never crash itself."""
    raise RuntimeError("boom")


def assert_wrong(verdict, *fragments):
    """The verdict is 'wrong' and its message contains every fragment (the input, expected, got, hint...)."""
    assert verdict.status == "wrong", str(verdict)
    text = str(verdict)
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in:\n{text}"


def correct_answers(*pairs):
    """Run a test on each ``(checker, independently written correct answer)`` pair, named after both."""
    import pytest

    return pytest.mark.parametrize(
        ("checker", "student"),
        pairs,
        ids=[f"{c.exercise}-{getattr(s, '__name__', s)}" for c, s in pairs],
    )


def assert_passes(checker, student):
    """The checker says PASSED to ``student``, also when earlier cells left grad mode off and float64 as the
    default dtype (a checker runs the answer under a known state), and puts that state back afterwards."""
    verdict = checker.verdict(student)
    assert verdict.passed, str(verdict)
    import torch

    grad, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    try:
        torch.set_grad_enabled(False)
        torch.set_default_dtype(torch.float64)
        verdict = checker.verdict(student)
        assert (torch.is_grad_enabled(), torch.get_default_dtype()) == (
            False,
            torch.float64,
        )
    finally:
        torch.set_grad_enabled(grad)
        torch.set_default_dtype(dtype)
    assert verdict.passed, (
        f"with grad mode off and float64 as the default dtype: {verdict}"
    )


def unwithheld(module):
    """``module``'s functions wrapped in ``functools.partial`` (classes and other names as they are).

    The checkers withhold the companion's own answer while a student's code runs, found by identity; a test that
    builds an answer (right or deliberately wrong) on the companion's function uses these wrappers, which are
    other objects. (A student could do the same on purpose: the threat model is honest mistakes and casual
    copying, not a sandbox.)
    """
    import functools
    import inspect
    import types

    names = {
        k: functools.partial(v) if inspect.isfunction(v) else v
        for k, v in vars(module).items()
        if not k.startswith("__")
    }
    return types.SimpleNamespace(**names)
