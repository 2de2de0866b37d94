"""Simulate a reader in Colab: a fresh environment with only what Colab preinstalls, the companion installed by
each chapter's setup cell, and the notebooks the launch buttons open, on the second floating-point path.

A fresh virtual environment holds what Colab's image has preinstalled (torch, numpy, matplotlib, scikit-learn,
transformers and a Jupyter kernel); the setup cell installs the companion built from this checkout (the
environment variable ``COMPANION_SOURCE`` points it at a wheel built once from here, as pip builds one from the
repository in Colab, instead of at the repository), and the notebooks run in a working folder outside the
checkout, so only the installed package counts. The kernels run on the second floating-point
path (tests/perturbed.py).

What can differ in Colab from the book build is the environment, so every chapter is checked against it:

- **every chapter's imports**, and every module of the installed companion, import in the fresh environment
  (a package Colab lacks fails here), and the installed package holds every file of the checkout's
  ``companion/`` (a data file left out of the package data fails here);
- **six chapters run top to bottom** there: the preface and chapters 1, 2, 4, 6 (its GPT checkpoint comes from
  the installed package) and 10 (scikit-learn).

The other five (3, 5, 7, 8, 9: four fifths of the book's execution time) are not run a third time: the book
build runs each on the default path, and nbval runs its homework notebook, which holds all of its code cells and
hidden asserts, on the second path (tests/conftest.py). The chapters read no file of their own (their data come
through the companion's loaders), which the imports and the file list above cover.

Chapter 7 downloads the all-MiniLM-L6-v2 weights from the Hugging Face hub in Colab; that path is tested with
the hub mocked (tests/test_bert.py).
"""

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.perturbed import PERTURBED
from tools import notebooks

# a fresh virtual environment, pip installs and six chapters: minutes
pytestmark = pytest.mark.slow

#: What Colab's image has preinstalled that the chapters use.
PREINSTALLED = [
    "torch",
    "numpy",
    "matplotlib",
    "ipykernel",
    "scikit-learn",
    "transformers",
]
CHAPTERS = notebooks.chapters()
#: The chapters run top to bottom here (the module docstring says why these).
RUN_IN_FULL = ("00", "01", "02", "04", "06", "10")


@pytest.fixture(scope="session")
def colab_kernel(tmp_path_factory, root):
    """A kernel named ``colab-sim`` in a fresh virtual environment; returns the folder that holds its spec, the
    environment's Python and the companion's wheel, built from this checkout.

    One per pytest process (each of `make test`'s two workers runs some of the chapters, tests/conftest.py):
    the chapters' setup cells pip-install the companion into it, so two workers never share one."""
    base = tmp_path_factory.mktemp("colab")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = [
        str(python),
        "-m",
        "pip",
        "install",
        "--quiet",
        "-c",
        str(root / "constraints.txt"),
        *PREINSTALLED,
    ]
    subprocess.run(install, check=True)
    probe = subprocess.run(
        [str(python), "-c", "import companion"], cwd=base, capture_output=True
    )
    assert probe.returncode != 0, (
        "the fresh environment must not see the companion before the setup cell"
    )
    # built once, as pip builds the repository's source in Colab (not once per chapter's setup cell)
    build = [str(python), "-m", "pip", "wheel", "--quiet", "--no-deps"]
    subprocess.run([*build, "-w", str(base / "dist"), str(root)], check=True)
    (wheel,) = (base / "dist").glob("*.whl")

    spec = base / "kernels" / "colab-sim"
    spec.mkdir(parents=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "Colab", "language": "python"})
    )
    return base, python, wheel


