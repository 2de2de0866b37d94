"""The process one answer runs in: ``python -I -m homework_grader.sandbox READ_FD WRITE_FD``.

The grader starts it (a new session, so that the grader can kill it and everything it started), sends the
answer's code (see :mod:`homework_grader.answers`) and the limits, and this process

1. imports what grading needs (torch, numpy, the companion modules that define the exercise's name, the modules
   the answer imports, never the checkers of ``companion.exercises``), then puts a stand-in that raises "write
   this one yourself" in place of the companion's reference everywhere it is bound (its module, every alias in a
   loaded module, closures and dictionaries that hold it) and of whatever else the checker withholds (a method
   such as ``GPT.forward``), makes the originals themselves raise, and refuses to open their source files and
   the checkers'; PyTorch's calls that compute the whole exercise (the checker's ``one_call``: ``F.layer_norm``
   for a layer norm the exercise asks to build) get a stand-in too;
2. sets its limits (``RLIMIT_AS`` memory, ``RLIMIT_CPU`` time, ``RLIMIT_FSIZE`` file size) and an audit hook
   that refuses to start processes, send signals, load native libraries through ctypes, or write files outside
   its own temporary folder;
3. says it is ready, waits for the grader's go (the grader reads the sandbox's memory before the answer's code
   runs: what the answer holds from then on counts in a memory check), runs the answer's code, alone, in a fresh
   namespace, and then calls the student's function on each set of arguments the grader sends and sends back
   what it returned (or raised) and the arguments as they are after the call, as data
   (:mod:`homework_grader.wire`). A model among the arguments arrives as data and is rebuilt here
   (:func:`rebuild`); a result that carries gradient keeps its graph here (:class:`Graphs`) until the grader
   asks for the gradients. For a class, :class:`ModuleServer` builds and runs the student's modules. The
   checker itself never runs here.
"""

from __future__ import annotations

import ast
import builtins
import functools
import gc
import importlib
import os
import sys
import types
from pathlib import Path
from typing import Any

import companion

from . import wire
from .answers import parse

# the package whose references are withheld
_COMPANION = Path(companion.__file__).resolve().parent

_REFUSED = (
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "os.kill",
    "os.killpg",
    "signal.pthread_kill",
    "ctypes.dlopen",
    "ctypes.dlsym",
    "ctypes.dlsym/handle",
    "sys.addaudithook",
    "sys.setprofile",
    "sys.settrace",
)
_PATH_EVENTS = {
    "os.rename": 2,
    "os.remove": 1,
    "os.rmdir": 1,
    "os.symlink": 2,
    "os.link": 2,
    "os.truncate": 1,
}
_PATH_EVENTS |= {
    "os.chmod": 1,
    "os.chown": 1,
    "os.mkdir": 1,
    "os.utime": 1,
    "shutil.rmtree": 1,
}


class WriteItYourself(Exception):
    """What the companion's reference raises inside an answer's process."""


@functools.cache
def _definitions() -> dict[str, tuple[str, ...]]:
    """Every top-level function and class name of the ``companion`` sources -> the modules defining it."""
    found: dict[str, list[str]] = {}
    for path in sorted(_COMPANION.rglob("*.py")):
        parts = path.relative_to(_COMPANION.parent).with_suffix("").parts
        if "exercises" in parts:
            continue
        try:
            tree = parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        module = ".".join(p for p in parts if p != "__init__")
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                found.setdefault(stmt.name, []).append(module)
    return {k: tuple(dict.fromkeys(v)) for k, v in found.items()}


def defining_modules(name: str) -> list[str]:
    """The ``companion`` modules whose source defines ``name`` at the top level (read, not imported)."""
    return list(_definitions().get(name, ()))


