"""The training loop: loss history, determinism, batches from lists, DataLoaders and functions."""

import math

import pytest
import torch
from raising import raises
from torch import nn

from companion.training import train, warmup_cosine_schedule


def regression_problem(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 3, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3
    return x, y


def mse(model, batch):
    x, y = batch
    return ((model(x).squeeze(-1) - y) ** 2).mean()


def test_loss_goes_down_and_history_is_returned():
    x, y = regression_problem()
    model = nn.Linear(3, 1)
    history = train(model, [(x, y)], mse, steps=200, lr=0.05, seed=0, progress=False)
    assert len(history) == 200 and all(isinstance(h, float) for h in history)
    assert history[-1] < 1e-3 < history[0]


def test_deterministic_with_a_seed():
    x, y = regression_problem()

    def run(advance, seed=7):
        torch.manual_seed(123)  # the same initial weights in every run
        model = nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.3), nn.Linear(8, 1))
        # the global generator in a different state: only train's seed can make dropout repeat
        torch.rand(advance)
        return train(
            model, lambda step: (x, y), mse, steps=20, seed=seed, progress=False
        )

    assert run(1) == run(5)
    # without the seed dropout differs, so the line above has power
    assert run(1, seed=None) != run(5, seed=None)


def test_batches_restart_and_dataloader_works():
    x, y = regression_problem()
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, y), batch_size=16
    )
    # 4 batches per epoch
    history = train(nn.Linear(3, 1), loader, mse, steps=10, progress=False)
    assert len(history) == 10


def test_generator_that_runs_out_is_reported():
    x, y = regression_problem()
    batches = ((x, y) for _ in range(3))
    with raises(ValueError, "batches ran out after 3 steps"):
        train(nn.Linear(3, 1), batches, mse, steps=5, progress=False)


def test_custom_optimizer_scheduler_and_callback():
    x, y = regression_problem()
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = warmup_cosine_schedule(optimizer, warmup_steps=5, total_steps=20)
    seen = []
    train(model, [(x, y)], mse, steps=20, optimizer=optimizer, scheduler=scheduler, progress=False,
          callback=lambda step, loss: seen.append((step, optimizer.param_groups[0]["lr"])))  # fmt: skip
    assert [s for s, _ in seen] == list(range(20))
    lrs = [lr for _, lr in seen]
    assert lrs[3] == pytest.approx(0.1) and lrs[-1] == pytest.approx(0.0, abs=1e-12)
    assert max(lrs) == pytest.approx(0.1)


def test_model_mode_is_restored():
    x, y = regression_problem()
    model = nn.Linear(3, 1).eval()
    modes = []
    train(
        model,
        [(x, y)],
        lambda m, b: (modes.append(m.training), mse(m, b))[1],
        steps=2,
        progress=False,
    )
    assert modes == [True, True] and not model.training


def test_progress_bar_writes_to_stderr(capsys):
    x, y = regression_problem()
    train(nn.Linear(3, 1), [(x, y)], mse, steps=3, progress=True, description="fitting")
    assert "fitting" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            dict(model="not a model"),
            TypeError,
            ("model", "got a str"),
        ),
        (dict(steps=0), ValueError, ("steps", ">= 1", "got 0")),
        (
            dict(loss_fn=lambda m, b: torch.ones(2)),
            TypeError,
            ("loss_fn must return a scalar tensor",),
        ),
        (
            dict(loss_fn=lambda m, b: m(b[0]).sum() * float("nan")),
            FloatingPointError,
            ("the loss became nan at step 0",),
        ),
        (
            dict(batches=42),
            TypeError,
            ("batches",),
        ),
    ],
)
def test_bad_input(kwargs, error, match):
    x, y = regression_problem()
    args = dict(model=nn.Linear(3, 1), batches=[(x, y)], loss_fn=mse, steps=2)
    args.update(kwargs)
    with raises(error, *match):
        train(
            args.pop("model"),
            args.pop("batches"),
            args.pop("loss_fn"),
            progress=False,
            **args,
        )


# --- the paper's schedule and one step (added with chapter 5's training section) ---------------------------

from companion.training import Update, train_step, transformer_schedule  # noqa: E402


def _rates(scheduler, optimizer, steps):
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def test_transformer_schedule_is_equation_3_of_the_paper():
    """Compare with the formula written out independently, and with its landmarks: linear up to the warm-up,
    peak (d_model · warmup)^(-1/2) there, then 1/sqrt(step)."""
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([parameter], lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    rates = _rates(
        transformer_schedule(optimizer, d_model=512, warmup_steps=4000),
        optimizer,
        12000,
    )
    for step in (1, 10, 3999, 4000, 4001, 11999):
        expected = 512**-0.5 * (step / 4000**1.5 if step <= 4000 else step**-0.5)
        assert math.isclose(rates[step - 1], expected, rel_tol=1e-12), step
    assert max(rates) == rates[3999] and math.isclose(max(rates), (512 * 4000) ** -0.5)
    assert math.isclose(rates[1999] / rates[999], 2.0)  # linear during the warm-up
    # then 1/sqrt(s): steps 4000 and 12000
    assert math.isclose(rates[3999] / rates[11999], 3**0.5)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"d_model": 0}, ("d_model",)),
        ({"d_model": 512, "warmup_steps": 0}, ("warmup_steps",)),
    ],
)
def test_transformer_schedule_bad_input(kwargs, match):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with raises(ValueError, *match):
        transformer_schedule(optimizer, **kwargs)


def test_train_step_is_one_gradient_step():
    """With SGD, no clipping: w <- w - lr * grad, and the loss returned is the one before the update."""
    model = torch.nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -2.0, 0.5]]))
    x, y = torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[2.0]])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    square = lambda m, b: ((m(b[0]) - b[1]) ** 2).mean()
    loss = train_step(model, (x, y), square, Update(optimizer, grad_clip=None))
    # prediction 1 - 4 + 1.5 = -1.5, error -3.5, loss 12.25, gradient 2 * (-3.5) * x
    assert loss == 12.25
    assert torch.allclose(
        model.weight, torch.tensor([[1.0, -2.0, 0.5]]) - 0.1 * 2 * -3.5 * x
    )


def test_train_step_clips_the_gradient_norm():
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    linear = lambda m, b: (m.weight * torch.tensor([[30.0, 40.0]])).sum()
    train_step(model, None, linear, Update(optimizer, grad_clip=1.0))
    # gradient (30, 40) rescaled to norm 1
    assert torch.allclose(model.weight, -torch.tensor([[0.6, 0.8]]))
    with raises(TypeError, "loss_fn must return a scalar tensor", "shape (1, 2)"):
        train(model, [None], lambda m, b: m.weight, steps=1, progress=False)
    with raises(TypeError, "optimizer must be a Optimizer", "got a str"):
        Update("adam")
    with raises(ValueError, "grad_clip", "got 0"):
        Update(optimizer, grad_clip=0)
