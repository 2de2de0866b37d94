"""The checker machinery: one comparison for every kind of answer, the standard checker, and the verdicts it
gives whatever the student's code does."""

import subprocess
import sys

import numpy as np
import pytest
import torch
from checker_testing import assert_wrong, stub
from torch import nn

from companion.exercises.checking import (
    Checker,
    Mismatch,
    call,
    case,
    compare,
    expect,
    restore,
    same,
    snapshot,
)


def _twice(x: torch.Tensor, factor: float = 2.0) -> torch.Tensor:
    return x * factor


CHECK_TWICE = compare(
    "twice",
    _twice,
    lambda: [
        case(torch.tensor([1.0, -2.0])),
        case(torch.randn(3, 2), why="random"),
        case(torch.ones(2), factor=3.0),
    ],
    mistakes=[(lambda x, factor=2.0: x + factor, "Multiply, do not add.")],
    hint="Scale every entry.",
)


# --- one comparison -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("got", "expected"),
    [
        ((1, 2), [1, 2]),  # a tuple for a list
        ([torch.ones(2), 3], (torch.ones(2, dtype=torch.float64), 3.0)),
        (torch.ones(3, dtype=torch.float64), torch.ones(3)),  # float64 for float32
        # int32 for int64
        (torch.tensor([1, 2], dtype=torch.int32), torch.tensor([1, 2])),
        (np.float32(0.5), torch.tensor(0.5)),  # a NumPy scalar for a 0-d tensor
        (np.array(0.5), 0.5),
        (torch.tensor([0.5]), torch.tensor(0.5)),  # a one-element tensor for a number
        (0.5, torch.tensor(0.5)),
        (torch.tensor(float("inf")), torch.tensor(float("inf"))),
        ("abc", "abc"),
    ],
)
def test_same_answers(got, expected):
    assert same(got, expected)
    expect(got, expected, input="-")


@pytest.mark.parametrize(
    ("got", "expected", "fragments"),
    [
        (
            torch.ones(3),
            torch.ones(3, dtype=torch.long),
            ["should be an integer tensor", "dtype=torch.int64"],
        ),
        (
            torch.ones(2, 2),
            torch.ones(2, 2, dtype=torch.bool),
            ["should be a boolean tensor"],
        ),
        (torch.ones(3), torch.ones(2), ["wrong shape", "shape (2,)", "shape (3,)"]),
        (np.ones(2), torch.ones(2), ["should be a torch.Tensor", "torch.from_numpy"]),
        (torch.tensor([1.0, float("nan")]), torch.ones(2), ["NaN", "division by zero"]),
        ("0.5", torch.tensor(0.5), ["should be a single number", "str: '0.5'"]),
        (True, 1.0, ["should be a single number"]),
        (200.0, float("inf"), ["is wrong"]),  # a finite number is not close to infinity
        ([1, 2, 3], [1, 2], ["list or tuple of 2 items"]),
        ((1, 3), [1, 2], ["item 1 differs"]),
        (
            torch.tensor([1.0, 2.5]),
            torch.tensor([1.0, 2.0]),
            ["wrong values", "index (1,)"],
        ),
    ],
)
def test_different_answers(got, expected, fragments):
    assert not same(got, expected)
    with pytest.raises(Mismatch) as info:
        expect(got, expected, input="-", what="The answer")
    text = " ".join(str(x) for x in vars(info.value).values())
    for fragment in fragments:
        assert fragment in text, text


def test_a_named_mistake_wins_over_the_nan_hint_and_the_nan_hint_over_the_default():
    nan = torch.tensor([float("nan")])
    with pytest.raises(Mismatch) as info:
        expect(
            nan,
            torch.ones(1),
            input="-",
            hint="default",
            mistakes=[(lambda: torch.tensor([0.0]), "zero")],
        )
    # the mistake does not match: the NaN hint stays
    assert "division by zero" in info.value.hint
    with pytest.raises(Mismatch) as info:
        expect(
            nan,
            torch.ones(1),
            input="-",
            hint="default",
            mistakes=[(lambda: nan.clone(), "named")],
        )
    assert info.value.hint == "named"
    with pytest.raises(Mismatch) as info:
        expect(
            torch.zeros(1),
            torch.ones(1),
            input="-",
            hint="default",
            mistakes=[(lambda: 1 / 0, "crashes")],
        )
    assert info.value.hint == "default"  # a mistake that raises is skipped


