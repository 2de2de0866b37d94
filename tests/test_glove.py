"""GloVe: co-occurrence counts against a loop, the ratio table, the weighting and loss against hand
computation, and one training step against autograd + AdaGrad written out."""

import math

import pytest
import torch
from raising import raises

from companion import glove


@pytest.mark.parametrize("seed", range(3))
def test_cooccurrence_matrix_equals_the_loop(seed):
    g = torch.Generator().manual_seed(seed)
    n, vocab_size = 80, 7
    ids = torch.randint(0, vocab_size, (n,), generator=g)
    sentences = torch.sort(torch.randint(0, 4, (n,), generator=g)).values
    loop = glove.cooccurrence_matrix_loop(ids, vocab_size, 5, sentences)
    dense = glove.cooccurrence_matrix(ids, vocab_size, 5, sentences)
    sparse = glove.cooccurrence_matrix(ids, vocab_size, 5, sentences, dense=False)
    assert not dense.is_sparse and sparse.is_sparse
    assert torch.allclose(dense, loop) and torch.allclose(sparse.to_dense(), loop)
    assert torch.allclose(dense, dense.T)
    rows = glove.cooccurrence_rows(ids, [3, 0], vocab_size, 5, sentences)
    assert torch.allclose(rows, loop[[3, 0]])


def test_cooccurrence_by_hand():
    x = glove.cooccurrence_matrix(torch.tensor([0, 1, 2, 0]), 3, window=2)
    expected = torch.tensor(
        [[0.0, 1.5, 1.5], [1.5, 0.0, 1.0], [1.5, 1.0, 0.0]], dtype=torch.float64
    )
    # 0-1 at distance 1 and 1-0 at distance 2 (1 + 1/2); 0-2 at distances 2 and 1; 1-2 at distance 1
    assert torch.equal(x, expected)
    with raises(ValueError, "ids", "at least 1 token", "got shape (0,)"):
        glove.cooccurrence_matrix(torch.tensor([], dtype=torch.long), 3)
    with raises(ValueError, "[0, 2]"):
        glove.cooccurrence_matrix(torch.tensor([0, 3]), 3)


def test_probability_ratio_table_by_hand():
    sentences = [
        ["ice", "solid", "water"],
        ["steam", "gas", "water"],
        ["ice", "cold"],
        ["steam", "gas"],
    ]
    table = glove.probability_ratio_table(
        sentences, "ice", "steam", ["solid", "gas", "water"], window=2
    )
    # X[ice] = {solid: 1, water: 1/2, cold: 1} (sum 2.5); X[steam] = {gas: 2, water: 1/2} (sum 2.5)
    assert table["P(k|ice)"] == pytest.approx({"solid": 0.4, "gas": 0.0, "water": 0.2})
    assert table["P(k|steam)"] == pytest.approx(
        {"solid": 0.0, "gas": 0.8, "water": 0.2}
    )
    ratio = table["P(k|ice)/P(k|steam)"]
    assert (
        ratio["solid"] == math.inf
        and ratio["gas"] == 0.0
        and ratio["water"] == pytest.approx(1.0)
    )
    with raises(KeyError, "fashion"):
        glove.probability_ratio_table(sentences, probes=["fashion"])


def test_paper_table_is_consistent():
    t = glove.PAPER_ICE_STEAM
    for k in ("solid", "gas", "water", "fashion"):
        assert t["P(k|ice)"][k] / t["P(k|steam)"][k] == pytest.approx(
            t["P(k|ice)/P(k|steam)"][k], rel=0.05
        )


def test_weighting_function_by_hand():
    x = torch.tensor([0.0, 1.0, 50.0, 100.0, 250.0])
    f = glove.glove_weight(x)
    assert f.tolist() == pytest.approx([0.0, 0.01**0.75, 0.5**0.75, 1.0, 1.0])
    assert glove.glove_weight(
        torch.tensor([5.0]), x_max=10, alpha=1.0
    ).item() == pytest.approx(0.5)
    with raises(ValueError, ">= 0"):
        glove.glove_weight(torch.tensor([-1.0]))
    with raises(TypeError, "floating"):
        glove.glove_weight(torch.tensor([1, 2]))


def test_loss_by_hand():
    w = torch.tensor([[1.0, 2.0], [0.5, 0.0]])
    wt = torch.tensor([[0.5, 0.5], [2.0, 1.0]])
    b, bt = torch.tensor([0.1, -0.2]), torch.tensor([0.0, 0.3])
    x = torch.tensor([10.0, 200.0])
    # pair 1: 1.5 + 0.1 - log 10, weight (10/100)^0.75; pair 2: 1.0 + 0.1 - log 200, weight 1
    e1, e2 = 1.6 - math.log(10), 1.1 - math.log(200)
    by_hand = 0.1**0.75 * e1**2 + e2**2
    assert glove.glove_loss(w, wt, b, bt, x).item() == pytest.approx(by_hand, rel=1e-6)
    assert glove.glove_loss(w, wt, b, bt, x, reduction="none").shape == (2,)
    model = glove.GloVe(3, 2)
    i, j = torch.tensor([0, 2]), torch.tensor([1, 1])
    assert model(i, j, x).item() == pytest.approx(
        glove.glove_loss(
            model.w[i], model.w_tilde[j], model.b[i], model.b_tilde[j], x
        ).item()
    )
    with raises(ValueError, "x must be > 0"):
        glove.glove_loss(w, wt, b, bt, torch.tensor([1.0, 0.0]))


def test_one_training_step_is_adagrad_on_half_the_loss():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(6, 6, generator=g, dtype=torch.float64) * 20
    x = (x + x.T) * (torch.rand(6, 6, generator=g) < 0.6)
    cfg = glove.GloVeConfig(vector_size=4, epochs=1, batch_size=1000, lr=0.1, x_max=10)
    result = glove.train_glove(x, cfg, progress=False)
    start = glove.GloVe(6, 4, seed=cfg.seed)  # the same initialisation
    rows, cols = (x > 0).nonzero(as_tuple=True)
    half = 0.5 * start(rows, cols, x[rows, cols].float(), x_max=10)
    half.backward()
    for p in start.parameters():
        expected = p.detach() - cfg.lr * p.grad / (1 + p.grad**2).sqrt()
        got = {
            id(start.w): result.model.w,
            id(start.w_tilde): result.model.w_tilde,
            id(start.b): result.model.b,
            id(start.b_tilde): result.model.b_tilde,
        }[id(p)]
        assert torch.allclose(got.detach(), expected, atol=1e-6)
    assert result.loss_history[0] == pytest.approx(
        2 * half.item() / len(rows), rel=1e-5
    )
    assert torch.allclose(
        result.vectors, (result.model.w + result.model.w_tilde).detach()
    )


def test_training_reduces_the_loss_and_is_deterministic(three_threads):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 30, (3000,), generator=g)
    x = glove.cooccurrence_matrix(ids, 30, 5)
    cfg = glove.GloVeConfig(vector_size=8, epochs=5, batch_size=128, x_max=10)
    a = glove.train_glove(x, cfg, progress=False)
    # set to 1 while training, then restored
    assert torch.get_num_threads() == three_threads
    b = glove.train_glove(x.to_sparse(), cfg, progress=False)
    assert a.loss_history[-1] < 0.5 * a.loss_history[0]
    assert torch.equal(a.vectors, b.vectors) and a.loss_history == b.loss_history
    with raises(ValueError, "no positive entry"):
        glove.train_glove(torch.zeros(3, 3), cfg, progress=False)
    with raises(ValueError, "square"):
        glove.train_glove(torch.ones(3, 2), cfg, progress=False)
