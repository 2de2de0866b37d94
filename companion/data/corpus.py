"""Real text and evaluation sets for chapter 3, all read offline from the files gensim's wheel ships.

==========================  ============================================================================
loader                      what it returns
==========================  ============================================================================
:func:`load_wikipedia`      106 English Wikipedia articles (≈453k tokens), tokenised by ``WikiCorpus``
:func:`load_lee`            the Lee background corpus: 300 news texts (≈60k tokens)
:func:`load_wordsim353`     the 353 WordSim-353 word pairs with their mean human similarity (0–10)
:func:`load_analogies`      Google's 19,544 analogy questions ``a : b :: c : d`` in 14 sections
:func:`load_text8`          (online) the text8 corpus, 17M tokens of cleaned Wikipedia, downloaded once
==========================  ============================================================================

Every corpus is a list of sentences (here: articles or texts), each a list of lower-case str tokens, the
form ``gensim.models.Word2Vec`` and :func:`companion.training.word2vec.train_word2vec` take.

Parsing the Wikipedia dump takes a few seconds, so the tokenised result is cached on disk, outside the
repository: in ``$COMPANION_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/companion``, else
``~/.cache/companion``. The cache file's name carries the SHA-256 of the source file, so a different
source never reads a stale cache.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from tqdm.auto import tqdm

from ..evaluation import AnalogyQuestion
from ..validation import describe, require_int

__all__ = [
    "WIKIPEDIA_FILE",
    "LEE_FILE",
    "WORDSIM353_FILE",
    "ANALOGIES_FILE",
    "TEXT8",
    "TEXT8_MEMBER_SHA256",
    "RemoteFile",
    "gensim_data_path",
    "cache_dir",
    "sha256sum",
    "load_wikipedia",
    "load_lee",
    "load_wordsim353",
    "load_analogies",
    "fetch",
    "load_text8",
    "corpus_size",
]

WIKIPEDIA_FILE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
"""A shortened English Wikipedia dump in gensim's test data (106 articles once short pages are dropped)."""
LEE_FILE = "lee_background.cor"
"""The Lee background corpus (Lee, Pincombe & Welsh 2005), 300 Australian news texts, one per line."""
WORDSIM353_FILE = "wordsim353.tsv"
"""WordSim-353 (Finkelstein et al. 2002), word pairs with mean human similarity ratings."""
ANALOGIES_FILE = "questions-words.txt"
"""Google's analogy questions (Mikolov et al. 2013a), sections introduced by ``: name`` lines."""

_CACHE_VERSION = 1


#: SHA-256 of each file of gensim's test data the book reads (gensim 4.4.0): a gensim release that changed one
#: would change the book's numbers, so the file is checked before use.
GENSIM_DATA_SHA256 = {
    "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2": (
        "a53f4648dec40467ebdcbc7a1307eddb51fe6e28e9309f6ebde81ba0d04bea2d"
    ),
    "lee_background.cor": "5d78d6dafd953bbf65797bef09a9ffb9ec430583381be705f8fd460000f370fb",
    "wordsim353.tsv": "f92a022fc2537793a15bc3a8c162ebcd74990e033a228bb6388cb71e4c0b1e1d",
    "questions-words.txt": "8c29b3332afc46f3fb8be04cb5297bf96f39aa7131272dff57869b4485b22a36",
    "lee.cor": "a878f9a58f6743c32985c56c2f2f75988386216b38a4023a01fd3bcf7884d93e",
    "similarities0-1.txt": "23762bc6b728897144dda3d324a2c032dc1e059e1009806226d64b6dd123ed79",
    "pang_lee_polarity.cor": "662c1b7c3bd0612eaaaf3f0c694cbd3897e30c0d87d2940b46c9fd0d15ed70c1",
    "simlex999.txt": "d5e0501971478a511430ee880bd0121e94ac701ba86d90544d83e6d2ba3db05d",
}


def gensim_data_path(name: str) -> Path:
    """The path of a file shipped in gensim's test data, checked against ``GENSIM_DATA_SHA256`` if listed."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str file name, got {describe(name)}")
    from gensim.test.utils import datapath

    path = Path(datapath(name))
    if not path.is_file():
        raise FileNotFoundError(
            f"gensim's test data has no file {name!r} (looked for {path})"
        )
    expected = GENSIM_DATA_SHA256.get(name)
    if expected is not None and (got := sha256sum(path)) != expected:
        raise ValueError(
            f"{path}: SHA-256 mismatch, expected {expected} (gensim 4.4.0's file), got {got}"
        )
    return path


def cache_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The directory for cached corpora (created if missing); ``path`` overrides the default."""
    if path is None:
        env = os.environ.get("COMPANION_CACHE_DIR")
        if env:
            path = env
        else:
            base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
                os.path.expanduser("~"), ".cache"
            )
            path = os.path.join(base, "companion")
    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    return d


