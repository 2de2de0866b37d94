"""Checkers for the FMMformer chapter.

================================  ==========================================================================
checker                           what the student writes
================================  ==========================================================================
``check_banded_softmax``          ``banded_softmax(q, k, v, b)``: ``softmax(band_b(QKᵀ/√d_k)) V`` for the
                                  causal band, ``(..., n, d_k) → (..., n, d_v)``, without an n × n matrix
``check_fmm_attention``           ``class FMMAttention(bandwidth, n_heads, n_maps=2)``: causal FMMformer
                                  attention with parameters ``near_raw``, ``far_raw`` (n_heads, 1, 1), weights
                                  ``softplus(θ)``; checked alone and inside a pre-norm ``CausalBlock``
================================  ==========================================================================
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..banded_attention import BandedAttention, banded_attention_dense
from ..fmmformer import FMM_FEATURE_MAPS, FMMAttention, FMMConfig
from ..transformer import BlockConfig, CausalBlock
from .checking import (
    RAISED,
    Checker,
    Mismatch,
    Trial,
    _changed,
    _copies,
    _expect_dtype,
    _round,
    _safe_difference,
    call,
    case,
    compare,
    confirmed,
    expect,
    expect_memory,
    expect_module,
    hidden_inputs,
    same,
    show,
)
from .fmm_attention_cases import (
    DTYPES,
    FMM_MISTAKES,
    LINEAR_EPS,
    MistakenAttention,
    fmm_built,
    fmm_cases,
    fmm_hidden,
)

__all__ = ["check_banded_softmax", "check_fmm_attention"]


# --- banded softmax in O(n·b) ------------------------------------------------------------------------------


def _banded(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: int) -> torch.Tensor:
    return BandedAttention(b)(q, k, v, causal=True)


_MISTAKES_BANDED = [
    (
        lambda q, k, v, b: BandedAttention(b)(
            q * math.sqrt(q.shape[-1]), k, v, causal=True
        ),
        "Divide the scores by √d_k before the softmax.",
    ),
    (
        lambda q, k, v, b: BandedAttention(b)(q, k, v, causal=False),
        "Your band also reads keys after the query (|i - j| < b): the causal band is 0 <= i - j < b.",
    ),
    (
        lambda q, k, v, b: BandedAttention(b + 1)(q, k, v, causal=True),
        "Your band holds b + 1 keys: query i sees itself and the b - 1 keys before it.",
    ),
    (
        lambda q, k, v, b: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "You computed full causal attention: keys more than b - 1 positions back must get weight 0.",
    ),
    (
        lambda q, k, v, b: banded_attention_dense(
            q, k, v, causal=True, bandwidth=b, return_weights=True
        )[1],
        "Return the weighted values D V, not the weights D.",
    ),
]

_banded_values = compare(
    "banded_softmax",
    _banded,
    lambda: [
        case(
            torch.randn(6, 4),
            torch.randn(6, 4),
            torch.randn(6, 3),
            2,
            why="one head, n = 6, b = 2",
        ),
        case(
            torch.randn(2, 3, 9, 4),
            torch.randn(2, 3, 9, 4),
            torch.randn(2, 3, 9, 5),
            3,
            why="(B, h, n, d)",
        ),
        case(
            torch.randn(5, 2),
            torch.randn(5, 2),
            torch.randn(5, 2),
            1,
            why="b = 1: each query reads its own value",
        ),
        case(
            torch.randn(7, 4),
            torch.randn(7, 4),
            torch.randn(7, 4),
            7,
            why="b = n: plain causal attention",
        ),
        case(torch.randn(4, 3), torch.randn(4, 3), torch.randn(4, 3), 9, why="b > n"),
        case(
            10 * torch.randn(1, 40, 8),
            10 * torch.randn(1, 40, 8),
            torch.randn(1, 40, 8),
            6,
            why="large scores: subtract the row maximum before exp",
        ),
    ],
    mistakes=_MISTAKES_BANDED,
    hint="For query i the weights are softmax over j = i - b + 1 … i of q_i·k_j/√d_k; zero elsewhere.",
    what="The output",
)

MEMORY_N = 2048
"""The sequence length of the memory check: one n × n float32 matrix is 16 MiB there."""


def _banded_memory(student) -> tuple[int, int]:
    count, hidden = _banded_values._cases(student)
    n, d, b = MEMORY_N, 8, 16
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(n, d, generator=g) for _ in range(3))
    square = n * n * q.element_size()
    expect_memory(
        student,
        _banded,
        (q, k, v, b),
        input=f"q, k, v of shape ({n}, {d}), b={b}",
        limit=square // 4,
        problem=f"an n × n score matrix takes {square / 2**20:.0f} MiB at n = {n} (the band has n·b = {n * b} scores)",
        hint="Compute only the scores inside the band: pad k and v with b - 1 rows in front and gather, for "
        "each query, its b keys (k_pad.unfold(-2, b, 1) is a view), then softmax over those b. NumPy arrays count "
        "too.",
    )
    return count + 1, hidden


check_banded_softmax = Checker(
    "banded_softmax",
    _banded_memory,
    kind="function",
    withhold=[
        "companion.banded_attention.BandedAttention.attend",
        "companion.banded_attention.banded_attention_dense",
    ],
)


# --- FMMAttention: the module, alone and inside a pre-norm block ------------------------------------------------
#
# The student writes ``FMMAttention(bandwidth, n_heads, n_maps=2)``: an nn.Module with two parameters ``near_raw``
# and ``far_raw`` of shape (n_heads, 1, 1) (the weights are w = softplus(θ), both starting at 0.5) and
# ``forward(q, k, v, mask=None, causal=True)``, causal FMMformer attention of q, k, v (B, h, n, d) with the causal
# band of ``bandwidth`` keys and the first ``n_maps`` of elu(x) + 1, elu(−x) + 1, tanh(x) + 1. The checker builds
# the student's class (in the grader: in the answer's process), loads each case's θ with ``load_state_dict`` and
# compares with the companion's FMMAttention given the same θ: outputs, gradients with respect to q, k, v and θ,
# causality (the outputs up to t, with the tokens after t changed), and all of it again inside
# ``companion.transformer.CausalBlock(norm_first=True)``, a pre-norm block; then the memory at n = 2048 and the
# starting weights. Every expectation is computed first, on copies, before the student's code runs.

FMM_PARAMETERS = ("near_raw", "far_raw")
"""The names of the student's two parameters: θ₁ (near field) and θ₂ (far field), each of shape (n_heads, 1, 1)."""