def _stand_in(name: str, kind: str) -> Any:
    message = (
        f"the companion's `{name}` is not available while your answer is graded: write this one yourself "
        "(you may use the companion's other functions)"
    )
    if kind == "class":

        class StandIn:
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                raise WriteItYourself(message)

            def __init_subclass__(cls, **kwargs: Any) -> None:
                raise WriteItYourself(message)

        StandIn.__name__ = StandIn.__qualname__ = name
        StandIn._grading_stand_in = True
        return StandIn

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        raise WriteItYourself(message)

    stand_in.__name__ = stand_in.__qualname__ = name
    stand_in._grading_stand_in = True
    return stand_in


def hide_reference(name: str, modules: list[str]) -> list[str]:
    """Replace the companion's ``name`` (defined in ``modules``) by a stand-in wherever it is reachable; the
    source files to refuse."""
    files: list[str] = []
    for module_name in modules:
        try:
            module = importlib.import_module(module_name)
        except Exception:
            continue
        original = module.__dict__.get(name)
        files.append(os.path.realpath(module.__file__))
        hidden = isinstance(
            original, (type, types.FunctionType)
        ) and "_grading_stand_in" in vars(original)
        # (a stand-in already: the checker withholds the exercise's own name too)
        if original is None or hidden:
            continue
        # a tuple: never rewritten below (a dict of locals holding `original` may be)
        kept = (original,)
        stand_in = _stand_in(
            name, "class" if isinstance(original, type) else "function"
        )
        for loaded in list(sys.modules.values()):
            namespace = getattr(loaded, "__dict__", None)
            if isinstance(namespace, dict):
                for key, value in list(namespace.items()):
                    if value is original:
                        namespace[key] = stand_in
        gc.collect()
        for holder in gc.get_referrers(original):
            if isinstance(holder, dict):
                for key, value in list(holder.items()):
                    if value is original:
                        holder[key] = stand_in
            elif isinstance(holder, list):
                holder[:] = [stand_in if v is original else v for v in holder]
            elif isinstance(holder, types.CellType):
                holder.cell_contents = stand_in
        _disable(kept[0], name)
        del original, kept
    return files


def hide_one_calls(entries: list[dict[str, Any]]) -> None:
    """Replace each of PyTorch's calls that computes a whole exercise by itself (the checker's ``one_call``,
    sent as data: ``name``, ``keyword``, ``message``) under its name and in every loaded module that binds it:
    a function raises (with ``keyword``, only when that keyword argument is given a true value), a class is a
    subclass that refuses to be made. The originals stay as they are (torch itself calls them) and their files
    stay readable."""
    for entry in entries:
        dotted, keyword, message = (
            str(entry["name"]),
            entry.get("keyword"),
            str(entry["message"]),
        )
        owner_name, attr = dotted.rsplit(".", 1)
        try:
            owner = importlib.import_module(owner_name)
        except ImportError:
            continue
        original = getattr(owner, attr, None)
        if original is None:
            continue
        stand_in = _one_call_stand_in(original, keyword, message)
        setattr(owner, attr, stand_in)
        for loaded in list(sys.modules.values()):
            namespace = getattr(loaded, "__dict__", None)
            if isinstance(namespace, dict):
                for key, value in list(namespace.items()):
                    if value is original:
                        namespace[key] = stand_in


def _one_call_stand_in(original: Any, keyword: str | None, message: str) -> Any:
    if isinstance(original, type):

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            raise WriteItYourself(message)

        return type(
            original.__name__,
            (original,),
            {"__init__": __init__, "__module__": original.__module__},
        )

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        if keyword is None or kwargs.get(keyword):
            raise WriteItYourself(message)
        return original(*args, **kwargs)

    stand_in.__name__ = stand_in.__qualname__ = getattr(original, "__name__", "call")
    return stand_in


