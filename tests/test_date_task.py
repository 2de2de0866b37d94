"""The dates task: words → ISO, deterministic, held-out dates disjoint from training."""

import datetime as dt

import pytest
import torch
from raising import raises

from companion.data.date_task import (
    TEMPLATES,
    Vocab,
    date_batches,
    date_to_iso,
    date_to_words,
    make_date_dataset,
)


@pytest.mark.parametrize(
    ("date", "template", "words"),
    [
        (dt.date(1991, 3, 23), 0, "twenty-third of march nineteen ninety-one"),
        (dt.date(2005, 6, 1), 2, "june first, two thousand and five"),
        (dt.date(1900, 12, 30), 1, "the thirtieth of december nineteen hundred"),
        (dt.date(1907, 2, 12), 3, "february the twelfth nineteen oh seven"),
        (dt.date(2000, 1, 31), 0, "thirty-first of january two thousand"),
        (dt.date(2021, 11, 20), 0, "twentieth of november twenty twenty-one"),
        (dt.date(2099, 7, 19), 0, "nineteenth of july twenty ninety-nine"),
    ],
)
def test_date_to_words(date, template, words):
    assert date_to_words(date, template) == words


def test_date_to_iso():
    assert date_to_iso(dt.date(1991, 3, 23)) == "1991-03-23"


def test_every_date_has_distinct_words_in_each_template():
    days = [dt.date(1900, 1, 1) + dt.timedelta(days=i) for i in range(0, 73049, 7)]
    for template in range(len(TEMPLATES)):
        texts = [date_to_words(d, template) for d in days]
        assert len(set(texts)) == len(texts)


def test_dataset_is_deterministic_and_split_is_disjoint():
    a = make_date_dataset(300, 50, seed=1)
    b = make_date_dataset(300, 50, seed=1)
    c = make_date_dataset(300, 50, seed=2)
    assert a.train_pairs == b.train_pairs and a.test_pairs == b.test_pairs
    assert a.train_pairs != c.train_pairs
    assert not {iso for _, iso in a.train_pairs} & {iso for _, iso in a.test_pairs}
    assert a.train_src.shape[0] == 300 and a.test_tgt.shape == (50, 12)
    assert (a.train_tgt[:, 0] == Vocab.bos_id).all() and (
        a.train_tgt[:, -1] == Vocab.eos_id
    ).all()


@pytest.mark.parametrize("level", ["word", "char"])
def test_encode_decode_round_trip(level):
    data = make_date_dataset(50, 10, seed=0, level=level)
    for (words, iso), src, tgt in zip(
        data.train_pairs, data.train_src, data.train_tgt, strict=True
    ):
        assert data.src_vocab.decode_text(src) == words
        assert data.tgt_vocab.decode_text(tgt) == iso
    assert Vocab.unk_id not in data.train_src.tolist()
    assert len(data.tgt_vocab) == 4 + 11


def test_vocabulary_does_not_depend_on_the_seed():
    assert (
        make_date_dataset(20, 5, seed=0).src_vocab.itos
        == make_date_dataset(20, 5, seed=9).src_vocab.itos
    )


def test_batches_are_reproducible_and_trimmed():
    data = make_date_dataset(200, 10, seed=0)
    first = date_batches(data, 16, seed=3)(0)
    again = date_batches(data, 16, seed=3)(0)
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert (first[0] != Vocab.pad_id).sum(1).max() == first[0].shape[1]


def test_bad_input():
    with raises(ValueError, "between 1900-01-01 and 2099-12-31, got 2100-01-01"):
        date_to_words(dt.date(2100, 1, 1))
    with raises(TypeError, "datetime.date"):
        date_to_iso("1991-03-23")
    with raises(ValueError, "template", "[0, 3]", "got 4"):
        date_to_words(dt.date(2000, 1, 1), 4)
    with raises(ValueError, "level must be 'word' or 'char'"):
        make_date_dataset(10, 10, level="byte")
