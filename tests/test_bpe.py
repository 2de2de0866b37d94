"""Byte-level BPE: the merge loop, encoding, round trips, and agreement with Hugging Face ``tokenizers``."""

import json
import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from raising import raises

from companion.bpe import (
    ENDOFTEXT,
    GPT2_SPLIT_PATTERN,
    BPETokenizer,
    get_pair_counts,
    merge,
    train_bpe,
    train_bpe_naive,
)
from companion.data import python_docs


@pytest.fixture(scope="module")
def topics() -> str:
    return python_docs.text("")


@pytest.fixture(scope="module")
def tokenizer(topics) -> BPETokenizer:
    return BPETokenizer.train(topics[:100_000], 512)


def test_pair_counts_and_merge_by_hand():
    assert get_pair_counts([1, 2, 3, 1, 2]) == {(1, 2): 2, (2, 3): 1, (3, 1): 1}
    # overlapping occurrences both count
    assert get_pair_counts([7, 7, 7]) == {(7, 7): 2}
    assert merge([1, 2, 3, 1, 2], (1, 2), 99) == [99, 3, 99]
    assert merge([7, 7, 7], (7, 7), 99) == [99, 7]  # left to right, no overlaps
    assert merge([], (1, 2), 99) == []


def test_wikipedia_example_aaabdaaabac():
    # Wikipedia's example: aa -> Z, then ab -> Y, then ZY -> X, leaving "XdXac". After the first merge "Za" and
    # "ab" both occur twice; the tie goes to the smaller pair of ids, ("a", "b") = (97, 98) < (Z, "a") = (256, 97).
    a, b, c, d = (ord(ch) for ch in "abcd")
    z, y, x = 256, 257, 258
    expected = {(a, a): z, (a, b): y, (z, y): x}
    for train in (train_bpe, train_bpe_naive):
        assert train("aaabdaaabac", 259, pattern=None) == expected
        # Asked for more, training goes on with pairs that occur once until "XdXac" is one token: 4 more merges.
        assert len(train("aaabdaaabac", 300, pattern=None)) == 3 + 4
    tok = BPETokenizer(expected, pattern=None, special_tokens=())
    assert tok.encode("aaabdaaabac") == [x, d, x, a, c]
    assert tok.decode([x, d, x, a, c]) == "aaabdaaabac"
    assert tok.vocab[x] == b"aaab"


@pytest.mark.slow
def test_fast_trainer_equals_the_naive_definition(topics):
    for pattern in (GPT2_SPLIT_PATTERN, None):
        text = topics[:4000] if pattern is None else topics[:15_000]
        assert train_bpe(text, 456, pattern) == train_bpe_naive(text, 456, pattern)


def test_training_stops_when_nothing_is_left_to_merge():
    assert train_bpe("ab ab", 1000) == {(ord("a"), ord("b")): 256, (ord(" "), 256): 257}
    assert train_bpe("", 1000) == {}
    # Chunks "x", " y", " z": the pairs " y" and " z" tie (count 1); the smaller, " y", is merged first.
    assert train_bpe("x y z", 1000) == {(32, ord("y")): 256, (32, ord("z")): 257}


def test_encode_applies_merges_in_rank_order():
    # "abc" with merges bc (rank 0) and ab (rank 1): bc is applied first, so ab never gets a chance.
    a, b, c = (ord(ch) for ch in "abc")
    tok = BPETokenizer({(b, c): 256, (a, b): 257}, pattern=None, special_tokens=())
    assert tok.encode("abc") == [a, 256]
    tok = BPETokenizer({(a, b): 256, (b, c): 257}, pattern=None, special_tokens=())
    assert tok.encode("abc") == [256, c]


def test_trained_tokenizer_reencodes_its_training_text_compactly(tokenizer, topics):
    ids = tokenizer.encode(topics[:20_000])
    assert tokenizer.decode(ids) == topics[:20_000]
    # 255 merges halve the length of English text
    assert len(topics[:20_000].encode()) / len(ids) > 2
    assert max(ids) < tokenizer.vocab_size == 512
    assert tokenizer.special_tokens == {ENDOFTEXT: 511}


ROUND_TRIP_EXAMPLES = [
    "",
    " ",
    "héllo wörld",
    "e\u0301 (e + combining acute) and é",
    "日本語のテキスト、中文文本",
    "emoji 👍🏽 family 👨‍👩‍👧 flag 🇫🇷",
    "tabs\tand\nnewlines\r\n  trailing   ",
    "'s 've 're don't ²½Ⅻ ٣",
    "\x00\x1f\x7f\ufffd",
]


@pytest.mark.parametrize("text", ROUND_TRIP_EXAMPLES)
def test_round_trip_examples(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text)) == text


@pytest.mark.slow
@settings(derandomize=True, max_examples=300, deadline=None)
@given(st.text())
def test_round_trip_any_unicode_string(tokenizer, text):
    ids = tokenizer.encode(text)
    assert all(isinstance(i, int) and 0 <= i < tokenizer.vocab_size for i in ids)
    assert tokenizer.decode(ids) == text
    # the pattern never drops a character
    assert "".join(re.findall(GPT2_SPLIT_PATTERN, text)) == text


def test_special_tokens(tokenizer):
    eot = tokenizer.special_tokens[ENDOFTEXT]
    text = f"one{ENDOFTEXT}two"
    assert eot not in tokenizer.encode(text)  # by default the string is ordinary text
    ids = tokenizer.encode(text, allowed_special=True)
    assert ids.count(eot) == 1 and tokenizer.decode(ids) == text


