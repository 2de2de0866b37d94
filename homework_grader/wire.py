"""Values as data between the grader and an answer's process: JSON for structure, tensors as raw arrays.

A message is a JSON header (the value's structure, with each tensor replaced by its index) and one binary blob
holding the tensors: a safetensors file when the ``safetensors`` package is installed, else ``numpy.save``
arrays (``allow_pickle=False``) one after the other. Nothing is ever unpickled: reading a message runs no code of
the sender's. What cannot be sent (a lambda, a student's own object) is sent as its type name and ``repr`` and
arrives as an :class:`Opaque` value, equal to nothing; :func:`encode` with ``strict=True`` raises
:class:`Unportable` instead (the grader's side: an argument it cannot send means the checker cannot run there).

A model (an ``nn.Module``) travels as data too, as :class:`ModuleData`: for each of its modules the class's name
(``module:qualname``), its own parameters and buffers (a parameter shared by two modules is sent once and
named twice, so tied weights stay tied), its children, its ``training`` flag and its other attributes, which must
be data themselves (numbers, strings, tuples, a companion dataclass such as ``GPTConfig``, a companion or torch
function such as the attention function a block calls). Reading it builds no object of any class: only the
answer's process turns it back into a model, and only from torch's and the companion's own classes
(:func:`homework_grader.sandbox.rebuild`). Going back, the same form carries the model as the answer left it.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import io
import json
import os
import select
import struct
import time
import types
from typing import Any

import numpy as np
import torch

try:
    from companion.exercises.checking import Abort
except ImportError:  # in an answer's sandbox, where the checkers do not exist

    class Abort(Exception):  # noqa: N818  (the name of the checkers' class)
        """Stands for the checkers' ``Abort``, which the answer's side never raises."""


try:
    from safetensors.torch import load as _st_load
    from safetensors.torch import save as _st_save
except ImportError:  # pragma: no cover - the grade extra installs it
    _st_save = _st_load = None

# bytes of tensors: a larger message is refused, never read into memory
MAX_MESSAGE = 512 * 2**20
# bytes of JSON (each small value read from it becomes a Python object of ~50 bytes)
MAX_HEADER = 16 * 2**20


class Unportable(Abort):
    """An argument the grader cannot send as data (the answer then gets an error verdict that says so)."""


class WireError(Exception):
    """A message that is not one: cut short, too large, or not the format."""


class Opaque:
    """A value that could not be sent as data: its type name and repr, equal to nothing."""

    def __init__(self, type_name: str, text: str) -> None:
        self.type_name, self.text = type_name, text

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<{self.type_name}: {self.text}>"


@dataclasses.dataclass
class ModuleData:
    """A model as data (see the module's docstring): ``nodes[0]`` is the root; each node is a dict with ``type``
    (``module:qualname``), ``private`` (the names of the methods a checker's own subclass defines, see
    :func:`module_data`), ``params`` (name -> ``(key, tensor, requires_grad)`` or ``None``; equal keys are one
    shared parameter), ``buffers`` (name -> tensor or ``None``), ``transient`` (the buffers left out of the
    state dict), ``children`` (name -> node index or ``None``), ``attrs`` and ``training``."""

    nodes: list[dict[str, Any]]

    def named_tensors(self) -> dict[str, torch.Tensor]:
        """Every parameter and buffer by its dotted name, as ``named_parameters``/``named_buffers`` would
        give them with ``remove_duplicate=False``."""
        out: dict[str, torch.Tensor] = {}

        def visit(i: int, prefix: str, seen: tuple[int, ...]) -> None:
            if i in seen:
                return
            node = self.nodes[i]
            for k, v in node["params"].items():
                if v is not None:
                    out[prefix + k] = v[1]
            for k, v in node["buffers"].items():
                if v is not None:
                    out[prefix + k] = v
            for k, j in node["children"].items():
                if j is not None:
                    visit(j, f"{prefix}{k}.", (*seen, i))

        visit(0, "", ())
        return out

    def training(self) -> dict[str, bool]:
        """Each module's ``training`` flag by its dotted name."""
        out: dict[str, bool] = {}

        def visit(i: int, prefix: str, seen: tuple[int, ...]) -> None:
            if i in seen:
                return
            out[prefix.rstrip(".")] = bool(self.nodes[i]["training"])
            for k, j in self.nodes[i]["children"].items():
                if j is not None:
                    visit(j, f"{prefix}{k}.", (*seen, i))

        visit(0, "", ())
        return out


#: what every ``nn.Module`` holds in its ``__dict__`` (parameters, buffers, children, hooks): not attributes
_MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))