FMM_INIT = 0.5
"""The starting value of both blend weights, softplus(θ) = 0.5 (the companion's ``init_near``, ``init_far``)."""


def _fmm_label(t: Trial) -> str:
    """The case in words; a hidden one says so, with its seed (its inputs are not shown in full)."""
    setup, data = t.case.args
    weights = ", ".join(
        f"{name} = {_round(data[name].flatten().tolist())} "
        f"(w = {_round(F.softplus(data[name].double()).flatten().tolist())})"
        for name in FMM_PARAMETERS
    )
    if setup["block"] is None:
        q, v = data["inputs"]["q"], data["inputs"]["v"]
        call_text = f"q and k of shape {tuple(q.shape)}, v of shape {tuple(v.shape)}, {setup['dtype']}"
    else:
        d_model, d_ff = setup["block"]
        x = data["inputs"]["x"]
        call_text = (
            f"CausalBlock(BlockConfig(d_model={d_model}, n_heads={setup['n_heads']}, d_ff={d_ff}, "
            f"norm_first=True), attention=yours) on x of shape {tuple(x.shape)}, {setup['dtype']}"
        )
    text = f"{fmm_built(setup)} with {weights}; {call_text}  ({t.case.why})"
    return (
        text
        if t.hidden_seed is None
        else f"{text}  [a hidden random case, seed {t.hidden_seed}]"
    )


def _fmm_run(
    module: nn.Module,
    setup: dict[str, Any],
    data: dict[str, Any],
    run: Callable[..., Any],
) -> dict:
    """Load θ (and the block's weights), run forward and backward and the changed inputs; ``run(f, *args)`` calls
    code that may be the student's (through :func:`call`) or the reference's (directly)."""
    kind = DTYPES[setup["dtype"]]
    theta = {name: data[name].to(kind) for name in FMM_PARAMETERS}
    if setup["block"] is None:
        net = run(module.to, kind)
    else:
        d_model, d_ff = setup["block"]
        net = run(
            lambda: CausalBlock(
                BlockConfig(d_model, setup["n_heads"], d_ff, norm_first=True), module
            ).to(kind)
        )
        run(lambda: net.load_state_dict(data["block_state"], strict=False))
    run(lambda: module.load_state_dict(theta, strict=False))
    params = run(lambda: dict(module.named_parameters()))
    inputs = {
        name: x.detach().clone().requires_grad_() for name, x in data["inputs"].items()
    }
    out = run(net, *inputs.values())
    grads: dict[str, Any] = {}
    cotangent = data["cotangent"]
    if (
        isinstance(out, torch.Tensor)
        and out.requires_grad
        and out.shape == cotangent.shape
    ):
        run(lambda: (out * cotangent.to(out.dtype)).sum().backward())
        grads = {name: x.grad for name, x in inputs.items()} | {
            name: params[name].grad for name in FMM_PARAMETERS
        }
    with torch.no_grad():
        later = run(net, *(x.clone() for x in data["later"].values()))
    after = {name: params[name].detach().clone() for name in FMM_PARAMETERS}
    return {
        "out": out.detach() if isinstance(out, torch.Tensor) else out,
        "grads": grads,
        "later": later,
        "params": after,
        "theta": theta,
        "inputs": {name: x.detach() for name, x in inputs.items()},
    }


