"""Masks: one convention (True = may attend), converters to PyTorch's, and clear errors."""

import pytest
import torch
import torch.nn.functional as F
from raising import raises

from companion.attention import scaled_dot_product_attention
from companion.interop import from_torch_mha_mask, to_additive_mask, to_torch_mha_mask
from companion.masks import (
    causal_mask,
    combine_masks,
    padding_mask_from_ids,
    padding_mask_from_lengths,
    padding_to_attention_mask,
)


def test_causal_mask_is_lower_triangular_with_diagonal():
    expected = torch.tensor(
        [[True, False, False], [True, True, False], [True, True, True]]
    )
    assert torch.equal(causal_mask(3), expected)
    assert causal_mask(3).dtype == torch.bool


def test_causal_mask_aligns_at_the_end_as_the_causal_flag_does():
    """One convention: ``mask=causal_mask(n_q, n_k)`` is ``causal=True``, and both are what a key/value cache
    needs: the last n_q queries of a causal pass over n_k tokens (an independent computation, PyTorch's square
    ``is_causal=True`` on all n_k tokens)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 7, 4, generator=g, dtype=torch.float64) for _ in range(3))
    for n_q in (3, 5, 7):
        mask = causal_mask(n_q, 7)
        with_mask = scaled_dot_product_attention(q[:, -n_q:], k, v, mask)
        torch.testing.assert_close(
            with_mask, scaled_dot_product_attention(q[:, -n_q:], k, v, causal=True)
        )
        # every token, top-left = end when square
        full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.testing.assert_close(with_mask, full[:, -n_q:])
    assert torch.equal(
        causal_mask(3, 5),
        torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]).bool(),
    )
    # more queries than keys: the first ones have no past
    assert not causal_mask(4, 2)[:2].any()


def test_causal_mask_equals_torch_square_subsequent_mask():
    torch_mask = torch.nn.Transformer.generate_square_subsequent_mask(6)
    assert torch.equal(from_torch_mha_mask(torch_mask), causal_mask(6))
    assert torch.equal(to_additive_mask(causal_mask(6)), torch_mask)


def test_padding_masks():
    lengths = torch.tensor([3, 1, 0])
    expected = torch.tensor(
        [[True, True, True, False], [True, False, False, False], [False] * 4]
    )
    assert torch.equal(padding_mask_from_lengths(lengths, 4), expected)
    assert padding_mask_from_lengths(lengths).shape == (3, 3)
    ids = torch.tensor([[5, 6, 0, 0], [7, 0, 0, 0]])
    assert torch.equal(padding_mask_from_ids(ids, 0), ids != 0)


def test_padding_to_attention_mask_broadcasts_over_queries():
    pad = torch.tensor([[True, True, False], [True, False, False]])
    m = padding_to_attention_mask(pad)
    assert m.shape == (2, 1, 3)
    assert padding_to_attention_mask(pad, heads=True).shape == (2, 1, 1, 3)
    combined = combine_masks(causal_mask(3), m)
    assert combined.shape == (2, 3, 3)
    assert torch.equal(combined[1], torch.tensor([[True, False, False]] * 3))


def test_combine_masks_skips_none():
    assert combine_masks(None, None) is None
    m = causal_mask(2)
    assert combine_masks(None, m) is m


def test_torch_mha_conversion_round_trip():
    m = torch.rand(4, 5) > 0.5
    assert torch.equal(to_torch_mha_mask(m), ~m)
    assert torch.equal(from_torch_mha_mask(to_torch_mha_mask(m)), m)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda: combine_masks(torch.ones(2, 3)),
            TypeError,
            ("boolean tensor (True = may attend), got dtype torch.float32",),
        ),
        (
            lambda: combine_masks(causal_mask(3), causal_mask(4)),
            ValueError,
            ("got shapes (3, 3) and (4, 4)",),
        ),
        (
            lambda: padding_mask_from_lengths(torch.tensor([1.0])),
            TypeError,
            ("lengths", "integer", "got dtype torch.float32"),
        ),
        (
            lambda: padding_mask_from_lengths(torch.tensor([5]), 3),
            ValueError,
            ("lengths", "[0, 3]"),
        ),
        (
            lambda: padding_mask_from_ids(torch.tensor([1, 2]), 0),
            ValueError,
            ("2 dimensions (batch, seq), got shape (2,)",),
        ),
        (
            lambda: padding_to_attention_mask(torch.ones(2, 3, 4, dtype=torch.bool)),
            ValueError,
            ("got shape (2, 3, 4)",),
        ),
        (lambda: causal_mask(0), ValueError, ("n_queries", ">= 1", "got 0")),
        (lambda: from_torch_mha_mask(torch.ones(2, 2)), ValueError, ("only 0",)),
    ],
)
def test_bad_input_is_named(call, error, match):
    with raises(error, *match):
        call()
