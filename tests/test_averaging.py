"""Checkpoint averaging against the mean of the state dicts, written out."""

import pytest
import torch
from raising import raises
from torch import nn

from companion import training


class _WithBuffers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)
        self.norm = nn.BatchNorm1d(2)  # float running statistics and an integer counter


def test_average_is_the_mean_of_each_parameter():
    torch.manual_seed(0)
    models = [_WithBuffers() for _ in range(3)]
    for i, m in enumerate(models):
        m.norm.num_batches_tracked += i + 1
        m.norm.running_mean += i
    dicts = [m.state_dict() for m in models]
    got = training.average_state_dicts(dicts)
    assert list(got) == list(dicts[0])
    for key in dicts[0]:
        if dicts[0][key].is_floating_point():
            # in float64, summed by hand
            expected = sum(d[key].double() for d in dicts) / 3
            torch.testing.assert_close(got[key].double(), expected, atol=1e-6, rtol=0)
            assert got[key].dtype == dicts[0][key].dtype
        else:
            # the counter of the last checkpoint
            assert torch.equal(got[key], dicts[-1][key])
    assert got["norm.running_mean"].tolist() == pytest.approx([1.0, 1.0])
    single = training.average_state_dicts(dicts[:1])
    assert all(torch.equal(single[k], dicts[0][k]) for k in dicts[0])
    with raises(ValueError, "empty"):
        training.average_state_dicts([])
    with raises(ValueError, "different keys"):
        training.average_state_dicts([dicts[0], nn.Linear(3, 2).state_dict()])


def test_last_checkpoints_keeps_copies_every_few_steps():
    model = nn.Linear(2, 1)
    keeper = training.LastCheckpoints(keep=3, every=2)
    seen = {}
    for step in range(10):
        with torch.no_grad():
            model.weight += 1.0  # the weights change every step
        seen[step + 1] = model.weight.detach().clone()
        keeper(model, step, 0.0)
    assert list(keeper.steps) == [6, 8, 10]
    for step, state in zip(keeper.steps, keeper.state_dicts, strict=True):
        assert torch.equal(state["weight"], seen[step])  # a copy, not the live tensor
    averaged = training.average_state_dicts(keeper.state_dicts)
    torch.testing.assert_close(averaged["weight"], (seen[6] + seen[8] + seen[10]) / 3)
    with raises((TypeError, ValueError), "keep"):
        training.LastCheckpoints(keep=0, every=2)


def test_train_date_model_hands_every_step_to_on_step():
    from companion.training import date_recipe

    config = date_recipe.date_task_config(
        n_train=64, n_test=8, steps=4, warmup_steps=1, batch_size=8, progress=False
    )
    keeper = training.LastCheckpoints(keep=5, every=2)
    model, _, history = date_recipe.train_date_model(config, on_step=keeper)
    assert list(keeper.steps) == [2, 4] and len(history) == 4
    final = model.state_dict()
    assert all(torch.equal(keeper.state_dicts[-1][k], final[k]) for k in final)
    assert not all(torch.equal(keeper.state_dicts[0][k], final[k]) for k in final)