class _CausalFMMAttention(FMMAttention):
    """The companion's FMMAttention, causal by default as the exercise's module is."""

    def forward(self, q, k, v, mask=None, causal=True):
        return super().forward(q, k, v, mask, causal=causal)


def _fmm_reference_module(setup: dict[str, Any]) -> nn.Module:
    b, h, r = setup["bandwidth"], setup["n_heads"], setup["n_maps"]
    maps = FMM_FEATURE_MAPS[:r]
    return _CausalFMMAttention(FMMConfig(b, maps, LINEAR_EPS, n_heads=h))


def _fmm_expected(setup: dict[str, Any], data: dict[str, Any]) -> dict:
    return _fmm_run(_fmm_reference_module(setup), setup, data, lambda f, *a: f(*a))


def _fmm_student(
    FMMAttention_: type, setup: dict[str, Any], data: dict[str, Any], label: str
) -> dict:
    """Build the student's module, check its two parameters, then run it as the reference ran."""
    h = setup["n_heads"]
    built = fmm_built(setup)
    kwargs = {"bandwidth": setup["bandwidth"], "n_heads": h, "n_maps": setup["n_maps"]}
    module = call(FMMAttention_, input=built, **kwargs)
    _fmm_require_parameters(module, built, h)
    return _fmm_run(module, setup, data, lambda f, *a: call(f, *a, input=label))


def _fmm_require_parameters(module: Any, built: str, h: int) -> dict[str, Any]:
    expect_module(module, built)
    params = call(lambda: dict(module.named_parameters()), input=built)
    for name in FMM_PARAMETERS:
        p = params.get(name)
        if not isinstance(p, torch.Tensor) or tuple(p.shape) != (h, 1, 1):
            raise Mismatch(
                f"The module needs a parameter `{name}` of shape ({h}, 1, 1): one θ per head, broadcasting "
                "against the heads' outputs (B, h, n, d_v).",
                input=built,
                expected=f"nn.Parameter of shape ({h}, 1, 1)",
                got=show(p, 200),
                hint=f"self.{name} = nn.Parameter(torch.full((n_heads, 1, 1), theta0)), with softplus(theta0) = 0.5.",
            )
    return params


_FMM_HINT = (
    "V̂ = softplus(near_raw) · softmax(band_b(QKᵀ/√d_k)) V + softplus(far_raw) · "
    "Σ_l LinearAttention(feature_map=φ_l)(q, k, v, causal=True), "
    "for the first n_maps of elu(x) + 1, elu(-x) + 1, tanh(x) + 1."
)


def _fmm_mistake_outputs(t: Trial) -> list[Any]:
    out = []
    for wrong, _ in FMM_MISTAKES:
        setup, data = _copies(t.case)[0]
        try:
            with torch.no_grad():
                out.append(
                    _fmm_run(
                        MistakenAttention(wrong, setup),
                        setup,
                        data,
                        lambda f, *a: f(*a),
                    )["out"]
                )
        except Exception:
            out.append(RAISED)
    return out


def _fmm_tolerance(setup: dict[str, Any]) -> tuple[float, float]:
    return (1e-5, 1e-4) if setup["dtype"] == "float64" else (2e-5, 2e-4)


