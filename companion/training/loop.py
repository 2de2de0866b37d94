"""The training loop and its learning-rate schedules (re-exported by :mod:`companion.training`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from ..validation import (
    describe,
    require_instance,
    require_int,
    require_number,
)

__all__ = [
    "train",
    "train_step",
    "LossFn",
    "Update",
    "warmup_cosine_schedule",
    "transformer_schedule",
]

# loss_fn(model, batch) → a scalar loss tensor
LossFn = Callable[[nn.Module, Any], torch.Tensor]


@dataclass(frozen=True)
class Update:
    """How a step updates the parameters: the optimizer, the schedule, the gradient clip."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None  # stepped after each
    grad_clip: float | None = 1.0  # the global gradient norm's bound; None: no clip

    def __post_init__(self) -> None:
        require_instance(self.optimizer, torch.optim.Optimizer, "optimizer")
        if self.grad_clip is not None:
            require_number(self.grad_clip, "grad_clip", low=0, low_open=True)


def _scalar_loss(loss_fn: LossFn) -> LossFn:
    """``loss_fn``, checked to return a scalar tensor."""

    def checked(model: nn.Module, batch: Any) -> torch.Tensor:
        loss = loss_fn(model, batch)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise TypeError(
                f"loss_fn must return a scalar tensor, got {describe(loss)}"
            )
        return loss

    return checked


def _batch_stream(
    batches: Iterable[Any] | Callable[[int], Any],
) -> Callable[[int], Any]:
    """Turn ``batches`` into a function ``step → batch``.

    A callable is used as it is; an iterable is iterated, and iterated again from the start when it runs out
    (so a list or a ``DataLoader`` serves as many epochs as there are steps).
    """
    if callable(batches) and not isinstance(batches, Iterable):
        return batches
    if not isinstance(batches, Iterable):
        raise TypeError(
            f"batches must be an iterable of batches or a function step -> batch, got {describe(batches)}"
        )
    iterator: Iterator[Any] = iter(batches)
    # a list or DataLoader can start again, a generator cannot
    restartable = iterator is not batches

    def next_batch(step: int) -> Any:
        nonlocal iterator
        try:
            return next(iterator)
        except StopIteration:
            if not restartable:
                raise ValueError(
                    f"batches ran out after {step} steps; pass a list, a DataLoader or a function"
                ) from None
            iterator = iter(batches)
            try:
                return next(iterator)
            except StopIteration:
                raise ValueError("batches is empty") from None

    return next_batch


