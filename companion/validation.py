"""Input checks shared by the companion's public functions.

Every public function validates what it is given and raises a :class:`TypeError` (wrong kind of object or
dtype) or a :class:`ValueError` (right kind, wrong shape or value) whose message names what was expected
and what came. These helpers keep those messages uniform.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

_T = TypeVar("_T")

__all__ = [
    "door",
    "describe",
    "require_tensor",
    "require_integer_tensor",
    "require_floating_tensor",
    "require_ndim",
    "require_index_range",
    "require_positive_int",
    "require_positive_ints",
    "require_positive_number",
    "require_int",
    "require_index",
    "require_number",
    "require_ids",
    "require_instance",
    "require_probability",
    "require_bool_mask",
    "check_attention_inputs",
    "check_mask",
    "check_heads",
    "check_mha_inputs",
    "require_heads",
    "require_min_ndim",
    "check_sequence",
    "check_token_ids",
    "require_choice",
    "require_floats",
    "require_entries",
    "require_callable",
    "check_pair",
    "check_token_stream",
    "check_windowed_stream",
    "check_labels",
    "require_keys_cover_queries",
]


def door(
    check: Callable[..., object],
) -> Callable[[Callable[..., _T]], Callable[..., _T]]:
    """Check a public entry point's arguments once, where they come in: ``@door(check)`` calls ``check`` with the
    call's arguments (by name, defaults filled in; ``check`` takes the names it needs) and then the function.

    The function itself stays reachable as ``f.unchecked``, for internal calls and loops whose arguments the
    caller's door has already checked (a decoding loop does not re-check its sampler's options on every step).
    """
    wanted = inspect.signature(check).parameters

    def wrap(f: Callable[..., _T]) -> Callable[..., _T]:
        signature = inspect.signature(f)

        @functools.wraps(f)
        def checked(*args: object, **kwargs: object) -> _T:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            check(
                **{
                    name: value
                    for name, value in bound.arguments.items()
                    if name in wanted
                }
            )
            return f(*args, **kwargs)

        checked.unchecked = f
        return checked

    return wrap


def describe(x: object) -> str:
    """A short description of ``x`` for error messages: its type, and shape and dtype for tensors."""
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"a {type(x).__name__} of shape {tuple(x.shape)} and dtype {x.dtype}"
    return f"a {type(x).__name__}"


def require_tensor(x: object, name: str) -> torch.Tensor:
    """Return ``x`` if it is a :class:`torch.Tensor`, else raise :class:`TypeError`."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {describe(x)}")
    return x


def require_integer_tensor(x: object, name: str) -> torch.Tensor:
    """Return ``x`` if it is a tensor of an integer dtype (token ids), else raise :class:`TypeError`."""
    x = require_tensor(x, name)
    if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        raise TypeError(
            f"{name} must hold integer token ids (dtype torch.long or another integer type), got dtype {x.dtype}"
        )
    return x


def require_floating_tensor(x: object, name: str) -> torch.Tensor:
    """Return ``x`` if it is a tensor of a floating dtype, else raise :class:`TypeError`."""
    x = require_tensor(x, name)
    if not x.dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    return x


def require_ndim(
    x: torch.Tensor, name: str, ndim: int | Sequence[int], layout: str = ""
) -> torch.Tensor:
    """Raise :class:`ValueError` unless ``x.ndim`` is ``ndim`` (or one of them).

    ``layout`` names the dimensions expected, e.g. ``"(batch, seq, d)"``, and goes into the message.
    """
    allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if x.ndim not in allowed:
        want = " or ".join(str(n) for n in allowed)
        shape_hint = f" {layout}" if layout else ""
        raise ValueError(
            f"{name} must have {want} dimensions{shape_hint}, got shape {tuple(x.shape)} ({x.ndim} dimensions)"
        )
    return x