def _public_module(name: str) -> bool:
    """Whether ``name`` is a module whose classes and functions may be named in a message: torch's, or the
    companion's own library (not its checkers; the grader is no part of it)."""
    parts = name.split(".")
    if parts[0] == "torch":
        return True
    return parts[0] == "companion" and len(parts) > 1 and parts[1] != "exercises"


def _spec(obj: Any) -> str:
    return f"{obj.__module__}:{obj.__qualname__}"


def named_object(spec: str) -> Any:
    """``module:qualname`` -> the object, from torch or the companion's library only (else :class:`WireError`)."""
    module, _, qualname = str(spec).partition(":")
    if not _public_module(module) or not qualname or "<" in qualname:
        raise WireError(
            f"{spec!r} is not a class or function of torch or the companion"
        )
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise WireError(f"no {spec!r} ({e})") from None
    return obj


def module_data(
    model: torch.nn.Module, tensors: list[torch.Tensor], *, strict: bool, depth: int
) -> dict[str, Any]:
    """The JSON form of a model (see :class:`ModuleData`). A class of a checker's own (defined in
    ``companion.exercises``, a subclass that forbids something, as chapter 6's GPT whose ``forward`` raises) is
    sent as its nearest public base class, with the names of the methods it defines: the answer's process
    makes those raise."""
    nodes: list[dict[str, Any]] = []
    index: dict[int, int] = {}
    shared: dict[int, int] = {}

    def again(v: Any) -> Any:
        return encode(v, tensors, strict=strict, depth=depth + 1)

    def visit(m: torch.nn.Module) -> int:
        if id(m) in index:
            return index[id(m)]
        i = index[id(m)] = len(nodes)
        nodes.append({})
        cls, private = type(m), []
        for c in type(m).__mro__:
            if _public_module(c.__module__) and "<" not in c.__qualname__:
                cls = c
                break
            # rebuilt in an answer's process from a checker's class: sent back
            if "_blocked_methods" in vars(c):
                private += list(vars(c)["_blocked_methods"])
                continue
            if not c.__module__.startswith("companion.exercises."):
                raise (Unportable if strict else ValueError)(
                    f"a model of class {type(m).__qualname__}"
                )
            private += [
                k for k, v in vars(c).items() if callable(v) and not k.startswith("__")
            ]
        hooks = [k for k in vars(m) if "hooks" in k and vars(m)[k]]
        if hooks:
            raise (Unportable if strict else ValueError)(
                f"a model with hooks ({', '.join(hooks)})"
            )
        params = {}
        for k, p in m._parameters.items():
            if p is None:
                params[k] = None
                continue
            if id(p) not in shared:
                tensors.append(_plain(p))
                shared[id(p)] = len(tensors) - 1
            params[k] = {"P": shared[id(p)], "g": bool(p.requires_grad)}
        attrs = {k: again(v) for k, v in vars(m).items() if k not in _MODULE_INTERNALS}
        node = {
            "type": _spec(cls),
            "private": sorted(set(private)),
            "params": params,
            "buffers": {k: again(v) for k, v in m._buffers.items()},
            "transient": sorted(m._non_persistent_buffers_set),
            "attrs": attrs,
            "training": bool(m.training),
        }
        node["children"] = {
            k: (None if c is None else visit(c)) for k, c in m._modules.items()
        }
        nodes[i] = node
        return i

    visit(model)
    return {"M": nodes}


def _decode_module(nodes: Any, tensors: list[torch.Tensor]) -> ModuleData:
    if type(nodes) is not list or not nodes:
        raise WireError("not a model")
    out = []
    for node in nodes:
        if type(node) is not dict:
            raise WireError("not a model")
        params = {}
        for k, v in node["params"].items():
            params[str(k)] = (
                None if v is None else (int(v["P"]), tensors[int(v["P"])], bool(v["g"]))
            )
        children = {
            str(k): (None if j is None else int(j)) for k, j in node["children"].items()
        }
        if any(j is not None and not 0 <= j < len(nodes) for j in children.values()):
            raise WireError("not a model")
        attrs = {str(k): decode(v, tensors) for k, v in node["attrs"].items()}
        out.append(
            {
                "type": str(node["type"]),
                "private": [str(n) for n in node["private"]],
                "params": params,
                "buffers": {
                    str(k): decode(v, tensors) for k, v in node["buffers"].items()
                },
                "transient": [str(n) for n in node["transient"]],
                "children": children,
                "attrs": attrs,
                "training": bool(node["training"]),
            }
        )
    return ModuleData(out)


def _plain(t: torch.Tensor) -> torch.Tensor:
    """The tensor's data as a plain, contiguous CPU tensor (whatever subclass it came as)."""
    with torch._C.DisableTorchFunctionSubclass():
        base = t.as_subclass(torch.Tensor) if type(t) is not torch.Tensor else t
        return base.detach().cpu().contiguous().clone()


