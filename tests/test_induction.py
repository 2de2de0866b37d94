"""companion.induction: the repeated-segment task, the attention-only model and the two losses, each against an
independent computation (loops, PyTorch's own attention)."""

import math

import pytest
import torch
import torch.nn.functional as F
from raising import raises

from companion import induction


def test_repeated_segments_repeat_a_segment_of_distinct_tokens():
    g = torch.Generator().manual_seed(0)
    ids, periods = induction.repeated_segments(200, 24, 20, (5, 11), generator=g)
    assert (
        ids.shape == (200, 24) and ids.dtype == torch.long and periods.shape == (200,)
    )
    # every period in the range, both ends included
    assert set(periods.tolist()) == set(range(5, 12))
    for row, p in zip(ids.tolist(), periods.tolist(), strict=True):
        segment = row[:p]
        assert len(set(segment)) == p and all(0 <= i < 20 for i in segment)
        assert all(row[t] == segment[t % p] for t in range(24))


def test_repeated_segments_are_reproducible_and_validated():
    a = induction.repeated_segments(
        4, 10, 12, (3, 5), generator=torch.Generator().manual_seed(1)
    )
    b = induction.repeated_segments(
        4, 10, 12, (3, 5), generator=torch.Generator().manual_seed(1)
    )
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    for bad in [(0, 5), (5, 3), (3, 13), (3.0, 5), [3, 5], (3,)]:
        with pytest.raises((TypeError, ValueError), match="periods|lowest|highest"):
            induction.repeated_segments(4, 12, 12, bad)
    with raises(TypeError, "length", ">= 1"):
        induction.repeated_segments(4, 10.0, 12, (3, 5))


def _forward_by_hand(model, ids):
    """The model's equation with PyTorch's own attention, head by head."""
    n = ids.shape[1]
    x = model.embed.weight[ids] + model.pos.embedding.weight[:n]
    for mha in model.layers:
        h, dh = mha.n_heads, mha.d_head
        q, k, v = (
            proj(x).view(*x.shape[:2], h, dh).transpose(1, 2)
            for proj in (mha.q_proj, mha.k_proj, mha.v_proj)
        )
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + mha.out_proj(out.transpose(1, 2).reshape(x.shape))
    return x @ model.unembed.weight.T + model.unembed.bias


@pytest.mark.parametrize(
    ("d_model", "n_heads", "n_layers"), [(16, 1, 2), (24, 3, 1), (8, 2, 3)]
)
def test_forward_is_the_equation_and_causal(d_model, n_heads, n_layers):
    torch.manual_seed(0)
    model = induction.AttentionOnlyTransformer(11, 9, d_model, n_heads, n_layers)
    ids = torch.randint(0, 11, (3, 9))
    logits = model(ids)
    assert logits.shape == (3, 9, 11)
    torch.testing.assert_close(
        logits, _forward_by_hand(model, ids), atol=1e-5, rtol=1e-4
    )
    changed = ids.clone()
    changed[:, 5] = (changed[:, 5] + 1) % 11
    # the past does not see the future
    torch.testing.assert_close(model(changed)[:, :5], logits[:, :5])
    assert not torch.allclose(model(changed)[:, 5:], logits[:, 5:])
    # attention only: no layer norms
    assert not any("norm" in name for name, _ in model.named_parameters())


def test_forward_rejects_bad_ids():
    model = induction.AttentionOnlyTransformer(5, 4, 8)
    with pytest.raises(ValueError):
        model(torch.tensor([[0, 1, 2, 3, 4]]))  # longer than the context
    with pytest.raises(ValueError):
        model(torch.tensor([[0, 5]]))  # outside the vocabulary


def test_first_and_repeat_loss_against_a_loop():
    torch.manual_seed(0)
    model = induction.AttentionOnlyTransformer(10, 12, 8)
    ids, periods = induction.repeated_segments(
        5, 12, 10, (3, 6), generator=torch.Generator().manual_seed(2)
    )
    first, repeat = induction.first_and_repeat_loss(model, ids, periods)
    sums, counts = [0.0, 0.0], [0, 0]
    for b in range(5):
        for t in range(1, 12):  # target t, predicted at position t - 1 from ids[b, :t]
            with torch.no_grad():
                logp = torch.log_softmax(model(ids[b : b + 1, :t])[0, -1], -1)
            which = int(t > periods[b])
            sums[which] -= float(logp[ids[b, t]])
            counts[which] += 1
    assert first == pytest.approx(sums[0] / counts[0], rel=1e-5)
    assert repeat == pytest.approx(sums[1] / counts[1], rel=1e-5)
    assert 1.5 < first < 4 and 1.5 < repeat < 4  # untrained: about ln 10 = 2.3 on both


def test_a_model_that_copies_from_one_period_back_has_no_repeat_loss():
    """The split is where the repeat becomes predictable: an oracle that knows p is perfect after t = p."""

    class Oracle(torch.nn.Module):
        def __init__(self, p):
            super().__init__()
            self.p = p

        def forward(self, ids):
            n = ids.shape[1]
            logits = torch.full((*ids.shape, 10), -30.0)
            for b in range(ids.shape[0]):
                for t in range(n):
                    if t + 1 >= self.p[b]:  # target t + 1 = target - p + p
                        logits[b, t, ids[b, t + 1 - self.p[b]]] = 30.0
                    else:
                        logits[b, t] = 0.0
            return logits

    ids, periods = induction.repeated_segments(
        6, 16, 10, (3, 7), generator=torch.Generator().manual_seed(3)
    )
    first, repeat = induction.first_and_repeat_loss(Oracle(periods), ids, periods)
    assert repeat < 1e-6 and first > 1.0
    with raises(ValueError, "periods must be a tensor"):
        induction.first_and_repeat_loss(Oracle(periods), ids, periods[:2])
    assert math.isfinite(first)