def require_index_range(ids: torch.Tensor, name: str, size: int) -> torch.Tensor:
    """Raise :class:`ValueError` unless every entry of ``ids`` lies in ``[0, size)``."""
    if ids.numel() == 0:
        return ids
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= size:
        bad = low if low < 0 else high
        raise ValueError(
            f"{name} must lie in [0, {size - 1}] (the table has {size} rows), got index {bad}"
        )
    return ids


def require_positive_int(value: object, name: str) -> int:
    """Return ``value`` if it is a positive Python ``int`` (not ``bool``), else raise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a positive int, got {describe(value)}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value}")
    return value


def _bounds(
    low: float | None,
    high: float | None,
    low_open: bool = False,
    high_open: bool = False,
) -> str:
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f" {'>' if low_open else '>='} {low}"
    if high is not None:
        return f" {'<' if high_open else '<='} {high}"
    return ""


def require_int(
    value: object,
    name: str,
    *,
    low: int | None = None,
    high: int | None = None,
    why: str = "",
) -> int:
    """Return ``value`` if it is a Python ``int`` (not ``bool``) with ``low <= value <= high`` (a bound that is
    ``None`` is not checked), else raise :class:`TypeError` or :class:`ValueError` naming the range (and
    ``why``, in parentheses, if given)."""
    expected = f"{name} must be an int{_bounds(low, high)}" + (
        f" ({why})" if why else ""
    )
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{expected}, got {describe(value)}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{expected}, got {value}")
    return value


def require_index(value: object, name: str, size: int, *, predicate: str = "") -> int:
    """Return ``value`` if it is an ``int`` index into ``size`` items, ``0 <= value < size``, else raise.

    ``predicate`` words the range check with the half-open range, e.g. ``"be a token id"`` for
    "bos_id must be a token id in [0, 12)"; without it the message reads "must lie in [0, 11]"."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int index, got {describe(value)}")
    if not 0 <= value < size:
        expected = (
            f"{predicate} in [0, {size})" if predicate else f"lie in [0, {size - 1}]"
        )
        raise ValueError(f"{name} must {expected}, got {value!r}")
    return value


def require_number(
    value: object,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    finite: bool = True,
    why: str = "",
) -> float:
    """Return ``value`` as a float if it is a real number (``int`` or ``float``, not ``bool``), finite unless
    ``finite=False``, and within the bounds given (``low``/``high``, excluded if ``low_open``/``high_open``),
    else raise :class:`TypeError` or :class:`ValueError` naming what was expected (and ``why``, if given)."""
    expected = f"{name} must be a {'finite ' if finite else ''}number{_bounds(low, high, low_open, high_open)}"
    expected += f" ({why})" if why else ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{expected}, got {describe(value)}")
    fails = (
        (finite and not math.isfinite(value))
        or (low is not None and not (value > low if low_open else value >= low))
        or (high is not None and not (value < high if high_open else value <= high))
    )
    if fails:
        raise ValueError(f"{expected}, got {value!r}")
    return float(value)


def require_ids(
    ids: object, name: str, vocab_size: int, ndim: int | None = None, layout: str = ""
) -> torch.Tensor:
    """Return ``ids`` if it is an integer tensor (of ``ndim`` dimensions, if given) of ids in ``[0, vocab_size)``."""
    ids = require_integer_tensor(ids, name)
    if ndim is not None:
        require_ndim(ids, name, ndim, layout)
    return require_index_range(
        ids, name, require_positive_int(vocab_size, "vocab_size")
    )


def require_positive_ints(**values: object) -> None:
    """Raise unless every keyword's value is a positive ``int``; the keyword names it in the message."""
    for name, value in values.items():
        require_positive_int(value, name)


