"""The corpus loaders read gensim's shipped data, cache the parsed Wikipedia excerpt, and fetch larger
corpora with a checksum (tested here on local files: no network)."""

import hashlib
import zipfile

import pytest
from raising import raises

from companion.data import corpus


def test_wikipedia_excerpt_size():
    # the default cache: parsed once per machine (a few seconds), then read back
    articles = corpus.load_wikipedia()
    assert corpus.corpus_size(articles) == (106, 452_944)
    assert all(isinstance(t, str) and t == t.lower() for t in articles[0][:100])


def test_wikipedia_cache_is_written_then_used(tmp_path, monkeypatch):
    first = corpus.load_wikipedia(2, cache_path=tmp_path)
    assert len(first) == 2 and all(len(a) >= 50 for a in first)
    files = list(tmp_path.glob("wikicorpus-*-2-v1.txt"))
    digest = corpus.sha256sum(corpus.gensim_data_path(corpus.WIKIPEDIA_FILE))
    assert len(files) == 1 and digest[:16] in files[0].name

    import gensim.corpora

    def boom(*args, **kwargs):
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(gensim.corpora, "WikiCorpus", boom)
    assert corpus.load_wikipedia(2, cache_path=tmp_path) == first
    with raises(ValueError, "max_articles"):
        corpus.load_wikipedia(0, cache_path=tmp_path)


def test_cache_dir_honours_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPANION_CACHE_DIR", str(tmp_path / "c"))
    assert corpus.cache_dir() == tmp_path / "c" and (tmp_path / "c").is_dir()


def test_lee_wordsim_analogies():
    lee = corpus.load_lee()
    assert len(lee) == 300 and 55_000 < corpus.corpus_size(lee)[1] < 62_000
    pairs = corpus.load_wordsim353()
    assert len(pairs) == 353 and pairs[0] == ("love", "sex", 6.77)
    questions = corpus.load_analogies()
    assert len(questions) == 19_544
    assert questions[0] == corpus.AnalogyQuestion(
        "capital-common-countries", "Athens", "Greece", "Baghdad", "Iraq"
    )
    assert len({q.section for q in questions}) == 14


def test_analogy_file_without_a_header_is_an_error(tmp_path):
    path = tmp_path / "q.txt"
    path.write_text("a b c d\n", encoding="utf-8")
    with raises(ValueError, "before any"):
        corpus.load_analogies(path)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_fetch_checks_and_caches(tmp_path):
    source = tmp_path / "remote" / "data.txt"
    source.parent.mkdir()
    source.write_bytes(b"hello corpus\n")
    cache = tmp_path / "cache"
    got = corpus.fetch(
        source.as_uri(), _sha(b"hello corpus\n"), cache_path=cache, progress=False
    )
    assert got == cache / "data.txt" and got.read_bytes() == b"hello corpus\n"
    source.unlink()  # the second call must not need the source any more
    assert (
        corpus.fetch(
            source.as_uri(), _sha(b"hello corpus\n"), cache_path=cache, progress=False
        )
        == got
    )


def test_fetch_rejects_a_wrong_checksum(tmp_path):
    source = tmp_path / "data.txt"
    source.write_bytes(b"tampered\n")
    cache = tmp_path / "cache"
    with raises(ValueError, "SHA-256 mismatch"):
        corpus.fetch(source.as_uri(), "0" * 64, cache_path=cache, progress=False)
    assert list(cache.iterdir()) == []
    # a corrupted cached copy is replaced
    good = _sha(b"tampered\n")
    corpus.fetch(source.as_uri(), good, cache_path=cache, progress=False)
    (cache / "data.txt").write_bytes(b"bit rot\n")
    assert (
        corpus.fetch(
            source.as_uri(), good, cache_path=cache, progress=False
        ).read_bytes()
        == b"tampered\n"
    )
    with raises(ValueError, "64-character"):
        corpus.fetch(source.as_uri(), "abc", cache_path=cache)


def test_load_text8_on_a_small_local_zip(tmp_path):
    text = " ".join(f"w{i % 7}" for i in range(25)).encode()
    archive = tmp_path / "mini.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("text8", text)
    remote = corpus.RemoteFile(archive.as_uri(), corpus.sha256sum(archive), "mini.zip")
    cache = tmp_path / "cache"
    sentences = corpus.load_text8(
        sentence_length=10,
        remote=remote,
        member_sha256=_sha(text),
        cache_path=cache,
        progress=False,
    )
    assert [len(s) for s in sentences] == [10, 10, 5] and sentences[0][:3] == [
        "w0",
        "w1",
        "w2",
    ]
    assert corpus.load_text8(
        12,
        sentence_length=10,
        remote=remote,
        member_sha256=_sha(text),
        cache_path=cache,
        progress=False,
    )[1] == ["w3", "w4"]
    with raises(ValueError, "SHA-256 mismatch"):
        corpus.load_text8(
            remote=remote,
            member_sha256="f" * 64,
            cache_path=tmp_path / "other",
            progress=False,
        )


def test_text8_registry_entry():
    assert corpus.TEXT8.url.endswith("text8.zip") and len(corpus.TEXT8.sha256) == 64
    assert (
        corpus.TEXT8.filename == "text8.zip" and len(corpus.TEXT8_MEMBER_SHA256) == 64
    )


def test_gensim_files_are_checked_against_their_recorded_digests(tmp_path, monkeypatch):
    for name, digest in corpus.GENSIM_DATA_SHA256.items():
        assert corpus.sha256sum(corpus.gensim_data_path(name)) == digest, name
    # A gensim release that changed a file the book reads is refused by name, not silently used.
    changed = tmp_path / "wordsim353.tsv"
    changed.write_text("tiger\tcat\t7.35\n")
    import gensim.test.utils

    monkeypatch.setattr(
        gensim.test.utils, "datapath", lambda name: str(tmp_path / name)
    )
    with pytest.raises(
        ValueError, match="SHA-256 mismatch.*wordsim353|wordsim353.*SHA-256 mismatch"
    ):
        corpus.gensim_data_path("wordsim353.tsv")
