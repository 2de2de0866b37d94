"""The grader's control groups on cgroup v2 (``homework_grader/cgroup.py``), against a fake tree: the test
machines have cgroup v1, so the v2 path never runs on their kernel. The fake is a folder laid out as
``/sys/fs/cgroup`` is under v2, a ``/proc/self/cgroup`` that puts this process in one of its groups, and a
kernel that fills a new group's folder with its files, empties it on removal, and keeps ``memory.peak`` per
open descriptor (a write of ``reset`` sets that descriptor's peak to the present usage; a read gives the highest
usage since). What is checked is what the grader writes and reads there, and where it makes the group."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from homework_grader import cgroup, remote

FILES = {
    "cgroup.procs": "",
    "cgroup.controllers": "memory pids",
    "cgroup.subtree_control": "",
    "memory.current": "0\n",
    "memory.peak": "0\n",
    "memory.max": "max\n",
    "memory.swap.max": "max\n",
    "pids.max": "max\n",
}


class FakeKernel:
    """The part of the kernel's cgroup v2 interface that ``cgroup.py`` uses, on files of a tmp folder."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch, peak: bool = True):
        self.root, self.peak_files = root, peak
        #: open descriptors of memory.peak -> (the group's folder, that descriptor's peak)
        self.peaks: dict[int, list] = {}
        real_open, real_write, real_pread, real_close = (
            os.open,
            os.write,
            os.pread,
            os.close,
        )

        def fake_open(path, flags, *args, **kwargs):
            fd = real_open(path, flags, *args, **kwargs)
            path = Path(path)
            if path.name == "memory.peak" and root in path.parents:
                self.peaks[fd] = [path.parent, self.usage(path.parent)]
            return fd

        def fake_write(fd, data):
            if fd in self.peaks:
                assert bytes(data).strip() == b"reset", data
                self.peaks[fd][1] = self.usage(self.peaks[fd][0])
                return len(data)
            return real_write(fd, data)

        def fake_pread(fd, n, offset):
            if fd in self.peaks:
                return f"{self.peaks[fd][1]}\n".encode()[:n]
            return real_pread(fd, n, offset)

        def fake_close(fd):
            self.peaks.pop(fd, None)
            return real_close(fd)

        for name, fake in (
            ("open", fake_open),
            ("write", fake_write),
            ("pread", fake_pread),
            ("close", fake_close),
        ):
            monkeypatch.setattr(os, name, fake)
        monkeypatch.setattr(cgroup, "_make", self.make)
        monkeypatch.setattr(cgroup, "_unmake", self.unmake)
        monkeypatch.setattr(cgroup, "ROOT", root)

    def make(self, folder: Path) -> None:
        folder.mkdir()
        parent = (folder.parent / "cgroup.subtree_control").read_text().split()
        files = dict(FILES, **{"cgroup.controllers": " ".join(parent)})
        if not self.peak_files:
            del files["memory.peak"]
        for name, text in files.items():
            (folder / name).write_text(text)

    def unmake(self, folder: Path) -> None:
        if (folder / "cgroup.procs").read_text().split():
            raise OSError(16, "Device or resource busy")
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()

    @staticmethod
    def usage(folder: Path) -> int:
        return int((folder / "memory.current").read_text())

    def set_usage(self, folder: Path, value: int) -> None:
        """The group's memory is now ``value``: each open peak descriptor of the group keeps its highest."""
        (folder / "memory.current").write_text(f"{value}\n")
        for group_peak in self.peaks.values():
            if group_peak[0] == folder:
                group_peak[1] = max(group_peak[1], value)


def _tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own: str, **kernel):
    """A fake v2 tree whose root enables memory and pids below it, with this process in ``own``."""
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    (root / "cgroup.subtree_control").write_text("memory pids\n")
    fake = FakeKernel(root, monkeypatch, **kernel)
    folder = root
    for part in [p for p in own.split("/") if p]:
        folder = folder / part
        fake.make(folder)
        (folder / "cgroup.subtree_control").write_text("memory pids\n")
    # the innermost group holds this process (so it passes no controller below it)
    (folder / "cgroup.subtree_control").write_text("")
    (folder / "cgroup.procs").write_text(f"{os.getpid()}\n")
    self_file = tmp_path / "self-cgroup"
    self_file.write_text(f"0::{own or '/'}\n")
    monkeypatch.setattr(cgroup, "SELF", self_file)
    return root, fake


def test_a_v2_group_is_made_beside_the_graders_own_with_its_limits(
    tmp_path, monkeypatch
):
    """The grader's own group holds processes, so the kernel would refuse to pass controllers below it: the
    sandbox's group is made in its parent, with the pids limit, the memory limit and no swap."""
    root, _ = _tree(tmp_path, monkeypatch, "/user.slice/session.scope")
    group, why = cgroup.create(3 * 2**30, pids=16)
    assert group is not None, why
    folder = root / "user.slice" / group.dirs["memory"].name
    assert group.v2 and group.dirs == {"memory": folder, "pids": folder}
    assert group.procs == [str(folder / "cgroup.procs")]
    assert (folder / "pids.max").read_text() == "16\n"
    assert (folder / "memory.max").read_text() == f"{3 * 2**30}\n"
    assert (folder / "memory.swap.max").read_text() == "0\n"
    argv = cgroup.wrap(group, ["bwrap", "x"])
    assert argv[-3:] == [str(folder / "cgroup.procs"), "bwrap", "x"], argv
    group.remove()
    assert not folder.exists()


