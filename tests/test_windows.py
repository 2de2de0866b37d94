"""The sliding windows of chapter 6 against a plain loop over the stream."""

import pytest
import torch
from raising import raises
from torch.utils.data import DataLoader

from companion.training import gpt_pretraining
from companion.training.windows import NextTokenWindows, sliding_windows


def loop_windows(
    stream: list[int], n: int, s: int
) -> list[tuple[list[int], list[int]]]:
    """Every (input, target) pair by hand: start at 0 and step by s while a window of n + 1 ids fits."""
    pairs, i = [], 0
    while i + n + 1 <= len(stream):
        pairs.append((stream[i : i + n], stream[i + 1 : i + n + 1]))
        i += s
    return pairs


@pytest.mark.parametrize(
    ("size", "n", "s"),
    [(12, 4, 2), (12, 4, 4), (13, 4, 4), (10, 9, 1), (10, 9, 3), (50, 7, 5)],
)
def test_windows_match_a_loop(size, n, s):
    stream = torch.randperm(
        1000, generator=torch.Generator().manual_seed(size + n + s)
    )[:size]
    dataset = NextTokenWindows(stream, n, s)
    expected = loop_windows(stream.tolist(), n, s)
    assert len(dataset) == len(expected) == (size - n - 1) // s + 1
    for k, (x, y) in enumerate(expected):
        inputs, targets = dataset[k]
        assert inputs.tolist() == x and targets.tolist() == y
        # the target is the input shifted by one
        assert inputs[1:].tolist() == targets[:-1].tolist()
        assert dataset.windows([k]).tolist() == [x + y[-1:]]
    starts = [stream.tolist().index(x[0]) for x, _ in expected]  # the ids are distinct
    # stride s from the start of the stream
    assert starts == list(range(0, len(expected) * s, s))
    # one more stride would not fit: the windows cover the stream
    assert starts[-1] + n + 1 > size - s
    inputs, targets = sliding_windows(stream, n, s)  # all at once, by unfold
    assert inputs.tolist() == [x for x, _ in expected] and targets.tolist() == [
        y for _, y in expected
    ]


def test_a_dataloader_batches_inputs_and_targets_of_shape_b_by_n():
    dataset = NextTokenWindows(torch.arange(100), 8, 4)
    inputs, targets = next(iter(DataLoader(dataset, batch_size=5, shuffle=True)))
    assert inputs.shape == targets.shape == (5, 8) and inputs.dtype == torch.long
    assert torch.equal(targets, inputs + 1) and torch.all(inputs[:, 0] % 4 == 0)


def test_pretraining_draws_the_same_windows_as_before():
    """random_windows and evaluate_loss read the windows of NextTokenWindows; the numbers of the shipped
    checkpoint came from the loops they replaced, written out here."""
    ids = torch.randint(0, 50, (300,), generator=torch.Generator().manual_seed(1))
    got = gpt_pretraining.random_windows(ids, 6, 16, torch.Generator().manual_seed(3))
    starts = torch.randint(
        0, len(ids) - 16, (6,), generator=torch.Generator().manual_seed(3)
    )
    assert torch.equal(got, torch.stack([ids[s : s + 17] for s in starts.tolist()]))
    disjoint = NextTokenWindows(ids, 16, 16)
    n = (len(ids) - 1) // 16
    assert len(disjoint) == n
    assert torch.equal(
        disjoint.windows(range(n)),
        torch.stack([ids[i * 16 : i * 16 + 17] for i in range(n)]),
    )


def test_bad_arguments():
    with raises(ValueError, "fewer than a window"):
        NextTokenWindows(torch.arange(5), 5)
    with raises(ValueError, "dimensions"):
        NextTokenWindows(torch.zeros(2, 8, dtype=torch.long), 3)
    with raises((TypeError, ValueError), "stride"):
        NextTokenWindows(torch.arange(10), 3, 0)
