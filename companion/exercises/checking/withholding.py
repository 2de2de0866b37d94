"""The companion's own answer, withheld while the student's code runs: each dotted name, and every other
binding of the same object in the companion's loaded modules and the notebook's namespace, is a stand-in that
raises :class:`WithheldReference` until the call returns. PyTorch's calls that compute a whole exercise by
themselves (:class:`OneCall`: ``F.layer_norm`` for a layer norm the exercise asks to build) are withheld the
same way, with a verdict that names the call."""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


class WithheldReference(Exception):
    """Raised by the stand-in of the companion's answer when a student's code calls it during a check.

    ``problem`` and ``hint`` are what the verdict says (the exception's message is its short form)."""

    def __init__(self, message: str, problem: str = "", hint: str = "") -> None:
        super().__init__(message)
        self.problem = (
            problem or f"Your code called the companion's own answer: {message}"
        )
        self.hint = hint or (
            "The exercise asks you to build this from the parts it names; the companion's version is what the "
            "checker compares yours with."
        )


@dataclass(frozen=True)
class OneCall:
    """A call of PyTorch's that computes a whole exercise by itself, where the exercise asks the student to
    build that computation (``torch.nn.functional.layer_norm`` for ``layer_norm``).

    Args:
        name: its dotted name (``"torch.nn.functional.layer_norm"``, a class such as ``"torch.nn.LayerNorm"``).
        keyword: for a call that is the whole answer only with one of its keyword arguments
            (``F.cross_entropy`` with ``label_smoothing``): withheld only when that keyword is given a true
            value; other calls go through, and holding the function is no delegation. ``None``: every call.
        instead: the smaller operations that build it, for the hint.

    Plain data (:meth:`data`), so that a grader can withhold it in another process too.
    """

    name: str
    keyword: str | None = None
    instead: str = "tensor arithmetic, reductions and indexing"

    def applies(self, kwargs: dict[str, Any]) -> bool:
        """Whether a call with these keyword arguments is the one-call answer."""
        return self.keyword is None or bool(kwargs.get(self.keyword))

    def problem(self) -> str:
        called = f" with {self.keyword}" if self.keyword else ""
        return (
            f"Your code called PyTorch's `{self.name}`{called}, which computes this whole exercise in one call; "
            "the exercise asks you to build that computation yourself."
        )

    def hint(self) -> str:
        return f"Build it from smaller torch operations: {self.instead}."

    def data(self) -> dict[str, Any]:
        """The entry as JSON-able data, with the message a stand-in raises elsewhere."""
        called = f" with {self.keyword}" if self.keyword else ""
        return {
            "name": self.name,
            "keyword": self.keyword,
            "message": f"PyTorch's `{self.name}`{called} computes this whole exercise in one call, which asks "
            f"you to build it: {self.hint()}",
        }


def one_calls(entries: Sequence[str | OneCall]) -> tuple[OneCall, ...]:
    """Each entry as a :class:`OneCall` (a bare name: withheld on every call)."""
    return tuple(e if isinstance(e, OneCall) else OneCall(e) for e in entries)


def resolve(names: Sequence[str]) -> list[tuple[str, Any]]:
    """``(dotted name, object)`` for each name: a module attribute, or an attribute of a class in a module."""
    out = []
    for dotted in names:
        parts = dotted.split(".")
        for i in range(len(parts) - 1, 0, -1):
            try:
                obj: Any = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for attr in parts[i:]:
                obj = (
                    inspect.getattr_static(obj, attr)
                    if isinstance(obj, type)
                    else getattr(obj, attr)
                )
            out.append((dotted, obj))
            break
        else:
            raise ValueError(f"cannot find {dotted!r} to withhold")
    return out


def _stand_in(name: str) -> Callable[..., Any]:
    short = name.rsplit(".", 1)[-1]

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        raise WithheldReference(
            f"the companion's `{name}` is not available while the checker runs your code: write this one yourself."
        )

    stand_in.__name__ = stand_in.__qualname__ = short
    return stand_in