# --- the standard checker -----------------------------------------------------------------------------------


def test_compare_passes_counts_and_names_arguments():
    verdict = CHECK_TWICE.verdict(lambda x, factor=2.0: factor * x)
    # the random case is drawn again, hidden; fixed ones are not
    assert (verdict.cases, verdict.hidden) == (4, 1)
    assert_wrong(
        CHECK_TWICE.verdict(lambda x, factor=2.0: x + factor),
        "input:    x=tensor([1.0, -2.0])",
        "expected: tensor of shape (2,)",
        "hint:     Multiply, do not add.",
    )
    assert_wrong(
        CHECK_TWICE.verdict(lambda x, factor=2.0: x * 2),
        "factor=3.0",
        "hint:     Scale every entry.",
    )
    assert CHECK_TWICE.verdict(stub).status == "not attempted"


def test_compare_names_a_change_in_place():
    def in_place(x, factor=2.0):
        return x.mul_(factor)

    assert_wrong(
        CHECK_TWICE.verdict(in_place), "changed its argument `x` in place", "x.clone()"
    )


def test_compare_leaves_the_students_random_state_alone():
    torch.manual_seed(5)
    expected = torch.rand(4)
    torch.manual_seed(5)
    # its cases draw random numbers
    CHECK_TWICE.verdict(lambda x, factor=2.0: x * factor)
    assert torch.equal(torch.rand(4), expected)


def test_verdicts_never_crash():
    for student in (
        lambda *a, **k: 1 / 0,
        lambda *a, **k: None,
        lambda *a, **k: object(),
        lambda *a, **k: torch.zeros(5, dtype=torch.complex64),
        lambda *a, **k: [torch.ones(2)],
        lambda *a, **k: torch.full((2,), float("nan")),
    ):
        assert CHECK_TWICE.verdict(student).status == "wrong"


# --- classes ------------------------------------------------------------------------------------------------