def test_controllers_are_passed_down_where_the_parent_does_not(tmp_path, monkeypatch):
    root, _ = _tree(tmp_path, monkeypatch, "/work/grader")
    (root / "work" / "cgroup.subtree_control").write_text("cpu\n")
    group, why = cgroup.create(2**30)
    assert group is not None, why
    assert (root / "work" / "cgroup.subtree_control").read_text() == "+memory +pids\n"
    group.remove()


def test_at_the_root_the_group_is_made_below_it(tmp_path, monkeypatch):
    root, _ = _tree(tmp_path, monkeypatch, "")
    group, why = cgroup.create(2**30)
    assert group is not None, why
    assert group.dirs["memory"].parent == root
    group.remove()


def test_the_peak_is_reset_and_read_through_the_graders_descriptor(
    tmp_path, monkeypatch
):
    """What a measured call is charged with (``remote.counted``) from the group's figures: the rise of the peak
    above the usage at the reset, and what the answer held at the reset beyond ``HELD_BYTES``."""
    _, fake = _tree(tmp_path, monkeypatch, "/grader")
    group, why = cgroup.create(2**30)
    assert group is not None, why
    folder = group.dirs["memory"]
    fake.set_usage(
        folder, 300 * 2**20
    )  # the fork server and the answer's process, before its code runs
    held_base = group.usage()
    fake.set_usage(
        folder, 303 * 2**20
    )  # the answer's process after the checker's first calls
    base = group.reset()
    assert base == 303 * 2**20 and group.peak() == base
    fake.set_usage(folder, 319 * 2**20)  # an n × n matrix, during the call
    fake.set_usage(folder, 303 * 2**20)  # freed
    assert group.peak() == 319 * 2**20
    assert remote.counted(base, group.peak(), held_base) == 16 * 2**20
    # the same matrix in a buffer taken before the call: no rise, the buffer is counted as held
    fake.set_usage(folder, 319 * 2**20)
    base = group.reset()
    assert group.peak() == base == 319 * 2**20
    charged = remote.counted(base, group.peak(), held_base)
    assert charged == 19 * 2**20 - remote.HELD_BYTES
    group.remove()
    assert not folder.exists()


def test_no_peak_file_no_group(tmp_path, monkeypatch):
    """A kernel without ``memory.peak`` (before Linux 5.19): no group, the reason said, nothing left behind."""
    root, _ = _tree(tmp_path, monkeypatch, "/grader", peak=False)
    group, why = cgroup.create(2**30)
    assert group is None and "cannot be reset" in why, why
    assert [p.name for p in root.iterdir() if p.is_dir()] == ["grader"]


def test_no_permission_no_group(tmp_path, monkeypatch):
    """Where the grader may not pass the controllers down (the file refuses the write), no group, and why."""
    root, _ = _tree(tmp_path, monkeypatch, "/a/grader")
    (root / "a" / "cgroup.subtree_control").unlink()
    (root / "a" / "cgroup.subtree_control").mkdir()  # reads and writes fail
    group, why = cgroup.create(2**30)
    assert group is None and "no control group could be made" in why, why


def test_removing_a_group_kills_what_is_left_in_it(tmp_path, monkeypatch):
    _, fake = _tree(tmp_path, monkeypatch, "/grader")
    group, why = cgroup.create(2**30)
    assert group is not None, why
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    procs = Path(group.procs[0])
    procs.write_text(f"{left.pid}\n")
    real_unmake = fake.unmake

    def unmake(folder):
        if left.poll() is not None:
            procs.write_text("")  # the kernel: a dead process leaves its group
        real_unmake(folder)

    monkeypatch.setattr(cgroup, "_unmake", unmake)
    group.remove()
    assert left.wait(timeout=10) == -9
    assert not group.dirs["memory"].exists()


def test_the_control_groups_are_not_in_the_sandbox(tmp_path):
    """Nothing of ``/sys`` (where the control groups' files are) is bound into an answer's sandbox."""
    from homework_grader import walls

    argv = walls.command(tmp_path)
    assert not any(a == "/sys" or a.startswith("/sys/") for a in argv), argv


def test_without_a_group_the_summary_says_so(monkeypatch):
    """Where no control group can be made, the summary's line on the sandbox says so, with the reason, and that a
    memory check then reads the answer's own process."""
    from homework_grader import cli

    monkeypatch.setattr(cgroup, "create", lambda *a, **k: (None, "not allowed here"))
    said = cli._isolation()
    assert "no control group (not allowed here)" in said, said
    assert "the answer's own process" in said, said