def require_positive_number(value: object, name: str, *, zero: bool = False) -> float:
    """Return ``value`` as a float if it is a real number > 0 (>= 0 if ``zero``), not ``bool``, else raise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {describe(value)}")
    if not (value >= 0 if zero else value > 0):
        raise ValueError(f"{name} must be {'>= 0' if zero else '> 0'}, got {value}")
    return float(value)


def require_instance(x: object, cls: type[_T], name: str) -> _T:
    """Return ``x`` if it is an instance of ``cls``, else raise :class:`TypeError` naming both."""
    if not isinstance(x, cls):
        raise TypeError(f"{name} must be a {cls.__name__}, got {describe(x)}")
    return x


def require_probability(p: object, name: str = "dropout") -> float:
    """Return ``p`` as a float if it is a number in ``[0, 1)``, else raise :class:`ValueError`."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1), got {p!r}")
    return float(p)


def require_bool_mask(mask: object, name: str = "mask") -> torch.Tensor:
    """Return ``mask`` if it is a boolean tensor, else raise :class:`TypeError` recalling the convention."""
    mask = require_tensor(mask, name)
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be a boolean tensor (True = may attend), got dtype {mask.dtype}. "
            "A float mask of 0/-inf can be turned into a boolean one with `mask == 0`; "
            "a torch.nn.MultiheadAttention boolean mask with companion.interop.from_torch_mha_mask"
        )
    return mask


