"""Checkpoint averaging (Vaswani et al., 2017): one model whose parameters are the mean of the last ``k``
checkpoints of a run, and the callback that keeps those checkpoints while the run trains (chapter 5)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import torch
from torch import nn

from ..validation import require_positive_ints

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
            self.state_dicts.append(
                {k: v.detach().clone() for k, v in model.state_dict().items()}
            )
            self.steps.append(step + 1)


def _same_keys(state_dicts: Sequence[dict]) -> Sequence[dict]:
    if not state_dicts:
        raise ValueError("state_dicts is empty: nothing to average")
    if any(d.keys() != state_dicts[-1].keys() for d in state_dicts):
        raise ValueError(
            "the state dicts have different keys: checkpoints of different models?"
        )
    return state_dicts


def average_state_dicts(state_dicts: Sequence[dict]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the checkpoints (same keys and shapes)."""
    averaged = {}
    for key, value in _same_keys(state_dicts)[-1].items():
        if value.is_floating_point():  # a weight: its mean over the checkpoints
            averaged[key] = torch.stack([d[key] for d in state_dicts]).mean(dim=0)
        else:  # an integer buffer (a step counter): the last checkpoint's
            averaged[key] = value.clone()
    return averaged
