"""Training a student's module one step beside the reference: the same weights, the same input and loss, one
step of SGD each; then outputs, input gradients and outputs after the step must agree. This catches what an
evaluation-mode comparison cannot: dropout left in, an in-place operation that breaks backward, a parameter
that training cannot reach."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .calling import call
from .expectations import expect
from .verdicts import Mismatch


def expect_trains_like(
    mine: nn.Module,
    reference: nn.Module,
    x: torch.Tensor,
    *,
    input: str,
    lr: float = 0.1,
) -> None:
    """``mine`` (the student's module, already given the reference's weights) and ``reference`` are trained one
    SGD step on the loss ``(module(x) · w).sum()`` with a fixed random ``w``; raise :class:`Mismatch` where the
    output in training mode, the gradient reaching ``x`` or the output after the step differ."""
    label = f"{input}; training mode, loss = (output · w).sum() with a fixed random w, one SGD step (lr={lr})"
    mine.train()
    reference.train()
    ours_x, their_x = (
        x.detach().clone().requires_grad_(),
        x.detach().clone().requires_grad_(),
    )
    expected = reference(ours_x)
    got = call(mine, their_x, input=label)
    hint = "Training mode must compute what evaluation mode does here (the exercise leaves out dropout)."
    expect(got, expected, input=label, what="The output in training mode", hint=hint)
    w = torch.randn(
        expected.shape,
        dtype=expected.dtype,
        generator=torch.Generator().manual_seed(11),
    )
    (expected * w).sum().backward()
    call(lambda: (got * w).sum().backward(), input=label + ", then loss.backward()")
    _expect_gradient(their_x.grad, ours_x.grad, label)
    for module in (mine, reference):
        with torch.no_grad():
            for p in module.parameters():
                if p.grad is not None:
                    p -= lr * p.grad
    after = x.detach().flip(0) if x.shape[0] > 1 else 2 * x.detach()
    mine.eval()
    reference.eval()
    with torch.no_grad():
        expect(call(mine, after.clone(), input=label), reference(after), input=label + ", then the output after it",
               what="The output after one training step",
               hint="Every parameter must take part in forward through differentiable operations, so that "
                    "training moves it as it moves the reference's.")  # fmt: skip


def _expect_gradient(got: Any, expected: torch.Tensor, label: str) -> None:
    if got is None:
        raise Mismatch(
            "No gradient reached the input x.",
            input=label,
            hint="Compute the output from x with differentiable operations (no .detach(), .data or no_grad).",
        )
    expect(got, expected, input=label, what="The gradient reaching x",
           hint="The forward pass is right but its graph is not: look for an in-place operation (+=, .add_) on a "
                "tensor that backward still needs; write x = x + sublayer(x).")  # fmt: skip
