"""One-hot vectors, the embedding table and similarities (companion.embeddings)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from raising import raises

from companion.embeddings import (
    Embedding,
    cosine_similarity,
    dot_similarity,
    nearest_neighbours,
    one_hot,
    pairwise_cosine,
    parameter_count,
)


def test_one_hot_matches_a_loop():
    ids = torch.tensor([[2, 0], [1, 2]])
    out = one_hot(ids, 4)
    assert out.shape == (2, 2, 4) and out.dtype == torch.float32
    for b in range(2):
        for t in range(2):
            for j in range(4):
                assert out[b, t, j] == (1.0 if j == ids[b, t] else 0.0)


def test_one_hot_vectors_are_all_equidistant():
    """The third problem of one-hot vectors: every pair of distinct words is sqrt(2) apart, cosine 0."""
    rows = one_hot(torch.arange(5), 5)
    dist = torch.cdist(rows, rows)
    off = ~torch.eye(5, dtype=torch.bool)
    assert torch.allclose(dist[off], torch.full((20,), math.sqrt(2)))
    assert torch.allclose(pairwise_cosine(rows)[off], torch.zeros(20))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 20), st.integers(1, 6), st.integers(1, 5), st.integers(0, 10_000))
def test_one_hot_times_matrix_equals_lookup_in_values_and_gradients(
    vocab, width, seq, seed
):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (2, seq), generator=g)
    table = torch.randn(vocab, width, generator=g, dtype=torch.float64)
    upstream = torch.randn(2, seq, width, generator=g, dtype=torch.float64)

    w1 = table.clone().requires_grad_()
    (one_hot(ids, vocab).double() @ w1).mul(upstream).sum().backward()

    layer = Embedding(vocab, width).double()
    with torch.no_grad():
        layer.weight.copy_(table)
    out = layer(ids)
    out.mul(upstream).sum().backward()

    assert torch.equal(out.detach(), (one_hot(ids, vocab).double() @ table))
    assert torch.allclose(layer.weight.grad, w1.grad)
    unused = torch.ones(vocab, dtype=torch.bool)
    unused[ids.flatten()] = False
    assert torch.all(layer.weight.grad[unused] == 0)


def test_embedding_matches_torch_embedding():
    torch.manual_seed(0)
    ours = Embedding(7, 3)
    theirs = torch.nn.Embedding(7, 3)
    theirs.weight.data.copy_(ours.weight.data)
    ids = torch.tensor([[0, 6, 6], [2, 3, 1]])
    assert torch.equal(ours(ids), theirs(ids))
    ours(ids).sum().backward()
    theirs(ids).sum().backward()
    assert torch.equal(ours.weight.grad, theirs.weight.grad)
    assert repr(ours) == "Embedding(7, 3)"


@pytest.mark.parametrize(
    ("ids", "error", "match"),
    [
        (
            torch.tensor([[7]]),
            ValueError,
            ("ids", "[0, 6]", "got index 7"),
        ),
        (torch.tensor([[-1]]), ValueError, ("got index -1",)),
        (
            torch.tensor([[1.0]]),
            TypeError,
            ("ids", "integer", "got dtype torch.float32"),
        ),
        (torch.tensor([[True]]), TypeError, ("got dtype torch.bool",)),
        ([[1, 2]], TypeError, ("ids", "got a list")),
    ],
)
def test_embedding_bad_input(ids, error, match):
    with raises(error, *match):
        Embedding(7, 3)(ids)


@pytest.mark.parametrize("args", [(0, 3), (3, -1), (2.5, 3), (True, 3)])
def test_embedding_bad_sizes(args):
    with raises((ValueError, TypeError), ">= 1"):
        Embedding(*args)


def test_one_hot_bad_input():
    with raises(ValueError, "got index 3"):
        one_hot(torch.tensor([3]), 3)
    with raises(TypeError, "got dtype torch.float32"):
        one_hot(torch.tensor([0.0]), 3)
    with raises(ValueError, "vocab_size", ">= 1", "got 0"):
        one_hot(torch.tensor([0]), 0)


def test_similarities_against_hand_computation():
    u = torch.tensor([3.0, 4.0])
    v = torch.tensor([4.0, 3.0])
    assert dot_similarity(u, v).item() == pytest.approx(24.0)
    assert cosine_similarity(u, v).item() == pytest.approx(24.0 / 25.0)
    # scale-invariant
    assert cosine_similarity(u, 10 * v).item() == pytest.approx(24.0 / 25.0)
    # not scale-invariant
    assert dot_similarity(u, 10 * v).item() == pytest.approx(240.0)
    assert cosine_similarity(u, -u).item() == pytest.approx(-1.0)
    # no NaN for the zero vector
    assert cosine_similarity(u, torch.zeros(2)).item() == 0.0


def test_cosine_broadcasts_and_matches_torch():
    torch.manual_seed(1)
    a, b = torch.randn(5, 8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    assert torch.allclose(
        cosine_similarity(a, b),
        torch.nn.functional.cosine_similarity(a, b[None], dim=-1),
    )
    p = pairwise_cosine(a)
    for i in range(5):
        for j in range(5):
            assert p[i, j].item() == pytest.approx(cosine_similarity(a[i], a[j]).item())


def test_similarity_bad_input():
    with raises(ValueError, "same last dimension D, got shapes (3,) and (4,)"):
        cosine_similarity(torch.ones(3), torch.ones(4))
    with raises(TypeError, "u", "floating-point", "got dtype torch.int64"):
        dot_similarity(torch.ones(3, dtype=torch.long), torch.ones(3))
    with raises(ValueError, "must broadcast"):
        cosine_similarity(torch.ones(2, 3), torch.ones(4, 3))


def test_nearest_neighbours_excludes_the_query_and_sorts():
    vectors = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [-1.0, 0.0]])
    ids, sims = nearest_neighbours(vectors, 0, k=3)
    assert ids.tolist() == [1, 2, 3]
    assert sims[0] > sims[1] > sims[2]
    with raises(ValueError, "k", "[1, 3]", "got 4"):
        nearest_neighbours(vectors, 0, k=4)
    with raises(ValueError, "query", "[0, 3]", "got 9"):
        nearest_neighbours(vectors, 9)


def test_embedding_parameter_arithmetic():
    assert parameter_count(50_000, 1000) == 50_000_000
    assert (
        parameter_count(50_257, 12_288)
        == torch.nn.Embedding(50_257, 12_288, device="meta").weight.numel()
    )