def _one_call_stand_in(entry: OneCall, original: Any) -> Any:
    """What replaces PyTorch's ``original``: a function that raises (or, when ``entry`` does not apply to the
    call's keywords, calls the original); for a class, a subclass that refuses to be made."""

    def refuse() -> WithheldReference:
        return WithheldReference(
            f"PyTorch's `{entry.name}` computes this whole exercise in one call.",
            entry.problem(),
            entry.hint(),
        )

    if isinstance(original, type):

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            raise refuse()

        return type(
            original.__name__,
            (original,),
            {"__init__": __init__, "__module__": original.__module__},
        )

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        if entry.applies(kwargs):
            raise refuse()
        return original(*args, **kwargs)

    stand_in.__name__ = stand_in.__qualname__ = entry.name.rsplit(".", 1)[-1]
    return stand_in


def _owner(name: str) -> Any:
    owner_name = name.rsplit(".", 1)[0]
    return (
        resolve([owner_name])[0][1]
        if "." in owner_name
        else importlib.import_module(owner_name)
    )


@contextmanager
def withheld(
    names: Sequence[str],
    namespaces: Sequence[dict[str, Any]] = (),
    one_call: Sequence[str | OneCall] = (),
) -> Iterator[None]:
    """Replace each dotted name (``"companion.bpe.merge"``) by a stand-in raising :class:`WithheldReference`.

    The same object bound under another name is replaced too, found by identity: in every loaded
    ``companion`` module (``from .bpe import merge``) and in ``namespaces`` (the notebook's globals, where
    ``from companion.bpe import merge as m`` put it). PyTorch's ``one_call`` entries are replaced under their
    name and in ``namespaces`` (``from torch.nn.functional import layer_norm``). Everything is put back on
    leaving, whatever happened.
    """
    targets = resolve(names)
    by_id = {id(obj): (name, obj) for name, obj in targets}
    calls = one_calls(one_call)
    torch_targets = resolve([c.name for c in calls])
    # one stand-in per name (each names its own call); a namespace gets the first for its object
    own = [_one_call_stand_in(c, obj) for c, (_, obj) in zip(calls, torch_targets, strict=True)]  # fmt: skip
    stand_ins: dict[int, tuple[Any, Any]] = {}
    for (_, obj), stand_in in zip(torch_targets, own, strict=True):
        stand_ins.setdefault(id(obj), (obj, stand_in))
    patches: list[tuple[Any, str, Any]] = []
    try:
        for name, obj in targets:  # the attribute itself (a method of a class included)
            owner, attr = _owner(name), name.rsplit(".", 1)[1]
            patches.append((owner, attr, obj))
            setattr(owner, attr, _stand_in(name))
        for (name, obj), stand_in in zip(torch_targets, own, strict=True):
            owner, attr = _owner(name), name.rsplit(".", 1)[1]
            patches.append((owner, attr, obj))
            setattr(owner, attr, stand_in)
        for space in namespaces:
            for key, value in list(space.items()):
                held = stand_ins.get(id(value))
                if held is not None and held[0] is value:
                    patches.append((space, key, value))
                    space[key] = held[1]
        modules = [
            m
            for k, m in list(sys.modules.items())
            if k.split(".")[0] == "companion" and m is not None
        ]
        spaces = [vars(m) for m in modules] + list(namespaces)
        for space in spaces:
            for key, value in list(space.items()):
                hit = by_id.get(id(value))
                if hit is not None and hit[1] is value:
                    patches.append((space, key, value))
                    space[key] = _stand_in(hit[0])
        yield
    finally:
        for owner, key, value in reversed(patches):
            if isinstance(owner, dict):
                owner[key] = value
            else:
                setattr(owner, key, value)


