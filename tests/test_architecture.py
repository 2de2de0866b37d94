"""Dependencies point one way: a concept module never imports machinery.

A *concept* is a top-level module of the package (``companion/attention.py``, ...), one per idea the book names;
*machinery* (data and tasks, training recipes, interop, benchmarking, plotting, homework checkers) lives in the
sub-packages (``companion/data/``, ``companion/training/``, ...). Machinery may import concepts, never the reverse,
so a reader who opens a concept finds the mathematics and what it is built from, not the harness around it.
The instructors' grader is not part of what readers import: it is a top-level package of its own,
``homework_grader``, which imports the companion; the companion never imports it.
"""

import ast
import subprocess
import sys
from pathlib import Path

import companion
import homework_grader
from tests.test_package_index import index

PACKAGE = Path(companion.__file__).parent
GRADER = Path(homework_grader.__file__).parent
# the package's docstring and the one validation module
SHARED = {"__init__", "validation"}


def concept_modules() -> list[str]:
    return sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in SHARED)


def machinery_packages() -> list[str]:
    return sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))


def imported_modules(source: str) -> list[str]:
    """Every module that ``source`` (the text of a top-level module) imports, anywhere in it, as dotted names."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level > 1:  # above the package: nothing a concept may need
                found.append("<outside companion>")
                continue
            if node.level == 1:  # relative to the concept's package, which is companion
                target = f"companion.{node.module}" if node.module else "companion"
            else:
                target = node.module or ""
            found.append(target)
            # `from . import data` imports companion.data
            found += [f"{target}.{alias.name}" for alias in node.names]
    return found


def machinery_imports(source: str) -> list[str]:
    """The imports of ``source`` that reach into a machinery sub-package of the companion."""
    machinery = machinery_packages()
    bad = []
    for name in imported_modules(source):
        parts = name.split(".")
        if name.startswith("<") or (
            parts[0] == "companion" and len(parts) > 1 and parts[1] in machinery
        ):
            bad.append(name)
    return sorted(set(bad))


def test_no_concept_module_imports_machinery():
    offenders = {}
    for module in concept_modules():
        bad = machinery_imports((PACKAGE / f"{module}.py").read_text())
        if bad:
            offenders[module] = bad
    assert not offenders, (
        f"concept modules import machinery (move the code into the sub-package; "
        f"CONTRIBUTING.md#where-a-thing-lives): {offenders}"
    )


def test_the_top_level_holds_the_concepts_and_nothing_else():
    indexed = {m for modules in index().values() for m in modules}
    stray = sorted(set(concept_modules()) - indexed)
    assert not stray, (
        f"top-level modules the chapter index does not name as concepts (machinery? move it; "
        f"CONTRIBUTING.md#where-a-thing-lives): {stray}"
    )
    assert set(machinery_packages()) == {
        "benchmarking",
        "data",
        "exercises",
        "interop",
        "plotting",
        "training",
    }


def companion_modules() -> list[str]:
    """Every module of the companion, as dotted names, found from its files (nothing imported)."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _absolute_imports(path: Path) -> list[str]:
    """The modules a file imports by absolute name, anywhere in it (``import x.y``, ``from x.y import z``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.append(node.module or "")
    return found


def test_the_companion_never_imports_the_grader():
    """Importing every module of the companion, in a fresh interpreter, leaves the grader unimported; no source
    of the companion names it. The grader imports the companion (its checkers), never the reverse."""
    mentions = [
        p.name
        for p in PACKAGE.rglob("*.py")
        if any(m.startswith("homework_grader") for m in _absolute_imports(p))
    ]
    assert not mentions, (
        f"companion modules import the grader (CONTRIBUTING.md#where-a-thing-lives): {mentions}"
    )
    modules = companion_modules()
    assert len(modules) > 40 and "companion.exercises.checking" in modules
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'homework_grader'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PACKAGE.parent,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", (
        f"importing the companion imported the grader (CONTRIBUTING.md#where-a-thing-lives): {done.stdout}"
    )
    grader = {m for p in GRADER.rglob("*.py") for m in _absolute_imports(p)}
    # the direction that is allowed, and used
    assert "companion.exercises.checking" in grader


def reexport_only_violations(source: str) -> list[str]:
    """The statements of a package's ``__init__`` that are not its docstring, an import from inside the package,
    ``__all__`` or ``__version__``: code that belongs in a named module."""
    bad = []
    for i, node in enumerate(ast.parse(source).body):
        if (
            i == 0
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
        ):
            continue  # the docstring
        if isinstance(node, ast.ImportFrom) and (
            node.level > 0 or node.module == "__future__"
        ):
            continue
        targets = [getattr(t, "id", "") for t in getattr(node, "targets", [])]
        if isinstance(node, ast.Assign) and targets in (["__all__"], ["__version__"]):
            continue
        bad.append(f"line {node.lineno}: {type(node).__name__}")
    return bad


def test_package_init_files_only_gather_names():
    """An ``__init__.py`` holds the package's docstring and re-exports; its code lives in a module named for what
    it is (``training/loop.py``, ``benchmarking/measuring.py``, ``exercises/checking/checker.py``)."""
    found = {}
    for path in sorted(PACKAGE.rglob("__init__.py")):
        bad = reexport_only_violations(path.read_text())
        if bad:
            found[path.relative_to(PACKAGE).as_posix()] = bad
    assert not found, (
        f"code in __init__.py files (move it into a named module and re-export it; "
        f"CONTRIBUTING.md#where-a-thing-lives): {found}"
    )
    assert reexport_only_violations("def f():\n    pass\nx = 1\nimport torch\n") == [
        "line 1: FunctionDef",
        "line 3: Assign",
        "line 4: Import",
    ]


MODULE_LINES = 600  # a module a newcomer reads in one sitting

# modules still longer, each with what splitting it waits for; the test fails once one fits
OVER_THE_LIMIT: dict[str, str] = {}


def test_no_module_is_longer_than_a_sitting():
    lengths = {
        p.relative_to(PACKAGE).as_posix(): len(p.read_text().splitlines())
        for p in PACKAGE.rglob("*.py")
    }
    long = {name: n for name, n in lengths.items() if n > MODULE_LINES}
    new = sorted(set(long) - set(OVER_THE_LIMIT))
    assert not new, (
        f"modules over {MODULE_LINES} lines (split them by concern; "
        f"CONTRIBUTING.md#module-size): { {k: long[k] for k in new} }"
    )
    fits = sorted(set(OVER_THE_LIMIT) - set(long))
    assert not fits, (
        f"modules that fit in {MODULE_LINES} lines now (remove them from OVER_THE_LIMIT; "
        f"CONTRIBUTING.md#module-size): {fits}"
    )


def test_the_check_sees_every_form_of_import():
    assert machinery_imports("from .benchmarking import time_call") == [
        "companion.benchmarking",
        "companion.benchmarking.time_call",
    ]
    assert machinery_imports("def f():\n    from .data.corpus import load_lee\n")
    assert machinery_imports("import companion.training") == ["companion.training"]
    assert machinery_imports("from . import plotting") == ["companion.plotting"]
    assert machinery_imports("from companion.interop import hf_gpt")
    assert machinery_imports("from .. import elsewhere") == ["<outside companion>"]
    assert not machinery_imports(
        "from . import linear_attention\nfrom .attention import KVCache\nimport torch"
    )


def test_attention_functions_take_q_k_v_mask_by_position_and_the_rest_by_name():
    """``causal``, ``feature_map``, ``eps``, ... always by keyword, so position 5 never means two things."""
    import inspect

    from companion import attention, banded_attention, fmmformer, linear_attention

    objects = [
        (f"{module.__name__}.{name}", getattr(module, name))
        for module in (attention, linear_attention, banded_attention, fmmformer)
        for name in module.__all__
    ]
    # the methods of the attention classes (LinearAttention.chunked, FMMAttention.attend, ...) too
    objects += [
        (f"{name}.{attr}", f)
        for name, cls in objects
        if inspect.isclass(cls)
        for attr, f in vars(cls).items()
        if inspect.isfunction(f)
    ]
    functions = [
        (name, f)
        for name, f in objects
        if inspect.isfunction(f) and "q" in inspect.signature(f).parameters
    ]
    assert len(functions) >= 12, functions
    for name, f in functions:
        params = list(inspect.signature(f).parameters.values())
        by_position = [
            p.name
            for p in params
            if p.kind is not inspect.Parameter.KEYWORD_ONLY and p.name != "self"
        ]
        assert by_position in (
            ["q", "k", "v", "mask"],
            ["q", "k", "v"],
            ["q", "k"],
            ["q", "k", "v", "state"],
        ), (
            f"{name} takes {by_position} by position (CONTRIBUTING.md#signatures-and-line-width)"
        )


# ----------------------------------------------------------------------------------------------------------
# One validation module, one rule: a number argument is checked by companion.validation (require_int,
# require_number, require_index, require_entries, ...), never by an `if` of its own that raises. What remains
# below is not an argument check, and says why.

NUMBER_NAMES = {"int", "float", "bool", "Real", "Integral", "Number"}

INLINE_NUMBER_CHECKS_ALLOWED = {
    "data/bert_pretraining.py::mask_tokens": "a consistency check between arguments (random_fraction > 0 but "
    "every id special: nothing to draw a random replacement from), not the range of one number",
    "exercises/attention_modules.py::_self_attention_cases": "a grader's verdict on a student's gradients (Mismatch)",
    "exercises/random_features.py::_performer_checks": "a grader's verdict on a measured error (Mismatch)",
    "exercises/random_feature_models.py::_future_check": "a grader's verdict on how far the outputs moved (Mismatch)",
    "homework_grader/answers.py::parse": "a retry counter that re-raises on the last attempt",
    "homework_grader/cli.py::_positive_int": "an argparse type converter: argparse needs ArgumentTypeError, and "
    "tests/test_grade_parts.py pins its wording",
    "homework_grader/cli.py::_positive": "an argparse type converter, as _positive_int",
    "homework_grader/remote.py::Sandbox._send": "a deadline running out, not an argument",
    "homework_grader/wire.py::encode": "the recursion limit of the encoder",
    "homework_grader/wire.py::_decode_module": "the consistency of a message from the sandbox (child indices)",
    "homework_grader/wire.py::_read_exactly": "a deadline running out, not an argument",
    "homework_grader/wire.py::read": "the consistency of a message from the sandbox (its tensor count)",
    "interop/torch_layers.py::from_torch_mha_mask": "the encoding of a float mask (only 0 and -inf), not a range",
}


def _is_number_test(test: ast.expr) -> bool:
    """Does an `if` test compare a plain name with a number, or ask isinstance(..., int/float/bool/...)?"""
    for node in ast.walk(test):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            number = any(
                isinstance(c, ast.Constant) and type(c.value) in (int, float)
                for c in operands
            )
            if number and any(isinstance(c, ast.Name) for c in operands):
                return True  # `if steps <= 0`, `if not 0 < p < 1`
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", "") == "isinstance"
            and len(node.args) == 2
        ):
            kinds = (
                node.args[1].elts
                if isinstance(node.args[1], ast.Tuple)
                else [node.args[1]]
            )
            if NUMBER_NAMES & {k.id for k in kinds if isinstance(k, ast.Name)}:
                return True
    return False


def inline_number_checks(source: str) -> list[str]:
    """The functions (qualified names) of ``source`` holding an `if` that tests a number and raises."""
    found = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = [*scope, child.name]
            if (
                isinstance(child, ast.If)
                and child.body
                and isinstance(child.body[-1], ast.Raise)
            ):
                if _is_number_test(child.test):
                    found.append(".".join(scope) or "<module>")
            visit(child, inner)

    visit(ast.parse(source), [])
    return found


def test_number_arguments_are_checked_by_the_validation_module():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "validation.py":
            continue
        for function in inline_number_checks(path.read_text()):
            found[f"{path.relative_to(PACKAGE).as_posix()}::{function}"] = path
    # the grader checks its numbers with the companion's rules too
    for path in sorted(GRADER.rglob("*.py")):
        for function in inline_number_checks(path.read_text()):
            found[f"{path.relative_to(GRADER.parent).as_posix()}::{function}"] = path
    new = sorted(set(found) - set(INLINE_NUMBER_CHECKS_ALLOWED))
    assert not new, (
        f"inline number checks outside companion/validation.py: {new}. Check the argument with a rule of "
        "companion.validation (require_int, require_number, require_index, require_entries, ...; extend one if a "
        "rule is missing), or, if it is not an argument check, add it to INLINE_NUMBER_CHECKS_ALLOWED with a reason "
        "(CONTRIBUTING.md#validation-at-the-door)"
    )
    stale = sorted(set(INLINE_NUMBER_CHECKS_ALLOWED) - set(found))
    assert not stale, (
        f"allowed inline number checks that no longer exist (remove them from the list; "
        f"CONTRIBUTING.md#validation-at-the-door): {stale}"
    )
    concepts = [key for key in found if "/" not in key.split("::")[0]]
    assert not concepts, (
        f"a concept module checks a number inline (CONTRIBUTING.md#validation-at-the-door): {concepts}"
    )


def test_the_number_check_finder_sees_each_form():
    source = (
        "def f(steps, p, x, n):\n"
        "    if steps <= 0:\n        raise ValueError\n"
        "    if not 0 < p < 1:\n        raise ValueError\n"
        "    if isinstance(x, bool) or not isinstance(x, (int, float)):\n        raise TypeError\n"
        "class C:\n    def g(self, n):\n        if n < 1:\n            raise ValueError\n"
    )
    assert inline_number_checks(source) == ["f", "f", "f", "C.g"]
    # not a number
    assert not inline_number_checks(
        "def f(x):\n    if x.ndim != 2:\n        raise ValueError\n"
    )
    # raises nothing
    assert not inline_number_checks("def f(n):\n    if n < 1:\n        n = 1\n")


def _names_used(source: str) -> set[str]:
    """The names that ``source`` reads, the attributes it takes and the names it imports."""
    used = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            used |= {alias.name for alias in node.names}
    return used


def test_every_rule_of_the_validation_module_is_used():
    import companion.validation as validate

    sources = [
        p
        for p in [*PACKAGE.rglob("*.py"), *GRADER.rglob("*.py")]
        if p.name != "validation.py"
    ]
    used = set().union(*(_names_used(p.read_text()) for p in sources))
    # a rule that another rule calls
    used |= _names_used((PACKAGE / "validation.py").read_text())
    dead = [name for name in validate.__all__ if name not in used]
    assert not dead, (
        f"companion.validation exports rules that nothing uses (delete them; "
        f"CONTRIBUTING.md#validation-at-the-door): {dead}"
    )