@pytest.fixture
def colab(colab_kernel, tmp_path, monkeypatch):
    """Run a notebook as Colab would: ``colab(nb)`` executes it in the fresh environment, in /content."""
    base, _, wheel = colab_kernel
    monkeypatch.setenv("JUPYTER_PATH", str(base))
    monkeypatch.setenv("COMPANION_SOURCE", str(wheel))
    # as in Colab: the kernel draws inline
    monkeypatch.delenv("MPLBACKEND", raising=False)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    for name, value in PERTURBED.items():
        monkeypatch.setenv(name, value)
    workdir = tmp_path / "content"  # like Colab's /content: not the checkout
    workdir.mkdir()

    def run(nb: nbformat.NotebookNode) -> Path:
        client = NotebookClient(
            nb,
            kernel_name="colab-sim",
            timeout=900,
            resources={"metadata": {"path": str(workdir)}},
        )
        # raises CellExecutionError, naming the cell, on any error or failed assert
        client.execute()
        return workdir

    return run


def _imports(source: str) -> list[str]:
    """The import statements of a code cell, as source lines."""
    # IPython's magics and shell lines are not Python
    code = "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line
        for line in source.splitlines()
    )
    tree = ast.parse(code)
    return [
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        or isinstance(node, ast.ImportFrom)
        and not node.level
    ]


def test_every_chapter_imports_in_colab(colab, root):
    """The setup cell, then every chapter's imports and every module of the installed companion; then the
    installed package must hold every file of the checkout's companion/."""
    setups, imports = set(), []
    for md in CHAPTERS:
        for cell in nbformat.read(notebooks.reader_path(md), as_version=4).cells:
            if cell.cell_type != "code":
                continue
            if "companion-setup" in cell.metadata.get("tags", []):
                setups.add(cell.source)
            else:
                imports += [i for i in _imports(cell.source) if i not in imports]
    assert len(setups) == 1, "the chapters' setup cells differ: each needs its own run"
    listing = """
import importlib, pkgutil, pathlib, companion
for module in pkgutil.walk_packages(companion.__path__, "companion."):
    importlib.import_module(module.name)
top = pathlib.Path(companion.__file__).parent
files = sorted(
    p.relative_to(top).as_posix()
    for p in top.rglob("*")
    if p.is_file() and "__pycache__" not in p.parts
)
pathlib.Path("installed.json").write_text(json.dumps(files))
"""
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(setups.pop()),
            nbformat.v4.new_code_cell("\n".join(imports)),
            nbformat.v4.new_code_cell("import json" + listing),
        ]
    )
    workdir = colab(nb)
    installed = set(json.loads((workdir / "installed.json").read_text()))
    tracked = subprocess.run(
        ["git", "ls-files", "companion"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    missing = sorted(
        {Path(f).relative_to("companion").as_posix() for f in tracked} - installed
    )
    assert not missing, (
        f"files of companion/ missing from the installed package: {missing}"
    )


@pytest.mark.parametrize(
    "md",
    [md for md in CHAPTERS if md.stem[:2] in RUN_IN_FULL],
    ids=lambda md: md.stem,
)
def test_chapter_runs_in_colab_on_another_floating_point_path(md, colab, colab_kernel):
    _, python, _ = colab_kernel
    nb = nbformat.read(notebooks.reader_path(md), as_version=4)
    start = time.perf_counter()
    workdir = colab(nb)
    print(f"{md.stem}: {time.perf_counter() - start:.0f} s on the perturbed path")

    outputs = "".join(
        o.get("text", "")
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    )
    assert "WRONG" not in outputs and "NOT ATTEMPTED" not in outputs, (
        "a checker did not pass on its solution"
    )
    if md.stem.startswith("01"):
        assert "PASSED  encode" in outputs and "PASSED  Embedding" in outputs
        where = subprocess.run(
            [str(python), "-c", "import companion; print(companion.__file__)"],
            cwd=workdir,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": ""},
        ).stdout
        assert "site-packages" in where, where
        capability = subprocess.run(
            [
                str(python),
                "-c",
                "import torch; print(torch.backends.cpu.get_cpu_capability())",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert capability == "DEFAULT", (
            f"the perturbed path was not taken: PyTorch runs its {capability} kernels"
        )
