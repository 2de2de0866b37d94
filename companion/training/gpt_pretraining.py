"""Pretraining a GPT on a CPU (chapter 6): the text, batches of windows, the validation loss and the checkpoint.

- :func:`pydoc_text`: Python's own documentation (the help topics of CPython 3.11.7, about 465k characters of
  English, shipped with the package as :mod:`companion.data.python_docs`), the offline corpus of chapter 6;
- :func:`train_val_split`, :func:`random_windows`, :func:`evaluate_loss`: next-token data and its validation;
- :func:`save_checkpoint`, :func:`load_checkpoint`: a :class:`~companion.gpt.GPT` with its BPE tokenizer and
  loss history in one file; :func:`pretrained_pydoc_gpt` loads the one shipped with the package, made by
  ``tools/pretrain_gpt.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path
from typing import Any

import torch

from ..bpe import BPETokenizer
from ..data import python_docs
from ..gpt import GPT, GPTConfig, next_token_loss
from ..validation import (
    require_int,
    require_ndim,
    require_number,
    require_positive_ints,
)
from .loop import train, warmup_cosine_schedule
from .windows import NextTokenWindows

__all__ = [
    "pydoc_text",
    "text_sha256",
    "train_val_split",
    "random_windows",
    "evaluate_loss",
    "RECIPE",
    "pretrain",
    "save_checkpoint",
    "load_checkpoint",
    "PRETRAINED_PATH",
    "pretrained_pydoc_gpt",
]

#: The checkpoint that ``tools/pretrain_gpt.py`` writes and chapter 6 loads.
PRETRAINED_PATH = Path(__file__).parents[1] / "data" / "gpt_pydoc.pt"


def pydoc_text() -> str:
    """The help topics of CPython 3.11.7's documentation, sorted by name and joined by blank lines."""
    return python_docs.text("\n\n")


