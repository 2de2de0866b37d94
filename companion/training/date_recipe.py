"""The recipe of chapter 5: the encoder-decoder that learns the dates task, its training and its scoring.

The data is :mod:`companion.data.date_task`; here are the model's hyperparameters (a
:class:`~companion.transformer.TransformerConfig` inside :class:`DateTaskConfig`, not a copy of its fields),
the training run (:func:`train_date_model`) and greedy decoding into ISO strings (:func:`decode_dates`,
:func:`exact_match_accuracy`). :func:`date_task_config` holds hyperparameters that reach 100% held-out exact
match in well under a minute of CPU training.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import torch
from torch import Tensor

from ..data.date_task import (
    DateDataset,
    Vocab,
    date_batches,
    make_date_dataset,
    source_vocab,
    target_vocab,
)
from ..decoding import Sampling
from ..transformer import EncoderDecoder, TransformerConfig, greedy_decode, seq2seq_loss
from .loop import train, warmup_cosine_schedule

__all__ = [
    "decode_dates",
    "exact_match_accuracy",
    "DateTaskConfig",
    "date_task_config",
    "train_date_model",
]

_MODEL_FIELDS = frozenset(f.name for f in dataclasses.fields(TransformerConfig))

# on_step(model, step, loss), called after every step
OnStep = Callable[[EncoderDecoder, int, float], None]
# what train_date_model returns: the trained model, its data, the loss of every step
DateRun = tuple[EncoderDecoder, DateDataset, list[float]]


def decode_dates(
    model: EncoderDecoder, data: DateDataset, src: Tensor, *, batch_size: int = 500
) -> list[str]:
    """Greedy-decode source ids ``(N, n_src)`` into ISO strings, ``batch_size`` rows at a time."""
    out: list[str] = []
    greedy = Sampling(11, temperature=0, eos_id=Vocab.eos_id)  # an ISO date: 10 + EOS
    for start in range(0, src.shape[0], batch_size):
        ids = greedy_decode(model, src[start : start + batch_size], greedy)
        out += [data.tgt_vocab.decode_text(row) for row in ids]
    return out


def exact_match_accuracy(
    model: EncoderDecoder, data: DateDataset, split: str = "test"
) -> float:
    """The fraction of ``split`` (``"test"`` or ``"train"``) pairs whose greedy decoding is exactly right."""
    if split not in ("test", "train"):
        raise ValueError(f"split must be 'test' or 'train', got {split!r}")
    src, pairs = (
        (data.test_src, data.test_pairs)
        if split == "test"
        else (data.train_src, data.train_pairs)
    )
    guesses = decode_dates(model, data, src)
    return sum(g == iso for g, (_, iso) in zip(guesses, pairs, strict=True)) / len(
        pairs
    )


def _date_model() -> TransformerConfig:
    """The encoder-decoder of the word-level task: d_model = 64, 4 heads, 2 + 2 pre-norm blocks, d_ff = 256."""
    return TransformerConfig(
        src_vocab_size=len(source_vocab("word")),
        tgt_vocab_size=len(target_vocab()),
        d_model=64,
        n_heads=4,
        d_ff=256,
        context_length=64,
        pad_id=Vocab.pad_id,
        bos_id=Vocab.bos_id,
    )


@dataclass
class DateTaskConfig:
    """Data, model and training hyperparameters of the dates task (see :func:`date_task_config`).

    ``model`` is the encoder-decoder's configuration; :meth:`model_config` fits its vocabulary sizes and
    context length to a dataset. ``progress`` shows the training's progress bar.
    """

    n_train: int = 20000
    n_test: int = 1000
    level: str = "word"
    model: TransformerConfig = field(default_factory=_date_model)
    batch_size: int = 64
    steps: int = 700
    lr: float = 2e-3
    adam_betas: tuple[float, float] = (0.9, 0.98)
    warmup_steps: int = 100
    weight_decay: float = 0.01
    label_smoothing: float = 0.0
    seed: int = 0
    progress: bool = True

    def model_config(self, data: DateDataset) -> TransformerConfig:
        """``model`` with ``data``'s vocabulary sizes and a context that holds its longest source."""
        longest = max(
            self.model.context_length, data.train_src.shape[1], data.test_src.shape[1]
        )
        return dataclasses.replace(
            self.model,
            src_vocab_size=len(data.src_vocab),
            tgt_vocab_size=len(data.tgt_vocab),
            context_length=longest,
            pad_id=Vocab.pad_id,
            bos_id=Vocab.bos_id,
        )


def date_task_config(**overrides: object) -> DateTaskConfig:
    """Hyperparameters that learn the dates task on a CPU in well under a minute.

    With these defaults (word-level source, 20,000 training pairs, d_model = 64, 4 heads, 2 + 2 pre-norm
    blocks, d_ff = 256, dropout 0.1, batch 64, 700 AdamW steps at lr 2e-3 with the paper's β₂ = 0.98, 100
    warm-up steps and a cosine decay, no label smoothing; 245,455 parameters) the held-out exact-match
    accuracy on 1,000 unseen dates was 100% for seeds 0, 1 and 2. Training took 26 s on 2 idle CPU threads
    (43 s on one). With β₂ = 0.999, 400 steps gave 99.9%, 250 gave 99.5%, and a character-level source 99.3%
    in 700 steps. Any field can be overridden, a field of :class:`~companion.transformer.TransformerConfig`
    too, e.g. ``date_task_config(steps=400, level="char", d_model=32)``.
    """
    model = {
        name: overrides.pop(name) for name in list(overrides) if name in _MODEL_FIELDS
    }
    config = DateTaskConfig(**overrides)
    config.model = dataclasses.replace(config.model, **model)
    return config


def train_date_model(c: DateTaskConfig, on_step: OnStep | None = None) -> DateRun:
    """Train on the dates task, ``on_step(model, step, loss)`` after each step."""
    data = make_date_dataset(c.n_train, c.n_test, seed=c.seed, level=c.level)
    torch.manual_seed(c.seed)
    model = EncoderDecoder(c.model_config(data))
    adam = dict(lr=c.lr, betas=c.adam_betas, weight_decay=c.weight_decay)  # β₂ = 0.98
    optimizer = torch.optim.AdamW(model.parameters(), **adam)  # decoupled weight decay
    warm, total = c.warmup_steps, c.steps
    scheduler = warmup_cosine_schedule(optimizer, warmup_steps=warm, total_steps=total)
    loss_fn = partial(seq2seq_loss, label_smoothing=c.label_smoothing)
    history = train(
        model,
        date_batches(data, c.batch_size, seed=c.seed),  # step -> (src, tgt): 64 pairs
        loss_fn,
        steps=c.steps,
        optimizer=optimizer,
        scheduler=scheduler,
        seed=c.seed,
        progress=c.progress,
        description="dates",
        callback=on_step and (lambda step, loss: on_step(model, step, loss)),
    )
    model.eval()
    return model, data, history