def test_bad_input_gets_clear_errors(tokenizer):
    with raises(TypeError, "text must be a str"):
        tokenizer.encode(b"bytes")
    with raises(ValueError, "token ids", "[0, 512)", "got 512"):
        tokenizer.decode([1, 512])
    with raises(TypeError, "ids must be a sequence"):
        tokenizer.decode("abc")
    with raises(ValueError, "vocab_size", ">= 256"):
        train_bpe("abc", 100)
    with raises(ValueError, "vocab_size", ">= 257", "got 256"):
        BPETokenizer.train("abc", 256)
    with raises(TypeError, "text must be a str"):
        train_bpe(["abc"], 300)
    with raises(ValueError, "must create id 256, got 300"):
        BPETokenizer({(97, 98): 300})
    with raises(ValueError, "uses an id that does not exist yet"):
        BPETokenizer({(97, 400): 256})


# --- GPT-2's own pattern (needs the ``regex`` package) and Hugging Face ``tokenizers`` -----------------------

GPT2_ORIGINAL_PATTERN = (
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)


def _outside_the_documented_difference(ch: str) -> bool:
    # Also outside: code points this Python's Unicode database has not assigned yet ("Cn"), which a newer
    # database in `regex` may call letters (U+3D000 is unassigned in Python 3.11's Unicode 14.0, a letter in
    # regex's); which of them hypothesis draws depends on what ran before, so the test was order-dependent.
    return (
        unicodedata.category(ch) not in ("Nl", "No", "Cn")
        and not "\x1c" <= ch <= "\x1f"
    )


@settings(derandomize=True, max_examples=300, deadline=None)
@given(st.text(st.characters().filter(_outside_the_documented_difference)))
def test_python_re_pattern_splits_as_gpt2s_regex(text):
    regex = pytest.importorskip("regex")
    assert re.findall(GPT2_SPLIT_PATTERN, text) == regex.findall(
        GPT2_ORIGINAL_PATTERN, text
    )


def test_python_re_pattern_on_real_text_and_the_documented_difference(topics):
    regex = pytest.importorskip("regex")
    assert re.findall(GPT2_SPLIT_PATTERN, topics) == regex.findall(
        GPT2_ORIGINAL_PATTERN, topics
    )
    # "²" is a number (No) for GPT-2, a letter here
    assert re.findall(GPT2_SPLIT_PATTERN, "x²") == ["x²"]
    assert regex.findall(GPT2_ORIGINAL_PATTERN, "x²") == ["x", "²"]


def _gpt2_byte_to_unicode() -> dict[int, str]:
    # GPT-2 shows each byte as a printable character: printable bytes as themselves, the rest as chr(256 + n).
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    others = [b for b in range(256) if b not in printable]
    return {
        **{b: chr(b) for b in printable},
        **{b: chr(256 + n) for n, b in enumerate(others)},
    }


def _hf_merges(text: str, vocab_size: int, pre_tokenizer) -> list[tuple[bytes, bytes]]:
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([text], trainer)
    to_byte = {c: b for b, c in _gpt2_byte_to_unicode().items()}
    merges = json.loads(tok.to_str())["model"]["merges"]
    return [
        tuple(bytes(to_byte[c] for c in piece) for piece in pair) for pair in merges
    ]


def _our_merges(text: str, vocab_size: int, pattern) -> list[tuple[bytes, bytes]]:
    tok = BPETokenizer(train_bpe(text, vocab_size, pattern), pattern, special_tokens=())
    return [(tok.vocab[a], tok.vocab[b]) for a, b in tok.merges]


def test_merges_equal_tokenizers_on_text_without_spaces(topics):
    # On the bytes 33-126 our byte order and tokenizers' (GPT-2's) agree, and so does every merge, ties included.
    pre = pytest.importorskip("tokenizers.pre_tokenizers")
    text = re.sub(r"[^!-~\s]", "", topics[:20_000])
    hf = _hf_merges(
        text,
        256 + 400,
        pre.Sequence(
            [
                pre.WhitespaceSplit(),
                pre.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        ),
    )
    ours = _our_merges(text, 256 + 400, r"\S+")
    # no two merges make the same bytes (tokenizers would merge ids)
    assert len(set(a + b for a, b in ours)) == 400
    assert ours == hf


def test_tokenizers_breaks_ties_by_its_ids_which_put_the_space_last(topics):
    """tokenizers takes the smallest pair of *its* ids among equally frequent pairs; its ids order the bytes as
    GPT-2 does (33-126 first, whitespace after them). Relabel the bytes into that order and every merge agrees."""
    pre = pytest.importorskip("tokenizers.pre_tokenizers")
    text = "".join(ch for ch in topics[:2000] if ch == "\n" or " " <= ch <= "~")
    hf = _hf_merges(
        text, 256 + 300, pre.ByteLevel(add_prefix_space=False, use_regex=False)
    )
    # Without relabelling, the first tie involving the space goes the other way:
    ours = _our_merges(text, 256 + 300, None)
    first = next(i for i, (x, y) in enumerate(zip(hf, ours, strict=True)) if x != y)
    assert (
        first > 0
        and b" " in hf[first] + ours[first]
        and set(hf[first : first + 2]) == set(ours[first : first + 2])
    )
    # Relabel: "!".."~" -> 32..125, "\n" -> 126, " " -> 127, so that byte order = tokenizers' order.
    to_ours = {
        **{chr(b): chr(b - 1) for b in range(33, 127)},
        "\n": chr(126),
        " ": chr(127),
    }
    back = str.maketrans({v: k for k, v in to_ours.items()})
    relabelled = _our_merges("".join(to_ours[ch] for ch in text), 256 + 300, None)
    assert [
        (a.decode().translate(back).encode(), b.decode().translate(back).encode())
        for a, b in relabelled
    ] == hf