def text_sha256(text: str) -> str:
    """The SHA-256 of ``text`` in UTF-8 (a checkpoint records the digest of the text it was trained on)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def train_val_split(
    ids: list[int] | torch.Tensor, val_fraction: float = 0.1
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first 1 - val_fraction of the token ids for training, the rest for validation (1-D long tensors)."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    require_ndim(ids, "ids", 1, "(n,)")
    require_number(
        val_fraction, "val_fraction", low=0, high=1, low_open=True, high_open=True
    )
    cut = int(round(len(ids) * (1 - val_fraction)))
    return ids[:cut], ids[cut:]


def random_windows(
    ids: torch.Tensor, batch_size: int, length: int, generator: torch.Generator
) -> torch.Tensor:
    """``batch_size`` windows of ``length + 1`` consecutive ids at random starts: (B, length + 1), drawn with
    replacement from the windows of stride 1 (:class:`~companion.training.windows.NextTokenWindows`)."""
    require_int(batch_size, "batch_size", low=1)
    every_start = NextTokenWindows(ids, length, stride=1)
    return every_start.windows(
        torch.randint(0, len(every_start), (batch_size,), generator=generator)
    )


@torch.no_grad()
def evaluate_loss(
    model: GPT,
    ids: torch.Tensor,
    length: int,
    *,
    batch_size: int = 32,
    max_windows: int = 64,
) -> float:
    """The mean next-token loss (nats) over up to ``max_windows`` non-overlapping windows of ``ids``, in eval mode."""
    require_positive_ints(length=length, batch_size=batch_size, max_windows=max_windows)
    # windows that share no prediction
    disjoint = NextTokenWindows(ids, length, stride=length)
    n = min(max_windows, len(disjoint))
    windows = disjoint.windows(range(n))
    was_training = model.training
    model.eval()
    try:
        losses = [next_token_loss(model, windows[i : i + batch_size]) * len(windows[i : i + batch_size])
                  for i in range(0, n, batch_size)]  # fmt: skip
    finally:
        model.train(was_training)
    return float(sum(losses) / n)


#: The pretraining recipe of ``tools/pretrain_gpt.py`` (saved in its checkpoint): BPE vocabulary, window length,
#: batch, model size, AdamW with a warm-up and cosine schedule, seed, how often to measure the validation loss.
RECIPE: dict[str, Any] = dict(
    vocab_size=1024, length=128, batch_size=16, n_layers=4, n_heads=4, d_model=128, dropout=0.1,
    lr=2e-3, weight_decay=0.1, warmup_steps=50, seed=0, eval_every=50,
)  # fmt: skip


def pretrain(
    recipe: dict[str, Any],
    total_steps: int,
    train_ids: torch.Tensor,
    val_ids: torch.Tensor,
    *,
    run_steps: int | None = None,
    progress: bool = True,
) -> tuple[GPT, dict[str, list]]:
    """Train a fresh seeded GPT by ``recipe`` on random windows of ``train_ids``, the learning rate scheduled for
    ``total_steps``; stop after ``run_steps`` (default: all). Return the model (eval mode) and its history:
    ``train_loss`` (every step), ``val_steps`` and ``val_loss`` (every ``eval_every`` steps, and at 0)."""
    run_steps = total_steps if run_steps is None else run_steps
    torch.manual_seed(recipe["seed"])
    config = GPTConfig(
        vocab_size=recipe["vocab_size"], context_length=recipe["length"], n_layers=recipe["n_layers"],
        n_heads=recipe["n_heads"], d_model=recipe["d_model"], dropout=recipe["dropout"],
    )  # fmt: skip
    model = GPT(config)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=recipe["lr"], weight_decay=recipe["weight_decay"]
    )
    warmup = min(recipe["warmup_steps"], total_steps)
    scheduler = warmup_cosine_schedule(
        optimizer, warmup_steps=warmup, total_steps=total_steps, min_factor=0.1
    )
    generator = torch.Generator().manual_seed(recipe["seed"])
    val: dict[int, float] = {0: evaluate_loss(model, val_ids, recipe["length"])}

    def evaluate(step: int, loss: float) -> None:
        if (step + 1) % recipe["eval_every"] == 0 or step + 1 == run_steps:
            val[step + 1] = evaluate_loss(model, val_ids, recipe["length"])

    losses = train(
        model, lambda step: random_windows(train_ids, recipe["batch_size"], recipe["length"], generator),
        next_token_loss, steps=run_steps, optimizer=optimizer, scheduler=scheduler, seed=recipe["seed"],
        progress=progress, description="pretraining", callback=evaluate,
    )  # fmt: skip
    return model.eval(), {
        "train_loss": losses,
        "val_steps": list(val),
        "val_loss": list(val.values()),
    }


def save_checkpoint(
    path: str | os.PathLike[str], model: GPT, tokenizer: BPETokenizer, **extras: Any
) -> None:
    """Save the model's config and weights (float32), the tokenizer's merges and ``extras`` (plain Python values)."""
    # tied to embed.weight
    state = {
        k: v.float() for k, v in model.state_dict().items() if k != "lm_head.weight"
    }
    torch.save(
        {
            "config": dataclasses.asdict(model.config),
            "state_dict": state,
            "merges": [[a, b] for (a, b) in tokenizer.merges],
            "pattern": tokenizer.pattern,
            "special_tokens": list(tokenizer.special_tokens),
            "extras": extras,
        },
        path,
    )


def load_checkpoint(
    path: str | os.PathLike[str],
) -> tuple[GPT, BPETokenizer, dict[str, Any]]:
    """The model (eval mode), tokenizer and extras saved by :func:`save_checkpoint`."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    data = torch.load(path, map_location="cpu", weights_only=True)
    model = GPT(GPTConfig(**data["config"]))
    state = dict(data["state_dict"]) | {
        "lm_head.weight": data["state_dict"]["embed.weight"]
    }
    model.load_state_dict(state)
    merges = {(a, b): 256 + k for k, (a, b) in enumerate(data["merges"])}
    tokenizer = BPETokenizer(merges, data["pattern"], data["special_tokens"])
    return model.eval(), tokenizer, data["extras"]


def pretrained_pydoc_gpt() -> tuple[GPT, BPETokenizer, dict[str, Any]]:
    """The GPT pretrained on :func:`pydoc_text` by ``tools/pretrain_gpt.py`` (see :data:`PRETRAINED_PATH`)."""
    return load_checkpoint(PRETRAINED_PATH)