def encode(
    value: Any, tensors: list[torch.Tensor], *, strict: bool = False, depth: int = 0
) -> Any:
    """The JSON form of ``value``; its tensors are appended to ``tensors``."""
    if depth > 50:
        raise (
            Unportable("nested too deeply")
            if strict
            else ValueError("nested too deeply")
        )

    def again(v: Any) -> Any:
        return encode(v, tensors, strict=strict, depth=depth + 1)

    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        return {"f": repr(value)}
    if isinstance(value, torch.Tensor):
        tensors.append(_plain(value))
        return {"T": len(tensors) - 1, "g": bool(value.requires_grad)}
    if isinstance(value, np.ndarray) and value.dtype.kind in "biufc":
        tensors.append(torch.from_numpy(np.ascontiguousarray(value)).clone())
        return {"N": len(tensors) - 1}
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return {"n": value.dtype.str, "v": again(value.item())}
    if isinstance(value, torch.dtype):
        return {"dt": str(value).removeprefix("torch.")}
    if isinstance(value, torch.Size):
        return {"S": [int(v) for v in value]}
    if type(value) is list:
        return {"l": [again(v) for v in value]}
    if type(value) is tuple:
        return {"t": [again(v) for v in value]}
    if type(value) is dict:
        return {"d": [[again(k), again(v)] for k, v in value.items()]}
    if type(value) in (set, frozenset):
        return {"s": [again(v) for v in value]}
    if isinstance(value, torch.nn.Module):
        return module_data(value, tensors, strict=strict, depth=depth)
    if isinstance(value, ModuleData):
        raise (Unportable if strict else ValueError)("a model already sent")
    if (
        dataclasses.is_dataclass(value)
        and not isinstance(value, type)
        and _public_module(type(value).__module__)
    ):
        fields = {
            f.name: again(getattr(value, f.name)) for f in dataclasses.fields(value)
        }
        return {"dc": _spec(type(value)), "fields": fields}
    if type(value) is functools.partial and not isinstance(
        value.func, functools.partial
    ):
        func = encode(value.func, tensors, strict=False, depth=depth + 1)
        if type(func) is dict and "fn" in func:
            return {
                "pt": func,
                "a": again(list(value.args)),
                "k": again(dict(value.keywords)),
            }
    if (
        callable(value)
        and _public_module(getattr(value, "__module__", "") or "")
        and isinstance(value, (types.FunctionType, types.BuiltinFunctionType))
    ):
        qualname = getattr(value, "__qualname__", "")
        if "<" not in qualname and _named_is(value):
            return {"fn": _spec(value)}
    if strict:
        raise Unportable(f"cannot send a {type(value).__name__} as data")
    try:
        text = repr(value)[:300]
    except Exception:
        text = "?"
    return {"o": type(value).__name__, "r": text}


