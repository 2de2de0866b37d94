"""WordPiece, the tokeniser of BERT: basic tokenisation, then greedy longest-match-first sub-words.

BERT tokenises in two stages. The *basic* stage cleans the text, puts spaces around CJK characters and
punctuation, lower-cases and strips accents (``"Héllo, world!" -> ["hello", ",", "world", "!"]``). The
*WordPiece* stage splits each word into the longest prefix found in the vocabulary, then the longest
continuation (written with a leading ``##``), and so on: ``"unaffable" -> ["un", "##aff", "##able"]``. A
word that cannot be split completely, or that is longer than 100 characters, becomes ``[UNK]``.

The vocabulary is a ``vocab.txt`` file with one token per line; the line number is the id.

This follows BERT's Python code (and Hugging Face's ``BertTokenizerLegacy``, equal on any Unicode text in our
tests). Hugging Face's default, Rust ``BertTokenizer`` gives the same ids on ordinary text; it differs where
Python and Rust lower-case differently (Python turns a word-final capital sigma into "ς", Rust into "σ") and on
rare code points that Python's Unicode database calls unassigned (dropped here) or knows differently.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path

from .validation import describe, require_instance, require_int

__all__ = [
    "SPECIAL_TOKENS",
    "basic_tokenize",
    "wordpiece",
    "WordPieceTokenizer",
    "load_vocab",
]

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
"""The special tokens of BERT (padding, unknown word, start of input for classification, separator, masked word)."""
_SPECIAL_SPLIT = re.compile("(" + "|".join(re.escape(s) for s in SPECIAL_TOKENS) + ")")


def _is_whitespace(ch: str) -> bool:
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def _is_control(ch: str) -> bool:
    # Every "other" character (control, format, surrogate, private use, unassigned) except tab and newlines.
    return ch not in "\t\n\r" and unicodedata.category(ch).startswith("C")


def _is_punctuation(ch: str) -> bool:
    # All non-letter/number ASCII (such as "$", "^", "`") counts as punctuation, as in BERT.
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(ch: str) -> bool:
    # The CJK Unified Ideographs blocks (Chinese characters, Japanese kanji, Korean hanja), as in BERT.
    cp = ord(ch)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def _strip_accents(word: str) -> str:
    # Decompose (é -> e + combining acute accent) and drop the combining marks (category Mn).
    return "".join(
        ch
        for ch in unicodedata.normalize("NFD", word)
        if unicodedata.category(ch) != "Mn"
    )


def _split_on_punctuation(word: str) -> list[str]:
    pieces: list[str] = []
    start_new = True
    for ch in word:
        if _is_punctuation(ch):
            pieces.append(ch)
            start_new = True
        else:
            if start_new:
                pieces.append("")
            pieces[-1] += ch
            start_new = False
    return pieces


def basic_tokenize(text: str, lower_case: bool = True) -> list[str]:
    """BERT's BasicTokenizer: clean, lower-case, strip accents, split punctuation."""
    require_instance(text, str, "text")
    cleaned = []
    for ch in text:
        if ch in ("\x00", "\ufffd") or _is_control(ch):
            continue  # dropped
        cleaned.append(" " if _is_whitespace(ch) else f" {ch} " if _is_cjk(ch) else ch)
    words = []
    for word in "".join(cleaned).split():
        if lower_case:
            word = _strip_accents(word.lower())
        words.extend(_split_on_punctuation(word))
    return [w for w in words if w]


def wordpiece(
    word: str, vocab: dict[str, int], unk: str = "[UNK]", max_chars: int = 100
) -> list[str]:
    """Split a word greedily into the longest ``vocab`` pieces (then ``##`` pieces)."""
    if len(word) > max_chars:
        return [unk]
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start:  # the longest piece word[start:end] in the vocabulary
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                break
            end -= 1
        if end == start:
            return [unk]  # no piece fits: the whole word is unknown
        pieces.append(piece)
        start = end
    return pieces