class Good(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.d = d

    def forward(self, x):
        return x


class Misspelt(nn.Module):
    def __init__(self, d):
        super().__init__()

    def foward(self, x):
        return x


def _module_cases(Module):
    layer = call(Module, 3, input="Module(3)")
    expect(
        call(layer, torch.ones(3), input="layer(ones(3))"),
        torch.ones(3),
        input="layer(ones(3))",
    )
    return 1


CHECK_MODULE = Checker("Module", _module_cases)


def test_class_checker_verdicts():
    assert CHECK_MODULE.kind == "class"
    assert CHECK_MODULE.verdict(Good).passed
    assert_wrong(
        CHECK_MODULE.verdict(Misspelt),
        "Your class Misspelt has no method `forward`",
        "spelt exactly",
    )
    assert_wrong(
        CHECK_MODULE.verdict(Good(3)),
        "Expected the class Module itself",
        "not Module(...)",
    )
    assert_wrong(
        CHECK_MODULE.verdict(lambda d: Good(d)),
        "Expected the class Module itself",
        "asks for a class",
    )


def test_a_missing_forward_found_only_when_called_is_wrong_not_unattempted():
    # forward added after the check of the class, then removed again
    class Late(nn.Module):
        def __init__(self, d):
            super().__init__()

    def cases(Module):
        return call(Module(3), torch.ones(1), input="layer(x)")

    assert_wrong(
        Checker("Late", cases, kind="function").verdict(Late), "has no method `forward`"
    )


@pytest.mark.slow  # a fresh interpreter that imports torch
def test_the_first_wrong_verdict_imports_nothing_heavy():
    """The error path used torch.unravel_index, whose first call imports sympy (2-3 s in a fresh kernel)."""
    code = (
        "import sys, torch\n"
        "from companion.exercises.words_to_vectors import check_one_hot\n"
        "before = set(sys.modules)\n"
        "assert check_one_hot.verdict(lambda i, v: torch.zeros(len(i), v)).status == 'wrong'\n"
        "print(len([m for m in set(sys.modules) - before if m.split('.')[0] in {'sympy', 'mpmath'}]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "0", (
        f"the first WRONG verdict imported {out.strip()} sympy/mpmath modules"
    )


# --- keeping the homework's variables safe ------------------------------------------------------------------


def test_restore_puts_back_what_the_student_replaced(capsys):
    namespace = {
        "emb": "module",
        "x": 1,
        "torch": torch,
        "_private": 0,
        "one_hot": None,
    }
    saved = snapshot(namespace)
    namespace.update(emb="a layer", x=2, one_hot="student's", scratch=3, _private=9)
    del namespace["torch"]
    back = restore(namespace, saved, keep=["one_hot"])
    assert sorted(back) == ["emb", "torch", "x"]
    assert (
        namespace["emb"] == "module"
        and namespace["x"] == 1
        and namespace["torch"] is torch
    )
    assert (
        namespace["one_hot"] == "student's"
        and namespace["scratch"] == 3
        and namespace["_private"] == 9
    )
    assert "`emb`, `x`, `torch`" in capsys.readouterr().out
    assert restore(namespace, saved, keep=["one_hot"]) == []
    assert capsys.readouterr().out == ""


# --- the machinery closes whole classes of gaps (issue 17) ----------------------------------------------------

import signal  # noqa: E402

import companion.masks  # noqa: E402
from companion.exercises.checking import RAISED, confirmed, peak_bytes  # noqa: E402
from companion.masks import causal_mask as imported_alias  # noqa: E402


class _Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.tensor([1.0, 2.0, 3.0]))
        self.register_buffer("offset", torch.zeros(3))

    def forward(self, x):
        return x * self.weight + self.offset


def _apply(model, x):
    return model(x).sum()


CHECK_APPLY = compare(
    "apply",
    _apply,
    lambda: [case(_Scale(), torch.randn(3)), case(_Scale(), torch.ones(3))],
    what="The sum",
    differentiable=True,
)


def test_a_student_who_changes_the_models_weights_before_a_right_computation_is_told():
    def doubles_first(model, x):
        with torch.no_grad():
            model.weight.mul_(2)
        # right value on the changed model... the expectation was computed before
        return (model(x) / 2).sum()

    def shifts_buffer(model, x):
        model.offset += 1
        return (model(x) - 1).sum()

    assert_wrong(
        CHECK_APPLY.verdict(doubles_first), "changed its argument `model` in place"
    )
    assert_wrong(
        CHECK_APPLY.verdict(shifts_buffer), "changed its argument `model` in place"
    )
    assert CHECK_APPLY.verdict(
        lambda model, x: (x * model.weight).sum() + model.offset.sum()
    ).passed
    assert CHECK_APPLY.verdict(lambda model, x: model(x).sum()).passed


def test_a_loss_must_stay_differentiable():
    assert_wrong(
        CHECK_APPLY.verdict(lambda model, x: model(x).sum().item()),
        "is a plain number",
        ".item()",
    )

    def no_grad(model, x):
        with torch.no_grad():
            return model(x).sum()

    assert_wrong(CHECK_APPLY.verdict(no_grad), "carries no gradient", "torch.no_grad()")
    assert_wrong(
        CHECK_APPLY.verdict(lambda model, x: model(x).sum().detach()),
        "carries no gradient",
    )
    wrong_graph = lambda model, x: model(x).sum().detach() + 0 * model.weight.sum()  # noqa: E731
    assert_wrong(
        CHECK_APPLY.verdict(wrong_graph),
        "gradient of your result with respect to `weight`",
    )


