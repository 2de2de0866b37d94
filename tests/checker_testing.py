"""Helpers shared by the checker tests (tests/test_exercises_*.py)."""


def stub(*args, **kwargs):
    """What a student starts from: a function that still raises NotImplementedError."""
    raise NotImplementedError


def assert_wrong(verdict, *fragments):
    """The verdict is 'wrong' and its message contains every fragment (the input, expected, got, hint...)."""
    assert verdict.status == "wrong", str(verdict)
    text = str(verdict)
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in:\n{text}"
