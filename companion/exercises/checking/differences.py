"""How an answer differs from the expected one: tensors by shape, kind of dtype and values (NaN and infinities
named as such), numbers in any form, lists and tuples item by item; each difference as the words a verdict
shows."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import torch

from .printing import safe_str, show
from .verdicts import Abort

NAN_HINT = "Look for a division by zero, a log of 0, or an exp() of a large number."


def _kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "boolean"
    if dtype.is_floating_point:
        return "floating-point"
    return "complex" if dtype.is_complex else "integer"


def number(value: Any) -> float | None:
    """``value`` as a float if it is a single real number (Python, NumPy, or a one-element tensor)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, np.ndarray):
        return (
            float(value.reshape(()))
            if value.size == 1 and value.dtype.kind in "iuf"
            else None
        )
    if (
        isinstance(value, torch.Tensor)
        and value.numel() == 1
        and not value.dtype.is_complex
    ):
        return float(value.detach().reshape(()))
    return None


def difference(
    got: Any, expected: Any, atol: float, rtol: float
) -> tuple[str, str, str, str | None] | None:
    """None when ``got`` matches ``expected``, else ``(problem, expected, got, hint)`` describing the difference.

    Tensors must agree in shape, kind of dtype (boolean, integer, floating) and values (within
    ``atol + rtol·|expected|``; float64 for float32 is fine); numbers may come as Python or NumPy scalars or
    one-element tensors; a tuple and a list with the same items are the same answer.
    """
    if isinstance(expected, torch.Tensor) and (
        expected.ndim > 0 or isinstance(got, torch.Tensor) and got.numel() != 1
    ):
        return _tensor_difference(got, expected, atol, rtol)
    if isinstance(expected, (numbers.Real, torch.Tensor)) and not isinstance(
        expected, bool
    ):
        e = float(expected.detach() if isinstance(expected, torch.Tensor) else expected)
        g = number(got)
        if g is None:
            return "should be a single number", f"{e:.6g}", show(got), None
        if math.isnan(g) and not math.isnan(e):
            return "is NaN", f"{e:.6g}", f"{g}", NAN_HINT
        if not math.isfinite(g) and math.isfinite(e):
            return "is infinite", f"{e:.6g}", f"{g}", INF_HINT
        close = (
            abs(g - e) <= atol + rtol * abs(e)
            if math.isfinite(e)
            else g == e or math.isnan(g) and math.isnan(e)
        )
        if not close:
            return "is wrong", f"{e:.6g}", f"{g:.6g}", None
        return None
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            return (
                f"should be a list or tuple of {len(expected)} items",
                show(expected),
                show(got),
                None,
            )
        for i, (g, e) in enumerate(zip(got, expected, strict=True)):
            diff = difference(g, e, atol, rtol)
            if diff is not None and isinstance(e, torch.Tensor):
                return f"has a wrong item {i} (it {diff[0]})", diff[1], diff[2], diff[3]
            if diff is not None:
                return (
                    f"is wrong (item {i} differs)",
                    show(expected),
                    show(got),
                    diff[3],
                )
        return None
    try:
        equal = bool(got == expected) and type(got) is type(expected)
    except Exception:
        equal = False
    return None if equal else ("is wrong", show(expected), show(got), None)


def _tensor_difference(
    got: Any, expected: torch.Tensor, atol: float, rtol: float
) -> tuple[str, str, str, str | None] | None:
    shape = tuple(expected.shape)
    if not isinstance(got, torch.Tensor):
        hint = (
            "Convert at the end with torch.from_numpy(...) or torch.tensor(...)."
            if isinstance(got, np.ndarray)
            else None
        )
        return "should be a torch.Tensor", f"a tensor of shape {shape}", show(got), hint
    if got.is_meta:
        return (
            "is a tensor on the meta device, which has no values",
            f"a tensor of shape {shape}",
            show(got),
            None,
        )
    if got.layout != torch.strided:
        return (
            "should be a dense tensor",
            f"a dense tensor of shape {shape}",
            show(got),
            "Convert with .to_dense().",
        )
    if tuple(got.shape) != shape:
        return (
            "has the wrong shape",
            f"shape {shape}",
            f"shape {tuple(got.shape)}",
            None,
        )
    if _kind(got.dtype) != _kind(expected.dtype):
        kind = _kind(expected.dtype)
        article = "an" if kind[0] in "aeiou" else "a"
        hint = f"Build the tensor with dtype={expected.dtype}, or convert it with .to({expected.dtype})."
        return (
            f"should be {article} {kind} tensor",
            f"{article} {kind} dtype such as {expected.dtype}",
            f"dtype {got.dtype}",
            hint,
        )
    g = (
        got.detach()
        .cpu()
        .to(torch.float64 if not expected.dtype.is_complex else torch.complex128)
    )
    e = expected.detach().cpu().to(g.dtype)
    finite = torch.isfinite(e)
    if torch.isnan(g[~torch.isnan(e)]).any():
        return "contains NaN", show(expected), show(got), NAN_HINT
    if not torch.isfinite(g[finite]).all():
        index = _first_index(finite & ~torch.isfinite(g), shape)
        return (
            f"contains an infinity where a finite value is expected (first at index {index})",
            show(expected),
            show(got),
            INF_HINT,
        )
    if not torch.allclose(g, e, atol=atol, rtol=rtol, equal_nan=True):
        infinite = ~finite & ~torch.isnan(e) & (g != e)
        if infinite.any():
            index = _first_index(infinite, shape)
            value = e[index] if expected.ndim else e
            return (
                f"should be {float(value)} at index {index}",
                show(expected),
                show(got),
                None,
            )
        worst = (g - e).abs().nan_to_num(math.inf).argmax().item()
        index = (
            tuple(int(i) for i in np.unravel_index(worst, shape))
            if expected.ndim
            else ()
        )
        return (
            f"has the wrong values (largest difference at index {index})",
            show(expected),
            show(got),
            None,
        )
    return None


def _first_index(where: torch.Tensor, shape: tuple[int, ...]) -> tuple[int, ...]:
    flat = int(where.reshape(-1).nonzero()[0, 0])
    return tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else ()


INF_HINT = (
    "An infinity (or -inf) appears where the reference has an ordinary number: look for an exp() of a large "
    "number, a division by zero, or a mask that removes too much."
)


def same(got: Any, candidate: Any, *, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """Whether ``got`` matches ``candidate`` as :func:`expect` would accept it; never raises."""
    try:
        return difference(got, candidate, atol, rtol) is None
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, (KeyboardInterrupt, Abort)):
            raise
        return False


def safe_difference(
    got: Any, expected: Any, atol: float, rtol: float
) -> tuple[str, str, str, str | None] | None:
    """:func:`difference`, turning anything a strange answer raises while being compared into a difference."""
    try:
        return difference(got, expected, atol, rtol)
    except BaseException as e:  # noqa: BLE001 -- a student's object may raise anything from __eq__ or __len__
        if isinstance(e, (KeyboardInterrupt, Abort)):
            raise
        return (
            f"could not be compared ({type(e).__name__}: {safe_str(e)})",
            show(expected),
            show(got),
            None,
        )