def test_a_named_mistake_must_hold_on_every_case():
    # the mistake x + factor equals the answer 2·x on x = [2, ...] only; a student wrong elsewhere is not named
    check = compare(
        "twice",
        _twice,
        [case(torch.tensor([2.0])), case(torch.tensor([5.0]))],
        mistakes=[(lambda x, factor=2.0: x + factor, "Multiply, do not add.")],
        hint="default",
    )
    # the mistake itself
    assert_wrong(check.verdict(lambda x, factor=2.0: x + 2), "Multiply, do not add.")
    coincidence = lambda x, factor=2.0: torch.where(x == 2, 4.0, 7.0)  # noqa: E731 -- matches it on case 1 only
    verdict = check.verdict(lambda x, factor=2.0: coincidence(x) + 1)
    assert_wrong(verdict, "hint:     default")
    # right, then unrelated
    verdict = check.verdict(lambda x, factor=2.0: torch.where(x == 2, 4.0, 0.0))
    assert_wrong(verdict, "x=tensor([5.0])", "hint:     default")
    assert confirmed([(1.0, 2.0, [1.0]), (RAISED, 3.0, [RAISED])], ["m"]) == ["m"]
    assert confirmed([(1.0, 2.0, [1.0]), (5.0, 3.0, [4.0])], ["m"]) == []
    # right where it does not apply
    assert confirmed([(1.0, 2.0, [1.0]), (3.0, 3.0, [RAISED])], ["m"]) == ["m"]


class _BadRepr:
    def __repr__(self):
        raise RuntimeError("no repr")

    __str__ = __repr__

    def __eq__(self, other):
        raise RuntimeError("no eq")


def _raises(exception):
    def student(*a, **k):
        raise exception

    return student


@pytest.mark.parametrize(
    ("student", "fragment"),
    [
        (lambda x, factor=2.0: torch.empty(x.shape, device="meta"), "meta device"),
        (lambda x, factor=2.0: (x * factor).to_sparse(), "dense tensor"),
        (lambda x, factor=2.0: _BadRepr(), "repr() raises"),
        (_raises(SystemExit(3)), "raised SystemExit"),
        (_raises(KeyboardInterrupt()), "raised KeyboardInterrupt"),
        (_raises(GeneratorExit()), "raised GeneratorExit"),
        (_raises(RuntimeError()), "raised RuntimeError"),
    ],
)
def test_no_verdict_raises(student, fragment):
    verdict = CHECK_TWICE.verdict(student)
    assert_wrong(verdict, fragment)
    str(verdict)


def test_the_stop_button_still_stops_a_check():
    def presses_stop(x, factor=2.0):
        # what Jupyter's stop button (or the grader's time limit) sends
        signal.raise_signal(signal.SIGINT)
        return x * factor

    # A Jupyter kernel's SIGINT handler is Python's default one; a test that ran before this one in the same
    # pytest worker may have left another (seen as a rare "DID NOT RAISE" under xdist), so set it here.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            CHECK_TWICE.verdict(presses_stop)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_hidden_random_cases_defeat_a_table_of_shown_answers():
    table = {}
    torch.manual_seed(0)
    for c in [
        case(torch.tensor([1.0, -2.0])),
        case(torch.randn(3, 2)),
        case(torch.ones(2), factor=3.0),
    ]:
        table[tuple(c.args[0].flatten().tolist())] = _twice(*c.args, **c.kwargs)

    def lookup(x, factor=2.0):
        return table.get(tuple(x.flatten().tolist()), torch.zeros_like(x))

    verdict = CHECK_TWICE.verdict(lookup)
    assert_wrong(verdict, "a hidden random case, seed")
    seeds = {
        str(CHECK_TWICE.verdict(lookup)).split("seed ")[1].split("]")[0]
        for _ in range(3)
    }
    assert len(seeds) > 1  # drawn afresh on every run


def _withholding_checker():
    return compare(
        "causal_mask",
        companion.masks.causal_mask,
        [case(3), case(2, 4)],
        withhold=["companion.masks.causal_mask"],
        atol=0,
        rtol=0,
    )


