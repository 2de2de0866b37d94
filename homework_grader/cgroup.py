"""A control group per sandbox: the kernel counts its memory and limits its processes, from outside it.

The grader makes one (:func:`create`) for each notebook's sandbox, below its own control group (cgroup v1) or
beside it (v2, where a group that holds processes, as the grader's does, cannot pass controllers to groups below
it), and the sandbox joins it before ``bwrap`` starts (:func:`wrap`): every process of the sandbox, whatever it
forks, clones or maps, is in it and cannot leave it (the control group file system is not in the sandbox, and without
capabilities it cannot mount one). Two controllers:

- ``memory``: the grader resets the group's peak before a measured call and reads it after (cgroup v1
  ``memory.max_usage_in_bytes``; v2 ``memory.peak``, reset through the grader's own descriptor). Answers run
  one after another in a sandbox, and its fork server and monitors do nothing meanwhile: the rise of the
  peak above the usage at the reset is the call's (its threads, the processes it forks, the files it writes in
  its memory file systems), and the usage at the reset above the usage before the answer's code ran is what the
  answer holds (see :func:`homework_grader.remote.counted`). Nothing inside the sandbox can reset it. The group
  also has a hard limit (``memory.limit_in_bytes``/``memory.max``): the answer's limit plus the fork server's
  share.
- ``pids``: at most :data:`PIDS` processes and threads in the sandbox (``pids.max``): a fork bomb or a flood of
  threads fails inside the answer (its own error), and neither the machine nor a classmate's sandbox notices.

Where no control group can be made (no permission, no such controller, an older kernel), :func:`create`
returns ``None`` with the reason, and the grader falls back on the kernel's figures for the answer's process
(``VmHWM``, see :func:`homework_grader.sandbox._memory`), which that process can reset itself: the README says so.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
#: where this process's control groups are listed (one line per hierarchy)
SELF = Path("/proc/self/cgroup")
#: processes and threads of one sandbox at most: the fork server, one monitor, one answer and torch's threads
PIDS = 64
_COUNT = itertools.count()


class Cgroup:
    """One sandbox's control group: ``dirs`` its folder per controller (one folder for cgroup v2)."""

    def __init__(self, dirs: dict[str, Path], v2: bool) -> None:
        self.dirs, self.v2 = dirs, v2
        self._peak_fd: int | None = None

    @property
    def procs(self) -> list[str]:
        """The files a process writes its pid into to join (one per hierarchy)."""
        return sorted({str(d / "cgroup.procs") for d in self.dirs.values()})

    def _file(self, controller: str, name: str) -> Path:
        return self.dirs[controller] / name

    def usage(self) -> int:
        name = "memory.current" if self.v2 else "memory.usage_in_bytes"
        return int(self._file("memory", name).read_text())

    def reset(self) -> int:
        """Reset the peak to the present usage; return that usage, in bytes."""
        if self.v2:
            if self._peak_fd is None:
                self._peak_fd = os.open(self._file("memory", "memory.peak"), os.O_RDWR)
            os.write(self._peak_fd, b"reset\n")
        else:
            self._file("memory", "memory.max_usage_in_bytes").write_text("0\n")
        return self.usage()

    def peak(self) -> int:
        """The highest usage since the last :meth:`reset`, in bytes."""
        if self.v2:
            return int(os.pread(self._peak_fd, 64, 0).split()[0])
        return int(self._file("memory", "memory.max_usage_in_bytes").read_text())

    def pids(self) -> list[int]:
        """The processes in the group now."""
        found: set[int] = set()
        for procs in self.procs:
            try:
                found |= {int(p) for p in Path(procs).read_text().split()}
            except (OSError, ValueError):
                pass
        return sorted(found)

    def remove(self) -> None:
        """Kill what is left in the group and remove it."""
        if self._peak_fd is not None:
            os.close(self._peak_fd)
            self._peak_fd = None
        for _ in range(50):
            left = self.pids()
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                for folder in set(self.dirs.values()):
                    if folder.exists():
                        _unmake(folder)
                return
            except OSError:
                time.sleep(0.02)


def _make(folder: Path) -> None:
    """A new control group (the kernel fills its folder with the group's files)."""
    folder.mkdir()


def _unmake(folder: Path) -> None:
    """Remove an empty control group (with the files the kernel made in it)."""
    folder.rmdir()


def _own(controller: str) -> Path | None:
    """This process's folder in the hierarchy of ``controller`` (``""``: cgroup v2), where it is mounted."""
    try:
        lines = SELF.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers.split(",") == [controller] or (
            controller == "" and controllers == ""
        ):
            base = ROOT if controller == "" else ROOT / controller
            return base / path.lstrip("/")
    return None


def create(memory_bytes: int, pids: int = PIDS) -> tuple[Cgroup | None, str]:
    """A new control group for one sandbox, with its limits set; or ``None`` and why not."""
    name = f"homework-grader-{os.getpid()}-{next(_COUNT)}"
    if (ROOT / "cgroup.controllers").is_file():  # cgroup v2 only
        own = _own("")
        if own is None or not own.is_dir():
            return None, "this process's control group was not found"
        # A group with processes (this one) cannot pass controllers to groups below it (the kernel's rule of no
        # internal processes, the root excepted): the sandbox's group is made beside this process's own.
        parent = own if own == ROOT else own.parent
        try:
            wanted = {"memory", "pids"}
            if not wanted <= set(
                (parent / "cgroup.subtree_control").read_text().split()
            ):
                (parent / "cgroup.subtree_control").write_text("+memory +pids\n")
            folder = parent / name
            _make(folder)
        except OSError as e:
            return None, f"no control group could be made ({e.strerror})"
        group = Cgroup({"memory": folder, "pids": folder}, v2=True)
        try:
            (folder / "pids.max").write_text(f"{pids}\n")
            (folder / "memory.max").write_text(f"{memory_bytes}\n")
            if (folder / "memory.swap.max").exists():
                (folder / "memory.swap.max").write_text("0\n")
            group.reset()
            group.peak()
        except (OSError, ValueError, IndexError) as e:
            group.remove()
            return (
                None,
                f"the kernel's memory peak of a control group cannot be reset here ({e})",
            )
        return group, ""
    dirs: dict[str, Path] = {}
    for controller in ("memory", "pids"):
        parent = _own(controller)
        if parent is None or not parent.is_dir():
            return None, f"no {controller} control group hierarchy"
        try:
            _make(parent / name)
        except OSError as e:
            Cgroup(dirs, v2=False).remove()
            return None, f"no control group could be made ({e.strerror})"
        dirs[controller] = parent / name
    group = Cgroup(dirs, v2=False)
    try:
        (dirs["pids"] / "pids.max").write_text(f"{pids}\n")
        (dirs["memory"] / "memory.limit_in_bytes").write_text(f"{memory_bytes}\n")
        group.reset()
        group.peak()
    except (OSError, ValueError) as e:
        group.remove()
        return None, f"the control group's limits cannot be set here ({e})"
    return group, ""


def wrap(group: Cgroup, argv: list[str]) -> list[str]:
    """``argv`` run by a shell that first moves itself into ``group``: every process it becomes or starts is in
    the group from its first instruction."""
    joins = " && ".join(f'echo $$ > "${i + 1}"' for i in range(len(group.procs)))
    return [
        "/bin/sh",
        "-c",
        f'{joins} && shift {len(group.procs)} && exec "$@"',
        "sh",
        *group.procs,
        *argv,
    ]
