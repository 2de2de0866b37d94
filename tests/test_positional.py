"""Positions: the sinusoidal table, learned embeddings and RoPE (relative positions, lengths kept)."""

import math

import pytest
import torch
from checker_testing import F64
from hypothesis import given, settings
from hypothesis import strategies as st
from raising import raises

from companion.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    apply_rope,
    rope_angles,
    sinusoidal_positional_encoding,
)

SETTINGS = settings(max_examples=30, deadline=None)


def test_sinusoidal_formula_entry_by_entry():
    pe = sinusoidal_positional_encoding(7, 6)
    for pos in range(7):
        for i in range(3):
            angle = pos / 10000 ** (2 * i / 6)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-15)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(
                math.cos(angle), abs=1e-15
            )
    assert torch.equal(pe[0], torch.tensor([0.0, 1.0] * 3, dtype=F64))


def test_sinusoidal_odd_width_and_dtype():
    pe = sinusoidal_positional_encoding(4, 5)
    assert pe.shape == (4, 5) and pe.dtype == F64
    # the lone sine column 2i = 4
    last = torch.sin(torch.arange(4.0, dtype=F64) / 10000 ** (4 / 5))
    torch.testing.assert_close(pe[:, 4], last)


def test_sinusoidal_relative_shift_is_a_rotation():
    """PE[pos + k] is a fixed linear (rotation) function of PE[pos], the paper's motivation."""
    pe = sinusoidal_positional_encoding(20, 8)
    k = 3
    i = torch.arange(4, dtype=F64)
    phi = k / 10000 ** (2 * i / 8)
    sin, cos = pe[:-k, 0::2], pe[:-k, 1::2]
    torch.testing.assert_close(pe[k:, 0::2], sin * phi.cos() + cos * phi.sin())
    torch.testing.assert_close(pe[k:, 1::2], cos * phi.cos() - sin * phi.sin())


def test_sinusoidal_module_adds_the_table():
    module = SinusoidalPositionalEncoding(6, context_length=10)
    x = torch.randn(2, 4, 6)
    torch.testing.assert_close(
        module(x), x + sinusoidal_positional_encoding(4, 6).float()
    )
    assert not list(module.parameters())
    assert module(x.double()).dtype == F64


def test_learned_module_adds_trainable_rows():
    torch.manual_seed(0)
    module = LearnedPositionalEmbedding(6, context_length=10)
    x = torch.randn(2, 4, 6)
    out = module(x)
    torch.testing.assert_close(out, x + module.embedding.weight[:4])
    out.sum().backward()
    grad = module.embedding.weight.grad
    assert torch.equal(grad[:4], torch.full((4, 6), 2.0)) and torch.equal(
        grad[4:], torch.zeros(6, 6)
    )