def test_the_companions_answer_is_withheld_while_the_students_code_runs():
    check = _withholding_checker()
    original = companion.masks.causal_mask
    assert_wrong(
        check.verdict(lambda n, m=None: companion.masks.causal_mask(n, m)),
        "write this one yourself",
    )
    # an alias
    assert_wrong(
        check.verdict(lambda n, m=None: imported_alias(n, m)), "write this one yourself"
    )
    assert_wrong(
        check.verdict(original), "the companion's own `companion.masks.causal_mask`"
    )
    # put back
    assert companion.masks.causal_mask is original and imported_alias is original
    assert check.verdict(
        lambda n, m=None: torch.ones(n, m or n, dtype=torch.bool).tril((m or n) - n)
    ).passed


def test_messages_agree_with_plural_subjects_and_tell_inf_from_nan():
    with pytest.raises(Mismatch) as info:
        expect(torch.ones(3), torch.ones(2), input="-", what="The logits")
    assert "The logits have the wrong shape" in info.value.problem
    with pytest.raises(Mismatch) as info:
        expect(torch.ones(3), torch.ones(2), input="-", what="The loss")
    assert "The loss has the wrong shape" in info.value.problem
    minus_inf = torch.tensor([1.0, float("-inf")])
    with pytest.raises(Mismatch) as info:
        expect(minus_inf, torch.tensor([1.0, 0.5]), input="-", what="The logits")
    assert (
        "contain an infinity where a finite value is expected (first at index (1,))"
        in info.value.problem
    )
    assert "division by zero" in info.value.hint and "NaN" not in info.value.problem
    with pytest.raises(Mismatch) as info:
        expect(torch.tensor([1.0, 0.5]), minus_inf, input="-", what="The logits")
    assert "should be -inf at index (1,)" in info.value.problem
    # -inf where -inf is expected is right
    expect(minus_inf, minus_inf.clone(), input="-")


def test_same_dtype_is_checked_when_asked():
    check = compare(
        "twice", _twice, [case(torch.ones(2, dtype=torch.float64))], same_dtype=True
    )
    assert_wrong(
        check.verdict(lambda x, factor=2.0: (x * factor).float()),
        "wrong dtype",
        "torch.float64",
    )
    assert check.verdict(lambda x, factor=2.0: x * factor).passed


def test_peak_bytes_counts_numpy_as_well_as_torch():
    n = 512
    numpy_square = peak_bytes(lambda: np.ones((n, n)).sum())
    torch_square = peak_bytes(lambda: torch.ones(n, n, dtype=torch.float64).sum())
    vector = peak_bytes(lambda: np.ones(n).sum())
    assert numpy_square >= n * n * 8 and torch_square >= n * n * 8
    assert vector < n * n * 8 / 50


def test_a_harness_that_runs_the_student_elsewhere_passes_in_where_its_peaks_go():
    """A grader runs the student's calls in another process, which measures them: the grader hands the checker a
    RemoteMemory, reads ``measuring`` before each call and records the peak that comes back; peak_bytes then
    reports that peak, not what this process allocated. No state outside the objects passed in."""
    from companion.exercises.checking import RemoteMemory

    memory, elsewhere = RemoteMemory(), 7 * 2**20
    asked = []

    def student(x):  # a grader's stand-in for the student's function
        asked.append(memory.measuring)
        # the peak the other process measured (ignored unless measuring)
        memory.record(elsewhere)
        return x

    def cases(f):
        peak = peak_bytes(f, torch.ones(3))
        if peak != elsewhere:
            raise Mismatch(f"peak {peak}")
        return 1

    assert Checker("f", cases).verdict(student, memory=memory).passed
    # both runs of peak_bytes measured remotely
    assert asked == [True, True] and not memory.measuring
    # no memory passed in: measured here, a few bytes
    assert not Checker("f", cases).verdict(student).passed
    assert peak_bytes(student, torch.ones(3)) < 2**20  # outside a checker too


# A student's own exception classes: whatever the student's code raises is the student's error (WRONG, naming
# their exception and the line of their code), never "the checker itself failed"; only a harness's Abort passes.
def _all_checkers():
    import importlib
    import pkgutil

    import companion.exercises as exercises

    found = []
    for info in pkgutil.iter_modules(exercises.__path__):
        if info.name != "checking":
            module = importlib.import_module(f"companion.exercises.{info.name}")
            found += [
                v
                for k, v in vars(module).items()
                if isinstance(v, Checker) and k.startswith("check_")
            ]
    return found