def sha256sum(path: str | os.PathLike[str]) -> str:
    """The hex SHA-256 digest of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _write_sentences(path: Path, sentences: list[list[str]]) -> None:
    """Write one sentence per line, tokens separated by single spaces, atomically."""
    tmp = tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=path.parent, delete=False, suffix=".tmp"
    )
    try:
        with tmp:
            for s in sentences:
                tmp.write(" ".join(s))
                tmp.write("\n")
        os.chmod(tmp.name, 0o644)
        os.replace(tmp.name, path)
    except BaseException:
        Path(tmp.name).unlink(missing_ok=True)
        raise


def _read_sentences(path: Path) -> list[list[str]]:
    with open(path, encoding="utf-8") as f:
        return [line.split() for line in f]


def load_wikipedia(
    max_articles: int | None = None,
    *,
    cache: bool = True,
    cache_path: str | os.PathLike[str] | None = None,
    source: str | os.PathLike[str] | None = None,
) -> list[list[str]]:
    """The Wikipedia excerpt of gensim's test data, one token list per article.

    Tokenised by ``gensim.corpora.WikiCorpus`` with its defaults: markup stripped, lower case, tokens of 2
    to 15 characters, articles under 50 tokens and non-article pages dropped. All 106 articles give
    452,944 tokens.

    Args:
        max_articles: keep only the first this many articles (``None``: all).
        cache: read and write the on-disk cache (see the module docstring).
        cache_path: directory of the cache, instead of the default.
        source: another WikiCorpus ``.xml.bz2`` dump to read instead of gensim's excerpt.
    """
    if max_articles is not None:
        require_int(max_articles, "max_articles", low=1, why="or None")
    path = Path(source) if source is not None else gensim_data_path(WIKIPEDIA_FILE)
    if not path.is_file():
        raise FileNotFoundError(f"no Wikipedia dump at {path}")
    target = None
    if cache:
        digest = sha256sum(path)[:16]
        n = "all" if max_articles is None else str(max_articles)
        target = (
            cache_dir(cache_path) / f"wikicorpus-{digest}-{n}-v{_CACHE_VERSION}.txt"
        )
        if target.is_file():
            return _read_sentences(target)
    from gensim.corpora import WikiCorpus

    wiki = WikiCorpus(str(path), dictionary={}, processes=1)
    texts = wiki.get_texts()
    try:
        articles = [
            list(t)
            for t in (texts if max_articles is None else islice(texts, max_articles))
        ]
    finally:
        texts.close()
    if target is not None:
        _write_sentences(target, articles)
    return articles


def load_lee(path: str | os.PathLike[str] | None = None) -> list[list[str]]:
    """The Lee background corpus, one token list per news text, via ``gensim.utils.simple_preprocess``.

    ``simple_preprocess`` lower-cases and keeps alphabetic tokens of 2 to 15 characters.
    """
    from gensim.utils import simple_preprocess

    p = Path(path) if path is not None else gensim_data_path(LEE_FILE)
    with open(p, encoding="utf-8") as f:
        return [simple_preprocess(line) for line in f if line.strip()]


def load_wordsim353(
    path: str | os.PathLike[str] | None = None,
) -> list[tuple[str, str, float]]:
    """WordSim-353 as ``(word1, word2, mean human score)`` triples, in file order.

    Parsed as gensim's ``KeyedVectors.evaluate_word_pairs`` does: lines starting with ``#`` are comments,
    the others are split on tabs into exactly three fields, the last a float; any other line is skipped.
    """
    p = Path(path) if path is not None else gensim_data_path(WORDSIM353_FILE)
    pairs = []
    with open(p, encoding="utf-8") as f:
        for line in f:
            if not line or line.startswith("#"):
                continue
            parts = line.split("\t")
            if len(parts) != 3:
                continue
            try:
                score = float(parts[2])
            except ValueError:
                continue
            pairs.append((parts[0], parts[1], score))
    return pairs


def load_analogies(path: str | os.PathLike[str] | None = None) -> list[AnalogyQuestion]:
    """Google's analogy questions, parsed as gensim's ``evaluate_word_analogies`` does.

    A line ``: name`` opens a section; every other line must split on whitespace into four words (lines
    that do not are skipped). A question before the first section header is an error.
    """
    p = Path(path) if path is not None else gensim_data_path(ANALOGIES_FILE)
    out: list[AnalogyQuestion] = []
    section = None
    with open(p, encoding="utf-8") as f:
        for line_no, line in enumerate(f):
            if line.startswith(": "):
                section = line.lstrip(": ").strip()
                continue
            if section is None:
                raise ValueError(
                    f"{p}: line {line_no} comes before any ': section' header"
                )
            words = line.split()
            if len(words) != 4:
                continue
            out.append(AnalogyQuestion(section, *words))
    return out


def corpus_size(sentences: list[list[str]]) -> tuple[int, int]:
    """``(number of sentences, number of tokens)`` of a corpus."""
    return len(sentences), sum(len(s) for s in sentences)


# ----------------------------------------------------------------------------------------------------------
# Larger corpora for readers who are online: downloaded once, checked, cached.


@dataclass(frozen=True)
class RemoteFile:
    """A file on the web with the SHA-256 its bytes must have."""

    url: str
    sha256: str
    filename: str


TEXT8 = RemoteFile(
    url="http://mattmahoney.net/dc/text8.zip",
    sha256="a6640522afe85d1963ad56c05b0ede0a0c000dddc9671758a6cc09b7a38e5232",
    filename="text8.zip",
)
"""Matt Mahoney's text8, the first 10^8 bytes of cleaned English Wikipedia (17M tokens), zipped (31 MB).

