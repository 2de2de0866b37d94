"""The chapter-2/3 figures: labelled axes, a title, one label per point, and clear errors on bad input."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch
from raising import raises

from companion.plotting import word_vectors as pe


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def _labels(ax):
    return [t.get_text() for t in ax.texts]


def test_lm_tables():
    tokens = ["!", ".", "ate", "cat", "dog", "ran", "the", "zoo"]
    g = torch.Generator().manual_seed(0)
    V, U = torch.randn(8, 2, generator=g), torch.randn(8, 2, generator=g)
    ax = pe.plot_lm_tables(V, U, tokens)
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    assert _labels(ax).count("dog") == 2  # once for V, once for U
    ax = pe.plot_lm_tables(V, U, tokens, prev="the")
    assert "prev = 'the'" in ax.get_title()
    sizes = ax.collections[1].get_sizes()  # the U markers, sized by p(next | the)
    p = torch.softmax(U @ V[6], 0)
    assert max(range(8), key=lambda j: sizes[j]) == int(p.argmax())
    with raises(ValueError, "(N, 2)"):
        pe.plot_lm_tables(torch.zeros(8, 3), torch.zeros(8, 3), tokens)
    with raises(ValueError, "prev"):
        pe.plot_lm_tables(V, U, tokens, prev="bird")


def test_pca_2d_matches_the_top_principal_components():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(50, 6, generator=g) * torch.tensor([5.0, 3.0, 0.1, 0.1, 0.1, 0.1])
    p = pe.pca_2d(x)
    assert p.shape == (50, 2)
    assert torch.allclose(p.mean(0), torch.zeros(2, dtype=torch.float64), atol=1e-10)
    # the variance captured is that of the two largest singular values
    s = torch.linalg.svdvals((x - x.mean(0)).double())
    assert torch.allclose(p.pow(2).sum(0), s[:2].pow(2))
    assert torch.equal(pe.pca_2d(x), p)  # deterministic
    with raises(ValueError, "(N, D)"):
        pe.pca_2d(torch.zeros(5))


def test_projection_and_loss():
    words = [f"w{i}" for i in range(10)]
    ax = pe.plot_projection(
        torch.randn(10, 5), words, groups=[i % 2 for i in range(10)]
    )
    assert (
        _labels(ax) == words
        and ax.get_xlabel() == "principal component 1"
        and ax.get_title()
    )
    ax = pe.plot_loss([3.0, 2.0, 1.5, 1.2, 1.1, 1.0], smooth=3, xlabel="batch")
    assert (
        ax.get_xlabel() == "batch" and ax.get_ylabel() == "loss" and len(ax.lines) == 2
    )
    ax = pe.plot_loss(torch.tensor([1.0, 0.5]), title="GloVe")
    assert ax.get_title() == "GloVe" and len(ax.lines) == 1
    with raises(ValueError, "empty"):
        pe.plot_loss([])
    with raises(ValueError, "one entry per row"):
        pe.plot_projection(torch.randn(3, 4), ["a"])


def test_word2vec_network():
    words = ["the", "professor", "is", "scribbling"]
    p = torch.tensor([0.4, 0.1, 0.3, 0.2])
    ax = pe.plot_word2vec_network(words, "is", hidden=3, probabilities=p)
    circles = [
        patch for patch in ax.patches if isinstance(patch, matplotlib.patches.Circle)
    ]
    assert len(circles) == 4 + 3 + 4  # input units, hidden units, output units
    texts = _labels(ax)
    assert texts.count("1") == 1 and texts.count("0") == 3  # the one-hot input of "is"
    # each word labels an input and an output unit
    assert all(texts.count(w) == 2 for w in words)
    assert [t for t in texts if t in ("0.40", "0.10", "0.30", "0.20")] == [
        "0.40",
        "0.10",
        "0.30",
        "0.20",
    ]
    dark = [line for line in ax.lines if line.get_linewidth() > 1]
    assert len(dark) == 3  # only the edges leaving the active input unit carry a signal
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    with raises(ValueError, "centre"):
        pe.plot_word2vec_network(words, "board")
    with raises(ValueError, "one entry per word"):
        pe.plot_word2vec_network(words, "is", probabilities=[0.5, 0.5])
    with raises(ValueError, "hidden"):
        pe.plot_word2vec_network(words, "is", hidden=0)
