"""The process one answer runs in: ``python -I -m companion.grading.sandbox READ_FD WRITE_FD``.

The grader starts it (a new session, so that the grader can kill it and everything it started), sends the
answer's code (see :mod:`companion.grading.answers`) and the limits, and this process

1. imports what grading needs (torch, numpy, the companion modules that define the exercise's name), then puts a
   stand-in that raises "write this one yourself" in place of the companion's reference everywhere it is bound
   (its module, every alias in a loaded module, closures and dictionaries that hold it), and refuses to open the
   reference's source file;
2. sets its limits (``RLIMIT_AS`` memory, ``RLIMIT_CPU`` time, ``RLIMIT_FSIZE`` file size) and an audit hook
   that refuses to start processes, send signals, load native libraries through ctypes, or write files outside
   its own temporary folder;
3. runs the answer's code, alone, in a fresh namespace, and then, in ``serve`` mode, calls the student's function
   on each set of arguments the grader sends and sends back what it returned (or raised) and the arguments as
   they are after the call, as data (:mod:`companion.grading.wire`). In ``check`` mode (exercises whose checker
   cannot run in the grader: classes, arguments that are not data) it runs the checker itself, here, and sends
   the verdict: the weaker way, since the student's code shares this process with the checker.
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

from . import wire

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
_PATH_EVENTS = {"os.rename": 2, "os.remove": 1, "os.rmdir": 1, "os.symlink": 2, "os.link": 2, "os.truncate": 1}
_PATH_EVENTS |= {"os.chmod": 1, "os.chown": 1, "os.mkdir": 1, "os.utime": 1, "shutil.rmtree": 1}


class WriteItYourself(Exception):
    """What the companion's reference raises inside an answer's process."""


@functools.cache
def _definitions() -> dict[str, tuple[str, ...]]:
    """Every top-level function and class name of the ``companion`` sources -> the modules defining it."""
    root = Path(__file__).resolve().parents[1]
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if "exercises" in parts or "grading" in parts:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
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
        return StandIn

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        raise WriteItYourself(message)

    stand_in.__name__ = stand_in.__qualname__ = name
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
        if original is None:
            continue
        kept = (original,)  # a tuple: never rewritten below (a dict of locals holding `original` may be)
        stand_in = _stand_in(name, "class" if isinstance(original, type) else "function")
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


def _disable(original: Any, name: str) -> None:
    """Make the reference itself raise, for whatever still reaches it (a subclass's ``__mro__``,
    ``__subclasses__()``, ``gc.get_objects()``): a function's code, a class's ``__init__`` and ``forward``."""
    message = f"the companion's `{name}` is not available while your answer is graded: write this one yourself"
    namespace: dict[str, Any] = {}
    exec(f"def blocked(*args, **kwargs):\n    raise PermissionError({message!r})\n", namespace)
    blocked = namespace["blocked"]
    if isinstance(original, types.FunctionType) and not original.__closure__:
        original.__code__ = blocked.__code__
    elif isinstance(original, type):
        for attr in ("__init__", "forward", "__call__"):
            if attr in vars(original) or attr == "__init__":
                try:
                    setattr(original, attr, blocked)
                except (TypeError, AttributeError):
                    pass


def _audit(allowed_dir: str, refused_files: list[str], private: list[str] = ()):
    refused = set(refused_files)
    caches = {os.path.join(os.path.dirname(f), "__pycache__", Path(f).stem) for f in refused_files}

    def outside(path: Any) -> bool:
        if isinstance(path, int):
            return False
        try:
            real = os.path.realpath(os.fsdecode(path))
        except Exception:
            return True
        return not (real == allowed_dir or real.startswith(allowed_dir + os.sep))

    def hook(event: str, args: tuple) -> None:
        if event in _REFUSED or event.startswith("os.exec") or event.startswith("os.spawn"):
            raise PermissionError(f"not allowed while an answer is graded: {event}")
        if event == "open" and args and not isinstance(args[0], int):
            try:
                real = os.path.realpath(os.fsdecode(args[0]))
            except Exception:
                real = ""
            if real in refused or any(real.startswith(c) for c in caches):
                raise PermissionError(f"the companion's source of the exercise cannot be read here: {real}")
            if any(real == p or real.startswith(p + os.sep) for p in private):
                raise PermissionError(f"the class's notebooks and results cannot be read here: {real}")
            mode, flags = (args[1] if len(args) > 1 else "r"), (args[2] if len(args) > 2 else 0)
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC)
            )
            if writing and outside(args[0]):
                raise PermissionError(f"an answer may write files only in its own folder, not {real}")
        elif event in _PATH_EVENTS:
            if any(outside(a) for a in args[: _PATH_EVENTS[event]]):
                raise PermissionError(f"not allowed outside the answer's own folder: {event}")

    return hook


def _limit(memory_bytes: int, cpu_seconds: float, file_bytes: int) -> None:
    try:
        import resource
    except ImportError:  # not on this platform (Windows): no limits
        return
    if memory_bytes > 0:
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (used + memory_bytes, used + memory_bytes))
    if cpu_seconds > 0:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(usage.ru_utime + usage.ru_stime + cpu_seconds) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 2))
    if file_bytes > 0:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))


def _watched(checker_module: str) -> list[Any]:
    """What a checker running in this process relies on: the modules and classes whose attributes an answer must
    not replace (``torch.allclose``, ``Tensor.__eq__``, the checking machinery, ...)."""
    import numpy
    import torch

    names = ["torch", "torch.nn", "torch.nn.functional", "numpy", "math", "builtins", "companion.exercises.checking"]
    names.append(checker_module)
    objects: list[Any] = [sys.modules[n] for n in names if n in sys.modules]
    return objects + [torch.Tensor, torch.nn.Module, torch.nn.Linear, torch.nn.Parameter, numpy.ndarray, object]


def _snapshot(objects: list[Any]) -> dict[tuple[int, str], int]:
    return {(i, k): id(v) for i, o in enumerate(objects) for k, v in list(vars(o).items())}


def _changed(objects: list[Any], before: dict[tuple[int, str], int]) -> list[str]:
    after = _snapshot(objects)
    keys = sorted(k for k in before if after.get(k) != before[k])  # replaced or deleted (new names may be lazy imports)
    return [f"{getattr(objects[i], '__name__', '?')}.{k}" for i, k in keys][:5]


def _raised(e: BaseException) -> dict[str, Any]:
    builtin = next((c.__name__ for c in type(e).__mro__ if getattr(builtins, c.__name__, None) is c), "Exception")
    try:
        text = str(e)[:1000]
    except Exception:
        text = "?"
    return {"raised": type(e).__name__, "builtin": builtin, "message": text}


def serve(rfd: int, wfd: int) -> None:
    import numpy  # noqa: F401  (imported before the limits, as the checkers need it)
    import torch

    init = wire.read(rfd)
    name, mode = init["name"], init["mode"]
    torch.set_num_threads(1)
    if mode == "check":
        import torch._dynamo  # noqa: F401  (it wraps torch.manual_seed & co. when first imported: do it before the snapshot)

        checker = getattr(importlib.import_module(init["module"]), init["checker"])
        refused: list[str] = []
    else:
        refused = hide_reference(name, init["defining"])
    for module_name in init.get("preload", []):  # the modules the answer imports, loaded before the limits
        try:
            importlib.import_module(module_name)
        except Exception:
            pass
    _limit(int(init["memory_bytes"]), float(init["cpu_seconds"]), int(init["file_bytes"]))
    sys.addaudithook(_audit(os.path.realpath(os.getcwd()), refused, list(init.get("private", []))))
    wire.write(wfd, {"op": "ready"})  # from here on, the time is the answer's
    watched = _watched(init["module"]) if mode == "check" else []
    before = _snapshot(watched)
    namespace: dict[str, Any] = {"__name__": "__answer__", "__builtins__": builtins}
    try:
        exec(compile(init["code"], "<your answer>", "exec"), namespace)
    except BaseException as e:
        wire.write(wfd, {"op": "defined", **_raised(e)})
        return
    student = namespace.get(name)
    module = str(getattr(student, "__module__", "") or "")
    mro = [f"{c.__module__}.{c.__qualname__}" for c in getattr(student, "__mro__", ())]
    import torch

    kind = "class" if isinstance(student, type) else "function"
    forward = isinstance(student, type) and getattr(student, "forward", None) is not torch.nn.Module.forward
    wire.write(wfd, {"op": "defined", "module": module, "mro": mro, "kind": kind, "forward": forward})
    if mode == "check":
        try:
            v = checker.verdict(student)
            fields = ("status", "problem", "input", "expected", "got", "hint", "cases")
            verdict = {k: getattr(v, k) for k in fields} | {"text": str(v)}
        except BaseException as e:
            verdict = {"status": "crash", "problem": f"{type(e).__name__}: {e}"[:500]}
        replaced = _changed(watched, before)
        if replaced:  # the checker shared this process with the answer, which changed what the checker uses
            what = ", ".join(f"`{r}`" for r in replaced)
            verdict = {"status": "tampered", "problem": f"your answer replaced {what}, which the checker uses"}
        wire.write(wfd, {"op": "verdict", "verdict": {k: (v if v is None else str(v)) for k, v in verdict.items()}})
        return
    modules = ModuleServer()
    while True:
        request = wire.read(rfd)
        op = request.get("op")
        if op not in ("call", "new", "forward", "backward"):
            return
        args, kwargs = list(request.get("args", [])), dict(request.get("kwargs", {}))
        try:
            if op == "call":
                value = student(*args, **kwargs)
            elif op == "new":
                value = modules.new(student, args, kwargs)
            elif op == "forward":
                value = modules.forward(request["value"], args, kwargs)
            else:
                value = modules.backward(request["value"])
        except BaseException as e:
            wire.write(wfd, {"op": "result", **_raised(e)})
            continue
        try:
            wire.write(wfd, {"op": "result", "value": value, "args": args, "kwargs": kwargs})
        except BaseException as e:
            wire.write(wfd, {"op": "result", **_raised(e)} | {"message": f"the result could not be sent: {e}"})


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
            attrs = {k: v for k, v in vars(m).items() if not k.startswith("_") and type(v) in (int, float, bool, str)}
            tree.append(
                {
                    "path": path,
                    "type": f"{type(m).__module__}:{type(m).__qualname__}" if own else type(m).__name__,
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
                current = holder._parameters.get(leaf) if leaf in holder._parameters else holder._buffers.get(leaf)
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
        return {"out": out, "requires": [o.requires_grad for o in outs], "buffers": buffers}

    def backward(self, meta: dict) -> Any:
        import torch

        obj, outs, inputs = self.last
        pairs = [(o, g) for o, g in zip(outs, meta["grads"], strict=True) if o.requires_grad and g is not None]
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        params = {n: p.grad for n, p in obj.named_parameters(remove_duplicate=False)}
        return {"params": params, "inputs": [t.grad if t.requires_grad else None for t in inputs]}


def zygote(sock_fd: int) -> None:
    """The fork server: import what every answer's process needs once, then fork one process per answer.

    Each request (on the socket ``sock_fd``) brings four descriptors: the answer's two message pipes, its output
    pipe and a status pipe. A monitor process is forked, which forks the answer's process (in a session of its
    own, its output on the output pipe, in its own folder), writes its pid on the status pipe, waits for it and
    writes its exit status there. This process never runs an answer itself.
    """
    import json
    import socket

    import numpy  # noqa: F401
    import torch  # noqa: F401

    sock = socket.socket(fileno=sock_fd)
    first = json.loads(sock.recv(1 << 16) or b"{}")
    for module_name in first.get("preload", []):
        try:
            importlib.import_module(module_name)
        except Exception:
            pass
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
            _monitor(request, *fds)
        for fd in fds:
            os.close(fd)


def _monitor(request: dict[str, Any], rfd: int, wfd: int, out: int, status: int) -> None:
    try:
        child = os.fork()
        if child == 0:
            os.close(status)
            os.setsid()
            os.dup2(out, 1)
            os.dup2(out, 2)
            os.close(out)
            folder = request["folder"]
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
        os.write(status, f"{child}\n".encode())
        _, code = os.waitpid(child, 0)
        os.write(status, f"{os.waitstatus_to_exitcode(code)}\n".encode())
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
