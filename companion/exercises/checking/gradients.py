"""Gradient checks for an answer that is a loss to train with: it must carry gradient, and give every model
argument the reference loss's gradients."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .differences import number
from .printing import agree, safe_str, show
from .trials import Trial
from .verdicts import Mismatch

_NO_GRADIENT_HINT = (
    "The loss is what training calls .backward() on: keep it a tensor connected to the model's parameters (no "
    ".item(), float(), .detach(), .numpy() or torch.no_grad())."
)


def expect_gradient_kept(got: Any, label: str, what: str) -> None:
    """A loss to train with must be a tensor that carries gradient: not a number, not computed under no_grad."""
    if not isinstance(got, torch.Tensor):
        if number(got) is not None:
            problem = agree(what, "is a plain number")
            raise Mismatch(f"{what} {problem}, with no gradient.", input=label, got=show(got), hint=_NO_GRADIENT_HINT)
        return  # the comparison of values says what is wrong
    if got.numel() == 1 and (not got.requires_grad or got.grad_fn is None):
        problem = agree(what, "carries no gradient")
        raise Mismatch(f"{what} {problem}.", input=label, got=show(got), hint=_NO_GRADIENT_HINT)


def expect_gradients(t: Trial, label: str, atol: float, rtol: float) -> None:
    """Backpropagate the student's result and the reference's: every model argument gets the same gradients."""
    theirs = [a for a in (*t.student_args[0], *t.student_args[1].values()) if isinstance(a, nn.Module)]
    ours = [a for a in (*t.reference_args[0], *t.reference_args[1].values()) if isinstance(a, nn.Module)]
    try:
        t.got.backward()
    except Exception as e:
        raise Mismatch(
            f"Calling .backward() on your result raised {type(e).__name__}: {safe_str(e)}",
            input=label,
            hint=_NO_GRADIENT_HINT,
        ) from e
    t.expected.backward()
    for mine, model in zip(theirs, ours, strict=True):
        for (name, p), (_, q) in zip(mine.named_parameters(), model.named_parameters(), strict=True):
            gp = p.grad if p.grad is not None else torch.zeros_like(p)
            gq = q.grad if q.grad is not None else torch.zeros_like(q)
            if not torch.allclose(gp, gq, atol=max(atol, 1e-5), rtol=max(rtol, 1e-4)):
                raise Mismatch(
                    f"The gradient of your result with respect to `{name}` is not the reference loss's.",
                    input=label,
                    hint="The value is right but the computation graph is not: compute the loss from the model's "
                    "output with differentiable operations only.",
                )
