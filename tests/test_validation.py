"""The one rule for q, k, v and the mask (companion.validation.check_attention_inputs): leading dimensions
broadcast, as in torch.matmul and PyTorch's scaled_dot_product_attention, and every attention function of the
companion follows it. Each function is checked against itself on explicitly expanded inputs."""

import math

import pytest
import torch
from raising import raises

from companion.attention import scaled_dot_product_attention
from companion.banded_attention import BandedAttention, banded_attention_dense
from companion.decoding import Sampling
from companion.linear_attention import (
    kernel_attention,
    linear_attention,
)
from companion.validation import (
    check_attention_inputs,
    check_mask,
    require_int,
    require_number,
)

FUNCTIONS = [
    scaled_dot_product_attention,
    linear_attention,
    linear_attention.quadratic,
    kernel_attention,
    linear_attention.recurrent,
    linear_attention.chunked,
    linear_attention.cumsum,
    lambda q, k, v: BandedAttention(2)(q, k, v),
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
    with raises(ValueError, "must broadcast, got shapes (2, 3, 5, 4), (3, 3, 5, 4)"):
        check_attention_inputs(q, k.expand(3, 3, 5, 4), v)
    for f in FUNCTIONS:
        with raises(ValueError, "must broadcast"):
            f(q, k.expand(3, 3, 5, 4), v)


def test_the_mask_broadcasts_against_the_scores_without_enlarging_them():
    assert check_mask(torch.ones(5, 5, dtype=torch.bool), (2, 3, 5, 5)).shape == (5, 5)
    with raises(
        ValueError,
        "broadcast against the scores of shape (3, 5, 5), got shape (2, 3, 5, 5)",
    ):
        check_mask(torch.ones(2, 3, 5, 5, dtype=torch.bool), (3, 5, 5))
    with raises(ValueError, "mask", "(5, 5)"):
        check_mask(torch.ones(1, 5, 5, dtype=torch.bool), (5, 5), exact=True)
    with raises(TypeError, "boolean tensor"):
        check_mask(torch.ones(5, 5), (5, 5))


def test_keys_must_cover_queries_when_asked():
    q, k, v = shared_kv()
    with raises(
        ValueError,
        "at least as many keys as queries",
        "n_q = 5 queries and n_k = 3 keys",
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
            ("n", ">= 0", "got a bool"),
        ),
        (
            lambda: require_int(2.0, "n", low=0),
            TypeError,
            ("n", ">= 0", "got a float"),
        ),
        (
            lambda: require_int(-1, "n", low=0),
            ValueError,
            ("n", ">= 0", "got -1"),
        ),
        (
            lambda: require_int(4, "k", low=1, high=3),
            ValueError,
            ("k", "[1, 3]", "got 4"),
        ),
        (
            lambda: require_int(9, "k", high=3),
            ValueError,
            ("k", "<= 3", "got 9"),
        ),
        (
            lambda: require_int(3, "i", low=0, high=2, why="an index"),
            ValueError,
            ("i", "[0, 2] (an index)", "got 3"),
        ),
        (
            lambda: require_int("0", "i", low=0, high=2),
            TypeError,
            ("i", "got a str"),
        ),
        (
            lambda: require_number(math.nan, "t", low=0),
            ValueError,
            ("t", ">= 0", "got nan"),
        ),
        (
            lambda: require_number(math.inf, "t"),
            ValueError,
            ("t", "got inf"),
        ),
        (
            lambda: require_number(1, "base", low=1, low_open=True),
            ValueError,
            ("base", "> 1"),
        ),
        (
            lambda: require_number(1.0, "p", low=0, high=1, high_open=True),
            ValueError,
            ("in [0, 1), got 1.0",),
        ),
        (
            lambda: require_number(False, "p"),
            TypeError,
            ("p", "got a bool"),
        ),
    ],
)
def test_scalar_checks_name_the_expected_range_and_what_came(call, error, message):
    with raises(error, *message):
        call()


