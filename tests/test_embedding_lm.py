"""The word-embedding language model: the toy corpus, the softmax with temperature, training, sampling,
and the count-based optimum it is measured against."""

import math

import pytest
import torch
from raising import raises

from companion import embedding_lm as lm


@pytest.fixture(scope="module")
def toy():
    vocab = lm.toy_vocabulary()
    return vocab, lm.encode(lm.toy_tokens(), vocab)


@pytest.fixture(scope="module")
def trained(toy):
    vocab, ids = toy
    model = lm.WordEmbeddingLM(len(vocab), 2, seed=0)
    history = lm.train_embedding_lm(model, ids, lm.Training(300, 0.2, progress=False))
    return model, history


def test_toy_corpus_matches_the_seed(toy):
    vocab, ids = toy
    assert list(vocab) == ["!", ".", "ate", "cat", "dog", "ran", "the", "zoo"]
    assert ids.numel() == 25
    p = lm.bigram_probabilities(ids, 8)
    the = vocab.index("the")
    expected = {"cat": 0.25, "dog": 0.5, "zoo": 0.25}
    assert {vocab[j]: float(p[the, j]) for j in range(8) if p[the, j] > 0} == expected
    # every transition of the notes' generated text occurs in the corpus
    sample = "the dog ate . the dog ! the zoo . the dog ran the zoo . the dog ate the dog !".split()
    s = lm.encode(sample, vocab)
    assert bool((p[s[:-1], s[1:]] > 0).all())


def test_encode_decode_round_trip_and_errors(toy):
    vocab, ids = toy
    assert lm.decode(ids, vocab) == lm.toy_tokens()
    with raises(ValueError, "'bird' is not in the vocabulary"):
        lm.encode(["the", "bird"], vocab)
    with raises(TypeError, "one str"):
        lm.encode("the dog", vocab)
    with raises(ValueError, "[0, 7]"):
        lm.decode([8], vocab)


def test_scores_are_U_times_v_prev():
    model = lm.WordEmbeddingLM(5, 3, seed=1)
    prev = torch.tensor([4, 0])
    scores = model(prev)
    assert scores.shape == (2, 5)
    for b, i in enumerate(prev.tolist()):
        for j in range(5):
            assert torch.isclose(scores[b, j], model.U[j] @ model.E[i])
    with raises(ValueError, "[0, 4]"):
        model(torch.tensor([5]))
    with raises(TypeError, "integer"):
        model(torch.tensor([1.0]))


def test_temperature():
    s = torch.tensor([-0.823, 0.683, -6.376, 4.174, 4.860, -3.803, -7.149, 4.152])
    p = lm.next_token_probabilities(s, 1.0)
    # the lecture notes' table for prev = 'the'
    assert torch.allclose(
        p,
        torch.tensor([0.002, 0.008, 0.000, 0.250, 0.496, 0.000, 0.000, 0.245]),
        atol=1e-3,
    )
    assert torch.allclose(lm.next_token_probabilities(s, 2.0), torch.softmax(s / 2, -1))
    assert torch.equal(
        lm.next_token_probabilities(s, 0.0),
        torch.nn.functional.one_hot(torch.tensor(4), 8).float(),
    )
    assert lm.next_token_probabilities(s, 1e-3)[4] > 0.999  # T -> 0 tends to the argmax
    assert torch.allclose(
        lm.next_token_probabilities(s, 1e6), torch.full((8,), 1 / 8), atol=1e-5
    )
    batch = torch.randn(3, 4, 8)
    assert torch.allclose(
        lm.next_token_probabilities(batch, 0.7).sum(-1), torch.ones(3, 4)
    )
    for bad in (-1.0, math.nan, math.inf):
        with raises(ValueError, "temperature"):
            lm.next_token_probabilities(s, bad)
    with raises(TypeError, "temperature"):
        lm.next_token_probabilities(s, "hot")


def test_bigram_counts_against_a_loop():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 6, (200,), generator=g)
    c = lm.bigram_counts(ids, 6)
    loop = torch.zeros(6, 6, dtype=torch.long)
    for a, b in zip(ids[:-1].tolist(), ids[1:].tolist(), strict=True):
        loop[a, b] += 1
    assert torch.equal(c, loop) and int(c.sum()) == 199
    p = lm.bigram_probabilities(ids, 6)
    assert torch.allclose(p.sum(1), torch.ones(6, dtype=torch.float64))
    assert torch.equal(
        lm.bigram_probabilities(torch.tensor([0, 1]), 3)[1:],
        torch.zeros(2, 3, dtype=torch.float64),
    )
    with raises(ValueError, "at least 2 tokens"):
        lm.bigram_counts(torch.tensor([1]), 3)


