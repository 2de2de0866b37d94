"""The one rule for q, k, v and the mask (companion.validation.check_attention_inputs): leading dimensions
broadcast, as in torch.matmul and PyTorch's scaled_dot_product_attention, and every attention function of the
companion follows it. Each function is checked against itself on explicitly expanded inputs."""

import math

import pytest
import torch

from companion.attention import scaled_dot_product_attention
from companion.banded_attention import banded_attention, banded_attention_dense
from companion.linear_attention import (
    causal_linear_attention_chunked,
    causal_linear_attention_cumsum,
    causal_linear_attention_recurrent,
    kernel_attention,
    linear_attention,
    quadratic_linear_attention,
)
from companion.validation import (
    check_attention_inputs,
    check_mask,
    require_index,
    require_int,
    require_number,
)

FUNCTIONS = [
    scaled_dot_product_attention,
    linear_attention,
    quadratic_linear_attention,
    kernel_attention,
    causal_linear_attention_recurrent,
    causal_linear_attention_chunked,
    causal_linear_attention_cumsum,
    lambda q, k, v: banded_attention(q, k, v, bandwidth=2),
    lambda q, k, v: banded_attention_dense(q, k, v, bandwidth=2),
]


def shared_kv(seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, 5, 4, generator=g, dtype=torch.float64)  # (B, h, n, d_k)
    # one k for every batch
    k = torch.randn(1, 3, 5, 4, generator=g, dtype=torch.float64)
    # one v for every batch and head
    v = torch.randn(5, 6, generator=g, dtype=torch.float64)
    return q, k, v


@pytest.mark.parametrize("f", FUNCTIONS)
def test_every_attention_function_broadcasts_leading_dimensions(f):
    q, k, v = shared_kv()
    expanded = f(q, k.expand(2, 3, 5, 4), v.expand(2, 3, 5, 6))
    assert expanded.shape == (2, 3, 5, 6)
    torch.testing.assert_close(f(q, k, v), expanded, rtol=0, atol=1e-12)


def test_the_checked_tensors_come_back_expanded_to_one_leading_shape():
    q, k, v = shared_kv()
    q2, k2, v2 = check_attention_inputs(q, k, v)
    assert (q2.shape, k2.shape, v2.shape) == ((2, 3, 5, 4), (2, 3, 5, 4), (2, 3, 5, 6))
    # a view, not a copy
    assert k2.data_ptr() == k.data_ptr() and torch.equal(k2[1], k[0])


def test_leading_dimensions_that_do_not_broadcast_are_refused_with_their_shapes():
    q, k, v = shared_kv()
    with pytest.raises(
        ValueError, match=r"must broadcast, got shapes \(2, 3, 5, 4\), \(3, 3, 5, 4\)"
    ):
        check_attention_inputs(q, k.expand(3, 3, 5, 4), v)
    for f in FUNCTIONS:
        with pytest.raises(ValueError, match="must broadcast"):
            f(q, k.expand(3, 3, 5, 4), v)


def test_the_mask_broadcasts_against_the_scores_without_enlarging_them():
    assert check_mask(torch.ones(5, 5, dtype=torch.bool), (2, 3, 5, 5)).shape == (5, 5)
    with pytest.raises(
        ValueError,
        match=r"broadcast against the scores of shape \(3, 5, 5\), got shape \(2, 3, 5, 5\)",
    ):
        check_mask(torch.ones(2, 3, 5, 5, dtype=torch.bool), (3, 5, 5))
    with pytest.raises(ValueError, match=r"mask must have shape \(5, 5\)"):
        check_mask(torch.ones(1, 5, 5, dtype=torch.bool), (5, 5), exact=True)
    with pytest.raises(TypeError, match="boolean tensor"):
        check_mask(torch.ones(5, 5), (5, 5))


def test_keys_must_cover_queries_when_asked():
    q, k, v = shared_kv()
    with pytest.raises(
        ValueError,
        match="at least as many keys as queries.*n_q = 5 queries and n_k = 3 keys",
    ):
        check_attention_inputs(q, k[..., :3, :], v[:3], keys_cover_queries=True)
    check_attention_inputs(q, k[..., :3, :], v[:3])  # not asked: fine


