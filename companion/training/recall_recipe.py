"""The recipe of chapters 8-10: train a language model to answer associative recall.

The task and its scoring are :mod:`companion.data.recall_task`; :func:`train_recall` trains a model on fresh
batches of it and records held-out accuracy against CPU time.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import nn

from ..data.recall_task import TEST_SEED, RecallTask, make_recall_batch, recall_accuracy
from ..validation import (
    describe,
    require_int,
)
from .loop import train

__all__ = ["train_recall"]

_TASK = RecallTask()  # the default task


def train_recall(
    model: nn.Module,
    task: RecallTask = _TASK,
    *,
    steps: int,
    every: int = 50,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    test_size: int = 2000,
) -> list[tuple[int, float, float]]:
    """Train a language model (B, T) → (B, T, V) to answer recall; every ``every`` steps record
    (step, CPU seconds of training so far, accuracy on ``test_size`` held-out sequences).

    AdamW with learning rate ``lr``; step s trains on ``make_recall_batch(batch_size, task, seed=seed·steps + s)``
    with the cross-entropy of the answer at the last position only. The test set is the same for every
    ``seed`` (seed ``TEST_SEED``), and its measurement is not counted in the CPU time.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {describe(model)}")
    for name, value in (
        ("steps", steps),
        ("every", every),
        ("batch_size", batch_size),
        ("test_size", test_size),
    ):
        require_int(value, name, low=1)
    why = f"(seed + 1) * steps <= {TEST_SEED}, the test batches' seed"
    require_int(seed, "seed", low=0, high=TEST_SEED // steps - 1, why=why)
    test_tokens, test_answers = make_recall_batch(test_size, task, seed=TEST_SEED)
    history, clock = [], {"start": time.process_time(), "measuring": 0.0}

    def loss_fn(
        model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]
    ) -> torch.Tensor:
        tokens, answers = batch
        return F.cross_entropy(model(tokens)[:, -1], answers)  # only the answer counts

    def record(step: int, loss: float) -> None:
        if (step + 1) % every == 0 or step + 1 == steps:
            now = time.process_time()
            model.eval()
            with torch.no_grad():
                accuracy = recall_accuracy(model(test_tokens), test_answers)
            model.train()
            history.append(
                (step + 1, now - clock["start"] - clock["measuring"], accuracy)
            )
            clock["measuring"] += time.process_time() - now

    train(
        model,
        lambda step: make_recall_batch(batch_size, task, seed=seed * steps + step),
        loss_fn,
        steps=steps,
        lr=lr,
        progress=False,
        callback=record,
    )
    return history