def _disable(original: Any, name: str) -> None:
    """Make the reference itself raise, for whatever still reaches it (a subclass's ``__mro__``,
    ``__subclasses__()``, ``gc.get_objects()``): a function's code, a class's ``__init__`` and ``forward``."""
    message = f"the companion's `{name}` is not available while your answer is graded: write this one yourself"
    free = (
        original.__code__.co_freevars
        if isinstance(original, types.FunctionType)
        else ()
    )
    # the same number of free variables (a method using super())
    cells = "".join(f"    {v} = None\n" for v in free)
    uses = f"        {', '.join(free)}\n" if free else ""
    source = (
        f"def outer():\n{cells}    def blocked(*args, **kwargs):\n"
        f"{uses}        raise PermissionError({message!r})\n"
    )
    namespace: dict[str, Any] = {}
    exec(source + "    return blocked\n", namespace)
    blocked = namespace["outer"]()
    if isinstance(original, types.FunctionType):
        original.__code__ = blocked.__code__
    elif isinstance(original, type):
        for attr in ("__init__", "forward", "__call__"):
            if attr in vars(original) or attr == "__init__":
                try:
                    setattr(original, attr, blocked)
                except (TypeError, AttributeError):
                    pass


def _audit(
    allowed_dir: str,
    refused_files: list[str],
    private: list[str] = (),
    closed: list[str] = (),
):
    refused = set(refused_files)
    caches = {
        os.path.join(os.path.dirname(f), "__pycache__", Path(f).stem)
        for f in refused_files
    }

    def outside(path: Any) -> bool:
        if isinstance(path, int):
            return False
        try:
            real = os.path.realpath(os.fsdecode(path))
        except Exception:
            return True
        return not (real == allowed_dir or real.startswith(allowed_dir + os.sep))

    def hook(event: str, args: tuple) -> None:
        if (
            event in _REFUSED
            or event.startswith("os.exec")
            or event.startswith("os.spawn")
        ):
            raise PermissionError(f"not allowed while an answer is graded: {event}")
        if event == "open" and args and not isinstance(args[0], int):
            try:
                real = os.path.realpath(os.fsdecode(args[0]))
            except Exception:
                real = ""
            if real in refused or any(real.startswith(c) for c in caches):
                raise PermissionError(
                    f"the companion's source of the exercise cannot be read here: {real}"
                )
            if any(real == p or real.startswith(p + os.sep) for p in closed):
                raise PermissionError(f"the checkers cannot be read here: {real}")
            if any(real == p or real.startswith(p + os.sep) for p in private):
                raise PermissionError(
                    f"the class's notebooks and results cannot be read here: {real}"
                )
            mode, flags = (
                (args[1] if len(args) > 1 else "r"),
                (args[2] if len(args) > 2 else 0),
            )
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int)
                and flags
                & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC)
            )
            if writing and outside(args[0]):
                raise PermissionError(
                    f"an answer may write files only in its own folder, not {real}"
                )
        elif event in _PATH_EVENTS:
            if any(outside(a) for a in args[: _PATH_EVENTS[event]]):
                raise PermissionError(
                    f"not allowed outside the answer's own folder: {event}"
                )

    return hook


def _limit(memory_bytes: int, cpu_seconds: float, file_bytes: int) -> None:
    try:
        import resource
    except ImportError:  # not on this platform (Windows): no limits
        return
    if memory_bytes > 0:
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(
            resource.RLIMIT_AS, (used + memory_bytes, used + memory_bytes)
        )
    if cpu_seconds > 0:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(usage.ru_utime + usage.ru_stime + cpu_seconds) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 2))
    if file_bytes > 0:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))


def _raised(e: BaseException) -> dict[str, Any]:
    builtin = next(
        (
            c.__name__
            for c in type(e).__mro__
            if getattr(builtins, c.__name__, None) is c
        ),
        "Exception",
    )
    try:
        text = str(e)[:1000]
    except Exception:
        text = "?"
    return {"raised": type(e).__name__, "builtin": builtin, "message": text}


def _closed(module_name: str) -> bool:
    """The checkers: never imported in an answer's process (a checker holds references of its own, and the
    classes that forbid what an exercise forbids)."""
    return module_name.split(".")[:2] == ["companion", "exercises"]


