"""Associative recall: a list of key–value pairs, then a query key; the answer is the value stored with it.

A sequence of ``m`` pairs and a query, with ``q`` one of the keys ``k_1 … k_m`` (all different)::

    k_1 v_1 k_2 v_2 … k_m v_m  QUERY  q        answer: the v_i with k_i = q

The answer is a token seen exactly once, possibly far back, and found by exact matching. Softmax attention
can put all its weight on that one position; linear attention must read it out of a state of fixed size
``r × d_v`` that sums every pair (chapter 8 measures the gap). Token ids: keys ``0 … n_keys − 1``, values
``n_keys … n_keys + n_values − 1``, and ``QUERY = n_keys + n_values``: ``vocab_size = n_keys + n_values + 1``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..validation import (
    describe,
    require_int,
    require_tensor,
)

__all__ = [
    "RecallTask",
    "make_recall_batch",
    "recall_answers",
    "recall_lm_targets",
    "recall_accuracy",
    "no_lookup_accuracy",
]

TEST_SEED = 10**9  # the test set's seed; training batches use seeds below it


@dataclass(frozen=True)
class RecallTask:
    """The sizes of an associative-recall task: ``n_pairs`` pairs drawn from ``n_keys`` keys and ``n_values`` values."""

    n_pairs: int = 8
    n_keys: int = 16
    n_values: int = 16

    def __post_init__(self) -> None:
        for name in ("n_pairs", "n_keys", "n_values"):
            require_int(getattr(self, name), name, low=1)
        if self.n_pairs > self.n_keys:
            raise ValueError(
                f"n_pairs must be at most n_keys = {self.n_keys} (keys differ), got {self.n_pairs}"
            )

    @property
    def query_token(self) -> int:
        return self.n_keys + self.n_values

    @property
    def vocab_size(self) -> int:
        return self.n_keys + self.n_values + 1

    @property
    def seq_len(self) -> int:
        """2 tokens per pair, then QUERY and the query key."""
        return 2 * self.n_pairs + 2


def make_recall_batch(
    n_examples: int, task: RecallTask = RecallTask(), *, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n_examples`` sequences (n_examples, 2m + 2) of pairs then a query, and their answers (n_examples,).

    Deterministic: the same ``seed`` gives the same batch. Keys of one sequence are distinct (a random
    permutation's first ``m``), values are drawn with replacement, the queried pair is uniform.
    """
    require_int(n_examples, "n_examples", low=1)
    if not isinstance(task, RecallTask):
        raise TypeError(f"task must be a RecallTask, got {describe(task)}")
    g = torch.Generator().manual_seed(seed)
    m = task.n_pairs
    # (B, m), distinct
    keys = torch.rand(n_examples, task.n_keys, generator=g).argsort(dim=-1)[:, :m]
    # (B, m)
    values = task.n_keys + torch.randint(task.n_values, (n_examples, m), generator=g)
    # (B, 1): which pair is queried
    asked = torch.randint(m, (n_examples, 1), generator=g)
    pairs = torch.stack([keys, values], dim=-1).flatten(-2)  # k_1 v_1 k_2 v_2 …
    query = torch.full((n_examples, 1), task.query_token)
    tokens = torch.cat([pairs, query, keys.gather(1, asked)], dim=1)
    return tokens, values.gather(1, asked).squeeze(1)


def recall_answers(
    tokens: torch.Tensor, task: RecallTask = RecallTask()
) -> torch.Tensor:
    """The answer of each sequence (B, 2m + 2) → (B,), found by reading the pairs one by one (a reference)."""
    require_tensor(tokens, "tokens", "int")
    if tokens.ndim != 2 or tokens.shape[1] != task.seq_len:
        raise ValueError(
            f"tokens must have shape (batch, {task.seq_len}), got shape {tuple(tokens.shape)}"
        )
    answers = []
    for row in tokens.tolist():
        query = row[-1]
        found = [row[2 * i + 1] for i in range(task.n_pairs) if row[2 * i] == query]
        if len(found) != 1 or row[-2] != task.query_token:
            raise ValueError(
                f"not a recall sequence (query {query} found {len(found)} times): {row}"
            )
        answers.append(found[0])
    return torch.tensor(answers, dtype=torch.long)


def recall_lm_targets(
    tokens: torch.Tensor, answers: torch.Tensor, ignore_index: int = -100
) -> torch.Tensor:
    """Next-token targets (B, T) for a language model: the answer at the last position, ``ignore_index`` elsewhere.

    Use with ``F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=ignore_index)``.
    """
    require_tensor(tokens, "tokens", "int")
    require_tensor(answers, "answers", "int")
    if tokens.ndim != 2 or answers.shape != tokens.shape[:1]:
        raise ValueError(
            f"tokens must be (batch, T) and answers (batch,), got shapes {tuple(tokens.shape)} and "
            f"{tuple(answers.shape)}"
        )
    targets = torch.full_like(tokens, ignore_index)
    targets[:, -1] = answers
    return targets


def recall_accuracy(logits: torch.Tensor, answers: torch.Tensor) -> float:
    """Fraction of sequences whose most likely token is the answer: logits (B, V) or (B, T, V) (last position used)."""
    require_tensor(logits, "logits")
    require_tensor(answers, "answers", "int")
    if logits.ndim == 3:
        logits = logits[:, -1]
    if logits.ndim != 2 or answers.shape != logits.shape[:1]:
        raise ValueError(
            f"logits must be (batch, V) or (batch, T, V) and answers (batch,), got shapes {tuple(logits.shape)} "
            f"and {tuple(answers.shape)}"
        )
    return float((logits.argmax(dim=-1) == answers).float().mean())


def no_lookup_accuracy(
    tokens: torch.Tensor, task: RecallTask = RecallTask()
) -> tuple[float, float]:
    """The exact expected accuracy of two answers that ignore the query, averaged over sequences (B, 2m + 2).

    Returns (a uniform choice among the distinct values of the sequence, its most frequent value).
    """
    require_tensor(tokens, "tokens", "int")
    if tokens.ndim != 2 or tokens.shape[1] != task.seq_len:
        raise ValueError(
            f"tokens must have shape (batch, {task.seq_len}), got shape {tuple(tokens.shape)}"
        )
    values = tokens[:, 1 : 2 * task.n_pairs : 2]  # (B, m)
    # (B, V): how often each value occurs
    counts = F.one_hot(values, task.vocab_size).sum(1)
    uniform = (1 / (counts > 0).sum(-1).double()).mean()
    most_frequent = (counts.max(-1).values / task.n_pairs).double().mean()
    return float(uniform), float(most_frequent)
