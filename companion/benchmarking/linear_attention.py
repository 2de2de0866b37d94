"""Time and memory of linear attention (chapter 8): its forms against n, and per generated token (state vs KV cache).

Machinery around :mod:`companion.linear_attention`: :func:`linear_attention_implementations` are the functions
that :func:`companion.benchmarking.measure_attention` times for the chapter's cost figure and for
``benchmarks/linear_attention_vs_sdpa.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..linear_attention import (
    FeatureMap,
    LinearAttention,
    elu_plus_one,
    linear_attention,
)
from ..validation import (
    require_int,
)
from .measuring import time_call

__all__ = [
    "GenerationMeasurement",
    "measure_generation",
    "linear_attention_implementations",
    "DEFAULT_MAX_N",
]


# ----------------------------------------------------------------------------------------------------
# Generation: a constant-size state against a growing KV cache


def _kv_cache_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    position: int,
) -> torch.Tensor:
    """Write k, v (..., d) at ``position`` of the caches (..., L, d), attend with q (..., d) to keys 0…position."""
    k_cache[..., position, :] = k
    v_cache[..., position, :] = v
    keys, values = k_cache[..., : position + 1, :], v_cache[..., : position + 1, :]
    return F.scaled_dot_product_attention(q.unsqueeze(-2), keys, values).squeeze(-2)


@dataclass(frozen=True)
class GenerationMeasurement:
    """The cost of generating one more token after ``length`` tokens: time per token and the bytes kept."""

    name: str
    length: int
    seconds: float
    state_bytes: int

    @property
    def microseconds(self) -> float:
        return 1e6 * self.seconds

    @property
    def state_kib(self) -> float:
        return self.state_bytes / 2**10


def measure_generation(
    lengths: Sequence[int] = (256, 1024, 4096, 16384),
    *,
    d: int = 64,
    heads: int = 8,
    batch: int = 1,
    feature_map: FeatureMap = elu_plus_one,
    min_run_time: float = 0.2,
    seed: int = 0,
) -> list[GenerationMeasurement]:
    """Time one attention step of generation after ``length`` tokens, with a state and with a KV cache.

    - ``"linear (state)"``: :meth:`~companion.linear_attention.LinearAttention.step` on a state ``(S, z)`` of shape
      ``(batch, heads, r, d) + (batch, heads, r)``: the same work and the same bytes at every length.
    - ``"softmax (KV cache)"``: the new key and value written into a preallocated cache, then
      ``torch.nn.functional.scaled_dot_product_attention`` of the one query against all ``length + 1`` keys:
      time and bytes ``2 · batch · heads · length · d`` grow with the text.

    Time is the median of :func:`companion.benchmarking.time_call`; ``state_bytes`` counts the tensors kept
    between tokens (the state, or the keys and values of the cache).

    Returns:
        Two :class:`GenerationMeasurement` per length (linear first).
    """
    for name, value in (("d", d), ("heads", heads), ("batch", batch)):
        require_int(value, name, low=1)
    lengths = list(lengths)
    for length in lengths:
        require_int(length, "each length", low=1)
    generator = torch.Generator().manual_seed(seed)
    rows: list[GenerationMeasurement] = []
    for length in lengths:
        k_past, v_past = (
            torch.randn(batch, heads, length, d, generator=generator) for _ in range(2)
        )
        q, k, v = (torch.randn(batch, heads, d, generator=generator) for _ in range(3))
        attention = LinearAttention(feature_map=feature_map)
        state = attention.state(k_past, v_past)
        seconds = time_call(
            attention.step,
            q,
            k,
            v,
            state,
            min_run_time=min_run_time,
        )
        rows.append(
            GenerationMeasurement("linear (state)", length, seconds, state.nbytes)
        )

        k_cache = torch.cat([k_past, torch.empty(batch, heads, 1, d)], dim=-2)
        v_cache = torch.cat([v_past, torch.empty(batch, heads, 1, d)], dim=-2)
        seconds = time_call(
            _kv_cache_step, q, k, v, k_cache, v_cache, length, min_run_time=min_run_time
        )
        cache_bytes = (k_cache.numel() + v_cache.numel()) * k_cache.element_size()
        rows.append(
            GenerationMeasurement("softmax (KV cache)", length, seconds, cache_bytes)
        )
    return rows


# ----------------------------------------------------------------------------------------------------
# Time and memory against n: what measure_attention times for the chapter's figure and the benchmark


def _sdpa(causal: bool) -> Callable[..., torch.Tensor]:
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def linear_attention_implementations(
    *, causal: bool = True
) -> dict[str, Callable[..., torch.Tensor]]:
    """``name → fn(q, k, v)`` for :func:`~companion.benchmarking.measure_attention`: PyTorch's fused softmax
    attention and our forms.

    Causal: ``"sdpa"`` (``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``), ``"chunked"``,
    ``"cumsum"``, ``"recurrent"``, ``"quadratic"``; non-causal: ``"sdpa"``, ``"linear"``, ``"quadratic"``.
    """
    if causal:
        return {
            "sdpa": _sdpa(True),
            "chunked": linear_attention.chunked,
            "cumsum": linear_attention.cumsum,
            "recurrent": linear_attention.recurrent,
            "quadratic": lambda q, k, v: linear_attention.quadratic(
                q, k, v, causal=True
            ),
        }
    return {
        "sdpa": _sdpa(False),
        "linear": linear_attention,
        "quadratic": linear_attention.quadratic,
    }


DEFAULT_MAX_N = {"quadratic": 4096, "cumsum": 16384, "recurrent": 2048}
"""The longest sequence for each slow form, as ``max_n`` of :func:`~companion.benchmarking.measure_attention`: with
4 heads of d = 64 in float32 the quadratic form stores 4·n² numbers (1 GiB at n = 8,192 for one matrix; it makes
three), the cumulative-sum form 4·n·d² (1 GiB at n = 16,384), and the recurrent form takes n Python steps."""
