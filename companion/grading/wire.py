"""Values as data between the grader and an answer's process: JSON for structure, tensors as raw arrays.

A message is a JSON header (the value's structure, with each tensor replaced by its index) and one binary blob
holding the tensors: a safetensors file when the ``safetensors`` package is installed, else ``numpy.save``
arrays (``allow_pickle=False``) one after the other. Nothing is ever unpickled: reading a message runs no code of
the sender's. What cannot be sent (a lambda, a student's own object) is sent as its type name and ``repr`` and
arrives as an :class:`Opaque` value, equal to nothing; :func:`encode` with ``strict=True`` raises
:class:`Unportable` instead (the grader's side: an argument it cannot send means the checker cannot run there).
"""

from __future__ import annotations

import io
import json
import os
import select
import struct
import time
from typing import Any

import numpy as np
import torch

from ..exercises.checking import Abort

try:
    from safetensors.torch import load as _st_load
    from safetensors.torch import save as _st_save
except ImportError:  # pragma: no cover - the grade extra installs it
    _st_save = _st_load = None

MAX_MESSAGE = 512 * 2**20  # bytes: a larger message is refused, never read into memory


class Unportable(Abort):
    """An argument the grader cannot send as data (the exercise is then checked the weaker way)."""


class WireError(Exception):
    """A message that is not one: cut short, too large, or not the format."""


class Opaque:
    """A value that could not be sent as data: its type name and repr, equal to nothing."""

    def __init__(self, type_name: str, text: str) -> None:
        self.type_name, self.text = type_name, text

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<{self.type_name}: {self.text}>"


def _plain(t: torch.Tensor) -> torch.Tensor:
    """The tensor's data as a plain, contiguous CPU tensor (whatever subclass it came as)."""
    with torch._C.DisableTorchFunctionSubclass():
        base = t.as_subclass(torch.Tensor) if type(t) is not torch.Tensor else t
        return base.detach().cpu().contiguous().clone()


def encode(value: Any, tensors: list[torch.Tensor], *, strict: bool = False, depth: int = 0) -> Any:
    """The JSON form of ``value``; its tensors are appended to ``tensors``."""
    if depth > 50:
        raise Unportable("nested too deeply") if strict else ValueError("nested too deeply")

    def again(v: Any) -> Any:
        return encode(v, tensors, strict=strict, depth=depth + 1)

    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        return {"f": repr(value)}
    if isinstance(value, torch.Tensor):
        tensors.append(_plain(value))
        return {"T": len(tensors) - 1, "g": bool(value.requires_grad)}
    if isinstance(value, np.ndarray) and value.dtype.kind in "biufc":
        tensors.append(torch.from_numpy(np.ascontiguousarray(value)).clone())
        return {"N": len(tensors) - 1}
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return {"n": value.dtype.str, "v": again(value.item())}
    if isinstance(value, torch.dtype):
        return {"dt": str(value).removeprefix("torch.")}
    if isinstance(value, torch.Size):
        return {"S": [int(v) for v in value]}
    if type(value) is list:
        return {"l": [again(v) for v in value]}
    if type(value) is tuple:
        return {"t": [again(v) for v in value]}
    if type(value) is dict:
        return {"d": [[again(k), again(v)] for k, v in value.items()]}
    if type(value) in (set, frozenset):
        return {"s": [again(v) for v in value]}
    if strict:
        raise Unportable(f"cannot send a {type(value).__name__} as data")
    try:
        text = repr(value)[:300]
    except Exception:
        text = "?"
    return {"o": type(value).__name__, "r": text}