def hide_attributes(names: list[str]) -> list[str]:
    """Replace each dotted name a checker withholds (``companion.gpt.next_token_loss``, a method
    ``companion.gpt.GPT.forward``) by a stand-in, and make the original itself raise; the source files to refuse."""
    files: list[str] = []
    for dotted in names:
        parts = dotted.split(".")
        for i in range(len(parts) - 1, 0, -1):
            try:
                module = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            break
        else:
            continue
        rest = parts[i:]
        if len(rest) == 1:
            files += hide_reference(rest[0], [module.__name__])
            continue
        owner: Any = module
        for attr in rest[:-1]:
            owner = getattr(owner, attr, None)
        if not isinstance(owner, type):
            continue
        original = vars(owner).get(rest[-1])
        setattr(owner, rest[-1], _stand_in(dotted, "function"))
        if isinstance(original, types.FunctionType):
            _disable(original, dotted)
        files.append(os.path.realpath(module.__file__))
    return files


def serve(rfd: int, wfd: int) -> None:
    import numpy  # noqa: F401  (imported before the limits: answers use it, and the wire reads arrays)
    import torch

    init = wire.read(rfd)
    name = init["name"]
    torch.set_num_threads(1)
    # the modules the answer imports, loaded before the limits
    for module_name in init.get("preload", []):
        if not _closed(module_name):
            try:
                importlib.import_module(module_name)
            except Exception:
                pass
    refused = hide_reference(name, init["defining"]) + hide_attributes(
        list(init.get("withhold", []))
    )
    hide_one_calls(list(init.get("one_call", [])))
    for module_name in [m for m in sys.modules if _closed(m)]:
        del sys.modules[module_name]
    package = sys.modules.get("companion")
    if package is not None and "exercises" in vars(package):
        delattr(package, "exercises")
    closed = [str(_COMPANION / "exercises")]
    _limit(
        int(init["memory_bytes"]), float(init["cpu_seconds"]), int(init["file_bytes"])
    )
    sys.addaudithook(
        _audit(
            os.path.realpath(os.getcwd()),
            refused,
            list(init.get("private", [])),
            closed,
        )
    )
    wire.write(wfd, {"op": "ready"})  # from here on, the time is the answer's
    # the grader reads the memory before the answer's code runs (what the answer keeps counts), then says go
    if wire.read(rfd).get("op") != "go":
        return
    namespace: dict[str, Any] = {"__name__": "__answer__", "__builtins__": builtins}
    try:
        exec(compile(init["code"], "<your answer>", "exec"), namespace)
    except BaseException as e:
        wire.write(wfd, {"op": "defined", **_raised(e)})
        return
    student = namespace.get(name)
    module = str(getattr(student, "__module__", "") or "")
    mro = [f"{c.__module__}.{c.__qualname__}" for c in getattr(student, "__mro__", ())]
    kind = "class" if isinstance(student, type) else "function"
    forward = (
        isinstance(student, type)
        and getattr(student, "forward", None) is not torch.nn.Module.forward
    )
    wire.write(
        wfd,
        {
            "op": "defined",
            "module": module,
            "mro": mro,
            "kind": kind,
            "forward": forward,
        },
    )
    modules = ModuleServer()
    graphs = Graphs()
    while True:
        request = wire.read(rfd)
        op = request.get("op")
        if op not in ("call", "new", "forward", "backward", "gradients"):
            return
        args, kwargs = list(request.get("args", [])), dict(request.get("kwargs", {}))
        graph = None
        try:
            if op == "call":
                args, kwargs = (
                    [rebuilt(a) for a in args],
                    {k: rebuilt(v) for k, v in kwargs.items()},
                )
                # the monitor measures this process's memory (from outside it)
                if request.get("measure"):
                    # as checking.peak_bytes measures: no graph kept for a backward
                    with torch.no_grad():
                        value = student(*args, **kwargs)
                else:
                    value = student(*args, **kwargs)
                graph = graphs.keep(value, args, kwargs)
            elif op == "new":
                value = modules.new(student, args, kwargs)
            elif op == "forward":
                value = modules.forward(request["value"], args, kwargs)
            elif op == "backward":
                value = modules.backward(request["value"])
            else:
                value = graphs.backward(request["value"])
        except BaseException as e:
            wire.write(wfd, {"op": "result", **_raised(e)})
            continue
        try:
            reply = {"op": "result", "value": value, "args": args, "kwargs": kwargs}
            wire.write(wfd, reply if graph is None else {**reply, "graph": graph})
        except BaseException as e:
            wire.write(
                wfd,
                {"op": "result", **_raised(e)}
                | {"message": f"the result could not be sent: {e}"},
            )