def test_scalar_checks_return_what_passes():
    assert require_int(0, "n", low=0) == 0 and require_int(3, "k", low=1, high=3) == 3
    assert require_int(2, "i", low=0, high=2) == 2
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
        check_token_stream,
        require_context,
        require_entries,
        require_floats,
        require_ids,
        require_ndim,
        require_same_dtype,
        require_tensor,
    )

    ids = torch.zeros(1, 3, dtype=torch.long)
    cases = [
        (
            lambda: require_floats(torch.ones(3), "a", "(..., m, n)", min_ndim=2),
            ValueError,
            ("a", "at least 2 dimensions", "(..., m, n)", "got shape (3,)"),
        ),
        (
            lambda: require_floats(torch.ones(4, 10), "w", "(d, R)", shape=(3, "R")),
            ValueError,
            ("w", "(d, R) = (3, R)", "got shape (4, 10)"),
        ),
        (
            lambda: require_floats(torch.ones(2, dtype=torch.long), "x"),
            TypeError,
            ("x", "floating-point", "got dtype torch.int64"),
        ),
        (
            lambda: require_tensor([1], "m", "bool"),
            TypeError,
            ("m", "boolean", "got a list"),
        ),
        (
            lambda: require_tensor(torch.ones(2), "mask", "bool"),
            TypeError,
            ("mask", "boolean", "got dtype torch.float32", "mask == 0"),
        ),
        (
            lambda: require_ndim(torch.ones(2), "x", 3, "(b, n, d)", at_least=True),
            ValueError,
            ("x", "at least 3 dimensions (b, n, d)", "got shape (2,)"),
        ),
        (
            lambda: require_same_dtype(m=torch.ones(2), x=torch.ones(2).double()),
            TypeError,
            ("m and x", "one dtype", "torch.float32 and torch.float64"),
        ),
        (
            lambda: require_entries(
                torch.tensor([1, 0, 3]), "counts", low=0, low_open=True
            ),
            ValueError,
            ("counts", "> 0", "got an entry 0"),
        ),
        (
            lambda: require_entries(torch.tensor([0.5, math.nan]), "p", low=0, high=1),
            ValueError,
            ("p", "[0, 1]", "got an entry nan"),
        ),
        (
            lambda: require_entries(torch.tensor([True]), "m", low=0),
            TypeError,
            ("m", "real numbers", "got dtype torch.bool"),
        ),
        (
            lambda: check_pair(torch.ones(5, 3), torch.ones(4, 2), ndim=2),
            ValueError,
            ("same last dimension d", "3 ≠ 2"),
        ),
        (
            lambda: check_pair(torch.ones(2, 3), torch.ones(3, 3)),
            ValueError,
            ("x and y", "broadcast", "(2, 3) and (3, 3)"),
        ),
        (
            lambda: check_pair(torch.ones(2, 3), torch.ones(2, 3, dtype=torch.float64)),
            TypeError,
            ("x and y", "one dtype"),
        ),
        (
            lambda: check_token_stream(
                torch.arange(3), 2, torch.zeros(2, dtype=torch.long)
            ),
            ValueError,
            ("sentence_ids", "shape of ids (3,)", "got (2,)"),
        ),
        (
            lambda: require_ids(ids[:, :1], "ids", min_length=2),
            ValueError,
            ("ids", "at least 2 tokens", "got shape (1, 1)"),
        ),
        (
            lambda: require_ids(ids + 5, "ids", 5),
            ValueError,
            ("ids", "[0, 4]", "got index 5"),
        ),
        (
            lambda: require_ids(ids.float(), "ids"),
            TypeError,
            ("ids", "integer", "got dtype torch.float32"),
        ),
        (
            lambda: require_context(ids, "ids", 4, offset=2),
            ValueError,
            ("ids", "3 positions", "after 2 cached ones", "context length T = 4"),
        ),
        (
            lambda: check_labels("abc", "words", 3, "(one per row)"),
            TypeError,
            ("words", "3 labels", "got a str"),
        ),
        (
            lambda: check_labels(["a"], "words", 3, "(one per row)"),
            ValueError,
            ("words", "3 labels", "got 1"),
        ),
        (
            lambda: require_int(12, "bos_id", low=0, high=11, why="a token id"),
            ValueError,
            ("bos_id", "[0, 11] (a token id)", "got 12"),
        ),
    ]
    for call, error, fragments in cases:
        with raises(error, *fragments):
            call()
    # why= says the reason
    with raises(ValueError, "n_heads", "(what fits on the page), got 7"):
        require_int(7, "n_heads", low=1, high=6, why="what fits on the page")
    assert require_int(3, "n_heads", low=1, high=6) == 3