def check_attention_inputs(
    q: object,
    k: object,
    v: object,
    mask: object = None,
    *,
    unbatched: bool = False,
    keys_cover_queries: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Check ``q (..., n_q, d_k)``, ``k (..., n_k, d_k)``, ``v (..., n_k, d_v)`` and the boolean ``mask``; return
    ``q, k, v`` expanded to one leading shape.

    The one rule for every attention function of the companion: the leading (batch, head) dimensions of ``q``,
    ``k`` and ``v`` **broadcast** against each other, as in :func:`torch.matmul` and
    :func:`torch.nn.functional.scaled_dot_product_attention` (``k`` and ``v`` of shape ``(1, n_k, d)`` serve every
    batch of ``q``), and the mask broadcasts against the scores ``(*lead, n_q, n_k)`` without enlarging them. The
    tensors come back expanded (views, no copy) to that common leading shape ``lead``, so that a kernel may assume
    equal leading dimensions. ``unbatched=True`` asks for exactly ``q (n_q, d_k)``, ``k (n_k, d_k)``,
    ``v (n_k, d_v)``, ``mask (n_q, n_k)``; ``keys_cover_queries=True`` asks for ``n_k >= n_q`` (queries aligned
    with the last keys, as causal and banded attention align them).
    """
    q, k, v = (
        require_floating_tensor(x, name) for name, x in (("q", q), ("k", k), ("v", v))
    )
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim < 2 or (unbatched and x.ndim != 2):
            want = (
                "2 dimensions (seq, d)"
                if unbatched
                else "at least 2 dimensions (..., seq, d)"
            )
            raise ValueError(f"{name} must have {want}, got shape {tuple(x.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            "q and k must have the same last dimension d_k: expected k of shape (..., n_k, "
            f"{q.shape[-1]}) to match q of shape {tuple(q.shape)}, got k of shape {tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            "k and v must have the same number of positions n_k: expected v of shape "
            f"(..., {k.shape[-2]}, d_v) to match k of shape {tuple(k.shape)}, got v of shape {tuple(v.shape)}"
        )
    if keys_cover_queries:
        require_keys_cover_queries(q.shape[-2], k.shape[-2])
    try:
        lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the leading (batch) dimensions of q, k and v must broadcast, got shapes {tuple(q.shape)}, "
            f"{tuple(k.shape)} and {tuple(v.shape)}"
        ) from None
    if mask is not None:
        check_mask(mask, (*lead, q.shape[-2], k.shape[-2]), exact=unbatched)
    q, k, v = (x.expand(*lead, *x.shape[-2:]) for x in (q, k, v))
    return q, k, v


def require_keys_cover_queries(n_q: int, n_k: int, who: str = "this attention") -> None:
    """Raise unless ``n_k >= n_q``: queries aligned with the last keys (query i sits at key position
    i + n_k - n_q), as causal, banded and causal linear attention align them."""
    if n_k < n_q:
        raise ValueError(
            f"{who} needs at least as many keys as queries, n_k >= n_q (query i sits at key position "
            f"i + n_k - n_q), got n_q = {n_q} queries and n_k = {n_k} keys"
        )


def check_labels(labels: object, name: str, size: int, what: str) -> list:
    """Return ``labels`` as a list if it is a sequence (not one str) of ``size`` labels, else raise naming
    ``what`` they label (e.g. ``"(one word per row of vectors)"``)."""
    if isinstance(labels, str) or not isinstance(labels, Sequence):
        raise TypeError(
            f"{name} must be a sequence of {size} labels {what}, got {describe(labels)}"
        )
    if len(labels) != size:
        raise ValueError(f"{name} must have {size} labels {what}, got {len(labels)}")
    return list(labels)


def check_mask(
    mask: object, scores_shape: Sequence[int], *, exact: bool = False
) -> torch.Tensor:
    """Return ``mask`` if it is a boolean tensor of at least 2 dimensions that broadcasts against the scores
    ``(..., n_q, n_k)`` without enlarging them (exactly their shape if ``exact``), else raise."""
    mask = require_bool_mask(mask)
    scores = tuple(scores_shape)
    try:
        ok = 2 <= mask.ndim <= len(scores) and torch.broadcast_shapes(
            mask.shape, scores
        ) == torch.Size(scores)
        ok = ok and (not exact or tuple(mask.shape) == scores)
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"mask must have shape ({scores[-2]}, {scores[-1]}) (n_queries, n_keys) or broadcast against the "
            f"scores of shape {scores}, got shape {tuple(mask.shape)}"
        )
    return mask


def check_heads(x: object, n_heads: object) -> torch.Tensor:
    """Raise unless ``x`` is a tensor ``(..., n, d_model)`` whose width ``d_model`` ``n_heads`` divides."""
    x = require_tensor(x, "x")
    n_heads = require_positive_int(n_heads, "n_heads")
    if x.ndim < 2:
        raise ValueError(
            f"x must have at least 2 dimensions (..., n, d_model), got shape {tuple(x.shape)}"
        )
    if x.shape[-1] % n_heads:
        raise ValueError(
            f"the width d_model = {x.shape[-1]} of x (shape {tuple(x.shape)}) must be divisible by n_heads = {n_heads}"
        )
    return x


def require_min_ndim(x: object, name: str, ndim: int, layout: str) -> torch.Tensor:
    """Return ``x`` if it is a tensor with at least ``ndim`` dimensions (``layout``, e.g. ``"(..., n, d)"``)."""
    x = require_tensor(x, name)
    if x.ndim < ndim:
        raise ValueError(
            f"{name} must have at least {ndim} dimensions {layout}, got shape {tuple(x.shape)}"
        )
    return x


def require_heads(d_model: object, n_heads: object) -> None:
    """Raise unless ``d_model`` and ``n_heads`` are positive ints and ``n_heads`` divides ``d_model``."""
    d_model = require_positive_int(d_model, "d_model")
    if d_model % require_positive_int(n_heads, "n_heads"):
        raise ValueError(
            f"d_model = {d_model} must be divisible by n_heads = {n_heads}"
        )


def check_mha_inputs(query: object, key: object, value: object, d_model: int) -> None:
    """Raise unless ``query (B, n_q, d_model)``, ``key (B, n_k, d_model)``, ``value (B, n_k, d_model)``."""
    q, k, v = (
        require_ndim(require_floating_tensor(x, name), name, 3, "(batch, seq, d_model)")
        for name, x in (("query", query), ("key", key), ("value", value))
    )
    for name, x in (("query", q), ("key", k), ("value", v)):
        if x.shape[-1] != d_model:
            raise ValueError(
                f"{name} must have last dimension d_model = {d_model}, got shape {tuple(x.shape)}"
            )
    if k.shape[0] != q.shape[0] or v.shape[:2] != k.shape[:2]:
        raise ValueError(
            f"key and value must have shape ({q.shape[0]}, n_k, {d_model}) with the same n_k, got shapes "
            f"{tuple(k.shape)} and {tuple(v.shape)} for query of shape {tuple(q.shape)}"
        )


def check_sequence(
    x: object,
    name: str,
    d_model: int,
    context_length: int | None = None,
    offset: int = 0,
) -> torch.Tensor:
    """Raise unless ``x`` is a floating tensor ``(..., n, d_model)`` whose positions ``offset … offset + n - 1``
    lie below ``context_length``."""
    x = require_floating_tensor(x, name)
    if x.ndim < 2 or x.shape[-1] != d_model:
        raise ValueError(
            f"{name} must have shape (..., n, {d_model}) (..., n, d), got shape {tuple(x.shape)}"
        )
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be a non-negative int, got {offset!r}")
    if context_length is not None and offset + x.shape[-2] > context_length:
        raise ValueError(
            f"positions {offset}…{offset + x.shape[-2] - 1} ({name} of shape {tuple(x.shape)}, offset {offset}) "
            f"exceed the context length T = {context_length}; build it with a larger context_length"
        )
    return x


def check_token_ids(
    ids: object,
    name: str,
    vocab_size: int | None,
    context_length: int | None = None,
    *,
    offset: int = 0,
    min_length: int = 0,
    layout: str = "(batch, seq)",
) -> torch.Tensor:
    """Raise unless ``ids`` is an integer tensor ``(batch, n)`` with ``n >= min_length`` of ids in
    ``[0, vocab_size)`` (not checked if ``vocab_size`` is None) whose positions ``offset … offset + n - 1`` lie
    below ``context_length`` (``offset`` positions already sit in a cache); ``layout`` names the dimensions."""
    ids = require_ndim(require_integer_tensor(ids, name), name, 2, layout)
    if ids.shape[1] < min_length:
        count = {1: "one token", 2: "two tokens"}.get(
            min_length, f"{min_length} tokens"
        )
        raise ValueError(
            f"{name} must hold at least {count} per sequence (n >= {min_length}), got shape {tuple(ids.shape)}"
        )
    if context_length is not None and offset + ids.shape[1] > context_length:
        cached = f" after {offset} cached ones" if offset else ""
        raise ValueError(
            f"{name} has {ids.shape[1]} positions (shape {tuple(ids.shape)}){cached}, more than the context length "
            f"T = {context_length}"
        )
    return ids if vocab_size is None else require_index_range(ids, name, vocab_size)


def require_choice(value: _T, name: str, choices: Sequence[_T]) -> _T:
    """Return ``value`` if it is one of ``choices``, else raise :class:`ValueError` listing them."""
    if value not in choices:
        listed = ", ".join(repr(c) for c in choices[:-1]) + f" or {choices[-1]!r}"
        raise ValueError(f"{name} must be one of {listed}, got {value!r}")
    return value


def require_floats(
    x: object,
    name: str,
    layout: str = "",
    *,
    ndim: int | None = None,
    min_ndim: int | None = None,
    shape: Sequence[int | str] | None = None,
    nonempty: Sequence[int] = (),
    dtype: torch.dtype | None = None,
    what: str = "",
) -> torch.Tensor:
    """Return ``x`` if it is a floating tensor (``what``, e.g. ``"a matrix"``) of the layout asked for, else
    raise naming it (``layout``, e.g. ``"(N, dim)"``) and the shape that came: ``ndim`` dimensions (or at
    least ``min_ndim``), the sizes of ``shape`` (a name such as ``"R"`` matches any size; it fixes ``ndim``),
    at least one entry along each dimension listed in ``nonempty``, and the dtype ``dtype`` (that of another
    argument)."""
    x = require_floating_tensor(x, name)
    ndim = len(shape) if shape is not None else ndim
    want = layout
    if shape is not None:
        sizes = ", ".join(str(s) for s in shape)
        sizes = f"({sizes}{',' if len(shape) == 1 else ''})"
        want = f"{layout} = {sizes}" if layout else sizes
    ok = (ndim is None or x.ndim == ndim) and (min_ndim is None or x.ndim >= min_ndim)
    ok = ok and (
        shape is None
        or all(
            isinstance(s, str) or s == n for s, n in zip(shape, x.shape, strict=True)
        )
    )
    ok = ok and all(x.shape[d] > 0 for d in nonempty)
    if not ok:
        rules = (
            [f"{ndim} dimension{'s' if ndim != 1 else ''}"]
            if ndim is not None and shape is None
            else []
        )
        rules += (
            [f"at least {min_ndim} dimension{'s' if min_ndim != 1 else ''}"]
            if min_ndim
            else []
        )
        rules += [f"at least one entry along dimension {d}" for d in nonempty]
        expected = (
            f"be {what} {want}".rstrip() if what else f"have shape {want or '(...)'}"
        )
        expected += f" ({', '.join(rules)})" if rules else ""
        raise ValueError(f"{name} must {expected}, got shape {tuple(x.shape)}")
    if dtype is not None and x.dtype != dtype:
        raise TypeError(
            f"{name} must have dtype {dtype} (that of the other inputs), got {x.dtype}"
        )
    return x


def require_entries(
    x: object,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    why: str = "",
) -> torch.Tensor:
    """Return ``x`` if it is a real tensor (or array) whose every entry lies within the bounds given (the
    number rule of :func:`require_number`, entrywise), else raise naming the range and the offending entry."""
    if not isinstance(x, torch.Tensor):
        if not hasattr(x, "dtype") or not hasattr(x, "shape"):
            raise TypeError(f"{name} must be a tensor of numbers, got {describe(x)}")
        x = torch.as_tensor(x)
    if x.dtype == torch.bool or x.dtype.is_complex:
        raise TypeError(f"{name} must hold real numbers, got dtype {x.dtype}")
    verb = "lie" if low is not None and high is not None else "be"
    expected = (
        f"{name} must {verb}{_bounds(low, high, low_open, high_open)} entrywise"
        + (f" ({why})" if why else "")
    )
    ok = torch.ones(x.shape, dtype=torch.bool, device=x.device)  # NaN lies in no range
    if low is not None:
        ok &= x > low if low_open else x >= low
    if high is not None:
        ok &= x < high if high_open else x <= high
    bad = ~ok
    if bool(bad.any()):
        raise ValueError(
            f"{expected}, got an entry {x[bad][0].item()!r} (shape {tuple(x.shape)})"
        )
    return x


def require_callable(f: object, name: str, what: str) -> object:
    """Return ``f`` if it is callable, else raise :class:`TypeError` naming ``what`` it should be."""
    if not callable(f):
        raise TypeError(f"{name} must be {what}, got {describe(f)}")
    return f


def check_pair(
    x: object,
    y: object,
    names: tuple[str, str] = ("x", "y"),
    *,
    ndim: int | None = None,
    same_dtype: bool = True,
    width: str = "d",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``x`` and ``y`` if they are floating tensors ``(..., d)`` with one width ``d`` (and one dtype, if
    ``same_dtype``; ``width`` names it in messages): of exactly ``ndim`` dimensions if given, else of at least
    one whose leading dimensions broadcast against each other."""
    (a, b), layout = names, f"(points, {width})" if ndim == 2 else f"(..., {width})"
    x = require_floats(x, a, layout, ndim=ndim, min_ndim=None if ndim else 1)
    y = require_floats(y, b, layout, ndim=ndim, min_ndim=None if ndim else 1)
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(
            f"{a} and {b} must have the same last dimension {width}, got shapes {tuple(x.shape)} and "
            f"{tuple(y.shape)} (the same {width} for both: {x.shape[-1]} ≠ {y.shape[-1]})"
        )
    if same_dtype and x.dtype != y.dtype:
        raise TypeError(
            f"{a} and {b} must share one dtype, got {x.dtype} and {y.dtype}"
        )
    if ndim is None:
        try:
            torch.broadcast_shapes(x.shape[:-1], y.shape[:-1])
        except RuntimeError:
            raise ValueError(
                f"{a} and {b} must broadcast against each other, got shapes {tuple(x.shape)} and {tuple(y.shape)}"
            ) from None
    return x, y


def check_token_stream(
    ids: object,
    window: object,
    sentence_ids: object = None,
    vocab_size: int | None = None,
    *,
    nonempty: bool = False,
) -> torch.Tensor:
    """Check a stream of token ids ``(N,)`` (in ``[0, vocab_size)``, if given; at least one, if ``nonempty``), a
    context window ``>= 1`` and the sentence id of each token ``(N,)`` (``None``: one sentence); return the
    sentence ids."""
    ids = require_ndim(require_integer_tensor(ids, "ids"), "ids", 1, "(N,)")
    require_positive_int(window, "window")
    if vocab_size is not None:
        require_index_range(ids, "ids", require_positive_int(vocab_size, "vocab_size"))
    if nonempty and ids.numel() == 0:
        raise ValueError("ids is empty: the stream needs at least one token")
    if sentence_ids is None:
        return torch.zeros(ids.numel(), dtype=torch.long)
    if require_integer_tensor(sentence_ids, "sentence_ids").shape != ids.shape:
        raise ValueError(
            f"sentence_ids must have the shape of ids {tuple(ids.shape)}, got {tuple(sentence_ids.shape)}"
        )
    return sentence_ids


def check_windowed_stream(
    ids: object, window: object, sentence_ids: object = None, windows: object = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`check_token_stream` and the window ``(N,)`` of each token, in ``[1, window]`` (``None``: all
    ``window``); return the sentence ids and the windows."""
    sentence_ids = check_token_stream(ids, window, sentence_ids)
    if windows is None:
        return sentence_ids, torch.full((ids.numel(),), window, dtype=torch.long)
    if require_integer_tensor(windows, "windows").shape != ids.shape:
        raise ValueError(
            f"windows must have the shape of ids {tuple(ids.shape)}, got {tuple(windows.shape)}"
        )
    return sentence_ids, require_entries(windows, "windows", low=1, high=window)


# ----------------------------------------------------------------------------------------------------------
# The checks of single functions, kept here so that the functions the book shows are their mathematics


def check_negative_sampling(
    v: object, u_pos: object, u_neg: object, reduction: object
) -> None:
    """word2vec.negative_sampling_loss: ``v (B, D)``, ``u_pos (B, D)``, ``u_neg (B, K, D)``, a reduction."""
    v, u_pos, u_neg = (
        require_floating_tensor(x, n)
        for x, n in ((v, "v"), (u_pos, "u_pos"), (u_neg, "u_neg"))
    )
    require_ndim(v, "v", 2, "(B, D)")
    require_ndim(u_neg, "u_neg", 3, "(B, K, D)")
    if u_pos.shape != v.shape:
        raise ValueError(
            f"u_pos must have the shape of v {tuple(v.shape)}, got {tuple(u_pos.shape)}"
        )
    if u_neg.shape[0] != v.shape[0] or u_neg.shape[2] != v.shape[1]:
        raise ValueError(
            f"u_neg must have shape ({v.shape[0]}, K, {v.shape[1]}), got {tuple(u_neg.shape)}"
        )
    require_choice(reduction, "reduction", ("mean", "sum", "none"))


def check_integer_tensors(**named: object) -> None:
    """Raise unless every keyword's value is an integer tensor (token ids); the keyword names it. A value
    ``(x, ndim, layout)`` also asks for ``ndim`` dimensions, ``layout`` naming them."""
    for name, x in named.items():
        if isinstance(x, tuple):
            x, ndim, layout = x
            require_ndim(require_integer_tensor(x, name), name, ndim, layout)
        require_integer_tensor(x, name)
