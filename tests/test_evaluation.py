"""The evaluation agrees exactly with gensim's ``KeyedVectors.evaluate_word_pairs`` and
``evaluate_word_analogies`` (with their defaults) on the same vectors, and reports what it leaves out."""

import pytest
import torch
from raising import raises

from companion import evaluation as ev
from companion.data.corpus import (
    gensim_data_path,
    load_analogies,
    load_lee,
    load_wordsim353,
)
from companion.evaluation import AnalogyQuestion
from companion.training.word2vec import Word2VecConfig, to_keyed_vectors, train_word2vec

WORDSIM = str(gensim_data_path("wordsim353.tsv"))
ANALOGIES = str(gensim_data_path("questions-words.txt"))


@pytest.fixture(scope="module")
def lee_vectors():
    model = train_word2vec(
        load_lee(), Word2VecConfig(vector_size=50, epochs=5, threads=1), progress=False
    )
    return model.vectors, list(model.words)


def _gensim_analogies(kv, **kwargs):
    score, sections = kv.evaluate_word_analogies(ANALOGIES, **kwargs)
    total = sections[-1]
    return (
        score,
        len(total["correct"]),
        len(total["correct"]) + len(total["incorrect"]),
        sections[:-1],
    )


@pytest.mark.slow
def test_word_pairs_equal_gensim(lee_vectors):
    vectors, words = lee_vectors
    ours = ev.evaluate_word_pairs(vectors, words, load_wordsim353())
    pearson, spearman, oov_ratio = to_keyed_vectors(vectors, words).evaluate_word_pairs(
        WORDSIM
    )
    assert ours.spearman == spearman.statistic
    assert ours.pearson == pytest.approx(pearson.statistic, abs=1e-6)
    assert ours.oov_ratio == pytest.approx(oov_ratio, abs=1e-12)
    # what is left out is reported, not silently dropped
    assert ours.pairs_used + ours.oov_count == 353 and ours.oov_count > 0
    vocab = {w.upper() for w in words}
    assert all(
        a.upper() not in vocab or b.upper() not in vocab for a, b in ours.oov_pairs
    )


@pytest.mark.slow
def test_analogies_equal_gensim(lee_vectors):
    vectors, words = lee_vectors
    ours = ev.evaluate_analogies(vectors, words, load_analogies())
    score, correct, evaluated, sections = _gensim_analogies(
        to_keyed_vectors(vectors, words)
    )
    assert (ours.accuracy, ours.correct, ours.evaluated) == (score, correct, evaluated)
    assert ours.evaluated + ours.skipped == 19_544 and ours.evaluated > 100
    for s in sections:
        assert ours.sections[s["section"]] == (
            len(s["correct"]),
            len(s["correct"]) + len(s["incorrect"]),
        )


@pytest.mark.slow
def test_restrict_vocab_equals_gensim(lee_vectors):
    vectors, words = lee_vectors
    kv = to_keyed_vectors(vectors, words)
    ours = ev.evaluate_analogies(vectors, words, load_analogies(), restrict_vocab=600)
    score, correct, evaluated, _ = _gensim_analogies(kv, restrict_vocab=600)
    assert (ours.accuracy, ours.correct, ours.evaluated) == (score, correct, evaluated)
    pairs = ev.evaluate_word_pairs(
        vectors, words, load_wordsim353(), restrict_vocab=600
    )
    assert (
        pairs.spearman
        == kv.evaluate_word_pairs(WORDSIM, restrict_vocab=600)[1].statistic
    )


def test_case_variants_match_gensim_on_a_question_file(tmp_path):
    # several rows upper-case to the same word ("athens", "Athens"): the first stands for it, and a
    # candidate that is a case variant of a question word is passed over
    questions = [
        q
        for q in load_analogies()
        if q.section in ("capital-common-countries", "family")
    ][::5]
    path = tmp_path / "q.txt"
    lines, section = [], None
    for q in questions:
        if q.section != section:
            lines.append(f": {q.section}")
            section = q.section
        lines.append(f"{q.a} {q.b} {q.c} {q.d}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    # vectors in which b - a is one offset per section, so that many questions are answerable
    g = torch.Generator().manual_seed(1)
    offsets = {
        s: 2 * torch.randn(12, generator=g)
        for s in ("capital-common-countries", "family")
    }
    vec: dict[str, torch.Tensor] = {}
    for q in questions:
        for first, second in ((q.a, q.b), (q.c, q.d)):
            vec.setdefault(first.lower(), torch.randn(12, generator=g))
            vec.setdefault(
                second.lower(),
                vec[first.lower()]
                + offsets[q.section]
                + 0.3 * torch.randn(12, generator=g),
            )
    lower = list(vec)
    variants = [
        w
        for w in sorted({w for q in questions for w in (q.a, q.b, q.c, q.d)})[::2]
        if w not in vec
    ]
    fillers = [f"filler{i}" for i in range(30)]
    words = lower + variants + fillers
    vectors = torch.stack(
        [vec[w] for w in lower]
        + [vec[w.lower()] + 0.05 * torch.randn(12, generator=g) for w in variants]
        + [torch.randn(12, generator=g) for _ in fillers]
    )
    kv = to_keyed_vectors(vectors, words)
    for case_insensitive in (True, False):
        ours = ev.evaluate_analogies(
            vectors, words, questions, case_insensitive=case_insensitive
        )
        score, sections = kv.evaluate_word_analogies(
            str(path), case_insensitive=case_insensitive
        )
        total = sections[-1]
        assert ours.accuracy == score
        assert (ours.correct, ours.evaluated) == (
            len(total["correct"]),
            len(total["correct"]) + len(total["incorrect"]),
        )
        if case_insensitive:
            assert (
                ours.evaluated == len(questions) and 0 < ours.correct < ours.evaluated
            ), ours


@pytest.mark.slow
def test_most_similar_matches_gensim(lee_vectors):
    vectors, words = lee_vectors
    kv = to_keyed_vectors(vectors, words)
    ours = ev.most_similar(vectors, words, "government", 8)
    theirs = kv.most_similar("government", topn=8)
    assert [w for w, _ in ours] == [w for w, _ in theirs]
    assert [s for _, s in ours] == pytest.approx([s for _, s in theirs], abs=1e-5)
    by_vector = ev.most_similar(vectors, words, vectors[words.index("government")], 1)
    assert by_vector[0][0] == "government" and by_vector[0][1] == pytest.approx(1.0)
    with raises(KeyError, "not among"):
        ev.most_similar(vectors, words, "zzzz")


def test_analogy_by_construction():
    words = ["man", "woman", "king", "queen", "apple"]
    e = torch.eye(5)
    vectors = torch.stack([e[0], e[1], e[0] + e[2], e[1] + e[2], e[4]])
    assert ev.analogy(vectors, words, "man", "king", "woman")[0][0] == "queen"
    assert ev.evaluate_analogies(
        vectors,
        words,
        [
            AnalogyQuestion("royal", "man", "king", "woman", "queen"),
            AnalogyQuestion("royal", "man", "king", "pear", "queen"),
        ],
    ).sections == {"royal": (1, 1)}


def test_input_validation():
    with raises(ValueError, "one word per row"):
        ev.evaluate_word_pairs(torch.zeros(3, 2), ["a", "b"], [])
    with raises(ValueError, "outside the vocabulary"):
        ev.evaluate_word_pairs(torch.randn(2, 2), ["xx", "yy"], load_wordsim353())
    with raises(TypeError, "floating"):
        ev.evaluate_analogies(torch.zeros(2, 2, dtype=torch.long), ["a", "b"], [])