def test_optimum_cross_entropy_by_hand(toy):
    _, ids = toy
    # rows: 'the' (8 bigrams) and 'dog' (4) have entropy 1.5 ln 2, 'cat' and 'ate' (2 each) ln 2, others 0
    expected = (12 * 1.5 + 4) * math.log(2) / 24
    assert math.isclose(
        lm.cross_entropy(lm.bigram_probabilities(ids, 8), ids), expected, rel_tol=1e-12
    )


def test_training_reaches_the_count_based_optimum(toy, trained):
    _, ids = toy
    model, history = trained
    assert history[0] > 2.0 and history[-1] < history[0]
    report = lm.optimum_gap(model, ids)
    assert report.gap == pytest.approx(
        float((report.prev_frequency * report.kl_per_token).sum()), abs=1e-9
    )
    assert 0 <= report.gap < 2e-3, report
    untrained = lm.optimum_gap(lm.WordEmbeddingLM(8, 2, seed=0), ids)
    assert untrained.gap > 1.0
    p = model.transition_matrix()
    assert torch.allclose(p[6].double(), lm.bigram_probabilities(ids, 8)[6], atol=0.01)


def test_training_is_deterministic_and_restores_the_thread_count(toy, three_threads):
    vocab, ids = toy
    runs = []
    for _ in range(2):
        m = lm.WordEmbeddingLM(len(vocab), 2, seed=3)
        runs.append(
            (
                lm.train_embedding_lm(m, ids, lm.Training(50, progress=False)),
                m.E.detach().clone(),
            )
        )
    assert runs[0][0] == runs[1][0] and torch.equal(runs[0][1], runs[1][1])
    # one thread while training, then the caller's again
    assert torch.get_num_threads() == three_threads


def test_generate(toy, trained):
    vocab, ids = toy
    model, _ = trained
    start = lm.encode(["the", "dog"], vocab)
    out = lm.generate(model, start, 20, seed=0)
    assert out.shape == (22,) and torch.equal(out[:2], start)
    assert torch.equal(out, lm.generate(model, start, 20, seed=0))
    p = lm.bigram_probabilities(ids, 8)
    # only transitions seen in the corpus
    assert bool((p[out[:-1], out[1:]] > 0).all()), lm.decode(out, vocab)
    greedy = lm.generate(model, start, 5, temperature=0)
    for a, b in zip(greedy[1:-1].tolist(), greedy[2:].tolist(), strict=True):
        assert b == int(model.transition_matrix()[a].argmax())
    with raises(ValueError, "temperature"):
        lm.generate(model, start, 3, temperature=-0.5)
    with raises(ValueError, "start", "at least 1 token", "got shape (0,)"):
        lm.generate(model, torch.tensor([], dtype=torch.long), 3)


def test_training_validates_inputs(toy):
    _, ids = toy
    with raises(TypeError, "WordEmbeddingLM"):
        lm.train_embedding_lm(torch.nn.Linear(2, 2), ids, lm.Training())
    with raises(ValueError, "[0, 3]"):
        lm.train_embedding_lm(lm.WordEmbeddingLM(4, 2), ids, lm.Training(1))
    with raises(TypeError, "c must be a Training", "got a dict"):
        lm.train_embedding_lm(lm.WordEmbeddingLM(8, 2), ids, {"steps": 1})
    with raises(ValueError, "steps", ">= 1", "got 0"):
        lm.Training(0)
    with raises(ValueError, "lr", "got 0"):
        lm.Training(lr=0)


def test_tied_model_has_one_table_and_symmetric_scores():
    model = lm.WordEmbeddingLM(6, 3, seed=4, tied=True)
    assert model.U is model.E and len(list(model.parameters())) == 1
    scores = model(torch.arange(6))
    assert torch.allclose(scores, scores.T)  # s_ij = s_ji
    # s_ii = |e_i|^2
    assert torch.allclose(scores.diagonal(), model.E.detach().pow(2).sum(1))
    untied = lm.WordEmbeddingLM(6, 3, seed=4)
    assert not torch.allclose(untied(torch.arange(6)), untied(torch.arange(6)).T)
    # training moves the one table, and the scores stay symmetric
    ids = torch.tensor([0, 1, 2, 3, 4, 5, 0, 2, 4])
    lm.train_embedding_lm(model, ids, lm.Training(20, progress=False))
    scores = model(torch.arange(6)).detach()
    assert torch.allclose(scores, scores.T, atol=1e-6)
    with raises(TypeError, "tied"):
        lm.WordEmbeddingLM(6, 3, tied="yes")