# ----------------------------------------------------------------------------------------------------------
# The scalar checks every module calls (one rule for numbers: a bool is not a number, the range is named)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: require_int(True, "n", low=0),
            TypeError,
            "n must be an int >= 0, got a bool",
        ),
        (
            lambda: require_int(2.0, "n", low=0),
            TypeError,
            "n must be an int >= 0, got a float",
        ),
        (
            lambda: require_int(-1, "n", low=0),
            ValueError,
            "n must be an int >= 0, got -1",
        ),
        (
            lambda: require_int(4, "k", low=1, high=3),
            ValueError,
            r"k must be an int in \[1, 3\], got 4",
        ),
        (
            lambda: require_int(9, "k", high=3),
            ValueError,
            "k must be an int <= 3, got 9",
        ),
        (
            lambda: require_index(3, "i", 3),
            ValueError,
            r"i must lie in \[0, 2\], got 3",
        ),
        (
            lambda: require_index("0", "i", 3),
            TypeError,
            "i must be an int index, got a str",
        ),
        (
            lambda: require_number(math.nan, "t", low=0),
            ValueError,
            "t must be a finite number >= 0, got nan",
        ),
        (
            lambda: require_number(math.inf, "t"),
            ValueError,
            "t must be a finite number, got inf",
        ),
        (
            lambda: require_number(1, "base", low=1, low_open=True),
            ValueError,
            "base must be a finite number > 1",
        ),
        (
            lambda: require_number(1.0, "p", low=0, high=1, high_open=True),
            ValueError,
            r"in \[0, 1\), got 1.0",
        ),
        (
            lambda: require_number(False, "p"),
            TypeError,
            "p must be a finite number, got a bool",
        ),
    ],
)
def test_scalar_checks_name_the_expected_range_and_what_came(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_scalar_checks_return_what_passes():
    assert require_int(0, "n", low=0) == 0 and require_int(3, "k", low=1, high=3) == 3
    assert require_index(2, "i", 3) == 2
    assert require_number(2, "x", low=1, low_open=True) == 2.0 and isinstance(
        require_number(2, "x"), float
    )
    assert require_number(math.inf, "x", finite=False) == math.inf
    assert require_number(0.0, "p", low=0, high=1, high_open=True) == 0.0


# ----------------------------------------------------------------------------------------------------------
# The shared tensor rules that replaced the modules' private checkers


def test_tensor_rules_name_what_was_expected_and_what_came():
    from companion.validation import (
        check_labels,
        check_pair,
        check_token_ids,
        check_windowed_stream,
        require_entries,
        require_floats,
    )

    cases = [
        (
            lambda: require_floats(
                torch.ones(3), "a", "(..., m, n)", min_ndim=2, what="a matrix"
            ),
            ValueError,
            r"a must be a matrix \(\.\.\., m, n\) \(at least 2 dimensions\), got shape \(3,\)",
        ),
        (
            lambda: require_floats(torch.ones(4, 10), "w", "(d, R)", shape=(3, "R")),
            ValueError,
            r"w must have shape \(d, R\) = \(3, R\), got shape \(4, 10\)",
        ),
        (
            lambda: require_floats(
                torch.ones(0, 2), "x", "(N, dim)", ndim=2, nonempty=(0,)
            ),
            ValueError,
            "at least one entry along dimension 0",
        ),
        (
            lambda: require_floats(torch.ones(2), "m", shape=(2,), dtype=torch.float64),
            TypeError,
            "m must have dtype torch.float64",
        ),
        (
            lambda: require_floats(torch.ones(2, dtype=torch.long), "x"),
            TypeError,
            "floating-point",
        ),
        (
            lambda: require_entries(
                torch.tensor([1, 0, 3]), "counts", low=0, low_open=True
            ),
            ValueError,
            r"counts must be > 0 entrywise, got an entry 0 \(shape \(3,\)\)",
        ),
        (
            lambda: require_entries(torch.tensor([0.5, math.nan]), "p", low=0, high=1),
            ValueError,
            r"p must lie in \[0, 1\] entrywise, got an entry nan",
        ),
        (
            lambda: require_entries(torch.tensor([True]), "m", low=0),
            TypeError,
            "real numbers",
        ),
        (
            lambda: check_pair(torch.ones(5, 3), torch.ones(4, 2), ndim=2),
            ValueError,
            "same last dimension d",
        ),
        (
            lambda: check_pair(torch.ones(2, 3), torch.ones(3, 3)),
            ValueError,
            "must broadcast against each other",
        ),
        (
            lambda: check_pair(torch.ones(2, 3), torch.ones(2, 3, dtype=torch.float64)),
            TypeError,
            "share one dtype",
        ),
        (
            lambda: check_windowed_stream(
                torch.arange(3), 2, None, torch.tensor([1, 3, 1])
            ),
            ValueError,
            r"windows must lie in \[1, 2\] entrywise, got an entry 3",
        ),
        (
            lambda: check_windowed_stream(
                torch.arange(3), 2, torch.zeros(2, dtype=torch.long)
            ),
            ValueError,
            "sentence_ids must have the shape of ids",
        ),
        (
            lambda: check_token_ids(
                torch.zeros(2, 1, dtype=torch.long), "ids", None, min_length=2
            ),
            ValueError,
            r"at least two tokens per sequence \(n >= 2\)",
        ),
        (
            lambda: check_token_ids(
                torch.zeros(1, 3, dtype=torch.long), "ids", 5, 4, offset=2
            ),
            ValueError,
            "3 positions .* after 2 cached ones, more than the context length T = 4",
        ),
        (
            lambda: check_labels("abc", "words", 3, "(one per row)"),
            TypeError,
            "sequence of 3 labels",
        ),
        (
            lambda: check_labels(["a"], "words", 3, "(one per row)"),
            ValueError,
            r"3 labels \(one per row\), got 1",
        ),
        (
            lambda: require_index(12, "bos_id", 12, predicate="be a token id"),
            ValueError,
            r"bos_id must be a token id in \[0, 12\), got 12",
        ),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()
    # why= says the reason
    with pytest.raises(ValueError, match=r"n_heads.*\(what fits on the page\), got 7"):
        require_int(7, "n_heads", low=1, high=6, why="what fits on the page")
    assert require_int(3, "n_heads", low=1, high=6) == 3


def test_tensor_rules_return_what_passes():
    from companion.validation import (
        check_pair,
        check_token_stream,
        check_windowed_stream,
        require_entries,
    )

    x = torch.ones(2, 3, dtype=torch.float64)
    assert require_entries(x, "x", low=1, high=1) is x
    assert (
        require_entries(torch.tensor([0.0, 1.0]).numpy(), "a", low=0, high=1).dtype
        == torch.float32
    )
    # leading dimensions broadcast: fine
    u, v = check_pair(torch.ones(4, 1, 3), torch.ones(5, 3))
    assert u.shape == (4, 1, 3) and v.shape == (5, 3)
    ids = torch.tensor([0, 1, 2])
    assert torch.equal(check_token_stream(ids, 2), torch.zeros(3, dtype=torch.long))
    sentences, windows = check_windowed_stream(ids, 2)
    assert torch.equal(windows, torch.full((3,), 2)) and torch.equal(
        sentences, torch.zeros(3, dtype=torch.long)
    )
    with pytest.raises(ValueError, match="empty"):
        check_token_stream(ids[:0], 2, nonempty=True)


def test_a_door_checks_the_arguments_once_and_the_unchecked_function_skips_the_check():
    from companion.validation import door

    calls = []

    def check(x, n):
        calls.append((x, n))
        require_int(n, "n", low=0)

    @door(check)
    def shift(x, *, n=1, unused=None):
        """x + n."""
        return x + n

    assert shift(1) == 2 and calls == [(1, 1)]  # the default reaches the check
    assert shift(1, n=3) == 4 and calls == [(1, 1), (1, 3)]
    with pytest.raises(ValueError, match="n must be"):
        shift(1, n=-1)
    # internal calls skip the door
    assert shift.unchecked(1, n=-1) == 0 and len(calls) == 3
    assert shift.__doc__ == "x + n." and shift.__name__ == "shift"


def test_generate_checks_its_prompt_at_its_own_door_only(monkeypatch):
    """generate checks ids once; the shared loop it drives does not check them again."""
    from companion import decoding, gpt

    model = gpt.GPT(
        gpt.GPTConfig(
            vocab_size=11, context_length=16, n_layers=1, d_model=8, n_heads=2
        )
    )
    seen = []
    monkeypatch.setattr(decoding, "check_token_ids", lambda *a, **k: seen.append(a))
    out = gpt.generate(model, torch.ones(2, 3, dtype=torch.long), 4, temperature=0)
    assert out.shape == (2, 7) and seen == []
    with pytest.raises(ValueError, match="top_k"):
        gpt.generate(model, torch.ones(1, 3, dtype=torch.long), 2, top_k=12)
    with pytest.raises(ValueError, match="at least one token"):
        gpt.generate(model, torch.ones(1, 0, dtype=torch.long), 2)
