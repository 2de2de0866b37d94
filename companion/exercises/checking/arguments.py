"""The arguments of a case: copies that share nothing with the originals (the reference and the student each get
their own), and whether the student's code changed its copy in place."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn


def copy_value(value: Any) -> Any:
    """A deep copy that shares nothing with ``value`` (tensors, models, lists of them), for one caller."""
    if isinstance(value, torch.Tensor):
        out = value.detach().clone()
        return (
            out.requires_grad_()
            if value.requires_grad and out.dtype.is_floating_point
            else out
        )
    try:
        return copy.deepcopy(value)
    except Exception:  # an object that cannot be copied is passed as it is
        return value


def changed(before: Any, after: Any) -> bool:
    """Whether ``after`` (the student's copy) differs from ``before`` (the original), models included."""
    if isinstance(before, torch.Tensor):
        if (
            not isinstance(after, torch.Tensor)
            or before.shape != after.shape
            or before.dtype != after.dtype
        ):
            return True
        return not torch.equal(before.detach(), after.detach())
    if isinstance(before, nn.Module):
        if not isinstance(after, nn.Module):
            return True
        b, a = before.state_dict(), after.state_dict()
        return b.keys() != a.keys() or any(changed(b[k], a[k]) for k in b)
    if isinstance(before, (list, tuple)):
        return (
            not isinstance(after, type(before))
            or len(before) != len(after)
            or any(changed(x, y) for x, y in zip(before, after, strict=True))
        )
    if isinstance(before, dict):
        return (
            not isinstance(after, dict)
            or before.keys() != after.keys()
            or any(changed(before[k], after[k]) for k in before)
        )
    try:
        return bool(before != after)
    except Exception:
        return False
