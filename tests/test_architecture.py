"""Dependencies point one way: a concept module never imports machinery.

A *concept* is a top-level module of the package (``companion/attention.py``, ...), one per idea the book names;
*machinery* (data and tasks, training recipes, interop, benchmarking, plotting, homework and grading) lives in the
sub-packages (``companion/data/``, ``companion/training/``, ...). Machinery may import concepts, never the reverse,
so a reader who opens a concept finds the mathematics and what it is built from, not the harness around it.
"""

import ast
from pathlib import Path

import companion
from tests.test_package_index import index

PACKAGE = Path(companion.__file__).parent
SHARED = {"__init__", "_validate"}  # the package's docstring and the one validation module


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
            found += [f"{target}.{alias.name}" for alias in node.names]  # `from . import data` imports companion.data
    return found


def machinery_imports(source: str) -> list[str]:
    """The imports of ``source`` that reach into a machinery sub-package of the companion."""
    machinery = machinery_packages()
    bad = []
    for name in imported_modules(source):
        parts = name.split(".")
        if name.startswith("<") or (parts[0] == "companion" and len(parts) > 1 and parts[1] in machinery):
            bad.append(name)
    return sorted(set(bad))


def test_no_concept_module_imports_machinery():
    offenders = {}
    for module in concept_modules():
        bad = machinery_imports((PACKAGE / f"{module}.py").read_text())
        if bad:
            offenders[module] = bad
    assert not offenders, f"concept modules import machinery (move the code into the sub-package): {offenders}"


def test_the_top_level_holds_the_concepts_and_nothing_else():
    indexed = {m for modules in index().values() for m in modules}
    stray = sorted(set(concept_modules()) - indexed)
    assert not stray, f"top-level modules the chapter index does not name as concepts (machinery? move it): {stray}"
    assert set(machinery_packages()) == {
        "benchmarking",
        "data",
        "exercises",
        "grading",
        "interop",
        "plotting",
        "training",
    }


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
    assert not machinery_imports("from . import linear_attention\nfrom .attention import KVCache\nimport torch")


def test_attention_functions_take_q_k_v_mask_by_position_and_the_rest_by_name():
    """``causal``, ``feature_map``, ``eps``, ... always by keyword, so position 5 never means two things."""
    import inspect

    from companion import attention, banded_attention, fmmformer, linear_attention

    functions = [
        (module, name)
        for module in (attention, linear_attention, banded_attention, fmmformer)
        for name in module.__all__
        if inspect.isfunction(getattr(module, name)) and "q" in inspect.signature(getattr(module, name)).parameters
    ]
    assert len(functions) >= 12, functions
    for module, name in functions:
        params = list(inspect.signature(getattr(module, name)).parameters.values())
        by_position = [p.name for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY]
        assert by_position in (["q", "k", "v", "mask"], ["q", "k", "v"], ["q", "k"], ["q", "k", "v", "state"]), (
            f"{module.__name__}.{name} takes {by_position} by position"
        )
