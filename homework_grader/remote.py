"""The grader's side of an answer's process: start it, call the student's function through it, end it.

:func:`check_exercise` grades one answer. For a function the checker runs here, in the grader's process, on a
stand-in for the student's function that sends the arguments to the answer's process as data and returns what
came back (see :mod:`homework_grader.sandbox`): the inputs, the expected values, the comparison, the named
mistakes and the verdict never exist in the student's process. A model the checker hands the function goes as
data too (:class:`~homework_grader.wire.ModuleData`), is rebuilt there from torch's and the companion's own
classes, and comes back as the function left it (a model trained in place, or changed by mistake); a result that
carries gradient comes back attached to the grader's copy of the model, its gradients computed there on demand
(:class:`_RemoteGraph`). A class is checked the same way through a mirror (:func:`remote_class`). An argument
that cannot be sent as data (a lambda, an object of a class of the checker's own that is no model) gives an
error verdict that says so: nothing is ever checked in the answer's process. A memory check
(:func:`companion.exercises.checking.peak_bytes`) is measured by the kernel, from outside the answer's process:
while it runs, the grader resets the peak of the sandbox's control group before each call and reads it after (where
there is no control group, the monitor of the answer's process does the same with that process's resident memory),
and what the answer holds since its code started, beyond :data:`HELD_BYTES`, counts as well (:func:`counted`).
Whatever happens, the process and everything it started are killed (its process group) before this returns; an
answer that ended or stopped (``SIGSTOP``) the processes that watch it, or the fork server, gets an error that says
so, and the next answer a new sandbox.
"""

from __future__ import annotations

import builtins
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from companion.exercises.checking import Abort, RemoteMemory

from . import cgroup, walls, wire
from .sandbox import defining_modules

#: the checkers share the grader's random generator (each forks and seeds it): one checker at a time
CHECK_LOCK = threading.Lock()


@dataclass
class Limits:
    """Per exercise: wall-clock seconds of checking (also the CPU-time limit), memory, printed output."""

    seconds: float = 60.0
    memory_bytes: int = 4 * 2**30
    output_bytes: int = 10 * 2**20
    # starting Python and importing torch: not the student's time
    startup_seconds: float = 120.0
    # folders the answer may not open at all (the submissions, the results)
    private: tuple[str, ...] = ()


#: why an answer whose process ended or stopped its monitor (or every process it could signal) gets an error
LOST = (
    "its process ended or stopped the processes that watched it and started the answers "
    "(its sandbox was ended)"
)
#: why an answer after which a process of the sandbox is left stopped gets an error
HALTED = (
    "its process stopped (SIGSTOP) the sandbox's fork server, which starts the answers "
    "(its sandbox was ended)"
)


class Stopped(Abort):
    """The answer's process stopped answering: past its time, killed by a limit, or gone."""

    def __init__(self, status: str, why: str) -> None:
        super().__init__(why)
        self.status, self.why = status, why