def warmup_cosine_schedule(
    optimizer: torch.optim.Optimizer,
    *,
    warmup_steps: int,
    total_steps: int,
    min_factor: float = 0.0,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Learning rate: a linear warm-up over ``warmup_steps``, then a cosine decay to ``min_factor · lr``.

        factor(t) = (t + 1) / warmup_steps                                       for t < warmup_steps
        factor(t) = min_factor + (1 - min_factor) · (1 + cos(π · progress)) / 2   afterwards

    with ``progress = (t - warmup_steps) / (total_steps - warmup_steps)``. Step it once per optimizer step
    (:func:`train` does).
    """
    require_int(total_steps, "total_steps", low=1)
    require_int(
        warmup_steps, "warmup_steps", low=0, high=total_steps, why="at most total_steps"
    )

    def factor(t: int) -> float:
        if t < warmup_steps:
            return (t + 1) / warmup_steps
        progress = min(1.0, (t - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_factor + (1.0 - min_factor) * 0.5 * (
            1.0 + math.cos(math.pi * progress)
        )

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def transformer_schedule(
    optimizer: torch.optim.Optimizer, *, d_model: int, warmup_steps: int = 4000
) -> torch.optim.lr_scheduler.LambdaLR:
    """The learning rate of *Attention is all you need* (its equation 3), for step ``s = t + 1 = 1, 2, …``:

        lrate(s) = d_model^(-1/2) · min(s^(-1/2), s · warmup_steps^(-3/2))

    a linear warm-up for ``warmup_steps`` steps, then a decay like ``1/√s``; the peak, at ``s = warmup_steps``,
    is ``(d_model · warmup_steps)^(-1/2)``. The rate is set as a factor of the optimizer's ``lr``, so create the
    optimizer with ``lr=1.0`` to get exactly this formula (the paper used Adam with β₁ = 0.9, β₂ = 0.98,
    ε = 10⁻⁹, ``d_model = 512`` and 4,000 warm-up steps).
    """
    require_int(d_model, "d_model", low=1)
    require_int(warmup_steps, "warmup_steps", low=1)

    def factor(t: int) -> float:
        s = t + 1
        return d_model**-0.5 * min(s**-0.5, s * warmup_steps**-1.5)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def train_step(model: nn.Module, batch: Any, loss_fn: LossFn, update: Update) -> float:
    """Loss, gradients, clipping, update, next learning rate; returns the loss."""
    loss = loss_fn(model, batch)
    update.optimizer.zero_grad(set_to_none=True)
    loss.backward()  # gradients of the loss with respect to every parameter
    if update.grad_clip is not None:  # to norm ≤ grad_clip
        nn.utils.clip_grad_norm_(model.parameters(), update.grad_clip)
    update.optimizer.step()  # update the parameters
    if update.scheduler is not None:
        update.scheduler.step()  # the learning rate of the next step
    return float(loss.detach())


def train(
    model: nn.Module,
    batches: Iterable[Any] | Callable[[int], Any],
    loss_fn: LossFn,
    *,
    steps: int,
    optimizer: torch.optim.Optimizer | None = None,
    lr: float = 1e-3,
    weight_decay: float = 0.0,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    grad_clip: float | None = 1.0,
    seed: int | None = None,
    progress: bool = True,
    description: str = "training",
    callback: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Train ``model`` for ``steps`` optimizer steps and return the loss of every step.

    Each step is :func:`train_step`: ``loss = loss_fn(model, batch)``; ``loss.backward()``; clip the gradient
    norm; optimizer step; scheduler step. The model is in training mode during the loop and goes back to the
    mode it had.

    Args:
        model: the module to train.
        batches: an iterable of batches (restarted when it runs out, e.g. a list or a ``DataLoader``) or a
            function ``step → batch``.
        loss_fn: ``loss_fn(model, batch)`` → a scalar tensor.
        steps: number of optimizer steps.
        optimizer: default ``AdamW(model.parameters(), lr, weight_decay)``.
        lr: learning rate of the default optimizer.
        weight_decay: weight decay of the default optimizer.
        scheduler: optional learning-rate scheduler, stepped after every optimizer step.
        grad_clip: clip the global gradient norm to this value (``None``: no clipping).
        seed: seed ``torch.manual_seed`` first, so that dropout and random batches repeat exactly.
        progress: show a tqdm progress bar with the running loss.
        description: the progress bar's label.
        callback: ``callback(step, loss)`` called after every step (e.g. to evaluate now and then).

    Returns:
        The list of the ``steps`` training losses, as Python floats.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {describe(model)}")
    require_int(steps, "steps", low=1)
    if not callable(loss_fn):
        raise TypeError(
            f"loss_fn must be a function (model, batch) -> loss, got {describe(loss_fn)}"
        )
    if seed is not None:
        torch.manual_seed(seed)
    if optimizer is None:
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("model has no trainable parameters")
        optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    next_batch = _batch_stream(batches)
    update = Update(optimizer, scheduler, grad_clip)
    loss_fn = _scalar_loss(loss_fn)

    history: list[float] = []
    was_training = model.training
    model.train()
    bar = tqdm(range(steps), desc=description, disable=not progress, leave=True)
    try:
        for step in bar:
            value = train_step(model, next_batch(step), loss_fn, update)
            if not math.isfinite(value):
                raise FloatingPointError(
                    f"the loss became {value} at step {step}; try a smaller learning rate"
                )
            history.append(value)
            if progress and (step % 10 == 0 or step == steps - 1):
                bar.set_postfix(loss=f"{value:.4f}")
            if callback is not None:
                callback(step, value)
    finally:
        bar.close()
        model.train(was_training)
    return history
