"""A small, reusable training loop: batches in, loss history out, with a progress bar.

Every model of the book trains with :func:`train`::

    history = train(model, batches, loss_fn, steps=500, lr=3e-4, seed=0)

``loss_fn(model, batch)`` returns a scalar loss, so the same loop serves the encoder–decoder of chapter 5,
the GPT of chapter 6, the BERT of chapter 7 and anything else: only the loss function changes.

The recipes (a model, its data and its training run) live beside the loop: word2vec's fast trainer of chapter 3
(:mod:`companion.training.word2vec`), the dates encoder-decoder of chapter 5
(:mod:`companion.training.date_recipe`), GPT's pretraining (chapter 6, :mod:`companion.training.gpt_pretraining`)
and associative recall (chapters 8-10, :mod:`companion.training.recall_recipe`). The windows of (input, target)
pairs that GPT's pretraining draws are :mod:`companion.training.windows`.
"""

from .averaging import LastCheckpoints, average_state_dicts
from .loop import (
    LossFn,
    Update,
    train,
    train_step,
    transformer_schedule,
    warmup_cosine_schedule,
)

__all__ = [
    "train",
    "train_step",
    "LossFn",
    "Update",
    "warmup_cosine_schedule",
    "transformer_schedule",
    "LastCheckpoints",
    "average_state_dicts",
]