def test_offset_adds_the_rows_of_later_positions():
    """Tokens after n cached ones get the rows n, n + 1, … of every table (incremental decoding)."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6)
    sinusoidal, learned = (
        SinusoidalPositionalEncoding(6, context_length=10),
        LearnedPositionalEmbedding(6, context_length=10),
    )
    torch.testing.assert_close(
        sinusoidal(x, offset=4), x + sinusoidal_positional_encoding(7, 6)[4:].float()
    )
    torch.testing.assert_close(learned(x, offset=4), x + learned.embedding.weight[4:7])
    long = torch.randn(2, 7, 6)
    for module in (sinusoidal, learned):
        torch.testing.assert_close(module(long)[:, 4:], module(long[:, 4:], offset=4))


def test_rope_rotates_adjacent_pairs():
    x = torch.tensor([[1.0, 0.0, 1.0, 0.0]] * 3, dtype=F64)
    out = apply_rope(x)
    for p in range(3):
        for i in range(2):
            phi = p * 10000 ** (-2 * i / 4)
            torch.testing.assert_close(
                out[p, 2 * i : 2 * i + 2],
                torch.tensor([math.cos(phi), math.sin(phi)], dtype=F64),
            )
    torch.testing.assert_close(apply_rope(x)[0], x[0])  # position 0 is not rotated


def test_rope_module_matches_function_with_offset():
    rope = RotaryEmbedding(8, context_length=32)
    x = torch.randn(2, 3, 5, 8, dtype=F64)
    torch.testing.assert_close(rope(x), apply_rope(x))
    torch.testing.assert_close(rope(x, offset=7), apply_rope(x, torch.arange(7, 12)))
    assert rope(x.float()).dtype == torch.float32


@SETTINGS
@given(
    m=st.integers(0, 60),
    n=st.integers(0, 60),
    shift=st.integers(-20, 40),
    seed=st.integers(0, 10_000),
)
def test_rope_scores_depend_only_on_relative_position(m, n, shift, seed):
    """rope(q, m)ᵀ rope(k, n) = rope(q, m + s)ᵀ rope(k, n + s) for every shift s."""
    shift = max(shift, -min(m, n))
    g = torch.Generator().manual_seed(seed)
    q, k = (
        torch.randn(1, 8, dtype=F64, generator=g),
        torch.randn(1, 8, dtype=F64, generator=g),
    )

    def score(a, b):
        return (
            apply_rope(q, torch.tensor([a])) @ apply_rope(k, torch.tensor([b])).T
        ).item()

    assert score(m, n) == pytest.approx(score(m + shift, n + shift), abs=1e-10)


@SETTINGS
@given(n=st.integers(1, 12), half=st.integers(1, 8), seed=st.integers(0, 10_000))
def test_rope_preserves_norms(n, half, seed):
    x = torch.randn(
        n, 2 * half, dtype=F64, generator=torch.Generator().manual_seed(seed)
    )
    torch.testing.assert_close(apply_rope(x).norm(dim=-1), x.norm(dim=-1))


def test_rope_angles_shape():
    assert rope_angles(torch.arange(5), 6).shape == (5, 3)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda: apply_rope(torch.randn(3, 5)),
            ValueError,
            ("must be even, got d (the last dimension of x) = 5",),
        ),
        (lambda: RotaryEmbedding(7), ValueError, ("must be even, got d = 7",)),
        (
            lambda: RotaryEmbedding(4, context_length=8)(torch.randn(9, 4)),
            ValueError,
            ("x has 9 positions", "context length T = 8"),
        ),
        (
            lambda: RotaryEmbedding(4, context_length=8)(torch.randn(5, 4), offset=4),
            ValueError,
            ("x has 5 positions", "after 4 cached ones", "T = 8"),
        ),
        (
            lambda: RotaryEmbedding(4, context_length=8)(torch.randn(5, 4), offset=-1),
            ValueError,
            ("offset", ">= 0", "got -1"),
        ),
        (
            lambda: RotaryEmbedding(4)(torch.randn(3, 6)),
            ValueError,
            ("x must have shape (..., n, 4)", "got shape (3, 6)"),
        ),
        (
            lambda: apply_rope(torch.randn(3, 4), torch.arange(4)),
            ValueError,
            ("positions must have shape (3,)", "got shape (4,)"),
        ),
        (
            lambda: apply_rope(torch.randn(3, 4), torch.arange(3.0)),
            TypeError,
            ("integer",),
        ),
        (
            lambda: apply_rope(torch.ones(3, 4, dtype=torch.long)),
            TypeError,
            ("floating-point",),
        ),
        (
            lambda: SinusoidalPositionalEncoding(4, context_length=5)(
                torch.randn(1, 6, 4)
            ),
            ValueError,
            ("x has 6 positions", "context length T = 5"),
        ),
        (
            lambda: LearnedPositionalEmbedding(4, context_length=5)(
                torch.randn(1, 3, 5)
            ),
            ValueError,
            ("x must have shape (..., n, 4)", "got shape (1, 3, 5)"),
        ),
        (
            lambda: sinusoidal_positional_encoding(0, 4),
            ValueError,
            ("n_positions", ">= 1", "got 0"),
        ),
        (
            lambda: RotaryEmbedding(4, base=1),
            ValueError,
            ("base", "> 1", "got 1"),
        ),
    ],
)
def test_bad_input_is_named(call, error, match):
    with raises(error, *match):
        call()
