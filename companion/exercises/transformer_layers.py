"""Checkers for chapter 5, *The Transformer*: layer normalisation and the encoder block.

==========================================  =================================================================
checker                                     what the student writes
==========================================  =================================================================
``check_layer_norm``                        ``layer_norm(x, weight, bias, eps=1e-5)`` over the last axis
``check_layer_norm_module``                 ``class LayerNorm(nn.Module)``: ``LayerNorm(d_model, eps=1e-5)``
                                            with parameters ``weight`` (γ) and ``bias`` (β)
``check_encoder_block``                     ``class EncoderBlock(nn.Module)``: a post-norm encoder layer,
                                            its sub-modules named as ``nn.TransformerEncoderLayer``'s
==========================================  =================================================================

:mod:`companion.exercises.transformer` re-exports them, with the chapter's other checkers.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import nn

from .checking import (
    Checker,
    Mismatch,
    OneCall,
    call,
    case,
    compare,
    expect,
    expect_module,
    show,
)
from .checking.random_state import hidden_inputs
from .checking.training import expect_trains_like

__all__ = ["check_layer_norm", "check_layer_norm_module", "check_encoder_block"]


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
    expect_module(layer, label)
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
    expect_module(block, label)
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
