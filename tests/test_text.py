"""Tokens and vocabularies (companion.text)."""

import pytest
import torch

from companion.text import UNK, Vocabulary, tokenize


def test_tokenize_splits_words_and_punctuation():
    assert tokenize("The dog barks. It's LOUD!") == ["the", "dog", "barks", ".", "it's", "loud", "!"]
    assert tokenize("") == []
    assert tokenize("a,b") == ["a", ",", "b"]


def test_tokenize_rejects_non_strings():
    with pytest.raises(TypeError, match="text must be a str, got a list"):
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
        ([], {}, ValueError, "empty list of tokens"),
        (["a", "b"], {"min_count": 5}, ValueError, "min_count=5 removes every token"),
        ("the dog", {}, TypeError, "got one str"),
        (["a", 3], {}, TypeError, "every token must be a str, got a int"),
        (["a"], {"min_count": 0}, ValueError, "min_count must be an int >= 1, got 0"),
    ],
)
def test_vocabulary_bad_input(tokens, kwargs, error, match):
    with pytest.raises(error, match=match):
        Vocabulary(tokens, **kwargs)


def test_decode_bad_ids():
    vocab = Vocabulary(["a", "b"])
    with pytest.raises(ValueError, match=r"id must lie in \[0, 2\], got 7"):
        vocab.decode([7])
    with pytest.raises(TypeError, match="ids must be integers, got dtype torch.float32"):
        vocab.decode(torch.tensor([1.0]))
    with pytest.raises(TypeError, match="encode takes a list of tokens"):
        vocab.encode("a b")
