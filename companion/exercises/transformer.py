"""Checkers for chapter 5, *The Transformer*.

==========================================  =================================================================
checker                                     what the student writes
==========================================  =================================================================
``check_sinusoidal_positional_encoding``    ``sinusoidal_positional_encoding(n_positions, d_model) -> (n, d)``
``check_rope``                              ``rope(x) -> x rotated``: ``(..., n, d)``, positions 0 … n-1,
                                            adjacent pairs ``(x_2i, x_2i+1)``
``check_layer_norm``                        ``layer_norm(x, weight, bias, eps=1e-5)`` over the last axis
``check_layer_norm_module``                 ``class LayerNorm(nn.Module)``: ``LayerNorm(d_model, eps=1e-5)``
                                            with parameters ``weight`` (γ) and ``bias`` (β)
``check_label_smoothed_cross_entropy``      ``label_smoothed_cross_entropy(logits, y, epsilon, ignore_index=-100)``:
                                            ``(N, V)``, ``(N,)`` → the mean over the kept rows
==========================================  =================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from .. import positional as ref
from .. import transformer as companion_transformer
from .checking import (
    Checker,
    Mismatch,
    OneCall,
    call,
    case,
    compare,
    expect,
    show,
)
from .checking.random_state import hidden_inputs
from .checking.training import expect_trains_like

__all__ = [
    "check_sinusoidal_positional_encoding",
    "check_rope",
    "check_layer_norm",
    "check_layer_norm_module",
]


# --- sinusoidal positional encoding -------------------------------------------------------------------------


def _sinusoid(
    n: int,
    d: int,
    *,
    exponent: str = "2i",
    swap: bool = False,
    start: int = 0,
    layout: str = "pairs",
):
    """The encoding and some typical mistakes in it (float64)."""
    pos = torch.arange(start, start + n, dtype=torch.float64)[:, None]
    col = torch.arange(d, dtype=torch.float64)
    if exponent == "2i":
        power = 2 * (col // 2) / d
    elif exponent == "i":
        power = (col // 2) / d
    else:  # the column index itself: column 2i+1 uses (2i+1)/d
        power = col / d
    angle = pos / 10000.0**power
    sin, cos = (torch.cos, torch.sin) if swap else (torch.sin, torch.cos)
    if layout == "halves":
        half = angle[:, 0::2]
        return torch.cat([sin(half), cos(half)], dim=1)[:, :d]
    out = torch.empty(n, d, dtype=torch.float64)
    out[:, 0::2] = sin(angle[:, 0::2])
    out[:, 1::2] = cos(angle[:, 1::2])
    return out


def _sinusoidal_reference(n_positions: int, d_model: int) -> torch.Tensor:
    return ref.sinusoidal_positional_encoding(n_positions, d_model, dtype=torch.float64)


check_sinusoidal_positional_encoding = compare(
    "sinusoidal_positional_encoding",
    _sinusoidal_reference,
    [case(4, 6), case(50, 16), case(1, 2), case(10, 128)],
    mistakes=[
        (
            lambda n, d: _sinusoid(n, d, swap=True),
            "sin and cos are swapped: even columns 2i hold the sine, odd columns 2i+1 the cosine.",
        ),
        (
            lambda n, d: _sinusoid(n, d, exponent="col"),
            "Both columns of a pair share one frequency: column 2i+1 uses the exponent of its even neighbour 2i.",
        ),
        (
            lambda n, d: _sinusoid(n, d, exponent="i"),
            "The exponent is 2i/d_model, where i numbers the pairs of columns.",
        ),
        (
            lambda n, d: _sinusoid(n, d, layout="halves"),
            "Interleave: sine in the even columns and cosine in the odd ones, rather than all sines then all cosines.",
        ),
        (
            lambda n, d: _sinusoid(n, d, start=1),
            "Positions start at 0: the first row is sin(0) = 0, cos(0) = 1.",
        ),
    ],
    hint="PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)); "
    "shape (n_positions, d_model).",
    what="The encoding",
    hidden=lambda: [
        case(int(torch.randint(1, 60, ())), 2 * int(torch.randint(1, 40, ())))
        for _ in range(3)
    ],
    withhold=["companion.positional.sinusoidal_positional_encoding"],
)


# --- RoPE ---------------------------------------------------------------------------------------------------


def _rope_variant(
    x: torch.Tensor,
    *,
    sign: float = 1.0,
    start: int = 0,
    exponent: str = "2i",
    halves: bool = False,
):
    n, d = x.shape[-2], x.shape[-1]
    i = torch.arange(d // 2, dtype=torch.float64)
    theta = 10000.0 ** (-(2 * i if exponent == "2i" else i) / d)
    angle = torch.arange(start, start + n, dtype=torch.float64)[:, None] * theta
    cos, sin = angle.cos().to(x.dtype), (sign * angle.sin()).to(x.dtype)
    if halves:
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)


def _rope_reference(x: torch.Tensor) -> torch.Tensor:
    return ref.apply_rope(x)


check_rope = compare(
    "rope",
    _rope_reference,
    lambda: [
        case(torch.randn(4, 2), why="one pair at 4 positions"),
        case(torch.randn(6, 8), why="6 positions of width 8"),
        case(
            torch.randn(2, 3, 5, 4),
            why="a batch of shape (2, 3) of 5 positions of width 4",
        ),
        case(torch.randn(1, 6), why="one position (position 0 is not rotated)"),
        case(torch.randn(20, 16), why="20 positions of width 16"),
    ],
    mistakes=[
        (
            lambda x: _rope_variant(x, sign=-1.0),
            "Wrong direction: rotate by +φ, i.e. y_2i = x_2i cos φ - x_2i+1 sin φ.",
        ),
        (
            lambda x: _rope_variant(x, halves=True),
            "This exercise rotates adjacent pairs (x_2i, x_2i+1), not feature i with feature i + d/2.",
        ),
        (
            lambda x: _rope_variant(x, start=1),
            "Positions start at 0: the first row is not rotated.",
        ),
        (
            lambda x: _rope_variant(x, exponent="i"),
            "The angle of pair i at position p is p · 10000^(-2i/d), with 2i in the exponent.",
        ),
    ],
    hint="For position p and pair i, φ = p · 10000^(-2i/d): y_2i = x_2i cos φ - x_2i+1 sin φ, "
    "y_2i+1 = x_2i sin φ + x_2i+1 cos φ; the shape stays the same.",
    what="The rotated x",
    # apply_rope itself is listed in the chapter before the exercise; its rotation, withheld, stops a call to it
    withhold=[
        "companion.positional._rotate",
        "companion.positional.RotaryEmbedding.forward",
    ],
)


# --- layer normalisation ------------------------------------------------------------------------------------

#: the companion's layer norm, withheld from both layer-norm exercises (a subclass of it is no answer either)
_LAYER_NORM = (
    "companion.transformer.LayerNorm.__init__",
    "companion.transformer.LayerNorm.forward",
)


#: PyTorch's layer norm, one call that computes either exercise whole: withheld from both
_LAYER_NORM_CALLS = tuple(
    OneCall(name, instead="mean, var, sqrt, arithmetic")
    for name in (
        "torch.nn.functional.layer_norm",
        "torch.layer_norm",
        "torch.nn.LayerNorm",
    )
)


def _layer_norm_reference(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    return nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def _layer_norm_mistakes() -> list[tuple[Callable[..., torch.Tensor], str]]:
    def norm(x, eps, *, unbiased=False, dim=-1, where="inside", by="std"):
        mean, var = (
            x.mean(dim, keepdim=True),
            x.var(dim, keepdim=True, unbiased=unbiased),
        )
        scale = {
            "inside": torch.sqrt(var + eps),
            "outside": var.sqrt() + eps,
            "variance": var + eps,
        }[where]
        return (x - mean) / scale

    return [
        (
            lambda x, w, b, eps=1e-5: norm(x, eps, unbiased=True) * w + b,
            "Use the biased variance mean((x - μ)²), dividing by d: torch.var divides by d - 1 by default "
            "(Bessel's correction).",
        ),
        (
            lambda x, w, b, eps=1e-5: norm(x, eps, where="outside") * w + b,
            "eps goes inside the square root: (x - μ) / √(σ² + eps), not (x - μ) / (σ + eps).",
        ),
        (
            lambda x, w, b, eps=1e-5: norm(x, eps, where="variance") * w + b,
            "Divide by the standard deviation √(σ² + eps), not by the variance.",
        ),
        (
            lambda x, w, b, eps=1e-5: norm(x, eps, dim=0) * w + b,
            "Layer norm normalises each vector over its own features (the last axis), not over the batch.",
        ),
        (
            lambda x, w, b, eps=1e-5: norm(x, eps),
            "Scale by γ (weight) and shift by β (bias) after normalising.",
        ),
        (
            lambda x, w, b, eps=1e-5: norm(x, 1e-5) * w + b,
            "Use the eps you are given (here it is not 1e-5).",
        ),
    ]


def _layer_norm_inputs() -> list[
    tuple[str, torch.Tensor, torch.Tensor, torch.Tensor, float]
]:
    d = 6
    # float64, so that rounding does not blur the difference that eps makes
    near_constant = torch.tensor(
        [[1.0, 1.001, 0.999, 1.0005, 0.9995, 1.0]], dtype=torch.float64
    )
    ones64, zeros64 = (
        torch.ones(d, dtype=torch.float64),
        torch.zeros(d, dtype=torch.float64),
    )
    return [
        (
            "x of shape (3, 4), γ = 1, β = 0",
            torch.randn(3, 4),
            torch.ones(4),
            torch.zeros(4),
            1e-5,
        ),
        (
            "x of shape (2, 5, 6), random γ and β",
            3 * torch.randn(2, 5, 6) + 2,
            torch.randn(d),
            torch.randn(d),
            1e-5,
        ),
        (
            "a constant row (variance 0): the output is β",
            torch.full((1, 4), 7.0),
            torch.ones(4),
            torch.arange(4.0),
            1e-5,
        ),
        (
            "a nearly constant row (variance 5e-7, smaller than eps)",
            near_constant,
            ones64,
            zeros64,
            1e-5,
        ),
        ("eps = 0.1", torch.randn(4, 3), torch.ones(3), torch.zeros(3), 0.1),
    ]


check_layer_norm = compare(
    "layer_norm",
    _layer_norm_reference,
    lambda: [case(x, w, b, eps, why=why) for why, x, w, b, eps in _layer_norm_inputs()],
    mistakes=_layer_norm_mistakes(),
    hint="y = (x - μ) / √(σ² + eps) · weight + bias, with μ and the biased σ² over the last axis.",
    what="The normalised x",
    withhold=_LAYER_NORM,
    one_call=_LAYER_NORM_CALLS,
)


def _layer_norm_module_cases(LayerNorm) -> tuple[int, int]:
    d = 6
    label = f"LayerNorm({d})"
    layer = call(LayerNorm, d, input=label)
    if not isinstance(layer, nn.Module):
        raise Mismatch(
            f"{label} should create an nn.Module.",
            input=label,
            got=show(layer),
            hint="Subclass torch.nn.Module and call super().__init__() first.",
        )
    for name, init in (("weight", torch.ones(d)), ("bias", torch.zeros(d))):
        p = getattr(layer, name, None)
        if not isinstance(p, nn.Parameter):
            raise Mismatch(
                f"The layer needs a parameter `{name}`, so that training can update it.",
                input=label,
                expected=f"an nn.Parameter of shape ({d},)",
                got=show(p),
                hint="A tensor becomes a parameter of the module when wrapped in nn.Parameter(...).",
            )
        expect(
            p.detach(),
            init,
            input=label,
            what=f"The initial `{name}`",
            atol=0,
            rtol=0,
            hint="A fresh layer only normalises: γ starts at ones and β at zeros.",
        )
    inputs = _layer_norm_inputs()
    # new on every run: width, eps, and rows whose spread is near eps
    with hidden_inputs() as seed:
        d_hidden, eps_hidden = (
            int(torch.randint(2, 13, ())),
            round(float(torch.empty(()).uniform_(0.01, 1.0)), 3),
        )
        x_hidden = torch.randn(3, 1, dtype=torch.float64) + 0.3 * torch.randn(
            3, d_hidden, dtype=torch.float64
        )
        gamma, beta = (
            torch.randn(d_hidden, dtype=torch.float64),
            torch.randn(d_hidden, dtype=torch.float64),
        )
    inputs.append(
        (f"a hidden random case, seed {seed}", x_hidden, gamma, beta, eps_hidden)
    )
    for why, x, weight, bias, eps in inputs:
        layer = _expect_normalises(LayerNorm, why, x, weight, bias, eps)
    # Gradients must reach γ and β.
    layer.zero_grad()
    x = torch.randn(3, layer.weight.shape[0], dtype=layer.weight.dtype)
    label = f"x of shape {tuple(x.shape)}; then out.sum().backward()"
    out = call(layer, x, input=label)
    try:
        out.sum().backward()
    except Exception as e:
        raise Mismatch(
            f"Backpropagating through your output raised {type(e).__name__}: {e}",
            input=label,
        ) from e
    if layer.bias.grad is None or layer.weight.grad is None:
        raise Mismatch(
            "No gradient reached weight and bias.",
            input=label,
            hint="Use the parameters themselves in forward (not .data or copies).",
        )
    w = weight.clone().requires_grad_()
    _layer_norm_reference(x, w, bias, eps).sum().backward()
    expect(
        layer.weight.grad,
        w.grad,
        input=label,
        what="weight.grad",
        hint="The gradient of γ is the sum of the normalised x.",
    )
    # One training step beside PyTorch's LayerNorm given the same weights.
    d = layer.weight.shape[0]
    theirs = nn.LayerNorm(d, eps=eps).to(layer.weight.dtype)
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)
        theirs.weight.copy_(weight)
        theirs.bias.copy_(bias)
    layer.zero_grad()
    expect_trains_like(
        layer,
        theirs,
        torch.randn(4, d, dtype=layer.weight.dtype),
        input=f"LayerNorm({d}, eps={eps})",
    )
    return 3 + len(inputs), 1


def _expect_normalises(
    LayerNorm, why: str, x: torch.Tensor, weight, bias, eps: float
) -> nn.Module:
    """The student's LayerNorm of x's width, given ``weight`` and ``bias``, normalises ``x`` (the layer returned)."""
    label = (
        f"LayerNorm({x.shape[-1]}, eps={eps}) with weight={weight.tolist()}, bias={bias.tolist()}, "
        f"applied to x of shape {tuple(x.shape)}  ({why})"
    )
    layer = call(LayerNorm, x.shape[-1], eps=eps, input=label).to(x.dtype)
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)
        got = call(layer, x.clone(), input=label)
    expect(
        got,
        _layer_norm_reference(x, weight, bias, eps),
        input=label,
        what="The output",
        mistakes=[
            (partial(w, x, weight, bias, eps), h) for w, h in _layer_norm_mistakes()
        ],
        hint="y = (x - μ) / √(σ² + eps) · self.weight + self.bias over the last axis.",
    )
    return layer


check_layer_norm_module = Checker(
    "LayerNorm",
    _layer_norm_module_cases,
    withhold=_LAYER_NORM,
    one_call=_LAYER_NORM_CALLS,
)


# ============================================================================================================
# --- encoder block (exercise ex-encoder-block; added by the ch4to5 work, issue 7 §3) ------------------------
# ============================================================================================================
#
# The student writes a post-norm ``EncoderBlock(d_model, n_heads, d_ff)`` with the sub-modules named as in
# ``nn.TransformerEncoderLayer``: ``self_attn`` (a multi-head attention with ``q_proj, k_proj, v_proj,
# out_proj``, e.g. ``companion.attention.MultiHeadAttention``), ``linear1``, ``linear2``, ``norm1``, ``norm2``.
# The checker copies the weights of a PyTorch layer (dropout 0) into those sub-modules and compares outputs.

_ENCODER_PARTS = ("self_attn", "linear1", "linear2", "norm1", "norm2")


def _copy_parameter(
    target: object, source: torch.Tensor, where: str, label: str
) -> None:
    if not isinstance(target, torch.Tensor) or tuple(target.shape) != tuple(
        source.shape
    ):
        raise Mismatch(
            f"`{where}` should be a parameter of shape {tuple(source.shape)} to receive PyTorch's weights.",
            input=label,
            expected=f"shape {tuple(source.shape)}",
            got=show(target),
            hint="Build the sub-modules as the exercise says: self_attn = MultiHeadAttention(d_model, n_heads), "
            "linear1 = nn.Linear(d_model, d_ff), linear2 = nn.Linear(d_ff, d_model), norm1 = norm2 = "
            "nn.LayerNorm(d_model).",
        )
    with torch.no_grad():
        target.copy_(source)


def _copy_encoder_layer(
    block: nn.Module, theirs: nn.TransformerEncoderLayer, label: str
) -> None:
    """Copy ``theirs``' weights into the student's ``block`` (raising Mismatch for a missing part)."""
    for name in _ENCODER_PARTS:
        if not isinstance(getattr(block, name, None), nn.Module):
            raise Mismatch(
                f"The block needs a sub-module `{name}` (the names of nn.TransformerEncoderLayer).",
                input=label,
                got=show(getattr(block, name, None)),
                hint="self.self_attn, self.linear1, self.linear2, self.norm1, self.norm2.",
            )
    d = theirs.self_attn.embed_dim
    weights = theirs.self_attn.in_proj_weight.detach().split(d)
    biases = theirs.self_attn.in_proj_bias.detach().split(d)
    for i, proj in enumerate(("q_proj", "k_proj", "v_proj")):
        layer = getattr(block.self_attn, proj, None)
        _copy_parameter(
            getattr(layer, "weight", None),
            weights[i],
            f"self_attn.{proj}.weight",
            label,
        )
        _copy_parameter(
            getattr(layer, "bias", None), biases[i], f"self_attn.{proj}.bias", label
        )
    for mine, source in (
        ("self_attn.out_proj", theirs.self_attn.out_proj),
        ("linear1", theirs.linear1),
        ("linear2", theirs.linear2),
        ("norm1", theirs.norm1),
        ("norm2", theirs.norm2),
    ):
        target = block
        for part in mine.split("."):
            target = getattr(target, part, None)
        _copy_parameter(
            getattr(target, "weight", None),
            source.weight.detach(),
            f"{mine}.weight",
            label,
        )
        _copy_parameter(
            getattr(target, "bias", None), source.bias.detach(), f"{mine}.bias", label
        )


def _encoder_mistakes(
    theirs: nn.TransformerEncoderLayer, x: torch.Tensor
) -> list[tuple[Callable[[], torch.Tensor], str]]:
    def attend(h: torch.Tensor) -> torch.Tensor:
        return theirs.self_attn(h, h, h, need_weights=False)[0]

    def ffn(h: torch.Tensor, relu: bool = True) -> torch.Tensor:
        hidden = theirs.linear1(h)
        return theirs.linear2(torch.relu(hidden) if relu else hidden)

    n1, n2 = theirs.norm1, theirs.norm2
    return [
        (lambda: (lambda h: h + ffn(n2(h)))(x + attend(n1(x))),
         "That is pre-norm (x + sublayer(norm(x))). The exercise asks for the paper's post-norm: "
         "x = norm1(x + self_attn(x)), then x = norm2(x + FFN(x))."),
        (lambda: n2(n1(attend(x)) + ffn(n1(attend(x)))),
         "Add the input to the attention's output before norm1: x = norm1(x + self_attn(x)) (the residual)."),
        (lambda: n2(ffn(n1(x + attend(x)))),
         "Add the FFN's input to its output before norm2: x = norm2(x + FFN(x)) (the second residual)."),
        (lambda: (lambda h: n2(h + ffn(h, relu=False)))(n1(x + attend(x))),
         "The FFN applies a ReLU between its two linear layers: linear2(relu(linear1(x)))."),
        (lambda: (lambda h: n1(h + ffn(h)))(n2(x + attend(x))),
         "norm1 follows the attention and norm2 the FFN: they hold different weights, so the order matters."),
        (lambda: n1(x + attend(x)), "After the attention sub-layer comes the feed-forward sub-layer."),
    ]  # fmt: skip


def _encoder_block_cases(EncoderBlock) -> tuple[int, int]:
    generator = torch.Generator().manual_seed(5)
    shapes = [("one batch x", (2, 5), 1.0), ("x scaled by 10", (1, 3), 10.0)]
    block, theirs, sample, label = _expect_encodes(
        EncoderBlock, 8, 2, 16, generator, shapes, ""
    )
    expect_trains_like(block, theirs, sample(2, 4, 8), input=label)
    # new on every run: sizes (heads other than the shown 2), weights and inputs
    with hidden_inputs() as seed:
        d_head, d_ff = int(torch.randint(3, 6, ())), int(torch.randint(4, 25, ()))
        n_heads = (1, 3, 4)[int(torch.randint(3, ()))]
        hidden = torch.Generator().manual_seed(int(torch.randint(2**31, ())))
        # one position shows no heads
        size = (int(torch.randint(1, 4, ())), int(torch.randint(2, 7, ())))
    note = f"  (a hidden random case, seed {seed})"
    _expect_encodes(
        EncoderBlock, n_heads * d_head, n_heads, d_ff, hidden, [("x", size, 1.0)], note
    )
    return 2 + len(shapes) + 1, 1


def _expect_encodes(
    EncoderBlock, d_model: int, n_heads: int, d_ff: int, generator, shapes, note: str
):
    """The student's block, given the weights of PyTorch's layer of these sizes, computes what it does on inputs
    of each ``(what, (batch, n), scale)``; the block, PyTorch's layer, a sampler and the label are returned."""
    label = f"EncoderBlock(d_model={d_model}, n_heads={n_heads}, d_ff={d_ff}){note}"
    block = call(EncoderBlock, d_model, n_heads, d_ff, input=label)
    if not isinstance(block, nn.Module):
        raise Mismatch(
            f"{label} should create an nn.Module.",
            input=label,
            got=show(block),
            hint="Subclass torch.nn.Module and call super().__init__() first.",
        )
    theirs = nn.TransformerEncoderLayer(
        d_model, n_heads, d_ff, dropout=0.0, batch_first=True
    ).double()
    # LayerNorms start at 1 and 0: make them distinct so that swapping them shows
    with torch.no_grad():
        for norm in (theirs.norm1, theirs.norm2):
            norm.weight.copy_(
                1 + 0.5 * torch.randn(d_model, generator=generator, dtype=torch.float64)
            )
            norm.bias.copy_(
                0.5 * torch.randn(d_model, generator=generator, dtype=torch.float64)
            )
    theirs.eval()
    block.double()
    _copy_encoder_layer(block, theirs, label)
    block.eval()

    def sample(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    for what, (batch, n), scale in shapes:
        x = scale * sample(batch, n, d_model)
        description = (
            f"{what} of shape {(batch, n, d_model)}, with the weights of "
            f"nn.TransformerEncoderLayer({d_model}, {n_heads}, {d_ff}){note}"
        )
        with torch.no_grad():
            got = call(block, x.clone(), input=description)
            expected = theirs(x)
            expect(
                got, expected, mistakes=_encoder_mistakes(theirs, x), input=description, what="The output",
                hint="A post-norm block: each sub-layer's output is added to its input and the sum normalised; "
                     "self-attention first, then the feed-forward network (ReLU between its two linear layers).",
            )  # fmt: skip
    return block, theirs, sample, label


check_encoder_block = Checker(
    "EncoderBlock",
    _encoder_block_cases,
    withhold=[
        "companion.transformer.EncoderBlock.__init__",
        "companion.transformer.EncoderBlock.forward",
    ],
    one_call=[
        OneCall(
            "torch.nn.TransformerEncoderLayer",
            instead="the attention module, nn.Linear, nn.LayerNorm, relu",
        )
    ],
)
__all__ += ["check_encoder_block"]


# --- label smoothing ----------------------------------------------------------------------------------------


def _smoothed(
    logits,
    y,
    epsilon,
    ignore_index=-100,
    *,
    others=False,
    count_all=False,
    log=True,
    uniform=True,
):
    """The label-smoothed cross-entropy and some typical mistakes in it."""
    kept = y != ignore_index
    n, v = logits.shape
    one_hot = F.one_hot(y.clamp(min=0) * kept, v).to(logits.dtype)
    if others:  # ε over the V - 1 wrong classes, 1 - ε on the right one
        q = (1 - epsilon) * one_hot + epsilon / (v - 1) * (1 - one_hot)
    else:
        q = (1 - epsilon) * one_hot + (epsilon / v if uniform else 0.0)
    scores = F.log_softmax(logits, dim=-1) if log else logits
    per_row = -(q * scores).sum(dim=-1) * kept
    return per_row.sum() / (n if count_all else kept.sum())


def _label_smoothing_cases():
    logits, y = 2 * torch.randn(12, 5), torch.randint(1, 5, (12,))
    y[[2, 7]] = 0
    return [
        case(
            torch.randn(4, 6),
            torch.tensor([0, 5, 2, 2]),
            0.1,
            why="4 rows, V = 6, ε = 0.1, nothing ignored",
        ),
        case(
            logits,
            y,
            0.2,
            ignore_index=0,
            why="ε = 0.2; rows 2 and 7 are <pad> (id 0), left out",
        ),
        case(
            torch.randn(3, 15),
            torch.tensor([3, -100, 14]),
            0.1,
            why="the default ignore_index = -100",
        ),
        case(
            3 * torch.randn(8, 4),
            torch.randint(0, 4, (8,)),
            0.0,
            why="ε = 0: the plain cross-entropy",
        ),
    ]


check_label_smoothed_cross_entropy = compare(
    "label_smoothed_cross_entropy",
    companion_transformer.label_smoothed_cross_entropy,
    _label_smoothing_cases,
    mistakes=[
        (
            partial(_smoothed, others=True),
            "Spread ε over all V classes, the right one included (PyTorch's label_smoothing): "
            "q = 1 - ε + ε/V on the right class and ε/V on each other.",
        ),
        (
            lambda logits, y, epsilon, ignore_index=-100: _smoothed(
                logits, y, 0.0, ignore_index
            ),
            "No smoothing: the target must be q = (1 - ε) one_hot(y) + ε/V, not the one-hot vector.",
        ),
        (
            partial(_smoothed, uniform=False),
            "Add ε/V to every class: (1 - ε) one_hot(y) alone does not sum to 1.",
        ),
        (
            partial(_smoothed, count_all=True),
            "Average over the kept rows only: the ignored (padding) rows count neither in the sum nor in the "
            "number of rows.",
        ),
        (
            partial(_smoothed, log=False),
            "Take the log-probabilities, log_softmax(logits), not the raw logits.",
        ),
        (
            lambda logits, y, epsilon, ignore_index=-100: (
                _smoothed(logits, y, epsilon, ignore_index) * (y != ignore_index).sum()
            ),
            "Average over the rows (F.cross_entropy's default), do not sum.",
        ),
    ],
    hint="loss = mean over the rows with y != ignore_index of -Σ_v q_v log softmax(logits)_v, "
    "q = (1 - ε) one_hot(y) + ε/V.",
    what="The loss",
    one_call=[
        OneCall(
            "torch.nn.functional.cross_entropy",
            keyword="label_smoothing",
            instead="log_softmax, one_hot, a weighted sum and a mean; F.cross_entropy without label_smoothing "
            "is fine",
        )
    ],
)
__all__ += ["check_label_smoothed_cross_entropy"]