def _blocked_method(cls_name: str, name: str):
    def blocked(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"the checker's model does not let your answer call `{name}` (its class {cls_name} forbids it): "
            "build the result from the model's parts, as the exercise asks"
        )

    blocked.__name__ = blocked.__qualname__ = name
    return blocked


@functools.cache
def _model_class(spec: str, private: tuple[str, ...]) -> type:
    """The class a model's node names: torch's or the companion's own (never the checkers' or the grader's);
    with ``private`` methods (a checker's subclass forbade them), a subclass in which they raise."""
    import torch

    cls = wire.named_object(spec)
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise wire.WireError(f"{spec!r} is not a model class")
    if private:
        namespace: dict[str, Any] = {
            n: _blocked_method(cls.__name__, n) for n in private
        }
        namespace["_blocked_methods"] = private
        cls = type(cls.__name__, (cls,), namespace)
    return cls


def rebuild(data: wire.ModuleData) -> Any:
    """The model ``data`` describes, built without calling any constructor: each module is created with
    ``__new__``, given ``nn.Module``'s empty state, then its attributes, parameters (shared ones shared),
    buffers and children."""
    import torch

    built = []
    shared: dict[int, torch.nn.Parameter] = {}
    for node in data.nodes:
        cls = _model_class(node["type"], tuple(node["private"]))
        m = cls.__new__(cls)
        torch.nn.Module.__init__(m)
        for k, v in node["attrs"].items():
            m.__dict__[k] = v
        for k, v in node["params"].items():
            if v is not None and v[0] not in shared:
                shared[v[0]] = torch.nn.Parameter(v[1], requires_grad=v[2])
            m._parameters[k] = None if v is None else shared[v[0]]
        for k, v in node["buffers"].items():
            m._buffers[k] = v
        m._non_persistent_buffers_set = set(node["transient"])
        m.training = node["training"]
        built.append(m)
    for m, node in zip(built, data.nodes, strict=True):
        for k, j in node["children"].items():
            m._modules[k] = None if j is None else built[j]
    return built[0]


def rebuilt(value: Any) -> Any:
    """An argument as the student's function receives it: a model sent as data, rebuilt (also in a list)."""
    if isinstance(value, wire.ModuleData):
        return rebuild(value)
    if type(value) in (list, tuple):
        return type(value)(rebuilt(v) for v in value)
    if type(value) is dict:
        return {k: rebuilt(v) for k, v in value.items()}
    return value