The SHA-256 is the one published projects that pin this file record; the member ``text8`` inside is
expected to hash to :data:`TEXT8_MEMBER_SHA256`.
"""
TEXT8_MEMBER_SHA256 = "6e890197040d37d85beb962ae1f041ff1d9a9ca8d20c7d99c85027eebf51dca7"
"""The SHA-256 of the file ``text8`` inside :data:`TEXT8`'s zip, checked after extraction."""


def fetch(
    url: str,
    sha256: str,
    *,
    filename: str | None = None,
    cache_path: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> Path:
    """Download ``url`` into the cache once and return its path, after checking its SHA-256.

    A cached file is re-checked on every call; a file whose digest differs from ``sha256`` is deleted and
    a ``ValueError`` names both digests. ``file://`` URLs work too (the tests use them).
    """
    if not isinstance(url, str) or not url:
        raise TypeError(f"url must be a non-empty str, got {describe(url)}")
    if not isinstance(sha256, str) or len(sha256) != 64:
        raise ValueError(f"sha256 must be a 64-character hex digest, got {sha256!r}")
    name = filename or url.rstrip("/").rsplit("/", 1)[-1]
    target = cache_dir(cache_path) / name
    if target.is_file():
        got = sha256sum(target)
        if got == sha256.lower():
            return target
        target.unlink()
    tmp = target.with_name(target.name + ".part")
    try:
        with urllib.request.urlopen(url) as response, open(tmp, "wb") as out:
            total = response.headers.get("Content-Length")
            with tqdm(
                total=int(total) if total else None,
                unit="B",
                unit_scale=True,
                desc=name,
                disable=not progress,
            ) as bar:
                while block := response.read(1 << 20):
                    out.write(block)
                    bar.update(len(block))
        got = sha256sum(tmp)
        if got != sha256.lower():
            raise ValueError(
                f"{url}: SHA-256 mismatch, expected {sha256.lower()}, got {got}; nothing was cached"
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _chunks(tokens: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(tokens), size):
        yield tokens[start : start + size]


def load_text8(
    max_tokens: int | None = None,
    *,
    sentence_length: int = 10_000,
    remote: RemoteFile = TEXT8,
    member: str = "text8",
    member_sha256: str | None = TEXT8_MEMBER_SHA256,
    cache_path: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> list[list[str]]:
    """The text8 corpus (needs the network once), cut into "sentences" of ``sentence_length`` tokens.

    text8 is one line of space-separated lower-case words with no punctuation, so like gensim's
    ``Text8Corpus`` we cut it into fixed-length chunks. The zip is checked against ``remote.sha256`` and
    the extracted member against ``member_sha256`` before use.

    Args:
        max_tokens: keep only the first this many tokens.
        sentence_length: tokens per sentence.
        remote, member, member_sha256: where to get the zip, which member to read, its digest
            (``None`` skips the member check); the defaults are text8's.
        cache_path: the cache directory, instead of the default.
    """
    if max_tokens is not None:
        require_int(max_tokens, "max_tokens", low=1, why="or None")
    require_int(sentence_length, "sentence_length", low=1)
    archive = fetch(
        remote.url,
        remote.sha256,
        filename=remote.filename,
        cache_path=cache_path,
        progress=progress,
    )
    extracted = archive.with_name(archive.name + "." + member)
    if not extracted.is_file() or (
        member_sha256 is not None and sha256sum(extracted) != member_sha256
    ):
        with (
            zipfile.ZipFile(archive) as z,
            z.open(member) as src,
            open(extracted, "wb") as dst,
        ):
            shutil.copyfileobj(src, dst)
        if member_sha256 is not None and (got := sha256sum(extracted)) != member_sha256:
            extracted.unlink()
            raise ValueError(
                f"{member} in {archive}: SHA-256 mismatch, expected {member_sha256}, got {got}"
            )
    with open(extracted, encoding="utf-8") as f:
        tokens = f.read().split()
    if max_tokens is not None:
        tokens = tokens[:max_tokens]
    return list(_chunks(tokens, sentence_length))
