"""The associative-recall task: determinism, the answers against a loop, and the helpers' checks."""

import pytest
import torch
from raising import raises

from companion.data.recall_task import (
    RecallTask,
    make_recall_batch,
    no_lookup_accuracy,
    recall_accuracy,
    recall_answers,
    recall_lm_targets,
)


def test_batches_are_deterministic_and_well_formed():
    task = RecallTask(n_pairs=6, n_keys=10, n_values=7)
    tokens, answers = make_recall_batch(500, task, seed=3)
    again, answers_again = make_recall_batch(500, task, seed=3)
    assert torch.equal(tokens, again) and torch.equal(answers, answers_again)
    assert not torch.equal(make_recall_batch(500, task, seed=4)[0], tokens)
    assert (
        tokens.shape == (500, task.seq_len) == (500, 14) and tokens.dtype == torch.long
    )
    keys, values = tokens[:, 0:12:2], tokens[:, 1:12:2]
    assert ((keys >= 0) & (keys < 10)).all() and ((values >= 10) & (values < 17)).all()
    assert all(len(set(row)) == 6 for row in keys.tolist())  # distinct keys
    assert task.query_token == 17 and task.vocab_size == 18
    assert (tokens[:, -2] == 17).all()
    # the answer is the value written after the queried key (an independent loop)
    assert torch.equal(recall_answers(tokens, task), answers)
    # every pair gets asked, every value appears as an answer
    asked = (keys == tokens[:, -1:]).float().argmax(dim=1)
    assert set(asked.tolist()) == set(range(6)) and set(answers.tolist()) == set(
        range(10, 17)
    )


def test_recall_lm_targets_and_accuracy():
    task = RecallTask()
    tokens, answers = make_recall_batch(64, task, seed=0)
    targets = recall_lm_targets(tokens, answers)
    assert (targets[:, :-1] == -100).all() and torch.equal(targets[:, -1], answers)
    perfect = torch.nn.functional.one_hot(answers, task.vocab_size).float()
    assert recall_accuracy(perfect, answers) == 1.0
    assert (
        recall_accuracy(perfect.unsqueeze(1).expand(64, 5, task.vocab_size), answers)
        == 1.0
    )
    wrong = torch.nn.functional.one_hot(
        (answers + 1) % task.vocab_size, task.vocab_size
    ).float()
    assert recall_accuracy(wrong, answers) == 0.0
    half = torch.cat([perfect[:32], wrong[32:]])
    assert recall_accuracy(half, answers) == 0.5


def test_bad_input():
    with raises(ValueError, "n_pairs must be at most n_keys = 4"):
        RecallTask(n_pairs=5, n_keys=4)
    with raises(ValueError, "n_values", ">= 1", "got 0"):
        RecallTask(n_values=0)
    with raises(TypeError, "task must be a RecallTask"):
        make_recall_batch(3, task=8)
    with raises(ValueError, "shape (batch, 18), got shape (2, 5)"):
        recall_answers(torch.zeros(2, 5, dtype=torch.long))
    with raises(ValueError, "not a recall sequence"):
        recall_answers(torch.zeros(2, 18, dtype=torch.long))
    with raises(TypeError, "integer"):
        recall_accuracy(torch.zeros(2, 5), torch.zeros(2))
    with raises(ValueError, "logits must be"):
        recall_accuracy(torch.zeros(2, 5), torch.zeros(3, dtype=torch.long))


def test_no_lookup_accuracy_against_a_loop():
    task = RecallTask(n_pairs=4, n_keys=16, n_values=5)
    tokens, _ = make_recall_batch(300, task, seed=1)
    uniform, most_frequent = no_lookup_accuracy(tokens, task)
    loop_uniform = loop_most = 0.0
    for row in tokens.tolist():
        values = row[1 : 2 * task.n_pairs : 2]
        loop_uniform += 1 / len(set(values)) / len(tokens)
        loop_most += max(values.count(v) for v in values) / task.n_pairs / len(tokens)
    assert uniform == pytest.approx(loop_uniform, abs=1e-12)
    assert most_frequent == pytest.approx(loop_most, abs=1e-12)
    assert 1 / task.n_pairs <= uniform <= most_frequent <= 1
    with raises(ValueError, "shape (batch, 10)"):
        no_lookup_accuracy(tokens[:, :-1], task)