class _StudentStop(BaseException):
    """What a student may write to stop early: a BaseException, not an Exception."""


class _StudentGiveUp(_StudentStop):
    pass


class _StudentError(Exception):
    pass


def _raising_function(exception):
    def student(*args, **kwargs):
        raise exception

    return student


def _raising_class(exception, where):
    class Student(nn.Module):
        def __init__(self, *args, **kwargs):
            super().__init__()
            if where == "init":
                raise exception

        def forward(self, *args, **kwargs):
            raise exception

    return Student


_OWN_EXCEPTIONS = [_StudentStop("stop here"), _StudentGiveUp(), _StudentError("mine")]


@pytest.mark.parametrize("checker", _all_checkers(), ids=lambda c: c.exercise)
def test_a_students_own_exception_is_their_error_in_every_checker(checker):
    assert len(_all_checkers()) >= 46
    if checker.kind == "class":
        students = [
            _raising_class(e, w) for e in _OWN_EXCEPTIONS for w in ("init", "forward")
        ]
    else:
        students = [_raising_function(e) for e in _OWN_EXCEPTIONS]
    for student in students:
        verdict = checker.verdict(student)
        assert "checker itself failed" not in str(verdict)
        # a class whose forward raises may first be WRONG for lacking the layers the task names
        fragments = ("Your code raised _Student", "test_exercises_checking.py")
        if checker.kind == "class" and "Your code raised" not in verdict.problem:
            fragments = ()
        assert_wrong(verdict, *fragments)


def test_own_base_exception_gets_its_hint_and_abort_still_passes():
    from companion.exercises.checking import Abort

    assert_wrong(
        CHECK_TWICE.verdict(_raising_function(_StudentStop("x"))),
        "derive your exceptions from Exception",
    )
    with pytest.raises(Abort):
        CHECK_TWICE.verdict(_raising_function(Abort()))


def test_a_checker_bug_is_still_reported_as_the_checkers():
    def broken_cases(student):
        raise ZeroDivisionError("the checker's own bug")

    verdict = Checker("f", broken_cases).verdict(lambda: None)
    assert verdict.status == "error" and "checker itself failed" in str(verdict)


# Ids are torch.long, as the tasks state: int32 (or uint8, int16) ids are WRONG with "expected int64, got ...".
def _encode_int32(tokens, stoi):
    return torch.tensor([stoi.get(t, stoi["<unk>"]) for t in tokens], dtype=torch.int32)


def _encode_numpy_int32(tokens, stoi):
    return torch.from_numpy(
        np.array([stoi.get(t, stoi["<unk>"]) for t in tokens], dtype=np.int32)
    )


def _encode_dot_int(tokens, stoi):
    return torch.tensor([stoi[t] if t in stoi else stoi["<unk>"] for t in tokens]).int()


def _encode_uint8(tokens, stoi):
    return torch.tensor([stoi.get(t, stoi["<unk>"]) for t in tokens], dtype=torch.uint8)


def _pairs_int32(ids, window):
    n = len(ids)
    centres, contexts = [], []
    for i in range(n):
        for j in range(max(0, i - window), min(n, i + window + 1)):
            if j != i:
                centres.append(int(ids[i]))
                contexts.append(int(ids[j]))
    return torch.tensor(centres, dtype=torch.int32), torch.tensor(
        contexts, dtype=torch.int32
    )


def _pairs_int16_contexts(ids, window):
    n = len(ids)
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    keep = ((i - j).abs() <= window) & (i != j)
    return ids[i[keep]], ids[j[keep]].to(torch.int16)


def _pair_int32(a, b, cls_id, sep_id, max_len):
    a, b = list(a), list(b)
    a_was_longer = len(a) > len(b)
    while len(a) + len(b) > max_len - 3:
        (a if len(a) > len(b) or (len(a) == len(b) and not a_was_longer) else b).pop()
    ids = [cls_id, *a, sep_id, *b, sep_id]
    return torch.tensor(ids, dtype=torch.int32), torch.tensor(
        [0] * (len(a) + 2) + [1] * (len(b) + 1)
    )


