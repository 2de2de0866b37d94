"""The cases and the typical mistakes of chapter 9's FMMAttention exercise, for its checker
(:data:`companion.exercises.fmmformer.check_fmm_attention`): each case a module's settings, its inputs (or a
pre-norm block's), θ, a cotangent and the inputs changed after t; each mistake an attention
(q, k, v, θ₁, θ₂, b, r) -> output, run as the reference is."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..banded_attention import BandedAttention
from ..fmmformer import FMM_FEATURE_MAPS
from ..transformer import BlockConfig, CausalBlock
from .checking import Case, case

DTYPES = {"float32": torch.float32, "float64": torch.float64}
# added to each far-field denominator, as companion.linear_attention does
LINEAR_EPS = 1e-6


def fmm_case(
    batch: int,
    heads: int,
    n: int,
    d: int,
    d_v: int,
    b: int,
    r: int,
    dtype: str,
    *,
    why: str,
    near: list[float] | None = None,
    far: list[float] | None = None,
    scale: float = 1.0,
    block: tuple[int, int] | None = None,
) -> Case:
    """One case: the module's settings, its inputs (or the block's), θ, a cotangent and the inputs changed after t."""
    kind = DTYPES[dtype]

    def theta(values: list[float] | None) -> torch.Tensor:
        drawn = (
            4 * torch.rand(heads, dtype=torch.float64) - 2
            if values is None
            else torch.tensor(values)
        )
        return drawn.to(torch.float32).reshape(heads, 1, 1)

    t = int(torch.randint(0, n - 1, ())) if n > 1 else 0
    setup = {
        "bandwidth": b,
        "n_heads": heads,
        "n_maps": r,
        "dtype": dtype,
        "t": t,
        "block": block,
    }
    data: dict[str, Any] = {"near_raw": theta(near), "far_raw": theta(far)}
    if block is None:
        shapes = {
            "q": (batch, heads, n, d),
            "k": (batch, heads, n, d),
            "v": (batch, heads, n, d_v),
        }
        out_shape = shapes["v"]
    else:
        d_model, d_ff = block
        shapes = {"x": (batch, n, d_model)}
        out_shape = shapes["x"]
        net = CausalBlock(BlockConfig(d_model, heads, d_ff, norm_first=True))
        with torch.no_grad():
            for res in net.residuals:  # LayerNorm starts at 1 and 0: make it matter
                res.norm.weight.copy_(1 + 0.3 * torch.randn(d_model))
                res.norm.bias.copy_(0.3 * torch.randn(d_model))
        data["block_state"] = {k: v.to(kind) for k, v in net.state_dict().items()}
    inputs = {
        name: scale ** (name != "v" and name != "x") * torch.randn(*shape, dtype=kind)
        for name, shape in shapes.items()
    }
    later = {name: x.clone() for name, x in inputs.items()}
    for x in later.values():
        x[..., t + 1 :, :] = torch.randn_like(x[..., t + 1 :, :])
    data |= {
        "inputs": inputs,
        "later": later,
        "cotangent": torch.randn(*out_shape, dtype=kind),
    }
    return case(setup, data, why=why)


def fmm_cases() -> list[Case]:
    return [
        fmm_case(2, 2, 10, 4, 4, 3, 2, "float64", near=[0.5, 1.5], far=[-40.0, -40.0],
                  why="far_raw = -40, so w_far = softplus(-40) ≈ 4e-18: the near field alone"),
        fmm_case(1, 2, 12, 4, 3, 3, 2, "float64", near=[-40.0, -40.0], far=[0.3, -1.0],
                  why="near_raw = -40, so w_near ≈ 4e-18: the far field alone"),
        fmm_case(2, 1, 8, 3, 2, 1, 1, "float64", why="b = 1 (each query's own key) and one feature map"),
        fmm_case(2, 3, 16, 8, 8, 5, 3, "float32", near=[-1.5, 0.0, 2.0], far=[1.0, -2.0, 0.5],
                  why="three heads with their own weights, three feature maps, float32"),
        fmm_case(1, 2, 7, 4, 4, 9, 2, "float64", why="b > n: the band is every earlier key"),
        fmm_case(1, 2, 24, 4, 4, 4, 2, "float64", scale=8.0, why="large scores: q and k times 8"),
        fmm_case(2, 2, 9, 4, 4, 3, 2, "float64", block=(8, 16),
                  why="your module inside a pre-norm block: x + attention(norm(x)), then x + MLP(norm(x))"),
    ]  # fmt: skip


def fmm_hidden() -> list[Case]:
    cases = []
    for _ in range(4):
        batch, heads, n, d, d_v = (
            int(x)
            for x in torch.randint(1, 4, (1,)).tolist()
            + torch.randint(1, 5, (1,)).tolist()
            + torch.randint(2, 21, (1,)).tolist()
            + torch.randint(1, 7, (2,)).tolist()
        )
        b, r = int(torch.randint(1, n + 3, ())), int(torch.randint(1, 4, ()))
        dtype = ("float32", "float64")[int(torch.randint(0, 2, ()))]
        cases.append(
            fmm_case(
                batch,
                heads,
                n,
                d,
                d_v,
                b,
                r,
                dtype,
                why="random sizes, bandwidth and weights",
            )
        )
    heads, d = int(torch.randint(1, 4, ())), int(torch.randint(1, 5, ()))
    n, b = int(torch.randint(2, 16, ())), int(torch.randint(1, 6, ()))
    cases.append(fmm_case(int(torch.randint(1, 3, ())), heads, n, d, d, b, int(torch.randint(1, 4, ())), "float64",
                           block=(heads * d, 16), why="random sizes, inside the pre-norm block"))  # fmt: skip
    return cases


def fmm_built(setup: dict[str, Any]) -> str:
    return f"FMMAttention(bandwidth={setup['bandwidth']}, n_heads={setup['n_heads']}, n_maps={setup['n_maps']})"


# The typical mistakes, each an attention (q, k, v, θ₁, θ₂, b, r) -> output, run as the reference is.


def _near(q, k, v, b, *, causal=True, scale=True):
    if not scale:
        q = q * math.sqrt(q.shape[-1])
    return BandedAttention(b)(q, k, v, causal=causal)


def _far(q, k, v, maps, *, causal=True, skip=0, normalise=True, shared=False):
    """Σ_l φ_l(Q)φ_l(K)ᵀV / (φ_l(Q)φ_l(K)ᵀ1 + eps) as matrices, over the keys j ≤ i − skip (causal)."""
    terms = []
    for phi in maps:
        a = phi(q) @ phi(k).transpose(-2, -1)
        terms.append(a.tril(-skip) if causal else a)
    if shared:
        a = sum(terms)
        return (a @ v) / (a.sum(-1, keepdim=True) + LINEAR_EPS)
    if not normalise:
        return sum(a @ v for a in terms)
    return sum((a @ v) / (a.sum(-1, keepdim=True) + LINEAR_EPS) for a in terms)


def _blend(q, k, v, tn, tf, b, r, *, weight=F.softplus, near=None, far=None):
    near = _near(q, k, v, b) if near is None else near
    far = _far(q, k, v, FMM_FEATURE_MAPS[:r]) if far is None else far
    return weight(tn).to(q.dtype) * near + weight(tf).to(q.dtype) * far


FMM_MISTAKES: list[tuple[Callable[..., torch.Tensor], str]] = [
    (lambda q, k, v, tn, tf, b, r: _blend(q, k, v, tn, tf, b, r, near=_near(q, k, v, b + 1)),
     "Your band holds b + 1 keys: query i sees itself and the b - 1 keys before it, 0 <= i - j < b."),
    (lambda q, k, v, tn, tf, b, r: _blend(q, k, v, tn, tf, b, r, near=_near(q, k, v, b, causal=False)),
     "Your near field also reads keys after the query (|i - j| < b): the causal band is 0 <= i - j < b."),
    (lambda q, k, v, tn, tf, b, r: _blend(q, k, v, tn, tf, b, r, near=_near(q, k, v, b, scale=False)),
     "Divide the near field's scores by √d_k before the softmax."),
    (lambda q, k, v, tn, tf, b, r: _blend(q, k, v, tn, tf, b, r, far=_far(q, k, v, FMM_FEATURE_MAPS[:r], skip=b)),
     "The far field runs over every key j <= i, the band's keys included (each term is a causal linear attention "
     "over all earlier keys): yours leaves the band's keys out."),
    (lambda q, k, v, tn, tf, b, r: _blend(q, k, v, tn, tf, b, r, far=_far(q, k, v, FMM_FEATURE_MAPS[:r], causal=False)),
     "The far field must be causal too: φ_l(q_i)ᵀ Σ_{j <= i} φ_l(k_j) v_jᵀ, not a sum over every key."),
    (lambda q, k, v, tn, tf, b, r: _blend(q, k, v, tn, tf, b, r, weight=lambda t: t),
     "The blend weights must be positive: w = softplus(θ) = log(1 + e^θ), not θ itself (θ may be negative)."),
    (lambda q, k, v, tn, tf, b, r: _blend(q, k, v, tn, tf, b, r, weight=torch.exp),
     "The blend weights are w = softplus(θ) = log(1 + e^θ), not e^θ."),
    (lambda q, k, v, tn, tf, b, r: _blend(q, k, v, tn, tf, b, r, weight=torch.sigmoid),
     "The blend weights are w = softplus(θ) = log(1 + e^θ), not sigmoid(θ) (which keeps them below 1)."),
    (lambda q, k, v, tn, tf, b, r: _blend(q, k, v, tn, tf, b, r,
                                          far=_far(q, k, v, FMM_FEATURE_MAPS[:r], normalise=False)),
     "Divide each far-field term by its normaliser φ_l(q_i)ᵀ Σ_{j <= i} φ_l(k_j) + 1e-6: yours is not divided."),
    (lambda q, k, v, tn, tf, b, r: _blend(q, k, v, tn, tf, b, r, far=_far(q, k, v, FMM_FEATURE_MAPS[::-1][:r])),
     "The feature maps come in the order elu(x) + 1, elu(-x) + 1, tanh(x) + 1, and n_maps = r takes the first r."),
    (lambda q, k, v, tn, tf, b, r: _blend(q, k, v, tn, tf, b, r, far=_far(q, k, v, FMM_FEATURE_MAPS[:r], shared=True)),
     "Each feature map is its own linear attention with its own denominator φ_l(q_i)ᵀ Σ_{j <= i} φ_l(k_j)."),
    (lambda q, k, v, tn, tf, b, r: _blend(q, k, v, tf, tn, b, r),
     "near_raw weights the banded (near) term and far_raw the far field: yours are swapped."),
    (lambda q, k, v, tn, tf, b, r: _blend(q, k, v, tn, tf, b, r) / (F.softplus(tn) + F.softplus(tf)).to(q.dtype),
     "Do not divide by w_near + w_far: the blend is w_near · DV + w_far · (far field)."),
]  # fmt: skip


class MistakenAttention(nn.Module):
    """A typical mistake as a module with the student's two parameters, to run through the same block."""

    def __init__(
        self, wrong: Callable[..., torch.Tensor], setup: dict[str, Any]
    ) -> None:
        super().__init__()
        self.wrong, self.b, self.r = wrong, setup["bandwidth"], setup["n_maps"]
        h = setup["n_heads"]
        self.near_raw = nn.Parameter(torch.zeros(h, 1, 1))
        self.far_raw = nn.Parameter(torch.zeros(h, 1, 1))

    def forward(self, q, k, v, mask=None, causal=True):
        return self.wrong(q, k, v, self.near_raw, self.far_raw, self.b, self.r)