def _fmm_judge(trials: Sequence[Trial]) -> None:
    mistakes: list[list[Any]] | None = None
    for index, t in enumerate(trials):
        if t.error is not None:
            raise t.error
        setup, data = t.case.args
        label = _fmm_label(t)
        atol, rtol = _fmm_tolerance(setup)
        got, expected = t.got, t.expected
        for name in FMM_PARAMETERS:
            if not torch.equal(got["params"][name], got["theta"][name]):
                raise Mismatch(
                    f"Your forward changed the parameter `{name}` in place.",
                    input=label,
                    expected=f"{name} unchanged: {show(got['theta'][name], 200)}",
                    got=show(got["params"][name], 200),
                    hint="Compute w = F.softplus(self.near_raw) as a new tensor; never assign to a parameter or "
                    "its .data in forward.",
                )
        for name, x in data["inputs"].items():
            if _changed(x, got["inputs"][name]):
                raise Mismatch(
                    f"Your forward changed its input `{name}` in place.",
                    input=label,
                    hint="Use out-of-place operations (x * s, not x *= s): the block still needs its tensors.",
                )
        _expect_dtype(got["out"], expected["out"], label, "The output")
        if _safe_difference(got["out"], expected["out"], atol, rtol) is not None:
            if mistakes is None:
                mistakes = [_fmm_mistake_outputs(u) for u in trials]
            rows = [
                (RAISED if u.error else u.got["out"], u.expected["out"], m)
                for u, m in zip(trials, mistakes, strict=True)
            ]
            named = confirmed(rows, [h for _, h in FMM_MISTAKES], atol=atol, rtol=rtol)
            here = [
                (lambda o=mistakes[index][i]: o, h)
                for i, (_, h) in enumerate(FMM_MISTAKES)
                if h in named
            ]
            if not any(same(got["out"], m(), atol=atol, rtol=rtol) for m, _ in here):
                _fmm_causal(t, label, atol, rtol)
            expect(got["out"], expected["out"], input=label, what="The output", hint=_FMM_HINT, atol=atol, rtol=rtol,
                   mistakes=here)  # fmt: skip
        _fmm_causal(t, label, atol, rtol)
        _fmm_gradients(t, label, atol, rtol)


def _fmm_causal(t: Trial, label: str, atol: float, rtol: float) -> None:
    """The outputs up to position t must not move when only the inputs after t change."""
    setup, _ = t.case.args
    out, later, step = t.got["out"], t.got["later"], setup["t"]
    if not (
        isinstance(out, torch.Tensor)
        and isinstance(later, torch.Tensor)
        and out.shape == later.shape
    ):
        return
    if out.ndim < 2 or not out.dtype.is_floating_point:
        return
    before, after = out[..., : step + 1, :].double(), later[..., : step + 1, :].double()
    if torch.allclose(before, after, atol=atol, rtol=rtol):
        return
    moved = (
        (before - after)
        .abs()
        .amax(dim=tuple(i for i in range(before.ndim) if i != before.ndim - 2))
    )
    first = (
        int((moved > atol + rtol * before.abs().max()).nonzero()[0, 0])
        if (moved > 0).any()
        else 0
    )
    changed = "x" if setup["block"] is not None else "q, k and v"
    raise Mismatch(
        f"Your module reads the future: changing {changed} after position t = {step} changed its outputs at "
        f"positions <= {step}.",
        input=label,
        expected=f"the outputs at positions 0 … {step} unchanged",
        got=f"they moved by up to {float(moved.max()):.3g}, first at position {first}",
        hint="Query i may read keys j <= i only, in both fields: the band 0 <= i - j < b, and the far field's sums "
        "Σ_{j <= i} (a cumulative sum, or a running state), never a sum over the whole sequence.",
    )


def _fmm_gradients(t: Trial, label: str, atol: float, rtol: float) -> None:
    expected, got = t.expected["grads"], t.got["grads"]
    label = f"{label}; then (output · g).sum().backward() for a random g"
    if not got:
        raise Mismatch(
            "Your output carries no gradient, so nothing could be trained through it.",
            input=label,
            hint="Compute the output from the inputs and the parameters with differentiable operations (no "
            ".detach(), .item(), .numpy() or torch.no_grad()).",
        )
    for name, e in expected.items():
        g = got.get(name)
        what = f"`{name}`" + (" (a blend parameter)" if name in FMM_PARAMETERS else "")
        if g is None:
            raise Mismatch(
                f"No gradient reached {what}, so training could not learn through it.",
                input=label,
                hint="Compute w = F.softplus(self.near_raw) (and far_raw) inside forward, from the parameter itself, "
                "not from .data, .item() or a copy made in __init__; keep the inputs connected (no .detach()).",
            )
        diff = _safe_difference(g, e, 10 * atol, 10 * rtol)
        if diff is not None:
            raise Mismatch(
                f"The gradient with respect to {what} {diff[0]}.",
                input=label,
                expected=diff[1],
                got=diff[2],
                hint="The output is right but its computation graph is not: compute it with differentiable operations, "
                "from the parameters themselves (no .detach(), .data or in-place changes of saved tensors).",
            )