def _best_span_int32(start_logits, end_logits, context_mask, max_len):
    out = []
    for s, e, m in zip(
        start_logits.tolist(), end_logits.tolist(), context_mask.tolist(), strict=True
    ):
        best = None
        for i in range(len(s)):
            for j in range(i, min(len(s), i + max_len)):
                if m[i] and m[j] and (best is None or s[i] + e[j] > best[0]):
                    best = (s[i] + e[j], i, j)
        out.append(best[1:])
    return torch.tensor(out, dtype=torch.int32)


def _id_checkers():
    from companion.exercises.bert import check_best_span, check_pair_inputs
    from companion.exercises.word2vec import check_skipgram_pairs
    from companion.exercises.words_to_vectors import check_encode

    return {
        "encode": check_encode,
        "pairs": check_skipgram_pairs,
        "pair": check_pair_inputs,
        "span": check_best_span,
    }


@pytest.mark.parametrize(
    ("exercise", "student", "got"),
    [
        ("encode", _encode_int32, "got int32"),
        ("encode", _encode_numpy_int32, "got int32"),
        ("encode", _encode_dot_int, "got int32"),
        ("encode", _encode_uint8, "got uint8"),
        ("pairs", _pairs_int32, "got int32"),
        ("pairs", _pairs_int16_contexts, "got int16"),
        ("pair", _pair_int32, "got int32"),
        ("span", _best_span_int32, "got int32"),
    ],
)
def test_ids_must_be_long(exercise, student, got):
    assert_wrong(
        _id_checkers()[exercise].verdict(student), "expected int64", got, "torch.long"
    )


# Losses that cannot train: a plain number, a detached part, no_grad: WRONG, naming the input nothing flows to.
def _ns_terms(v, u_pos, u_neg):
    pos = torch.nn.functional.logsigmoid((u_pos * v).sum(-1))
    neg = torch.nn.functional.logsigmoid(-(u_neg @ v.unsqueeze(-1)).squeeze(-1)).sum(-1)
    return pos, neg


def _ns_item(v, u_pos, u_neg):
    pos, neg = _ns_terms(v, u_pos, u_neg)
    return (-(pos + neg)).mean().item()


def _ns_detached_negatives(v, u_pos, u_neg):
    pos, neg = _ns_terms(v, u_pos, u_neg.detach())
    return (-(pos + neg)).mean()


def _ns_detached_centre(v, u_pos, u_neg):
    pos, neg = _ns_terms(v.detach(), u_pos, u_neg)
    return -(pos + neg).mean()


def _ns_no_grad(v, u_pos, u_neg):
    with torch.no_grad():
        pos, neg = _ns_terms(v, u_pos, u_neg)
    return -(pos + neg).mean()


def _ns_tensor_of_float(v, u_pos, u_neg):
    pos, neg = _ns_terms(v, u_pos, u_neg)
    return torch.tensor(float(-(pos + neg).mean()))


def _glove_terms(e, u, b, b_tilde, c, x_max, alpha):
    weight = torch.clamp((c / x_max) ** alpha, max=1.0)
    return weight, (e * u).sum(1) + b + b_tilde - torch.log(c)


def _glove_item(e, u, b, b_tilde, c, x_max=100.0, alpha=0.75):
    w, r = _glove_terms(e, u, b, b_tilde, c, x_max, alpha)
    return (w * r**2).sum().item()


def _glove_detached_biases(e, u, b, b_tilde, c, x_max=100.0, alpha=0.75):
    w, r = _glove_terms(e, u, b.detach(), b_tilde.data, c, x_max, alpha)
    return (w * r**2).sum()


def _glove_numpy(e, u, b, b_tilde, c, x_max=100.0, alpha=0.75):
    w, r = _glove_terms(
        e.detach(), u.detach(), b.detach(), b_tilde.detach(), c, x_max, alpha
    )
    return float((w * r**2).sum().numpy())