class Graphs:
    """The computation graphs of the student's results that carry gradient, kept until the grader asks for
    their gradients (a loss to train with: the checker backpropagates it, perhaps after other calls)."""

    def __init__(self) -> None:
        self.kept: dict[int, tuple[list[Any], list[Any]]] = {}

    def keep(self, value: Any, args: list, kwargs: dict) -> dict[str, Any] | None:
        """``None``, or when a tensor of ``value`` is computed with gradient ``{"graph": key, "leaves": [...],
        "outs": [...]}``: ``outs`` are those tensors' places among the result's tensors; the leaves are every
        parameter of a model argument (``[argument, name]``) and every tensor argument (``[argument, None]``)
        that requires gradient, the argument an index or a keyword."""
        import torch

        found = wire.tensors_in(value)
        places = [
            i for i, t in enumerate(found) if t.requires_grad and t.grad_fn is not None
        ]
        if not places:
            # (a leaf that requires gradient comes back as one: no graph behind it)
            return None
        outs = [found[i] for i in places]
        leaves: list[Any] = []
        where: list[list[Any]] = []
        for at, a in [*enumerate(args), *kwargs.items()]:
            if isinstance(a, torch.nn.Module):
                for n, p in a.named_parameters():
                    if p.requires_grad:
                        leaves.append(p)
                        where.append([at, n])
            elif isinstance(a, torch.Tensor) and a.requires_grad and a.is_leaf:
                leaves.append(a)
                where.append([at, None])
        key = len(self.kept)
        self.kept[key] = (outs, leaves)
        return {"graph": key, "leaves": where, "outs": places}

    def backward(self, meta: dict) -> Any:
        """The gradients of the kept graph's leaves, given those of its outputs."""
        import torch

        outs, leaves = self.kept[int(meta["graph"])]
        pairs = [
            (o, g) for o, g in zip(outs, meta["grads"], strict=True) if g is not None
        ]
        for leaf in leaves:
            leaf.grad = None
        if pairs:
            torch.autograd.backward(
                [o for o, _ in pairs], [g for _, g in pairs], inputs=leaves or None
            )
        return {"leaves": [leaf.grad for leaf in leaves]}


class ModuleServer:
    """The answer's side of a class exercise: build the student's modules, run them with the weights the grader
    sends, send back outputs, gradients and the modules' structure, all as data."""

    def __init__(self) -> None:
        self.objects: list[Any] = []
        self.last: tuple | None = None

    def new(self, cls: type, args: list, kwargs: dict) -> Any:
        import torch

        obj = cls(*args, **kwargs)
        if not isinstance(obj, torch.nn.Module):
            return obj
        self.objects.append(obj)
        tree = []
        for path, m in obj.named_modules(remove_duplicate=False):
            own = type(m).__module__.startswith("torch.")
            attrs = {
                k: v
                for k, v in vars(m).items()
                if not k.startswith("_") and type(v) in (int, float, bool, str)
            }
            tree.append(
                {
                    "path": path,
                    "type": f"{type(m).__module__}:{type(m).__qualname__}"
                    if own
                    else type(m).__name__,
                    "params": dict(m._parameters),
                    "buffers": dict(m._buffers),
                    "attrs": attrs,
                    "training": m.training,
                }
            )
        return {"module": len(self.objects) - 1, "tree": tree}

    def forward(self, meta: dict, args: list, kwargs: dict) -> Any:
        import torch

        obj = self.objects[meta["module"]]
        with torch.no_grad():
            for name, value in meta["state"].items():
                owner, _, leaf = name.rpartition(".")
                holder = obj.get_submodule(owner) if owner else obj
                current = (
                    holder._parameters.get(leaf)
                    if leaf in holder._parameters
                    else holder._buffers.get(leaf)
                )
                if current is None:
                    continue
                if current.shape == value.shape and current.dtype == value.dtype:
                    current.copy_(value)
                else:
                    current.data = value.to(current.device).clone()
        for path, training in meta["training"].items():
            (obj.get_submodule(path) if path else obj).training = training
        grad = bool(meta["grad"])
        inputs = [a for a in args if isinstance(a, torch.Tensor)]
        if grad:
            for t in inputs:
                if t.is_floating_point():
                    t.requires_grad_(True)
        for p in obj.parameters():
            p.grad = None
        with torch.set_grad_enabled(grad):
            # (measured, when the checker measures memory, by the monitor)
            out = obj(*args, **kwargs)
        outs = (
            [out]
            if isinstance(out, torch.Tensor)
            else [o for o in out if isinstance(o, torch.Tensor)]
            if (isinstance(out, tuple))
            else []
        )
        self.last = (obj, outs, inputs)
        buffers = {n: b for n, b in obj.named_buffers(remove_duplicate=False)}
        reply = {
            "out": out,
            "requires": [o.requires_grad for o in outs],
            "buffers": buffers,
        }
        return reply

    def backward(self, meta: dict) -> Any:
        import torch

        obj, outs, inputs = self.last
        pairs = [
            (o, g)
            for o, g in zip(outs, meta["grads"], strict=True)
            if o.requires_grad and g is not None
        ]
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        params = {n: p.grad for n, p in obj.named_parameters(remove_duplicate=False)}
        return {
            "params": params,
            "inputs": [t.grad if t.requires_grad else None for t in inputs],
        }


