"""Checkers for the chapter *Linear attention*: the non-causal form and one recurrent step, with the inputs
and the memory measure that the causal checkers of :mod:`companion.exercises.linear_attention` share.

=========================================  =============================================================
checker                                    what the student writes
=========================================  =============================================================
``check_linear_attention``                 ``linear_attention(q, k, v) -> (..., n_q, d_v)``: non-causal
                                           linear attention by associativity, φ = elu + 1, eps = 1e-6
``check_linear_attention_step``            ``linear_attention_step(q, k, v, s, z) -> (y, s, z)``: one
                                           token of causal linear attention as an RNN
=========================================  =============================================================
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import linear_attention as ref
from .checking import (
    Checker,
    case,
    compare,
    expect_memory,
)

__all__ = ["check_linear_attention", "check_linear_attention_step"]


EPS = ref.DEFAULT_EPS
phi = ref.elu_plus_one


def _randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
    return scale * torch.randn(*shape)


# ----- non-causal linear attention --------------------------------------------------------------------------


def _reference_linear(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:
    return ref.linear_attention(q, k, v)


def _no_normaliser(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return phi(q) @ (phi(k).transpose(-2, -1) @ v)


def _no_feature_map(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return (q @ (k.transpose(-2, -1) @ v)) / (q @ k.sum(-2).unsqueeze(-1) + EPS)


def _softmax(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)


def _phi_on_k_only(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    phi_k = phi(k)
    return (q @ (phi_k.transpose(-2, -1) @ v)) / (q @ phi_k.sum(-2).unsqueeze(-1) + EPS)


def _normalise_over_queries(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:
    a = phi(q) @ phi(k).transpose(-2, -1)
    return (a @ v) / (a.sum(dim=-2, keepdim=True).transpose(-2, -1) + EPS)


def _scaled(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    d = q.shape[-1] ** 0.5
    return ref.linear_attention(q / d, k, v)


def _linear_cases() -> list:
    return [
        case(
            _randn(4, 3),
            _randn(4, 3),
            _randn(4, 2),
            why="n = 4 tokens, d_k = 3, d_v = 2",
        ),
        case(
            _randn(3, 4),
            _randn(6, 4),
            _randn(6, 5),
            why="3 queries, 6 keys: n_q != n_k",
        ),
        case(
            _randn(2, 4, 7, 8),
            _randn(2, 4, 7, 8),
            _randn(2, 4, 7, 8),
            why="a batch of 2 with 4 heads",
        ),
        case(
            _randn(5, 3).double(),
            _randn(5, 3).double(),
            _randn(5, 4).double(),
            why="float64",
        ),
    ]


_LINEAR_FORMS = [
    "companion.linear_attention.LinearAttention.attend",
    "companion.linear_attention.LinearAttention.quadratic",
    "companion.linear_attention.kernel_attention",
    "companion.linear_attention.LinearAttention.recurrent",
    "companion.linear_attention.LinearAttention.chunked",
    "companion.linear_attention.LinearAttention.cumsum",
]

MEMORY_N = 2048
"""The sequence length of the memory checks: one n × n float32 matrix is 16 MiB there."""


def _long_inputs(
    seed: int, d_v: int = 8, n: int = MEMORY_N
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(n, d, generator=g) for d in (8, 8, d_v))


def _square_bytes(n: int = MEMORY_N) -> int:
    return n * n * 4


_linear_values = compare(
    "linear_attention",
    _reference_linear,
    _linear_cases,
    mistakes=[
        (
            _no_normaliser,
            "Divide by the normaliser φ(q_i)ᵀ z, z = Σ_j φ(k_j), (plus eps = 1e-6).",
        ),
        (
            _no_feature_map,
            "Apply the feature map φ = elu + 1 to the queries and the keys before anything else.",
        ),
        (
            _softmax,
            "That is softmax attention; replace exp(q_iᵀk_j / √d_k) by φ(q_i)ᵀφ(k_j).",
        ),
        (_phi_on_k_only, "Apply φ to the queries too: the kernel is φ(q_i)ᵀφ(k_j)."),
        (
            _normalise_over_queries,
            "The normaliser of query i sums its kernel values over the keys j: φ(q_i)ᵀ Σ_j φ(k_j).",
        ),
        (_scaled, "Linear attention has no 1/√d_k: apply φ to q and k as they are."),
    ],
    hint="S = φ(K)ᵀV (d_k × d_v), z = φ(K)ᵀ1 (d_k); out_i = φ(q_i)ᵀS / (φ(q_i)ᵀz + 1e-6). Never form n × n.",
    what="The output",
)


def _linear_memory(student) -> tuple[int, int]:
    count, hidden = _linear_values._cases(student)
    expect_memory(
        student,
        _reference_linear,
        _long_inputs(2),
        input=f"q, k, v of shape ({MEMORY_N}, 8)",
        limit=_square_bytes() // 4,
        problem=f"an n × n matrix takes {_square_bytes() / 2**20:.0f} MiB at n = {MEMORY_N}",
        hint="Use associativity: φ(K)ᵀV is d_k × d_v, so compute it first and never the n × n φ(Q)φ(K)ᵀ "
        "(NumPy arrays count too).",
    )
    return count + 1, hidden


check_linear_attention = Checker(
    "linear_attention", _linear_memory, kind="function", withhold=_LINEAR_FORMS
)


# ----- one recurrent step ------------------------------------------------------------------------------------


def _reference_step(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, s: torch.Tensor, z: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y, state = ref.linear_attention.step(q, k, v, ref.LinearAttentionState(s, z))
    return y, state.s, state.z


def _read_before_update(q, k, v, s, z):  # noqa: ANN001, ANN202
    y = (phi(q).unsqueeze(-2) @ s).squeeze(-2) / (
        (phi(q) * z).sum(-1, keepdim=True) + EPS
    )
    return y, s + phi(k).unsqueeze(-1) * v.unsqueeze(-2), z + phi(k)


def _z_not_updated(q, k, v, s, z):  # noqa: ANN001, ANN202
    s = s + phi(k).unsqueeze(-1) * v.unsqueeze(-2)
    y = (phi(q).unsqueeze(-2) @ s).squeeze(-2) / (
        (phi(q) * z).sum(-1, keepdim=True) + EPS
    )
    return y, s, z


def _raw_key(q, k, v, s, z):  # noqa: ANN001, ANN202
    s, z = s + k.unsqueeze(-1) * v.unsqueeze(-2), z + k
    y = (phi(q).unsqueeze(-2) @ s).squeeze(-2) / (
        (phi(q) * z).sum(-1, keepdim=True) + EPS
    )
    return y, s, z


def _step_no_normaliser(q, k, v, s, z):  # noqa: ANN001, ANN202
    s, z = s + phi(k).unsqueeze(-1) * v.unsqueeze(-2), z + phi(k)
    return (phi(q).unsqueeze(-2) @ s).squeeze(-2), s, z


def _step_cases() -> list:
    cases = []
    for shape, why in (
        ((3,), "d_k = 3, d_v = 2, after 4 tokens"),
        ((2, 4), "a batch of 2 with 4 heads"),
    ):
        keys, values = _randn(*shape, 4, 3), _randn(*shape, 4, 2)
        state = ref.linear_attention.state(keys, values)
        q, k, v = _randn(*shape, 3), _randn(*shape, 3), _randn(*shape, 2)
        cases.append(case(q, k, v, state.s, state.z, why=why))
    zeros = case(
        _randn(3),
        _randn(3),
        _randn(2),
        torch.zeros(3, 2),
        torch.zeros(3),
        why="the first token: S, z = 0",
    )
    return [zeros, *cases]


check_linear_attention_step = compare(
    "linear_attention_step",
    _reference_step,
    _step_cases,
    mistakes=[
        (
            _read_before_update,
            "Add the new token to the state first, then read it: y_i = φ(q_i)ᵀS_i / φ(q_i)ᵀz_i.",
        ),
        (_z_not_updated, "Update the normaliser's state too: z ← z + φ(k)."),
        (
            _raw_key,
            "Apply φ to the key before adding it to the state: S ← S + φ(k)vᵀ, z ← z + φ(k).",
        ),
        (
            _step_no_normaliser,
            "Divide by φ(q)ᵀz + eps: without it the output grows with the number of tokens.",
        ),
    ],
    hint="S ← S + φ(k) vᵀ (an outer product, d_k × d_v), z ← z + φ(k); y = φ(q)ᵀS / (φ(q)ᵀz + 1e-6).",
    what="(y, s, z)",
    withhold=["companion.linear_attention.LinearAttention.step", *_LINEAR_FORMS],
)
