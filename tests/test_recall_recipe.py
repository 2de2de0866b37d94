"""The recall recipe: train_recall learns what can be learnt, records its history and is reproducible."""

import itertools

import torch
from raising import raises

from companion.data.recall_task import RecallTask, make_recall_batch, recall_accuracy
from companion.training.recall_recipe import train_recall


class LastToken(torch.nn.Module):
    """Logits at position t from the token before it alone (at the answer: QUERY): it cannot look anything up,
    but it can learn a constant answer there."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(vocab_size, vocab_size)

    def forward(self, tokens):
        return self.table(tokens.roll(1, dims=1))


def test_train_recall_learns_what_can_be_learnt_and_records_its_history():
    # one value: the answer never changes
    task = RecallTask(n_pairs=3, n_keys=6, n_values=1)
    torch.manual_seed(0)
    model = LastToken(task.vocab_size)
    history = train_recall(model, task, steps=25, every=10, lr=0.1, test_size=200)
    assert [step for step, _, _ in history] == [10, 20, 25]
    # CPU time grows
    assert all(0 <= a <= b for (_, a, _), (_, b, _) in itertools.pairwise(history))
    assert history[-1][2] == 1.0 and model.training
    torch.manual_seed(0)
    untrained = LastToken(task.vocab_size)
    tokens, answers = make_recall_batch(200, task, seed=10**9)
    assert recall_accuracy(untrained(tokens), answers) < 0.5  # so training did it
    # the same seed gives the same run; another seed other batches
    torch.manual_seed(0)
    again = train_recall(
        LastToken(task.vocab_size), task, steps=25, every=10, lr=0.1, test_size=200
    )
    assert [h[2] for h in again] == [h[2] for h in history]


def test_train_recall_on_the_task_the_query_is_needed_for():
    task = RecallTask(n_pairs=2, n_keys=4, n_values=4)
    torch.manual_seed(0)
    history = train_recall(
        LastToken(task.vocab_size), task, steps=30, every=30, lr=0.1, test_size=500
    )
    tokens, _ = make_recall_batch(500, task, seed=10**9)
    # reading only the QUERY token it can do no better than a constant guess
    assert history[-1][2] < 0.45
    with raises(TypeError, "model must be a torch.nn.Module"):
        train_recall(lambda tokens: tokens, task, steps=3)
    with raises(ValueError, "seed must be an int"):
        train_recall(LastToken(task.vocab_size), task, steps=3, seed=-1)
    with raises(ValueError, "steps", ">= 1"):
        train_recall(LastToken(task.vocab_size), task, steps=0)