def decode(data: Any, tensors: list[torch.Tensor]) -> Any:
    """The value :func:`encode` described (tensors taken from ``tensors``)."""
    if data is None or type(data) in (bool, int, str):
        return data
    if type(data) is not dict or len(data) == 0:
        raise WireError(f"not a value: {str(data)[:80]}")
    if "f" in data:
        return float(data["f"])
    if "T" in data:
        t = tensors[data["T"]]
        return t.requires_grad_(True) if data.get("g") and (t.is_floating_point() or t.is_complex()) else t
    if "N" in data:
        return tensors[data["N"]].numpy()
    if "n" in data:
        return np.dtype(data["n"]).type(decode(data["v"], tensors))
    if "dt" in data:
        dtype = getattr(torch, str(data["dt"]), None)
        if not isinstance(dtype, torch.dtype):
            raise WireError(f"no dtype {data['dt']!r}")
        return dtype
    if "S" in data:
        return torch.Size([int(v) for v in data["S"]])
    if "l" in data:
        return [decode(v, tensors) for v in data["l"]]
    if "t" in data:
        return tuple(decode(v, tensors) for v in data["t"])
    if "d" in data:
        return {decode(k, tensors): decode(v, tensors) for k, v in data["d"]}
    if "s" in data:
        return {decode(v, tensors) for v in data["s"]}
    if "o" in data:
        return Opaque(str(data["o"]), str(data.get("r", "")))
    raise WireError(f"not a value: {str(data)[:80]}")


def _pack(tensors: list[torch.Tensor]) -> bytes:
    if not tensors:
        return b""
    if _st_save is not None:
        return b"S" + _st_save({str(i): t for i, t in enumerate(tensors)})
    out = io.BytesIO()
    out.write(b"N")
    for t in tensors:
        if t.dtype == torch.bfloat16:
            t = t.float()
        np.save(out, t.numpy(), allow_pickle=False)
    return out.getvalue()


def _unpack(blob: bytes, count: int) -> list[torch.Tensor]:
    if count == 0:
        return []
    if blob[:1] == b"S" and _st_load is not None:
        loaded = _st_load(blob[1:])
        return [loaded[str(i)] for i in range(count)]
    if blob[:1] == b"N":
        stream = io.BytesIO(blob[1:])
        return [torch.from_numpy(np.load(stream, allow_pickle=False).copy()) for _ in range(count)]
    raise WireError("unknown tensor format")


def dumps(message: dict[str, Any], *, strict: bool = False) -> bytes:
    """A message as bytes: header length, header (JSON), blob length, blob."""
    tensors: list[torch.Tensor] = []
    body = {
        k: (encode(v, tensors, strict=strict) if k in ("value", "args", "kwargs") else v) for k, v in message.items()
    }
    body["tensors"] = len(tensors)
    header = json.dumps(body).encode()
    blob = _pack(tensors)
    return struct.pack("<Q", len(header)) + header + struct.pack("<Q", len(blob)) + blob


def _read_exactly(fd: int, n: int, deadline: float | None = None) -> bytes:
    chunks, left = [], n
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError("no answer in time")
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise WireError("the message was cut short")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read(fd: int, deadline: float | None = None) -> dict[str, Any]:
    """Read one message from ``fd``, its values decoded; :class:`TimeoutError` past ``deadline`` (monotonic)."""
    (n,) = struct.unpack("<Q", _read_exactly(fd, 8, deadline))
    if n > MAX_MESSAGE:
        raise WireError(f"a message of {n} bytes is too large")
    try:
        body = json.loads(_read_exactly(fd, n, deadline))
    except (ValueError, RecursionError) as e:
        raise WireError(f"not JSON ({e})") from None
    (m,) = struct.unpack("<Q", _read_exactly(fd, 8, deadline))
    if m > MAX_MESSAGE:
        raise WireError(f"a message of {m} bytes is too large")
    if type(body) is not dict:
        raise WireError("not a message")
    count = body.pop("tensors", 0)
    if type(count) is not int or count < 0:
        raise WireError("not a message")
    try:
        tensors = _unpack(_read_exactly(fd, m, deadline), count)
        for k in ("value", "args", "kwargs"):
            if k in body:
                body[k] = decode(body[k], tensors)
    except (KeyError, IndexError, TypeError, ValueError, RecursionError) as e:
        raise WireError(f"malformed ({type(e).__name__}: {e})") from None
    return body


def write(fd: int, message: dict[str, Any], *, strict: bool = False) -> None:
    data = memoryview(dumps(message, strict=strict))
    while data:
        n = os.write(fd, data)
        data = data[n:]