class _FromMemory:
    """Imports the modules whose sources the grader sent (the references'), which exist in no file here."""

    def __init__(self, sources: dict[str, list]) -> None:
        self.sources = sources

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        import importlib.util

        if name not in self.sources:
            return None
        package = bool(self.sources[name][1])
        root = _COMPANION
        relative = Path(*name.split(".")[1:])
        origin = (
            root / relative / "__init__.py"
            if package
            else (root / relative).with_suffix(".py")
        )
        spec = importlib.util.spec_from_loader(
            name, self, origin=str(origin), is_package=package
        )
        spec.has_location = True
        if package:
            spec.submodule_search_locations = [str(origin.parent)]
        return spec

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        exec(
            compile(self.sources[module.__name__][0], module.__spec__.origin, "exec"),
            module.__dict__,
        )


def _not_dumpable() -> None:
    """No process of this sandbox may be traced or have its memory read by another (``PR_SET_DUMPABLE`` 0,
    inherited by every fork): an answer cannot reach into the fork server or a later answer's process."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)


def _fixed_mmap_threshold() -> None:
    """Allocations of 64 KiB and more are mapped for themselves and given back to the kernel when freed (glibc's
    ``M_MMAP_THRESHOLD``, fixed: by default it grows with the blocks freed, and a freed n × n matrix would stay
    in the heap, resident, for the next to reuse unseen): each tensor a call makes is in the kernel's count of
    its peak memory (see :func:`_memory`). Inherited by every fork."""
    import ctypes

    try:
        ctypes.CDLL(None).mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):  # not glibc
        pass


def zygote(sock_fd: int) -> None:
    """The fork server: import what every answer's process needs once, then fork one process per answer.

    Its first message comes on standard input: the modules to import, and (in a sandbox, see
    ``homework_grader.walls``) the sources of the modules that exist in no file here, imported from memory
    before anything else. Each request (on the socket ``sock_fd``) brings four descriptors: the answer's two
    message pipes, its output pipe and a control socket. A monitor process is forked, which forks the answer's
    process (in a session of its own, its output on the output pipe, in its own folder), writes its pid on the
    control socket, waits for it to end or for the grader to ask for its end, and writes its exit status there.
    In a sandbox the monitor then ends every other process of the sandbox but the server and empties the
    writable folders, so that nothing of one answer is left for the next. This process never runs an answer.
    """
    import json
    import socket

    first = json.loads(sys.stdin.buffer.read() or b"{}")
    isolated = bool(first.get("isolated"))
    _fixed_mmap_threshold()
    if isolated:
        _not_dumpable()
    sources = first.get("sources") or {}
    finder = _FromMemory(sources)
    sys.meta_path.insert(0, finder)
    import numpy  # noqa: F401
    import torch  # noqa: F401

    sock = socket.socket(fileno=sock_fd)
    for module_name in [*first.get("preload", []), *sources]:
        if _closed(module_name):
            continue
        try:
            importlib.import_module(module_name)
        except Exception:
            pass
    sys.meta_path.remove(finder)
    sources.clear()  # the references' sources: nowhere in the answers' processes
    del first, finder
    gc.collect()
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        message, fds, _, _ = socket.recv_fds(sock, 1 << 16, 4)
        if not message:
            return
        request = json.loads(message)
        if len(fds) != 4:
            for fd in fds:
                os.close(fd)
            continue
        if os.fork() == 0:
            sock.close()
            _monitor(request, *fds, isolated=isolated)
        for fd in fds:
            os.close(fd)


def _sweep(keep: set[int]) -> None:
    """End every process of this sandbox's PID namespace but ``keep`` (and its init), until none is left."""
    import signal

    for _ in range(100):
        others = [
            int(p)
            for p in os.listdir("/proc")
            if p.isdigit() and int(p) not in keep and int(p) != 1
        ]
        # (a zombie is ended already)
        others = [p for p in others if _state(p) not in ("Z", "X", "")]
        if not others:
            return
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""