def test_tensor_rules_return_what_passes():
    from companion.validation import (
        check_pair,
        check_token_stream,
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
    with raises(ValueError, "ids", "at least 1 token", "got shape (0,)"):
        check_token_stream(ids[:0], 2, nonempty=True)


def test_a_door_checks_the_arguments_and_skip_checks_turns_it_off():
    from companion.validation import door, skip_checks

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
    with raises(ValueError, "n", ">= 0", "got -1"):
        shift(1, n=-1)
    # a loop whose inputs were checked skips the doors
    with skip_checks():
        assert shift(1, n=-1) == 0 and len(calls) == 3
    with raises(ValueError, "n", "got -1"):  # and only inside the block
        shift(1, n=-1)
    assert shift.__doc__ == "x + n." and shift.__name__ == "shift"


def test_the_decoding_loops_check_their_input_once_and_never_per_step(monkeypatch):
    """generate and greedy_decode check the prompt (the source) at their door; the steps of the loop call the
    model unchecked, while a reader's own model(ids) is checked."""
    from companion import decoding, gpt, transformer

    calls = []

    def counted(module):
        real = module.require_ids
        monkeypatch.setattr(
            module,
            "require_ids",
            lambda x, name, *a, **k: calls.append(name) or real(x, name, *a, **k),
        )

    for module in (decoding, gpt, transformer):
        counted(module)
    model = gpt.GPT(
        gpt.GPTConfig(
            vocab_size=11, context_length=16, n_layers=1, d_model=8, n_heads=2
        )
    )
    for use_cache in (True, False):
        calls.clear()
        out = gpt.generate(
            model,
            torch.ones(2, 3, dtype=torch.long),
            Sampling(4, temperature=0),
            use_cache=use_cache,
        )
        assert out.shape == (2, 7) and calls == ["ids"]  # the door's check, no step's
    calls.clear()
    model(torch.ones(2, 3, dtype=torch.long))
    assert calls == ["ids"]  # a reader's call is checked
    with raises(ValueError, "ids", "[0, 10]", "got index 11"):
        model(torch.full((1, 2), 11))
    with raises(ValueError, "top_k", "got 12"):
        gpt.generate(model, torch.ones(1, 3, dtype=torch.long), Sampling(2, top_k=12))
    with raises(ValueError, "ids", "at least 1 token", "got shape (1, 0)"):
        gpt.generate(model, torch.ones(1, 0, dtype=torch.long), Sampling(2))

    seq2seq = transformer.EncoderDecoder(
        transformer.TransformerConfig(
            src_vocab_size=7, tgt_vocab_size=9, d_model=8, n_heads=2, d_ff=16,
            n_encoder_layers=1, n_decoder_layers=1, context_length=16,
        )
    )  # fmt: skip
    calls.clear()
    greedy = Sampling(5, temperature=0)
    out = transformer.greedy_decode(seq2seq, torch.ones(2, 3, dtype=torch.long), greedy)
    assert out.shape == (2, 6) and calls == ["src"]  # the source once, no step's target
    with raises(ValueError, "tgt", "[0, 8]", "got index 9"):
        seq2seq.decode(
            torch.full((1, 2), 9), seq2seq.encode(torch.ones(1, 3, dtype=torch.long))
        )
