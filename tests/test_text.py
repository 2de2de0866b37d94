"""Tokens and vocabularies (companion.text)."""

import pytest
import torch
from raising import raises

from companion.text import UNK, Vocabulary, tokenize


def test_tokenize_splits_words_and_punctuation():
    assert tokenize("The dog barks. It's LOUD!") == [
        "the",
        "dog",
        "barks",
        ".",
        "it's",
        "loud",
        "!",
    ]
    assert tokenize("") == []
    assert tokenize("a,b") == ["a", ",", "b"]


def test_tokenize_rejects_non_strings():
    with raises(TypeError, "text", "got a list"):
        tokenize(["the", "dog"])


def test_vocabulary_orders_by_frequency_then_alphabet_after_unk():
    vocab = Vocabulary(["b", "a", "c", "a", "b", "a"])
    assert vocab.itos == [UNK, "a", "b", "c"]
    assert len(vocab) == 4
    assert vocab.unk_id == 0 and vocab.id(UNK) == 0


def test_encode_decode_round_trip_and_unknown_tokens():
    tokens = tokenize("the cat ate the dog . the zoo .")
    vocab = Vocabulary(tokens)
    ids = vocab.encode(tokens)
    assert ids.dtype == torch.long and ids.shape == (len(tokens),)
    assert vocab.decode(ids) == tokens
    unknown = vocab.encode(["the", "giraffe"])
    assert unknown.tolist() == [vocab.id("the"), 0]
    assert vocab.decode(unknown) == ["the", UNK]


def test_min_count_drops_rare_tokens_to_unk():
    vocab = Vocabulary(["a", "a", "b"], min_count=2)
    assert vocab.itos == [UNK, "a"]
    assert vocab.encode(["b"]).tolist() == [0]
    assert "b" not in vocab and "a" in vocab


@pytest.mark.parametrize(
    ("tokens", "kwargs", "error", "match"),
    [
        ([], {}, ValueError, ("empty list of tokens",)),
        (
            ["a", "b"],
            {"min_count": 5},
            ValueError,
            ("min_count=5 removes every token",),
        ),
        ("the dog", {}, TypeError, ("got one str",)),
        (["a", 3], {}, TypeError, ("every token", "got a int")),
        (["a"], {"min_count": 0}, ValueError, ("min_count", ">= 1", "got 0")),
    ],
)
def test_vocabulary_bad_input(tokens, kwargs, error, match):
    with raises(error, *match):
        Vocabulary(tokens, **kwargs)


def test_decode_bad_ids():
    vocab = Vocabulary(["a", "b"])
    with raises(ValueError, "ids", "[0, 2]", "got 7"):
        vocab.decode([7])
    with raises(TypeError, "ids", "integer", "got dtype torch.float32"):
        vocab.decode(torch.tensor([1.0]))
    with raises(TypeError, "encode takes a list of tokens"):
        vocab.encode("a b")


# --- one vocabulary type for every chapter ------------------------------------------------------------------


def test_special_tokens_come_first_and_have_named_ids():
    from companion.text import BOS, CLS, EOS, MASK, PAD, SEP

    vocab = Vocabulary(
        tokenize("the cat saw the dog"), specials=(PAD, UNK, CLS, SEP, MASK)
    )
    assert vocab.itos == [PAD, UNK, CLS, SEP, MASK, "the", "cat", "dog", "saw"]
    assert (vocab.pad_id, vocab.unk_id, vocab.cls_id, vocab.sep_id, vocab.mask_id) == (
        0,
        1,
        2,
        3,
        4,
    )
    assert (
        vocab.bos_id is None
        and vocab.eos_id is None
        and BOS not in vocab
        and EOS not in vocab
    )
    assert vocab.encode(["the", "zebra"]).tolist() == [5, 1]
    assert vocab.counts.tolist() == [0, 0, 0, 0, 0, 2, 1, 1, 1] and vocab.total == 5


def test_orders_and_ties():
    tokens = ["b", "c", "a", "c", "a", "d"]
    # frequency, ties alphabetical
    assert Vocabulary(tokens).itos == [UNK, "a", "c", "b", "d"]
    # ties by first appearance
    assert Vocabulary(tokens, ties="appearance").itos == [UNK, "c", "a", "b", "d"]
    assert Vocabulary(tokens, order="appearance", specials=()).itos == [
        "b",
        "c",
        "a",
        "d",
    ]
    with raises(ValueError, "order", "got 'alphabetical'"):
        Vocabulary(tokens, order="alphabetical")


def test_a_vocabulary_is_also_the_list_of_its_tokens():
    vocab = Vocabulary(["x", "y", "y"], specials=())
    assert (
        list(vocab) == ["y", "x"]
        and vocab[0] == "y"
        and vocab["x"] == 1
        and vocab.index("x") == 1
    )
    assert vocab.words == ("y", "x")
    with raises(KeyError, "'z' is not in the vocabulary (2 tokens, min_count=1)"):
        vocab["z"]
    with raises(KeyError, "'z' is not in the vocabulary"):
        vocab.encode(["z"])  # no <unk> to fall back on


def test_every_chapter_uses_this_vocabulary_type():
    from companion import embedding_lm, word2vec
    from companion.data import date_task

    dates = date_task.Vocab(list("0123456789-"))
    assert isinstance(dates, Vocabulary)
    assert (dates.pad_id, dates.bos_id, dates.eos_id, dates.unk_id) == (0, 1, 2, 3) == (
        date_task.Vocab.pad_id, date_task.Vocab.bos_id, date_task.Vocab.eos_id, date_task.Vocab.unk_id
    )  # fmt: skip
    assert dates.encode_text("1-2", bos=True, eos=True) == [1, 5, 14, 6, 2]
    assert dates.decode_text([1, 5, 14, 6, 2, 0]) == "1-2"
    assert isinstance(embedding_lm.toy_vocabulary(), Vocabulary)
    assert isinstance(word2vec.build_vocab([["a", "b", "a"]], min_count=1), Vocabulary)
