"""Gradient checks for an answer that is a loss to train with: it must carry gradient, and give every model
argument the reference loss's gradients."""

from __future__ import annotations

from collections.abc import Sequence
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
            raise Mismatch(
                f"{what} {problem}, with no gradient.",
                input=label,
                got=show(got),
                hint=_NO_GRADIENT_HINT,
            )
        return  # the comparison of values says what is wrong
    if got.numel() == 1 and (not got.requires_grad or got.grad_fn is None):
        problem = agree(what, "carries no gradient")
        raise Mismatch(
            f"{what} {problem}.", input=label, got=show(got), hint=_NO_GRADIENT_HINT
        )


def trainable(value: Any) -> Any:
    """``value`` with every floating-point tensor (in lists and tuples too) a leaf that requires grad: the
    inputs a loss must reach (:func:`expect_gradients` compares their gradients with the reference's)."""
    if (
        isinstance(value, torch.Tensor)
        and value.dtype.is_floating_point
        and not value.requires_grad
    ):
        return value.detach().clone().requires_grad_()
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(trainable(v) for v in value)
    return value


def expect_gradients(
    t: Trial, label: str, atol: float, rtol: float, names: Sequence[str] = ()
) -> None:
    """Backpropagate the student's result and the reference's: every model argument and every input tensor
    that requires grad gets the same gradients (a ``.detach()`` on the way is caught here)."""
    theirs = [
        a
        for a in (*t.student_args[0], *t.student_args[1].values())
        if isinstance(a, nn.Module)
    ]
    ours = [
        a
        for a in (*t.reference_args[0], *t.reference_args[1].values())
        if isinstance(a, nn.Module)
    ]
    expect_loss_gradients(t.got, t.expected, _leaves(t.student_args, names), _leaves(t.reference_args, names),
                          theirs, ours, label, atol, rtol)  # fmt: skip


def _leaves(
    arguments: tuple[list[Any], dict[str, Any]], names: Sequence[str]
) -> list[tuple[str, torch.Tensor]]:
    names = [
        f"`{names[i]}`" if i < len(names) else f"argument {i + 1}"
        for i in range(len(arguments[0]))
    ]
    names += [f"`{k}`" for k in arguments[1]]
    return [(n, a) for n, a in zip(names, [*arguments[0], *arguments[1].values()], strict=True)
            if isinstance(a, torch.Tensor) and a.requires_grad and a.is_leaf]  # fmt: skip


def expect_loss_gradients(
    got: Any,
    expected: torch.Tensor,
    inputs: list[tuple[str, torch.Tensor]],
    reference_inputs: list[tuple[str, torch.Tensor]],
    models: list[nn.Module],
    reference_models: list[nn.Module],
    label: str,
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> None:
    """A loss to train with: ``got`` must be a one-number tensor that carries gradient, and its backward must
    give each input leaf (``(name, tensor)``, the student's copies) and each model's parameters what the
    reference loss ``expected`` gives theirs (computed on ``reference_inputs`` and ``reference_models``)."""
    expect_gradient_kept(got, label, "The loss")
    if not isinstance(got, torch.Tensor) or got.numel() != 1:
        return
    theirs, ours = models, reference_models
    try:
        got.reshape(()).backward()
    except Exception as e:
        raise Mismatch(
            f"Calling .backward() on your result raised {type(e).__name__}: {safe_str(e)}",
            input=label,
            hint=_NO_GRADIENT_HINT,
        ) from e
    expected.reshape(()).backward()
    for mine, model in zip(theirs, ours, strict=True):
        for (name, p), (_, q) in zip(
            mine.named_parameters(), model.named_parameters(), strict=True
        ):
            gp = p.grad if p.grad is not None else torch.zeros_like(p)
            gq = q.grad if q.grad is not None else torch.zeros_like(q)
            if not torch.allclose(gp, gq, atol=max(atol, 1e-5), rtol=max(rtol, 1e-4)):
                raise Mismatch(
                    f"The gradient of your result with respect to `{name}` is not the reference loss's.",
                    input=label,
                    hint="The value is right but the computation graph is not: compute the loss from the model's "
                    "output with differentiable operations only.",
                )
    for (name, mine), (_, ref) in zip(inputs, reference_inputs, strict=True):
        gm = mine.grad if mine.grad is not None else torch.zeros_like(mine)
        gr = ref.grad if ref.grad is not None else torch.zeros_like(ref)
        if not torch.allclose(
            gm.to(gr.dtype), gr, atol=max(atol, 1e-5), rtol=max(rtol, 1e-4)
        ):
            nothing = mine.grad is None or not mine.grad.any()
            how = (
                "zero: nothing flows back to it"
                if nothing
                else "not the reference loss's"
            )
            raise Mismatch(
                f"The gradient of your loss with respect to {name} is {how}.",
                input=label,
                expected=show(gr, 200),
                got=show(gm, 200),
                hint="Training follows these gradients: compute the loss from every input with differentiable "
                "operations (no .detach(), .item(), .data or torch.no_grad() on the way).",
            )
