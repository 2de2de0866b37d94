"""How a verdict shows values: a tensor's shape and dtype first, an argument on one line, a message's verb that
agrees with its subject. Nothing here raises, whatever a student's object does in ``repr`` or ``str``."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def show(value: Any, limit: int = 400) -> str:
    """A compact, readable rendering of ``value`` for a verdict (shape and dtype first for tensors); never raises."""
    try:
        if isinstance(value, torch.Tensor):
            head = f"tensor of shape {tuple(value.shape)}, dtype {value.dtype}"
            if value.is_meta:
                text = f"{head} on the meta device (it has no values)"
            elif value.layout != torch.strided:
                text = f"{head}, layout {value.layout}"
            else:
                with torch.no_grad():
                    text = f"{head}:\n{value.detach().cpu()!r}"
        else:
            text = f"{type(value).__name__}: {value!r}"
    except BaseException:  # noqa: BLE001 -- a student's object may raise anything from __repr__
        text = f"a {type(value).__name__} object whose repr() raises"
    if len(text) > limit:
        text = text[: limit - 4] + " ..."
    return text


def safe_str(value: Any, limit: int = 300) -> str:
    """``str(value)``, shortened to ``limit`` characters; never raises."""
    try:
        text = str(value)
    except BaseException:  # noqa: BLE001 -- a student's object may raise anything from __str__
        text = f"<a {type(value).__name__} whose str() raises>"
    return text if len(text) <= limit else text[: limit - 4] + " ..."


def brief(value: Any) -> str:
    """One short line for an argument in a case's description."""
    if isinstance(value, torch.Tensor):
        if value.numel() <= 12 and value.ndim <= 2:
            values = value.tolist()
            if value.dtype.is_floating_point:
                values = round_values(values)
            return f"tensor({values})" + (
                "" if value.dtype in (torch.float32, torch.long) else f", {value.dtype}"
            )
        return f"tensor of shape {tuple(value.shape)}, dtype {value.dtype}"
    if isinstance(value, nn.Module):
        return f"a {type(value).__name__} model"
    if isinstance(value, float):
        return repr(value)
    try:
        text = repr(value)
    except BaseException:  # noqa: BLE001
        text = f"a {type(value).__name__} object whose repr() raises"
    return text if len(text) <= 120 else text[:116] + " ..."


def round_values(values: Any) -> Any:
    """A number, or nested lists of numbers, to four significant digits."""
    if isinstance(values, list):
        return [round_values(v) for v in values]
    return float(f"{values:.4g}")


def _plural(what: str) -> bool:
    """Whether a verdict's subject ("The logits", "(inputs, labels)") takes a plural verb."""
    if what.startswith("(") and "," in what:
        return True
    word = what.rstrip(" .)").split(" ")[-1]
    return word.endswith("s") and not word.endswith("ss")


_PLURAL_VERBS = {"is": "are", "has": "have", "contains": "contain", "was": "were"}


def agree(what: str, problem: str) -> str:
    """``problem`` with its first verb made plural when ``what`` is plural: "has the wrong shape" → "have ..."."""
    if not _plural(what):
        return problem
    first, _, rest = problem.partition(" ")
    return (
        f"{_PLURAL_VERBS.get(first, first)} {rest}".rstrip()
        if first in _PLURAL_VERBS
        else problem
    )