@dataclass
class Sandbox:
    """One answer's process (see :mod:`homework_grader.sandbox`)."""

    limits: Limits
    pid: int = 0
    code: int | None = None
    output: int = 0
    over_output: bool = False
    deadline: float = 0.0
    isolated: bool = False
    # its monitor was gone: the answer ended the process that watched it
    lost: bool = False
    # it was stopped by a signal when its time ran out
    halted: bool = False
    #: where the checker's memory measurements take the peaks this process measures (see check_exercise)
    memory: RemoteMemory = field(default_factory=RemoteMemory)
    #: the memory of the sandbox (or of the answer's process) before the answer's code ran, in bytes
    held_base: int | None = None
    # the start of a line from the monitor, read before a deadline
    _partial: bytes = b""

    def start(self, init: dict[str, Any]) -> dict[str, Any]:
        """Start the process (forked by the fork server) and send it the answer; return once it is ready to run
        the answer's code (imports and limits done: the time after this is the answer's)."""
        self.tmp = tempfile.TemporaryDirectory(prefix="companion-answer-")
        to_child, from_child, out = os.pipe(), os.pipe(), os.pipe()
        control = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        status = (control[0].detach(), control[1].detach())
        self._rfd, self._wfd, self._out, self._status = (
            from_child[0],
            to_child[1],
            out[0],
            status[0],
        )
        self.isolated = ZYGOTE.walls is not None
        try:
            ZYGOTE.fork(
                {"folder": self.tmp.name},
                [to_child[0], from_child[1], out[1], status[1]],
            )
        finally:
            for fd in (to_child[0], from_child[1], out[1], status[1]):
                os.close(fd)
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()
        deadline = time.monotonic() + self.limits.startup_seconds
        line = self._status_line(deadline)
        if not line.strip().isdigit():
            raise Stopped(
                "error", "the grader could not start a process for the answer"
            )
        self.pid = int(line)
        cpu = self.limits.seconds + 1
        init = {**init, "memory_bytes": self.limits.memory_bytes, "cpu_seconds": cpu}
        init["private"] = [os.path.realpath(p) for p in self.limits.private]
        init["file_bytes"] = self.limits.output_bytes
        self._send(init, deadline)
        ready = self._receive(deadline, starting=True)
        # what the sandbox holds before the answer's code runs: what the answer keeps from then on is its own
        group = ZYGOTE.cgroup if self.isolated else None
        self.held_base = self._group(group, None) if group else self._kernel(b"r")
        self._send({"op": "go"}, deadline)
        return ready

    def _status_line(self, deadline: float) -> str:
        """One line from the monitor: the pid, then the exit status; "" at the deadline (what came of the line
        is kept for the next call) or at its end."""
        data, self._partial = self._partial, b""
        while not data.endswith(b"\n"):
            wait = max(0.0, deadline - time.monotonic())
            if not select.select([self._status], [], [], wait)[0]:
                self._partial = data
                return ""
            chunk = os.read(self._status, 1)
            if not chunk:
                return ""
            data += chunk
        return data.decode()

    def _drain(self) -> None:
        """Read and count what the answer prints; past the output limit, stop the process."""
        while True:
            try:
                chunk = os.read(self._out, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            self.output += len(chunk)
            if self.output > self.limits.output_bytes and not self.over_output:
                self.over_output = True
                self.kill()

    def _send(
        self, message: dict[str, Any], deadline: float, strict: bool = False
    ) -> None:
        data = wire.dumps(message, strict=strict)
        try:
            os.set_blocking(self._wfd, False)
            view = memoryview(data)
            while view:
                wait = deadline - time.monotonic()
                if wait <= 0 or not select.select([], [self._wfd], [], wait)[1]:
                    raise self._stopped(True)
                view = view[os.write(self._wfd, view[: 1 << 16]) :]
        except OSError:
            raise self._stopped(False) from None

    def _receive(self, deadline: float, starting: bool = False) -> dict[str, Any]:
        try:
            return wire.read(self._rfd, deadline)
        except TimeoutError:
            # (read before the kill: a process stopped by a signal waits for it like one that loops)
            self.halted = not starting and self.pid in ZYGOTE.halted()
            self.kill()
            raise self._stopped(not starting) from None
        except wire.WireError as e:
            self.kill()
            if "cut short" in str(e):
                raise self._stopped(False) from None
            raise Stopped(
                "error", f"its process sent something that is not an answer ({e})"
            ) from None

    def _stopped(self, timed_out: bool) -> Stopped:
        halted = timed_out and (self.halted or self.pid in ZYGOTE.halted())
        self.kill()
        code = self.wait()
        mb = self.limits.output_bytes / 2**20
        if self.over_output:
            return Stopped("error", f"it printed more than the {mb:g} MB output limit")
        if halted:
            return Stopped(
                "timeout",
                f"its process was stopped (SIGSTOP) and did not answer within the "
                f"{self.limits.seconds:g} s limit",
            )
        if timed_out:
            return Stopped(
                "timeout", f"it ran past the {self.limits.seconds:g} s limit"
            )
        if code == -signal.SIGXCPU:
            return Stopped(
                "timeout", f"it used more than {self.limits.seconds:g} s of CPU time"
            )
        if self.lost:
            return Stopped("error", LOST)
        if code is not None and code < 0:
            return Stopped(
                "error", f"its process was killed ({signal.Signals(-code).name})"
            )
        return Stopped("error", f"its process ended (exit status {code})")

    def call(self, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
        message = {
            "op": "call",
            "args": list(args),
            "kwargs": kwargs,
            "measure": self.memory.measuring,
        }
        return self.request(message, measure=self.memory.measuring)

    def request(self, message: dict[str, Any], measure: bool = False) -> dict[str, Any]:
        """Send one request and return the reply. With ``measure`` (a checker measures memory), the kernel's
        peak is reset before the request is sent and read once the reply has come: the call's peak is how far
        the memory rose above the usage at the reset, plus what the answer held at the reset beyond
        :data:`HELD_BYTES` (see :func:`counted`). In a sandbox with a control group
        (:mod:`homework_grader.cgroup`) the grader resets and reads the group's figures itself, and they count
        every process and thread of the sandbox; else the monitor does, for the answer's process alone (its
        resident memory, which that process could reset itself)."""
        group = ZYGOTE.cgroup if self.isolated else None
        base = (
            (self._group(group, True) if group else self._kernel(b"r"))
            if measure
            else None
        )
        self._send(message, self.deadline, strict=True)
        reply = self._receive(self.deadline)
        if measure:
            top = self._group(group, False) if group else self._kernel(b"p")
            if base is None or top is None:
                raise Stopped(
                    "error",
                    "the grader could not read the memory of the answer's process",
                )
            self.memory.record(counted(base, top, self.held_base))
        return reply

    @staticmethod
    def _group(group: cgroup.Cgroup, reset: bool | None) -> int | None:
        """``True``: reset the group's peak, the usage then; ``False``: the peak since; ``None``: the usage."""
        try:
            if reset is None:
                return group.usage()
            return group.reset() if reset else group.peak()
        except (OSError, ValueError, IndexError):
            return None

    def _kernel(self, asked: bytes) -> int | None:
        """Ask the monitor for the kernel's figure of the answer's process (``r``: reset the peak, the present
        size; ``p``: the peak since), in bytes; ``None`` where there is none."""
        try:
            os.write(self._status, asked)
        except OSError:
            return None
        line = self._status_line(time.monotonic() + 30.0)
        head, _, value = line.strip().partition(" ")
        # the process ended: the monitor's line is its exit status
        if head != asked.decode():
            if line.strip().lstrip("-").isdigit():
                self.code = int(line)
            return None
        return int(value) if value.isdigit() else None

    def verdict(self) -> dict[str, Any]:
        """The next message of the answer's process, by the deadline."""
        return self._receive(self.deadline)

    def kill(self) -> None:
        """Kill the process and everything it started: its monitor does (in a sandbox, every process of the
        sandbox but the fork server); without a sandbox, the process group is killed from here too."""
        if self.pid:
            try:
                os.write(self._status, b"k")
            except OSError:
                pass
            # (in a sandbox the pid is the sandbox's own: it names no process here)
            if not self.isolated:
                try:
                    os.killpg(self.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def wait(self) -> int | None:
        """The process's exit status (negative: the signal that ended it), once it has ended. When its monitor
        cannot say (an answer that killed it), the whole sandbox is ended: nothing of the answer is left."""
        if self.code is None and self.pid:
            end, line = time.monotonic() + 30.0, ""
            while not line and time.monotonic() < end:
                line = self._status_line(min(end, time.monotonic() + 1.0))
                # (a monitor stopped by a signal never answers: no need to wait for it)
                if not line and ZYGOTE.watcher_halted(self.pid):
                    break
            self.code = int(line) if line.strip().lstrip("-").isdigit() else None
            if self.code is None:
                self.lost = True
                ZYGOTE.stop()
        return self.code

    def close(self) -> None:
        self.kill()
        self.wait()
        fds = [self._rfd, self._wfd, self._status]
        drainer = getattr(self, "_drainer", None)
        if drainer is not None:
            # the output pipe's writers are dead: it ends at once
            drainer.join(timeout=10.0)
            # else leave its descriptor open: closed, its number could be reused
            if not drainer.is_alive():
                fds.append(self._out)
        else:
            fds.append(self._out)
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.tmp.cleanup()


def _server_source(folders: list[str] | None = None) -> str:
    """What the fork server runs: isolated (``-I``: no PYTHONPATH, no user site, not the current folder), it
    imports the grader and the companion from where this process imported them (in a sandbox, from ``folders``,
    the copy ``homework_grader.walls`` made), then takes those folders off its path again, so that an answer
    imports nothing more than it could before."""
    import companion

    if folders is None:
        folders = sorted(
            {
                str(Path(m.__file__).resolve().parents[1])
                for m in (companion, sys.modules[__package__])
            }
        )
    return (
        f"import sys; path = list(sys.path); sys.path[:0] = {folders!r}; import companion; "
        "import homework_grader.sandbox as sandbox; sys.path[:] = path; sandbox.main()"
    )


_SERVER = _server_source()
#: memory an answer may keep between calls (its process's own growth as the checker calls it: copies of pages
#: shared with the fork server, Python's heap, the results and graphs kept for a backward; 2 to 5 MiB for the
#: right answers of chapters 8 and 9) before what it keeps counts in a memory check
HELD_BYTES = 8 * 2**20


def counted(base: int, top: int, held_base: int | None) -> int:
    """The memory a measured call is charged with: how far the memory rose above ``base`` (the usage at the
    reset) to ``top`` (the peak), plus what the answer held at the reset beyond :data:`HELD_BYTES`, counted
    from ``held_base`` (the usage before its code ran). A buffer taken when the answer is defined, or by an
    earlier call, and filled by this one is the answer's memory as much as one taken during the call."""
    held = 0 if held_base is None else max(0, base - held_base - HELD_BYTES)
    return max(0, top - base) + held


#: a sandbox's memory beyond its answer's limit: the fork server (Python, torch) and its memory file systems
SERVER_BYTES = 2 * 2**30


class Zygote:
    """The fork server (:func:`homework_grader.sandbox.zygote`): one per grading run, started on first use.

    Starting Python and importing torch takes seconds; forking a process that has done it takes milliseconds.
    The server runs in a session of its own, with a minimal environment, and never runs an answer itself.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.preload: list[str] = []
        #: the sandbox (``homework_grader.walls``): ``{"copy": folder, "sources": {...}}``, or ``None``
        #: when the instructor said the submissions are trusted (``--no-isolation``)
        self.walls: dict[str, Any] | None = None
        #: the sandbox's control group (``homework_grader.cgroup``), where one could be made
        self.cgroup: cgroup.Cgroup | None = None
        self.no_cgroup = ""  # why none could

    def fork(self, request: dict[str, Any], fds: list[int]) -> None:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            try:
                socket.send_fds(self.sock, [json.dumps(request).encode()], fds)
            except OSError:
                self._start()
                socket.send_fds(self.sock, [json.dumps(request).encode()], fds)

    def _start(self) -> None:
        self.stop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        fd = str(theirs.fileno())
        first: dict[str, Any] = {"preload": self.preload}
        if self.walls is not None:
            boot = _server_source([walls.INSIDE])
            argv = [
                *walls.command(Path(self.walls["copy"])),
                sys.executable,
                "-I",
                "-c",
                boot,
                "--zygote",
                fd,
            ]
            first |= {"sources": self.walls["sources"], "isolated": True}
            self.cgroup, self.no_cgroup = cgroup.create(
                int(self.walls.get("memory_bytes", 0)) + SERVER_BYTES
            )
            if self.cgroup is not None:
                argv = cgroup.wrap(self.cgroup, argv)
        else:
            argv = [sys.executable, "-I", "-c", _SERVER, "--zygote", fd]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": tempfile.gettempdir(),
            "MPLBACKEND": "Agg",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "LANG": "C.UTF-8",
        }
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                cwd=tempfile.gettempdir(),
                env=env,
                start_new_session=True,
            )
        finally:
            theirs.close()
        self.sock = ours
        try:
            self.proc.stdin.write(json.dumps(first).encode())
            self.proc.stdin.close()
        except OSError:
            pass

    def processes(self) -> dict[int, tuple[int, str, int]]:
        """The processes the server's command started (``bwrap``, the server, the monitors, the answers): their
        pid as the sandbox numbers them (as this process does, without a sandbox) -> (pid here, state, parent's
        pid here)."""
        if self.proc is None:
            return {}
        children: dict[int, list[int]] = {}
        states: dict[int, tuple[str, int]] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            pid = int(entry.name)
            states[pid] = (fields[0].decode(), int(fields[1]))
            children.setdefault(int(fields[1]), []).append(pid)
        found: dict[int, tuple[int, str, int]] = {}
        todo = [self.proc.pid]
        while todo:
            pid = todo.pop()
            todo += children.get(pid, [])
            inside = pid
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("NSpid:"):
                            inside = int(line.split()[-1])
            except (OSError, ValueError):
                continue
            found[inside] = (pid, *states.get(pid, ("", 0)))
        return found

    def halted(self) -> list[int]:
        """The processes of the sandbox stopped by a signal (``SIGSTOP``), by their pid in the sandbox."""
        return [
            inside
            for inside, (_, state, _) in self.processes().items()
            if state in ("T", "t")
        ]

    def watcher_halted(self, answer: int) -> bool:
        """Whether the monitor of the answer's process ``answer`` (its pid in the sandbox) is stopped by a
        signal."""
        found = self.processes()
        if answer not in found:
            return False
        parent = found[answer][2]
        return any(h == parent and s in ("T", "t") for h, s, _ in found.values())

    def stop(self) -> None:
        """End the server (the answers' processes it forked are ended one by one by their :class:`Sandbox`)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
            self.proc = None
        if self.cgroup is not None:
            self.cgroup.remove()  # (what is left of the sandbox is killed)
            self.cgroup = None


ZYGOTE = Zygote()


def _rebuild(reply: dict[str, Any]) -> BaseException:
    """The exception the student's code raised, as an exception of this process (builtin type where it was one)."""
    name, base, message = (
        str(reply.get("raised")),
        str(reply.get("builtin")),
        str(reply.get("message", "")),
    )
    cls = getattr(builtins, base, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = Exception
    if name != cls.__name__:
        cls = type(name, (cls,), {})
    try:
        return cls(message)
    except Exception:
        return Exception(message)


def _write_back(original: Any, after: Any) -> None:
    """Make the grader's argument look as the student's was after the call (so a change in place is seen)."""
    if isinstance(original, torch.nn.Module) and isinstance(after, wire.ModuleData):
        _write_back_model(original, after)
    elif isinstance(original, torch.Tensor) and isinstance(after, torch.Tensor):
        with torch.no_grad():
            if original.shape == after.shape and original.dtype == after.dtype:
                # (an unchanged tensor keeps its version: a graph may hold it)
                if not torch.equal(original, after):
                    original.copy_(after)
            elif not original.requires_grad:
                original.data = after
    elif isinstance(original, list) and isinstance(after, list):
        if len(original) != len(after) or any(
            type(a) is not type(b) for a, b in zip(original, after, strict=True)
        ):
            original[:] = after
        else:
            for a, b in zip(original, after, strict=True):
                _write_back(a, b)
    elif isinstance(original, dict) and isinstance(after, dict):
        if original.keys() != after.keys():
            original.clear()
            original.update(after)
        else:
            for k in original:
                _write_back(original[k], after[k])


CHANGED_MARK = "replaced_by_your_answer"


def _write_back_model(model: torch.nn.Module, after: wire.ModuleData) -> None:
    """The grader's model takes the parameters, buffers and ``training`` flags the answer left in its copy; where
    the answer added or removed a parameter or buffer, a buffer of that name marks the model as changed."""
    theirs = after.named_tensors()
    ours = dict(model.named_parameters(remove_duplicate=False))
    ours |= {
        n: b for n, b in model.named_buffers(remove_duplicate=False) if b is not None
    }
    with torch.no_grad():
        for name, t in ours.items():
            new = theirs.get(name)
            if not isinstance(new, torch.Tensor):
                continue
            if t.shape == new.shape and t.dtype == new.dtype:
                if not torch.equal(t, new):
                    t.copy_(new)
            else:
                t.data = new.detach()
    if theirs.keys() != ours.keys() and CHANGED_MARK not in model._buffers:
        model.register_buffer(CHANGED_MARK, torch.ones(()))
    for path, training in after.training().items():
        try:
            (model.get_submodule(path) if path else model).training = training
        except AttributeError:
            pass


class _RemoteGraph(torch.autograd.Function):
    """A result of the student's function that carries gradient: its values came back as data; its backward
    asks the answer's process for the gradients of the leaves (the model's parameters, the tensor arguments)."""

    @staticmethod
    def forward(ctx, box, key, n_outs, *tensors):  # noqa: ANN001
        ctx.box, ctx.key, ctx.n_outs = box, key, n_outs
        return tuple(t.detach().clone() for t in tensors[:n_outs])

    @staticmethod
    def backward(ctx, *grads):  # noqa: ANN001
        reply = _request(
            ctx.box, "gradients", {"graph": ctx.key, "grads": list(grads)}
        )["value"]
        return (None, None, None, *([None] * ctx.n_outs), *reply["leaves"])


def _replaced(value: Any, new: dict[int, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return new.get(id(value), value)
    if type(value) in (list, tuple):
        return type(value)(_replaced(v, new) for v in value)
    if type(value) is dict:
        return {k: _replaced(v, new) for k, v in value.items()}
    return value


def _attach(
    box: Sandbox, graph: dict[str, Any], value: Any, args: tuple, kwargs: dict[str, Any]
) -> Any:
    """``value`` with each tensor that carries gradient in the answer's process made a function of the grader's
    leaves (the same parameters and tensors, named by argument and parameter name)."""
    leaves = []
    for at, name in graph.get("leaves", []):
        arg = (
            args[at]
            if isinstance(at, int) and 0 <= at < len(args)
            else kwargs.get(str(at))
        )
        leaf = (
            dict(arg.named_parameters()).get(name)
            if isinstance(arg, torch.nn.Module)
            else arg
        )
        if not (isinstance(leaf, torch.Tensor) and leaf.requires_grad):
            # not the grader's leaves: the values stay, with no gradient to give
            return value
        leaves.append(leaf)
    found = wire.tensors_in(value)
    outs = [
        found[i]
        for i in graph.get("outs", [])
        if isinstance(i, int) and 0 <= i < len(found)
    ]
    if not torch.is_grad_enabled() or not leaves or not outs:
        return value
    attached = _RemoteGraph.apply(
        box, graph["graph"], len(outs), *[o.detach() for o in outs], *leaves
    )
    return _replaced(value, {id(o): a for o, a in zip(outs, attached, strict=True)})


def remote_function(box: Sandbox, name: str):
    """A function that calls the student's ``name`` in its process, with arguments and result as data."""

    def student(*args: Any, **kwargs: Any) -> Any:
        reply = box.call(args, kwargs)
        if "raised" in reply:
            raise _rebuild(reply)
        for a, b in zip(args, reply.get("args", []), strict=False):
            _write_back(a, b)
        for k, v in kwargs.items():
            _write_back(v, reply.get("kwargs", {}).get(k))
        value = reply.get("value")
        if isinstance(reply.get("graph"), dict):
            value = _attach(box, reply["graph"], value, args, kwargs)
        return value

    student.__name__ = student.__qualname__ = name
    return student


def _request(
    box: Sandbox,
    op: str,
    meta: Any,
    args: tuple = (),
    kwargs: dict | None = None,
    measure: bool = False,
) -> Any:
    reply = box.request(
        {"op": op, "value": meta, "args": list(args), "kwargs": kwargs or {}},
        measure=measure,
    )
    if "raised" in reply:
        raise _rebuild(reply)
    return reply


def _torch_class(spec: str) -> type | None:
    """``torch.nn.modules.linear:Linear`` -> the class, for torch's own modules only."""
    module, _, qualname = spec.partition(":")
    if not module.startswith("torch.") or not qualname:
        return None
    import importlib

    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    return obj if isinstance(obj, type) and issubclass(obj, torch.nn.Module) else None


class _NotHere(torch.nn.Module):
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            "a sub-module of your class cannot be called on its own by the grader"
        )


def _mirror(box: Sandbox, name: str, description: dict[str, Any]) -> torch.nn.Module:
    """A module of the grader's with the structure and weights of the student's (built in its process); calling
    it runs the student's forward there, with the mirror's current weights, gradients coming back as data."""
    ident = description["module"]
    built: dict[str, torch.nn.Module] = {}
    for node in description["tree"]:
        path = node["path"]
        cls = _torch_class(node["type"]) if path else None
        if path == "":
            cls = type(name, (_RemoteModule,), {})
        elif cls is None:
            cls = type(str(node["type"]), (_NotHere,), {})
        m = cls.__new__(cls)
        torch.nn.Module.__init__(m)
        for k, v in node["attrs"].items():
            if k != "training":
                try:
                    object.__setattr__(m, k, v)
                except Exception:
                    pass
        for k, v in node["params"].items():
            m.register_parameter(
                k,
                None if v is None else torch.nn.Parameter(v.detach(), v.requires_grad),
            )
        for k, v in node["buffers"].items():
            m.register_buffer(k, None if v is None else v.detach())
        m.training = bool(node["training"])
        built[path] = m
        if path:
            parent, _, leaf = path.rpartition(".")
            built[parent].add_module(leaf, m)
    root = built[""]
    root._remote = (box, ident)
    return root


class _RemoteModule(torch.nn.Module):
    """The root of a mirror (see :func:`_mirror`)."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        box, ident = self._remote
        named = list(self.named_parameters(remove_duplicate=False))
        state = {n: p.detach() for n, p in named} | {
            n: b for n, b in self.named_buffers(remove_duplicate=False)
        }
        training = {
            n: m.training for n, m in self.named_modules(remove_duplicate=False)
        }
        params = [p for _, p in named]
        inputs = [a for a in args if isinstance(a, torch.Tensor)]
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in params + inputs)
        meta = {
            "module": ident,
            "state": state,
            "training": training,
            "grad": grad,
            "measure": box.memory.measuring,
        }
        if not grad:
            reply = _request(
                box, "forward", meta, args, kwargs, measure=meta["measure"]
            )["value"]
            self._load_buffers(reply["buffers"])
            return reply["out"]
        return _RemoteCall.apply(
            self, meta, args, kwargs, len(params), *params, *inputs
        )

    def _load_buffers(self, buffers: dict[str, Any]) -> None:
        with torch.no_grad():
            for n, b in self.named_buffers(remove_duplicate=False):
                new = buffers.get(n)
                if isinstance(new, torch.Tensor) and new.shape == b.shape:
                    b.copy_(new)


class _RemoteCall(torch.autograd.Function):
    """forward and backward of a student's module, both run in the answer's process."""

    @staticmethod
    def forward(ctx, module, meta, args, kwargs, n_params, *tensors):  # noqa: ANN001
        box, _ = module._remote
        reply = _request(box, "forward", meta, args, kwargs)["value"]
        module._load_buffers(reply["buffers"])
        out = reply["out"]
        if isinstance(out, torch.Tensor):
            outs = [out.detach()]
        elif (
            isinstance(out, tuple)
            and out
            and all(isinstance(o, torch.Tensor) for o in out)
        ):
            outs = [o.detach() for o in out]
        else:
            raise TypeError(
                f"the forward of your class returned {type(out).__name__}, not a tensor"
            )
        ctx.box, ctx.n_params = box, n_params
        ctx.names = [n for n, _ in module.named_parameters(remove_duplicate=False)]
        for o, requires in zip(outs, reply["requires"], strict=False):
            if not requires or not (o.is_floating_point() or o.is_complex()):
                ctx.mark_non_differentiable(o)
        return tuple(outs) if isinstance(out, tuple) else outs[0]

    @staticmethod
    def backward(ctx, *grads):  # noqa: ANN001
        reply = _request(ctx.box, "backward", {"grads": list(grads)})["value"]
        params = [reply["params"].get(n) for n in ctx.names]
        return (None, None, None, None, None, *params, *reply["inputs"])


def remote_class(box: Sandbox, name: str, has_forward: bool) -> type:
    """A class standing for the student's ``name``: calling it builds the student's module in the answer's
    process and returns a mirror of it (see :func:`_mirror`)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        value = _request(box, "new", None, args, kwargs)["value"]
        if isinstance(value, dict) and "tree" in value:
            return _mirror(box, name, value)
        return value

    namespace: dict[str, Any] = {"__new__": __new__}
    if has_forward:
        namespace["forward"] = _RemoteModule.forward
    return type(name, (torch.nn.Module,), namespace)


def check_exercise(
    exercise: Any, code: str, limits: Limits, preload: list[str]
) -> dict[str, Any]:
    """Grade ``code`` (an answer) against ``exercise`` (a :class:`~homework_grader.chapters.Exercise`).

    Returns the verdict's fields (``status``, ``problem``, …, ``text``) plus ``module`` and ``mro`` of the
    student's object and ``how`` (``"remote"``: checked here, the answer run in its own process); a process that
    stopped gives ``status`` ``"timeout"`` or ``"stopped"`` with ``why``, and an argument the checker hands the
    answer that cannot be sent as data ``status`` ``"unportable"`` with ``why``.
    """
    box = Sandbox(limits)
    start = time.monotonic()
    try:
        result = _run(box, exercise, code, limits, preload)
    finally:
        box.close()  # the process group is dead before anything is reported
    # an answer that ended or stopped the processes that watch it loses its verdict (it may have freed memory
    # they held during a memory check), and the next answer gets a new sandbox
    if box.lost:
        result = {"status": "stopped", "why": LOST}
    elif box.pid and ZYGOTE.halted():
        ZYGOTE.stop()
        result = {"status": "stopped", "why": HALTED}
    return {
        **result,
        "output_bytes": box.output,
        "seconds": round(time.monotonic() - start, 2),
    }


def _run(
    box: Sandbox, exercise: Any, code: str, limits: Limits, preload: list[str]
) -> dict[str, Any]:
    import importlib

    checker = getattr(importlib.import_module(exercise.module), exercise.checker)
    init = {
        "name": exercise.name,
        "code": code,
        "module": exercise.module,
        "preload": preload,
    }
    init |= {
        "defining": defining_modules(exercise.name),
        "withhold": list(getattr(checker, "withhold", ())),
        "one_call": [c.data() for c in getattr(checker, "one_call", ())],
    }
    try:
        box.start(init)
        box.deadline = time.monotonic() + limits.seconds
        # the answer's code has run: its definitions, or what it raised
        defined = box.verdict()
        if "raised" in defined:
            return {
                "status": "defining",
                "error": f"{defined['raised']}: {defined.get('message', '')}"[:500],
            }
        out: dict[str, Any] = {
            "module": defined.get("module", ""),
            "mro": defined.get("mro", []),
        }
        if defined.get("kind") == "class":
            student = remote_class(box, exercise.name, bool(defined.get("forward")))
        else:
            student = remote_function(box, exercise.name)
        with CHECK_LOCK:
            box.deadline = time.monotonic() + limits.seconds
            try:
                v = checker.verdict(student, memory=box.memory)
            except wire.Unportable as e:
                return {**out, "status": "unportable", "why": str(e)}
        fields = ("status", "problem", "input", "expected", "got", "hint", "cases")
        return {
            **out,
            **{k: getattr(v, k) for k in fields},
            "text": str(v),
            "how": "remote",
        }
    except Stopped as s:
        return {
            "status": "stopped" if s.status != "timeout" else "timeout",
            "why": s.why,
        }