def _glove_detached_u(e, u, b, b_tilde, c, x_max=100.0, alpha=0.75):
    w, r = _glove_terms(e, u.detach(), b, b_tilde, c, x_max, alpha)
    return torch.sum(w * r * r)


@pytest.mark.parametrize(
    ("exercise", "student", "fragment"),
    [
        ("ns", _ns_item, "plain number"),
        ("ns", _ns_detached_negatives, "with respect to `u_neg` is zero"),
        ("ns", _ns_detached_centre, "with respect to `v`"),
        ("ns", _ns_no_grad, "carries no gradient"),
        ("ns", _ns_tensor_of_float, "carries no gradient"),
        ("glove", _glove_item, "plain number"),
        ("glove", _glove_detached_biases, "with respect to `b` is zero"),
        ("glove", _glove_numpy, "plain number"),
        ("glove", _glove_detached_u, "with respect to `u` is zero"),
    ],
)
@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")
def test_losses_that_cannot_train_are_wrong(exercise, student, fragment):
    from companion.exercises.word2vec import (
        check_glove_loss,
        check_negative_sampling_loss,
    )

    checker = {"ns": check_negative_sampling_loss, "glove": check_glove_loss}[exercise]
    assert_wrong(checker.verdict(student), fragment, ".detach()")


def test_losses_that_train_pass():
    from checker_testing import assert_passes

    from companion.exercises.word2vec import (
        check_glove_loss,
        check_negative_sampling_loss,
    )

    def ns(v, u_pos, u_neg):
        pos, neg = _ns_terms(v, u_pos, u_neg)
        return -(pos + neg).mean()

    def glove(e, u, b, b_tilde, c, x_max=100.0, alpha=0.75):
        w, r = _glove_terms(e, u, b, b_tilde, c, x_max, alpha)
        return (w * r**2).sum()

    assert_passes(check_negative_sampling_loss, ns)
    assert_passes(check_glove_loss, glove)


# The state earlier cells leave (grad mode off, float64 as the default dtype) does not reach the checker, and
# the student's own state is put back afterwards, also when their code changes it.
def test_checker_runs_under_a_known_torch_state_and_puts_the_students_back():
    seen = []

    def student(x, factor=2.0):
        seen.append((torch.is_grad_enabled(), torch.get_default_dtype()))
        # the student's code changes it: put back after the check
        torch.set_default_dtype(torch.float64)
        torch.set_grad_enabled(True)
        return x * factor

    grad, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    try:
        torch.set_grad_enabled(False)
        torch.set_default_dtype(torch.float64)
        CHECK_TWICE.verdict(student)
        assert (torch.is_grad_enabled(), torch.get_default_dtype()) == (
            False,
            torch.float64,
        )
        torch.set_default_dtype(torch.float32)
        CHECK_TWICE.verdict(student)
        assert (torch.is_grad_enabled(), torch.get_default_dtype()) == (
            False,
            torch.float32,
        )
    finally:
        torch.set_grad_enabled(grad)
        torch.set_default_dtype(dtype)
    # the first call of each check; later ones see what the student set
    assert seen[0] == (True, torch.float32)


@pytest.mark.parametrize("state", ["no_grad", "float64"])
def test_a_correct_loss_passes_with_grad_mode_left_off_or_float64(state):
    from companion.exercises.gpt import check_gpt_forward, check_next_token_loss

    def loss(model, ids):
        logits = model(ids[:, :-1])
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)
        )

    def forward(model, ids):
        x = model.pos(model.embed(ids))
        for block in model.blocks:
            x = block(x)
        return model.norm(x) @ model.embed.weight.T

    dtype = torch.get_default_dtype()
    try:
        with torch.set_grad_enabled(state != "no_grad"):
            if state == "float64":
                torch.set_default_dtype(torch.float64)
            verdicts = [
                check_next_token_loss.verdict(loss),
                check_gpt_forward.verdict(forward),
            ]
    finally:
        torch.set_default_dtype(dtype)
    for verdict in verdicts:
        assert verdict.passed, str(verdict)