def load_vocab(path: str | Path) -> dict[str, int]:
    """Read a ``vocab.txt`` (one token per line, id = line number) into ``{token: id}``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no vocab.txt at {path}")
    vocab: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            token = line.rstrip("\n")
            if token in vocab:
                raise ValueError(
                    f"{path}: token {token!r} appears twice (lines {vocab[token] + 1} and {i + 1})"
                )
            vocab[token] = i
    return vocab


class WordPieceTokenizer:
    """BERT's tokeniser: :func:`basic_tokenize`, then :func:`wordpiece` on every word.

    Args:
        vocab: ``{token: id}`` (for instance from :func:`load_vocab`); must contain the special tokens
            ``[PAD] [UNK] [CLS] [SEP] [MASK]``.
        lower_case: lower-case and strip accents (the "uncased" models); False for "cased" models.
        max_chars: words longer than this become ``[UNK]`` (BERT: 100).
    """

    def __init__(
        self, vocab: dict[str, int], lower_case: bool = True, max_chars: int = 100
    ) -> None:
        if not isinstance(vocab, dict):
            raise TypeError(
                f"vocab must be a dict {{token: id}}, got {describe(vocab)}"
            )
        missing = [s for s in SPECIAL_TOKENS if s not in vocab]
        if missing:
            raise ValueError(
                f"vocab must contain the special tokens {list(SPECIAL_TOKENS)}; missing {missing}"
            )
        if sorted(vocab.values()) != list(range(len(vocab))):
            raise ValueError(f"vocab ids must be 0 .. {len(vocab) - 1}, each used once")
        require_int(max_chars, "max_chars", low=1)
        self.vocab = dict(vocab)
        self.id_to_token = {i: t for t, i in vocab.items()}
        self.lower_case = lower_case
        self.max_chars = max_chars
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            vocab[s] for s in SPECIAL_TOKENS
        )

    @classmethod
    def from_file(cls, path: str | Path, lower_case: bool = True) -> WordPieceTokenizer:
        """Load a ``vocab.txt``."""
        return cls(load_vocab(path), lower_case=lower_case)

    @property
    def vocab_size(self) -> int:
        """Number of tokens in the vocabulary."""
        return len(self.vocab)

    @property
    def special_ids(self) -> list[int]:
        """Ids of ``[PAD] [UNK] [CLS] [SEP] [MASK]``."""
        return [self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id]

    def tokenize(self, text: str) -> list[str]:
        """The WordPiece tokens of ``text``; special-token strings such as ``[MASK]`` in it are kept whole."""
        require_instance(text, str, "text")
        tokens = []
        for part in _SPECIAL_SPLIT.split(text):
            if part in SPECIAL_TOKENS:
                tokens.append(part)
                continue
            for word in basic_tokenize(part, self.lower_case):
                tokens.extend(wordpiece(word, self.vocab, "[UNK]", self.max_chars))
        return tokens

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no ``[CLS]``/``[SEP]``; see :meth:`encode_pair`)."""
        return [self.vocab[t] for t in self.tokenize(text)]

    def encode_pair(self, a: str, b: str | None = None) -> tuple[list[int], list[int]]:
        """BERT's input ``[CLS] a [SEP] (b [SEP])`` and its token types (0 for a's part, 1 for b's)."""
        ids_a = [self.cls_id, *self.encode(a), self.sep_id]
        ids_b = [] if b is None else [*self.encode(b), self.sep_id]
        return ids_a + ids_b, [0] * len(ids_a) + [1] * len(ids_b)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Join the tokens of ``ids`` with spaces, gluing ``##`` continuations to the piece before."""
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
            raise TypeError(
                f"ids must be a sequence of int token ids, got {describe(ids)}"
            )
        ids = [int(i) for i in ids]
        bad = [i for i in ids if i not in self.id_to_token]
        if bad:
            raise ValueError(
                f"token ids must lie in [0, {self.vocab_size}), got {bad[0]}"
            )
        special = set(self.special_ids) if skip_special_tokens else set()
        tokens = [self.id_to_token[i] for i in ids if i not in special]
        return " ".join(tokens).replace(" ##", "").strip()