MEMORY_N_FMM = 4096
"""The sequence length of FMMAttention's memory check: one n × n float32 matrix is 64 MiB there, and the check
allows a quarter of it, 16 MiB. Measured in a test process: right answers (the chapter's parts, windows and
cumulative sums, chunks) peaked at 0.4 to 4.7 MiB. The matrix in a buffer taken before the call (a grader counts
what an answer holds only beyond 8 MiB) is still charged 56 MiB (at n = 1024 a 4 MiB buffer was not counted)."""


def _fmm_memory(FMMAttention_: type) -> None:
    n, d, b = MEMORY_N_FMM, 8, 16
    setup = {"bandwidth": b, "n_heads": 1, "n_maps": 2}
    built = fmm_built(setup)
    theta = {
        "near_raw": torch.full((1, 1, 1), 0.3),
        "far_raw": torch.full((1, 1, 1), -0.2),
    }
    module = call(FMMAttention_, input=built, bandwidth=b, n_heads=1, n_maps=2)
    _fmm_require_parameters(module, built, 1)
    call(lambda: module.load_state_dict(theta, strict=False), input=built)
    reference = _fmm_reference_module(setup)
    reference.load_state_dict(theta)
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 1, n, d, generator=g) for _ in range(3))
    square = n * n * q.element_size()
    expect_memory(
        lambda q, k, v: call(module, q, k, v, input=built),
        lambda q, k, v: reference(q, k, v).detach(),
        (q, k, v),
        input=f"{built}, q, k, v of shape (1, 1, {n}, {d}), float32",
        limit=square // 4,
        problem=f"an n × n matrix takes {square / 2**20:.0f} MiB at n = {n}, where the band has n·b = {n * b} scores "
        f"and the far field's state d_k × d_v = {d * d} numbers per map",
        hint="Neither field needs the n × n matrix: the band's scores by windows of b keys (unfold, as in "
        "banded_softmax, or ba.banded_attention), the far field by cumulative sums of φ(k_j) v_jᵀ and φ(k_j) (or "
        "la.linear_attention(..., causal=True)). NumPy arrays count too.",
    )


def _fmm_start(FMMAttention_: type) -> None:
    setup = {"bandwidth": 3, "n_heads": 2, "n_maps": 2}
    built = fmm_built(setup)
    module = call(FMMAttention_, input=built, bandwidth=3, n_heads=2, n_maps=2)
    params = _fmm_require_parameters(module, built, 2)
    theta0 = math.log(math.expm1(FMM_INIT))
    for name in FMM_PARAMETERS:
        w = F.softplus(params[name].detach().double())
        if not torch.allclose(w, torch.full_like(w, FMM_INIT), atol=1e-6, rtol=0):
            raise Mismatch(
                f"Both weights start at {FMM_INIT}: softplus({name}) should be {FMM_INIT} for every head when the "
                "module is built.",
                input=built,
                expected=f"softplus({name}) = {FMM_INIT}, so {name} = log(e^{FMM_INIT} - 1) ≈ {theta0:.4f}",
                got=f"softplus({name}) = {_round(w.flatten().tolist())} "
                f"({name} = {_round(params[name].detach().flatten().tolist())})",
                hint="theta0 = math.log(math.expm1(0.5)), the inverse of softplus at 0.5: the companion's FMMAttention "
                "starts there.",
            )


def _fmm_trials() -> list[Trial]:
    """The shown cases, then the hidden ones (drawn under a fresh seed), each with its expectation computed first,
    on copies (``draw_trials`` without its search for duplicates, which random tensors never are)."""
    trials = [Trial(c) for c in fmm_cases()]
    with hidden_inputs() as seed:
        trials += [Trial(c, hidden_seed=seed) for c in fmm_hidden()]
    for t in trials:
        t.reference_args = _copies(t.case)
        t.expected = _fmm_expected(*t.reference_args[0])
    return trials


def _fmm_attention_cases(FMMAttention_: type) -> tuple[int, int]:
    trials = _fmm_trials()
    for t in trials:
        t.student_args = _copies(t.case)
        try:
            t.got = _fmm_student(FMMAttention_, *t.student_args[0], label=_fmm_label(t))
        except Mismatch as m:
            t.error = m
    _fmm_judge(trials)
    _fmm_memory(FMMAttention_)
    _fmm_start(FMMAttention_)
    return len(trials) + 2, sum(t.hidden_seed is not None for t in trials)


check_fmm_attention = Checker(
    "FMMAttention",
    _fmm_attention_cases,
    kind="class",
    withhold=[
        "companion.fmmformer.FMMAttention.attend",
        "companion.fmmformer.far_field_attention",
        "companion.fmmformer.FMMAttention.forward",
    ],
)
