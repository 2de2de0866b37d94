"""The random state a checker runs in: torch's, Python's and NumPy's generators forked and seeded, put back
afterwards, so that the student's own random state is untouched and the shown cases are the same on every run;
hidden cases are drawn under a seed taken afresh from ``os.urandom``; and the rest of torch's global state a
notebook's earlier cells may have changed (grad mode, the default dtype), known while the checker runs."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch


@contextmanager
def forked_random_state(seed: int) -> Iterator[None]:
    """torch's, Python's and NumPy's global generators seeded with ``seed``, and put back on leaving."""
    with torch.random.fork_rng(devices=[]), _other_random_states():
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed % 2**32)
        yield


@contextmanager
def _other_random_states() -> Iterator[None]:
    """Python's and NumPy's global random states, put back after the checker (as fork_rng does for torch)."""
    python, numpy = random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)


@contextmanager
def hidden_inputs() -> Iterator[int]:
    """Seed torch, NumPy and ``random`` afresh from ``os.urandom`` (inside a checker's forked state) and yield
    the seed: the cases drawn inside are new on every run, so no table of shown answers can pass them."""
    seed = int.from_bytes(os.urandom(4), "little")
    with forked_random_state(seed):
        yield seed


@contextmanager
def known_torch_state() -> Iterator[None]:
    """Grad mode on and float32 as the default dtype while the checker runs, whatever earlier cells left
    (``torch.set_grad_enabled(False)``, ``torch.set_default_dtype(torch.float64)``), and the student's settings
    put back on leaving, also when the student's code changed them."""
    grad, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    try:
        torch.set_grad_enabled(True)
        torch.set_default_dtype(torch.float32)
        yield
    finally:
        torch.set_grad_enabled(grad)
        torch.set_default_dtype(dtype)