def _empty(folder: str) -> None:
    """Remove everything in ``folder`` (a file system of the sandbox), whatever its permissions."""
    import shutil
    import stat

    def retry(function: Any, path: str, _: Any) -> None:
        try:
            os.chmod(os.path.dirname(path), stat.S_IRWXU)
            if os.path.isdir(path) and not os.path.islink(path):
                os.chmod(path, stat.S_IRWXU)
            function(path)
        except OSError:
            pass

    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, onerror=retry)
            else:
                os.unlink(path)
        except OSError:
            pass


def _memory(pid: int, reset: bool) -> str:
    """The kernel's figures for the answer's process ``pid``, read from outside it (where the sandbox has no
    control group of its own, see :mod:`homework_grader.cgroup`): with ``reset``, its peak
    resident memory is set back to its present size (``5`` written to ``/proc/PID/clear_refs``) and that size
    (``VmRSS``) is returned; else its peak since then (``VmHWM``). In bytes, or ``-`` where the kernel says
    nothing (an ended process, a system without ``/proc``)."""
    try:
        if reset:
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")
        with open(f"/proc/{pid}/status") as f:
            key = "VmRSS:" if reset else "VmHWM:"
            for line in f:
                if line.startswith(key):
                    return str(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    return "-"


def _monitor(
    request: dict[str, Any],
    rfd: int,
    wfd: int,
    out: int,
    control: int,
    isolated: bool = False,
) -> None:
    import select
    import signal

    try:
        folder = request["folder"]
        if isolated:
            folder = "/tmp/answer"
            os.makedirs(folder, exist_ok=True)
        child = os.fork()
        if child == 0:
            os.close(control)
            os.setsid()
            os.dup2(out, 1)
            os.dup2(out, 2)
            os.close(out)
            os.chdir(folder)
            os.environ.update(HOME=folder, TMPDIR=folder, MPLCONFIGDIR=folder)
            import tempfile

            tempfile.tempdir = folder
            try:
                serve(rfd, wfd)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)
        for fd in (rfd, wfd, out):
            os.close(fd)
        os.write(control, f"{child}\n".encode())
        pidfd = os.pidfd_open(child)
        while True:
            ready = select.select([pidfd, control], [], [])[0]
            if control in ready:
                asked = os.read(control, 1)
                # the grader measures the answer's memory: the kernel's figures
                if asked in (b"r", b"p"):
                    os.write(
                        control,
                        f"{asked.decode()} {_memory(child, asked == b'r')}\n".encode(),
                    )
                    continue
                try:  # the grader asks for its end (or is gone)
                    os.killpg(child, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                break
            if pidfd in ready:
                break
        _, code = os.waitpid(child, 0)
        if isolated:
            _sweep({os.getpid(), os.getppid()})
            for scratch in ("/tmp", "/dev/shm"):
                _empty(scratch)
        os.write(control, f"{os.waitstatus_to_exitcode(code)}\n".encode())
    finally:
        os._exit(0)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "--zygote":
        zygote(int(args[1]))
        return
    rfd, wfd = int(args[0]), int(args[1])
    try:
        serve(rfd, wfd)
    finally:
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