def decode(data: Any, tensors: list[torch.Tensor]) -> Any:
    """The value :func:`encode` described (tensors taken from ``tensors``)."""
    if data is None or type(data) in (bool, int, str):
        return data
    if type(data) is not dict or len(data) == 0:
        raise WireError(f"not a value: {str(data)[:80]}")
    if "f" in data:
        return float(data["f"])
    if "T" in data:
        t = tensors[data["T"]]
        return (
            t.requires_grad_(True)
            if data.get("g") and (t.is_floating_point() or t.is_complex())
            else t
        )
    if "N" in data:
        return tensors[data["N"]].numpy()
    if "n" in data:
        return np.dtype(data["n"]).type(decode(data["v"], tensors))
    if "dt" in data:
        dtype = getattr(torch, str(data["dt"]), None)
        if not isinstance(dtype, torch.dtype):
            raise WireError(f"no dtype {data['dt']!r}")
        return dtype
    if "S" in data:
        return torch.Size([int(v) for v in data["S"]])
    if "l" in data:
        return [decode(v, tensors) for v in data["l"]]
    if "t" in data:
        return tuple(decode(v, tensors) for v in data["t"])
    if "d" in data:
        return {decode(k, tensors): decode(v, tensors) for k, v in data["d"]}
    if "s" in data:
        return {decode(v, tensors) for v in data["s"]}
    if "o" in data:
        return Opaque(str(data["o"]), str(data.get("r", "")))
    if "M" in data:
        return _decode_module(data["M"], tensors)
    if "dc" in data:
        cls = named_object(data["dc"])
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise WireError(f"{data['dc']!r} is not a dataclass")
        # no __init__ or __post_init__ of the sender's choosing runs
        obj = object.__new__(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        for k, v in data["fields"].items():
            if k not in names:
                raise WireError(f"{data['dc']!r} has no field {k!r}")
            object.__setattr__(obj, k, decode(v, tensors))
        return obj
    if "pt" in data:
        func, args, keywords = (
            decode(data["pt"], tensors),
            decode(data["a"], tensors),
            decode(data["k"], tensors),
        )
        if not (
            type(data["pt"]) is dict
            and "fn" in data["pt"]
            and type(args) is list
            and type(keywords) is dict
        ):
            raise WireError("not a partial function")
        return functools.partial(
            func, *args, **{str(k): v for k, v in keywords.items()}
        )
    if "fn" in data:
        fn = named_object(data["fn"])
        if not callable(fn) or isinstance(fn, type):
            raise WireError(f"{data['fn']!r} is not a function")
        return fn
    raise WireError(f"not a value: {str(data)[:80]}")


def tensors_in(value: Any) -> list[torch.Tensor]:
    """The tensors of a result, in order (a tensor, or lists, tuples and dicts of them)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if type(value) in (list, tuple):
        return [t for v in value for t in tensors_in(v)]
    if type(value) is dict:
        return [t for v in value.values() for t in tensors_in(v)]
    return []


def _named_is(fn: Any) -> bool:
    """Whether ``fn`` is what its module and qualified name name (so that the receiver finds the same function)."""
    try:
        return named_object(_spec(fn)) is fn
    except WireError:
        return False


def _pack(tensors: list[torch.Tensor]) -> bytes:
    if not tensors:
        return b""
    if _st_save is not None:
        return b"S" + _st_save({str(i): t for i, t in enumerate(tensors)})
    out = io.BytesIO()
    out.write(b"N")
    for t in tensors:
        if t.dtype == torch.bfloat16:
            t = t.float()
        np.save(out, t.numpy(), allow_pickle=False)
    return out.getvalue()


def _unpack(blob: bytes, count: int) -> list[torch.Tensor]:
    if count == 0:
        return []
    if blob[:1] == b"S" and _st_load is not None:
        loaded = _st_load(blob[1:])
        return [loaded[str(i)] for i in range(count)]
    if blob[:1] == b"N":
        stream = io.BytesIO(blob[1:])
        return [
            torch.from_numpy(np.load(stream, allow_pickle=False).copy())
            for _ in range(count)
        ]
    raise WireError("unknown tensor format")


def dumps(message: dict[str, Any], *, strict: bool = False) -> bytes:
    """A message as bytes: header length, header (JSON), blob length, blob."""
    tensors: list[torch.Tensor] = []
    body = {
        k: (
            encode(v, tensors, strict=strict) if k in ("value", "args", "kwargs") else v
        )
        for k, v in message.items()
    }
    body["tensors"] = len(tensors)
    header = json.dumps(body).encode()
    blob = _pack(tensors)
    return struct.pack("<Q", len(header)) + header + struct.pack("<Q", len(blob)) + blob


def _read_exactly(fd: int, n: int, deadline: float | None = None) -> bytes:
    chunks, left = [], n
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError("no answer in time")
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise WireError("the message was cut short")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read(fd: int, deadline: float | None = None) -> dict[str, Any]:
    """Read one message from ``fd``, its values decoded; :class:`TimeoutError` past ``deadline`` (monotonic)."""
    (n,) = struct.unpack("<Q", _read_exactly(fd, 8, deadline))
    if n > MAX_HEADER:
        raise WireError(f"a message of {n} bytes is too large")
    try:
        body = json.loads(_read_exactly(fd, n, deadline))
    except (ValueError, RecursionError) as e:
        raise WireError(f"not JSON ({e})") from None
    (m,) = struct.unpack("<Q", _read_exactly(fd, 8, deadline))
    if m > MAX_MESSAGE:
        raise WireError(f"a message of {m} bytes is too large")
    if type(body) is not dict:
        raise WireError("not a message")
    count = body.pop("tensors", 0)
    if type(count) is not int or count < 0:
        raise WireError("not a message")
    try:
        tensors = _unpack(_read_exactly(fd, m, deadline), count)
        for k in ("value", "args", "kwargs"):
            if k in body:
                body[k] = decode(body[k], tensors)
    except (KeyError, IndexError, TypeError, ValueError, RecursionError) as e:
        raise WireError(f"malformed ({type(e).__name__}: {e})") from None
    return body


def write(fd: int, message: dict[str, Any], *, strict: bool = False) -> None:
    data = memoryview(dumps(message, strict=strict))
    while data:
        n = os.write(fd, data)
        data = data[n:]
