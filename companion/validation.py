"""Input checks shared by the companion's public functions.

A public entry point checks its arguments once, where they come in (:func:`door`), and raises a
:class:`TypeError` (wrong kind of object or dtype) or a :class:`ValueError` (right kind, wrong shape or value)
whose message names the argument, what was expected and what came. The rules are few and each checks one
thing (``CONTRIBUTING.md``, section Validation at the door, lists them): numbers and other objects, tensors
(kind, dimensions, entries, dtype, context), the two kinds of data the models read (:func:`require_floats`,
:func:`require_ids`), and the structures several modules share.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import math
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import torch

_T = TypeVar("_T")

__all__ = [
    "door",
    "skip_checks",
    "describe",
    "require_int",
    "require_number",
    "require_positive_ints",
    "require_choice",
    "require_instance",
    "require_callable",
    "require_tensor",
    "require_ndim",
    "require_entries",
    "require_same_dtype",
    "require_context",
    "require_floats",
    "require_ids",
    "check_attention_inputs",
    "require_keys_cover_queries",
    "check_mask",
    "require_heads",
    "check_sequence",
    "check_pair",
    "check_token_stream",
    "check_labels",
]


_SKIPPING = contextvars.ContextVar("skipping_checks", default=False)


def door(
    check: Callable[..., object],
) -> Callable[[Callable[..., _T]], Callable[..., _T]]:
    """Check a public entry point's arguments once, where they come in: ``@door(check)`` calls ``check`` with the
    call's arguments (by name, defaults filled in; ``check`` takes the names it needs, ``self`` on a method) and
    then the function, except inside :func:`skip_checks`."""
    wanted = inspect.signature(check).parameters

    def wrap(f: Callable[..., _T]) -> Callable[..., _T]:
        signature = inspect.signature(f)

        @functools.wraps(f)
        def checked(*args: object, **kwargs: object) -> _T:
            if not _SKIPPING.get():
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                check(**{n: v for n, v in bound.arguments.items() if n in wanted})
            return f(*args, **kwargs)

        return checked

    return wrap


@contextlib.contextmanager
def skip_checks() -> Iterator[None]:
    """Within the block no door checks: for a loop whose inputs its caller's door has checked once (a decoding
    loop does not re-check the model's input, the tokens it wrote itself, nor its sampler's options, at every
    step). Hooks, subclasses and patched methods run as in any call."""
    token = _SKIPPING.set(True)
    try:
        yield
    finally:
        _SKIPPING.reset(token)


def describe(x: object) -> str:
    """A short description of ``x`` for error messages: its type, and shape and dtype for tensors."""
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"a {type(x).__name__} of shape {tuple(x.shape)} and dtype {x.dtype}"
    return f"a {type(x).__name__}"


# ----------------------------------------------------------------------------------------------------------
# Numbers and other objects


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
    ``why``, in parentheses, if given). A count is ``low=1``; an index into ``size`` items is
    ``low=0, high=size - 1``."""
    expected = f"{name} must be an int{_bounds(low, high)}" + (
        f" ({why})" if why else ""
    )
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{expected}, got {describe(value)}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{expected}, got {value}")
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
    else raise :class:`TypeError` or :class:`ValueError` naming what was expected (and ``why``, if given).
    A probability below 1 (dropout) is ``low=0, high=1, high_open=True``; a positive number ``low=0,
    low_open=True``."""
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


def require_positive_ints(**values: object) -> None:
    """:func:`require_int` with ``low=1`` for every keyword (a count); the keyword names it in the message."""
    for name, value in values.items():
        require_int(value, name, low=1)


def require_choice(value: _T, name: str, choices: Sequence[_T]) -> _T:
    """Return ``value`` if it is one of ``choices``, else raise :class:`ValueError` listing them."""
    if value not in choices:
        listed = ", ".join(repr(c) for c in choices[:-1]) + f" or {choices[-1]!r}"
        raise ValueError(f"{name} must be one of {listed}, got {value!r}")
    return value


def require_instance(x: object, cls: type[_T], name: str) -> _T:
    """Return ``x`` if it is an instance of ``cls``, else raise :class:`TypeError` naming both."""
    if not isinstance(x, cls):
        raise TypeError(f"{name} must be a {cls.__name__}, got {describe(x)}")
    return x


def require_callable(f: object, name: str, what: str) -> object:
    """Return ``f`` if it is callable, else raise :class:`TypeError` naming ``what`` it should be."""
    if not callable(f):
        raise TypeError(f"{name} must be {what}, got {describe(f)}")
    return f


# ----------------------------------------------------------------------------------------------------------
# Tensors: the kind, the dimensions, the entries, and the two kinds of data (features and token ids)

_KINDS = {
    None: ("a torch.Tensor", lambda dtype: True),
    "float": ("a floating-point tensor", lambda dtype: dtype.is_floating_point),
    "int": (
        "an integer tensor (token ids: dtype torch.long or another integer type)",
        lambda dtype: (
            not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)
        ),
    ),
    "bool": ("a boolean tensor (True = may attend)", lambda dtype: dtype == torch.bool),
}
_MASK_HINT = (
    ". A float mask of 0/-inf can be turned into a boolean one with `mask == 0`; "
    "a torch.nn.MultiheadAttention boolean mask with companion.interop.from_torch_mha_mask"
)


def require_tensor(x: object, name: str, kind: str | None = None) -> torch.Tensor:
    """Return ``x`` if it is a :class:`torch.Tensor` of the ``kind`` asked for (``"float"``, ``"int"``,
    ``"bool"``; ``None``: any dtype), else raise :class:`TypeError`."""
    want, fits = _KINDS[kind]
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be {want}, got {describe(x)}")
    if not fits(x.dtype):
        hint = _MASK_HINT if kind == "bool" else ""
        raise TypeError(f"{name} must be {want}, got dtype {x.dtype}{hint}")
    return x


def require_ndim(
    x: object,
    name: str,
    ndim: int | Sequence[int],
    layout: str = "",
    *,
    at_least: bool = False,
) -> torch.Tensor:
    """Return ``x`` if it is a tensor (:func:`require_tensor`) whose ``ndim`` is ``ndim`` (or one of them; at
    least ``ndim`` if ``at_least``), else raise; ``layout`` names the dimensions, e.g. ``"(batch, seq, d)"``."""
    x = require_tensor(x, name)
    allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if (x.ndim < allowed[0]) if at_least else (x.ndim not in allowed):
        want = " or ".join(str(n) for n in allowed)
        want = f"at least {want}" if at_least else want
        shape_hint = f" {layout}" if layout else ""
        raise ValueError(
            f"{name} must have {want} dimensions{shape_hint}, got shape {tuple(x.shape)} ({x.ndim} dimensions)"
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


def require_same_dtype(**tensors: torch.Tensor) -> None:
    """Raise :class:`TypeError` unless the tensors given by keyword share one dtype; the keywords name them."""
    dtypes = [x.dtype for x in tensors.values()]
    if len(set(dtypes)) > 1:
        names, got = list(tensors), [str(d) for d in dtypes]
        listed = ", ".join(names[:-1]) + f" and {names[-1]}"
        raise TypeError(
            f"{listed} must share one dtype, got {', '.join(got[:-1])} and {got[-1]}"
        )


def require_context(
    x: torch.Tensor, name: str, context_length: int, *, offset: int = 0, dim: int = -1
) -> torch.Tensor:
    """Raise :class:`ValueError` unless the positions ``offset … offset + n - 1`` of ``x`` (``n = x.shape[dim]``;
    ``offset`` positions already sit in a cache) lie below the context length."""
    n = x.shape[dim]
    if offset + n > context_length:
        cached = f" after {offset} cached ones" if offset else ""
        raise ValueError(
            f"{name} has {n} positions (shape {tuple(x.shape)}){cached}, more than the context length "
            f"T = {context_length}"
        )
    return x


def require_floats(
    x: object,
    name: str,
    layout: str = "",
    *,
    ndim: int | None = None,
    min_ndim: int | None = None,
    shape: Sequence[int | str] | None = None,
) -> torch.Tensor:
    """Return ``x`` if it is a floating tensor (:func:`require_tensor`) of ``ndim`` dimensions, or at least
    ``min_ndim`` (:func:`require_ndim`), or of the sizes ``shape`` (a name such as ``"R"`` matches any size),
    else raise naming the ``layout`` expected, e.g. ``"(N, dim)"``, and the shape that came."""
    x = require_tensor(x, name, "float")
    if ndim is not None or min_ndim is not None:
        require_ndim(x, name, ndim or min_ndim, layout, at_least=ndim is None)
    if shape is not None and (
        x.ndim != len(shape)
        or any(
            not isinstance(s, str) and s != n
            for s, n in zip(shape, x.shape, strict=False)
        )
    ):
        sizes = ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "")
        want = f"{layout} = ({sizes})" if layout else f"({sizes})"
        raise ValueError(f"{name} must have shape {want}, got shape {tuple(x.shape)}")
    return x


def require_ids(
    ids: object,
    name: str,
    vocab_size: int | None = None,
    ndim: int | None = 2,
    layout: str = "(batch, seq)",
    *,
    min_length: int = 0,
) -> torch.Tensor:
    """Return ``ids`` if it is an integer tensor (:func:`require_tensor`) of ``ndim`` dimensions (``layout``;
    ``None``: any) with at least ``min_length`` ids along its last dimension, each in ``[0, vocab_size)``
    (unchecked if ``vocab_size`` is ``None``), else raise."""
    ids = require_tensor(ids, name, "int")
    if vocab_size is not None:
        require_int(vocab_size, "vocab_size", low=1)
    if ndim is not None:
        require_ndim(ids, name, ndim, layout)
    if min_length and (ids.ndim == 0 or ids.shape[-1] < min_length):
        count = f"{min_length} token{'s' if min_length > 1 else ''}"
        raise ValueError(
            f"{name} must hold at least {count} per sequence (n >= {min_length}), got shape {tuple(ids.shape)}"
        )
    if vocab_size is not None and ids.numel():
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= vocab_size:
            raise ValueError(
                f"{name} must lie in [0, {vocab_size - 1}] (the table has {vocab_size} rows), got index "
                f"{low if low < 0 else high}"
            )
    return ids


# ----------------------------------------------------------------------------------------------------------
# Structures that several modules share


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
    layout = "(seq, d)" if unbatched else "(..., seq, d)"
    q, k, v = (
        require_ndim(
            require_tensor(x, name, "float"), name, 2, layout, at_least=not unbatched
        )
        for name, x in (("q", q), ("k", k), ("v", v))
    )
    require_same_dtype(q=q, k=k, v=v)
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


def check_mask(
    mask: object, scores_shape: Sequence[int], *, exact: bool = False
) -> torch.Tensor:
    """Return ``mask`` if it is a boolean tensor of at least 2 dimensions that broadcasts against the scores
    ``(..., n_q, n_k)`` without enlarging them (exactly their shape if ``exact``), else raise."""
    mask = require_tensor(mask, "mask", "bool")
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


def require_heads(d_model: object, n_heads: object) -> None:
    """Raise unless ``d_model`` and ``n_heads`` are positive ints and ``n_heads`` divides ``d_model``."""
    d_model = require_int(d_model, "d_model", low=1)
    if d_model % require_int(n_heads, "n_heads", low=1):
        raise ValueError(
            f"d_model = {d_model} must be divisible by n_heads = {n_heads}"
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
    x = require_floats(x, name, "(..., n, d)", min_ndim=2)
    if x.shape[-1] != d_model:
        raise ValueError(
            f"{name} must have shape (..., n, {d_model}) (..., n, d), got shape {tuple(x.shape)}"
        )
    require_int(offset, "offset", low=0)
    if context_length is not None:
        require_context(x, name, context_length, offset=offset, dim=-2)
    return x


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
    if same_dtype:
        require_same_dtype(**{a: x, b: y})
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
    ids = require_ids(ids, "ids", vocab_size, 1, "(N,)", min_length=int(nonempty))
    require_int(window, "window", low=1)
    if sentence_ids is None:
        return torch.zeros(ids.numel(), dtype=torch.long)
    if require_tensor(sentence_ids, "sentence_ids", "int").shape != ids.shape:
        raise ValueError(
            f"sentence_ids must have the shape of ids {tuple(ids.shape)}, got {tuple(sentence_ids.shape)}"
        )
    return sentence_ids


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


# ----------------------------------------------------------------------------------------------------------
# The checks of single functions, kept here so that the functions the book shows are their mathematics


def check_negative_sampling(
    v: object, u_pos: object, u_neg: object, reduction: object
) -> None:
    """word2vec.negative_sampling_loss: ``v (B, D)``, ``u_pos (B, D)``, ``u_neg (B, K, D)``, a reduction."""
    v = require_floats(v, "v", "(B, D)", ndim=2)
    u_pos = require_tensor(u_pos, "u_pos", "float")
    u_neg = require_floats(u_neg, "u_neg", "(B, K, D)", ndim=3)
    if u_pos.shape != v.shape:
        raise ValueError(
            f"u_pos must have the shape of v {tuple(v.shape)}, got {tuple(u_pos.shape)}"
        )
    if u_neg.shape[0] != v.shape[0] or u_neg.shape[2] != v.shape[1]:
        raise ValueError(
            f"u_neg must have shape ({v.shape[0]}, K, {v.shape[1]}), got {tuple(u_neg.shape)}"
        )
    require_choice(reduction, "reduction", ("mean", "sum", "none"))
