"""Checkpoint averaging (Vaswani et al., 2017): one model whose parameters are the mean of the last ``k``
checkpoints of a run, and the callback that keeps those checkpoints while the run trains (chapter 5)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import torch
from torch import nn

from .._validate import require_positive_ints

__all__ = ["LastCheckpoints", "average_state_dicts"]


class LastCheckpoints:
    """A training callback ``(model, step, loss)``: after every ``every``-th step, a copy of the model's state
    dict; the last ``keep`` copies are in ``state_dicts`` (oldest first) and their steps in ``steps``."""

    def __init__(self, keep: int, every: int) -> None:
        require_positive_ints(keep=keep, every=every)
        self.every = every
        self.state_dicts: deque[dict[str, torch.Tensor]] = deque(maxlen=keep)
        self.steps: deque[int] = deque(maxlen=keep)

    def __call__(self, model: nn.Module, step: int, loss: float) -> None:
        if (step + 1) % self.every == 0:  # after `step + 1` optimizer steps
            self.state_dicts.append({k: v.detach().clone() for k, v in model.state_dict().items()})
            self.steps.append(step + 1)


def average_state_dicts(state_dicts: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean of every floating-point tensor of ``state_dicts`` (same keys and shapes); any
    other tensor (a step counter, an integer buffer) is taken from the last one."""
    if not state_dicts:
        raise ValueError("state_dicts is empty: nothing to average")
    last = state_dicts[-1]
    if any(d.keys() != last.keys() for d in state_dicts):
        raise ValueError("the state dicts have different keys: checkpoints of different models?")
    return {
        k: torch.stack([d[k] for d in state_dicts]).mean(dim=0) if v.is_floating_point() else v.clone()
        for k, v in last.items()
    }
