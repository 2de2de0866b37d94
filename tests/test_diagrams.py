"""Smoke tests of the chapter 4–5 diagrams: they draw what they claim, and reject bad input clearly."""

import math

import matplotlib
import numpy as np
import pytest
import torch
from matplotlib import pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from raising import raises

from companion import positional
from companion.plotting import diagrams

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_attention_flow_has_the_three_projections_and_the_output():
    ax = diagrams.draw_attention_flow()
    texts = " ".join(_texts(ax))
    for symbol in ("$W_Q$", "$W_K$", "$W_V$", "softmax", "$Z$"):
        assert symbol in texts, symbol
    boxes = [p for p in ax.patches if isinstance(p, FancyBboxPatch)]
    assert len(boxes) == 9  # X, 3 matrices, Q K V, weights, Z
    assert not ax.axison


@pytest.mark.parametrize("n_heads", [1, 2, 3, 6])
def test_multi_head_draws_one_row_per_head(n_heads):
    ax = diagrams.draw_multi_head_attention(n_heads)
    heads = [t for t in _texts(ax) if t.startswith("head ")]
    assert len(heads) == n_heads
    assert sum("$W_O$" in t for t in _texts(ax)) == 1


@pytest.mark.parametrize("bad", [0, 7, 2.0, True, "3"])
def test_multi_head_rejects_a_bad_number_of_heads(bad):
    with raises((TypeError, ValueError), "n_heads", "(what fits on the page), got"):
        diagrams.draw_multi_head_attention(bad)


def test_transformer_has_two_stacks_with_the_papers_sub_layers():
    ax = diagrams.draw_transformer()
    texts = _texts(ax)
    # 2 in the encoder block, 3 in the decoder block
    assert texts.count("Add & Norm") == 5
    assert texts.count("Feed Forward") == 2
    assert (
        "Masked Multi-Head\nSelf-Attention" in texts
        and "Multi-Head\nCross-Attention" in texts
    )
    assert texts.count("$L\\times$") == 2
    assert {"Linear", "Softmax", "encoder", "decoder"} <= set(texts)
    assert len([p for p in ax.patches if isinstance(p, FancyArrowPatch)]) >= 15


def test_rope_arrows_are_the_rotations_of_apply_rope():
    """With d = 2, apply_rope turns the one pair by p radians: the drawn arrows must be those vectors."""
    vector = (0.8, -0.3)
    left, right = diagrams.draw_rope_rotation(vector, theta=1.0, positions=(0, 1, 2, 3))
    ends = np.array([a.xy for a in left.texts if a.get_text() == ""])
    if ends.size == 0:  # annotate() keeps the arrow end in .xy of Annotation objects
        ends = np.array(
            [
                a.xy
                for a in left.get_children()
                if isinstance(a, matplotlib.text.Annotation)
            ]
        )
    expected = positional.apply_rope(
        torch.tensor([vector] * 4, dtype=torch.float64), torch.arange(4)
    )
    assert np.allclose(ends, expected.numpy(), atol=1e-12)
    assert np.allclose(np.linalg.norm(ends, axis=1), math.hypot(*vector))


def test_rope_legend_shows_the_same_score_for_the_same_offset():
    _, right = diagrams.draw_rope_rotation(pairs=((1, 3), (5, 7), (0, 4)))
    labels = [t.get_text() for t in right.get_legend().get_texts()]
    scores = [label.rsplit("score ", 1)[1] for label in labels]
    assert scores[0] == scores[1] != scores[2]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"vector": (0.0, 0.0)}, ValueError, ("vector must be a non-zero pair",)),
        ({"query": (1.0, 2.0, 3.0)}, ValueError, ("query must be a non-zero pair",)),
        ({"theta": "25"}, TypeError, ("theta must be a finite number",)),
        ({"theta": math.inf}, ValueError, ("theta", "got inf")),
    ],
)
def test_rope_rejects_bad_input(kwargs, error, message):
    with raises(error, *message):
        diagrams.draw_rope_rotation(**kwargs)


def test_drawing_on_given_axes_and_rejecting_others():
    _, ax = plt.subplots()
    assert diagrams.draw_transformer(ax=ax) is ax
    with raises(TypeError, "ax must be a matplotlib Axes"):
        diagrams.draw_attention_flow(ax="left")


def test_gpt_is_one_pre_norm_stack_with_a_tied_output():
    ax = diagrams.draw_gpt()
    texts = _texts(ax)
    assert texts.count("LayerNorm") == 3  # before each sub-layer, and the final one
    assert (
        "Masked Multi-Head\nSelf-Attention" in texts and "Feed Forward (GELU)" in texts
    )
    assert texts.count("+") == 3  # embeddings, and the two residual additions
    assert "Add & Norm" not in texts and texts.count("$L\\times$") == 1
    assert any("tied" in t for t in texts) and "Softmax" in texts
    assert diagrams.draw_gpt(ax=ax) is ax