def caller_namespace() -> dict[str, Any] | None:
    """The globals of the first frame outside ``companion.exercises`` (the notebook that called the checker)."""
    frame = inspect.currentframe()
    try:
        while frame is not None:
            name = frame.f_globals.get("__name__", "")
            if not name.startswith("companion.exercises"):
                return frame.f_globals
            frame = frame.f_back
        return None
    finally:
        del frame


def namespace_of(student: Any) -> dict[str, Any] | None:
    """The globals of the student's function, or of the module that defines the student's class."""
    space = getattr(student, "__globals__", None)
    if isinstance(space, dict):
        return space
    module = sys.modules.get(getattr(student, "__module__", None) or "")
    return vars(module) if module is not None else None


def own_name(reference: Callable[..., Any]) -> tuple[str, ...]:
    """``("companion.module.name",)`` when ``reference`` is a top-level function of the companion, else ``()``."""
    module, name = (
        getattr(reference, "__module__", "") or "",
        getattr(reference, "__qualname__", ""),
    )
    public = (
        module.startswith("companion.")
        and not module.startswith("companion.exercises")
        and "." not in name
    )
    return (f"{module}.{name}",) if public and "<" not in name else ()


def withheld_classes(targets: Sequence[tuple[str, Any]]) -> list[tuple[str, type]]:
    """``(dotted name, class)`` for each withheld class and each class that owns a withheld method: an answer
    that subclasses one of them runs the companion's code, whatever the stand-ins replace."""
    out: dict[int, tuple[str, type]] = {}
    for name, obj in targets:
        if isinstance(obj, type):
            out[id(obj)] = (name, obj)
        elif name.count(".") > 1:
            owner_name = name.rsplit(".", 1)[0]
            try:
                owner = resolve([owner_name])[0][1]
            except (ValueError, ImportError, AttributeError):
                continue
            if isinstance(owner, type):
                out[id(owner)] = (owner_name, owner)
    return list(out.values())


def _captured(function: Any) -> Iterator[Any]:
    """What ``function`` (or the function of a property, a static or class method) holds from the moment it was
    defined: its default arguments and closure cells. (A ``functools.partial`` of the companion's function is
    left alone: the tests build answers on the companion that way, see tests/checker_testing.py.)"""
    if isinstance(function, (staticmethod, classmethod)):
        function = function.__func__
    if isinstance(function, property):
        function = function.fget
    if not inspect.isfunction(function):
        return
    yield from function.__defaults__ or ()
    yield from (function.__kwdefaults__ or {}).values()
    for cell in function.__closure__ or ():
        try:
            yield cell.cell_contents
        except ValueError:  # an empty cell
            continue


def _own_functions(student: Any) -> Iterator[Any]:
    """The student's function, or every function the student's class (and its own base classes) defines."""
    if not isinstance(student, type):
        yield student
        return
    for cls in student.__mro__:
        if (getattr(cls, "__module__", "") or "").split(".")[0] in (
            "torch",
            "builtins",
            "companion",
        ):
            continue
        yield from vars(cls).values()


def delegation(
    student: Any, names: Sequence[str], one_call: Sequence[str | OneCall] = ()
) -> str | None:
    """The dotted name of a withheld object that ``student`` merely delegates to, else None: a class that
    subclasses the companion's withheld class (or the class of a withheld method), or a withheld object captured
    when the student's code was defined (a default argument, a closure cell), which
    replacing names cannot reach. PyTorch's ``one_call`` entries count too, except those withheld only for
    some arguments (holding ``F.cross_entropy`` is no answer in itself)."""
    always = [c.name for c in one_calls(one_call) if c.keyword is None]
    targets = resolve([*names, *always])
    classes = withheld_classes(targets)
    if isinstance(student, type):
        for name, cls in classes:
            if issubclass(student, cls):
                return name
    for function in _own_functions(student):
        for held in _captured(function):
            for name, obj in targets:
                if held is obj:
                    return name
            if isinstance(held, type):
                for name, cls in classes:
                    if issubclass(held, cls):
                        return name
    return None
