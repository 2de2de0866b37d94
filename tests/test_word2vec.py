"""word2vec: vocabulary, subsampling, noise distribution, windows and pairs, the loss and its hand-derived
gradients, and the trainer's determinism and behaviour."""

import math

import numpy as np
import pytest
import torch
from raising import raises
from scipy import stats

from companion import word2vec as w2v
from companion.data.corpus import load_lee
from companion.training import word2vec as trainer

TOY = [
    ["the", "cat", "sat", "on", "the", "mat"],
    ["the", "dog", "sat"],
    ["a", "cat", "and", "a", "dog"],
]


@pytest.fixture(scope="module")
def lee():
    return load_lee()


@pytest.fixture(scope="module")
def lee_model(lee):
    cfg = trainer.Word2VecConfig(vector_size=32, epochs=2, threads=1, seed=0)
    return trainer.train_word2vec(lee, cfg, progress=False)


# --- vocabulary -------------------------------------------------------------------------------------------


def test_vocabulary_order_counts_and_min_count():
    vocab = w2v.build_vocab(TOY, min_count=2)
    # by count, ties by first appearance
    assert vocab.words == ("the", "cat", "sat", "dog", "a")
    assert vocab.counts.tolist() == [3, 2, 2, 2, 2] and vocab.total == 11
    assert vocab["dog"] == 3 and "mat" not in vocab
    with raises(KeyError, "'mat' is not in the vocabulary"):
        vocab["mat"]


def test_empty_corpus_and_min_count_removing_everything_are_clear_errors():
    with raises(ValueError, "the corpus is empty"):
        w2v.build_vocab([[], []])
    with raises(ValueError, "the corpus is empty"):
        trainer.train_word2vec([], progress=False)
    with raises(
        ValueError,
        "min_count=4 removes every word: the most frequent word occurs 3 times",
    ):
        w2v.build_vocab(TOY, min_count=4)
    with raises(ValueError, "removes every word"):
        trainer.train_word2vec(
            TOY, trainer.Word2VecConfig(min_count=10), progress=False
        )
    with raises(TypeError, "one str"):
        w2v.build_vocab("the cat sat")


def test_encoding_drops_unknown_words_and_keeps_sentences():
    vocab = w2v.build_vocab(TOY, min_count=2)
    ids, sent = w2v.encode_sentences(TOY, vocab)
    assert [vocab.words[i] for i in ids.tolist()] == [
        "the",
        "cat",
        "sat",
        "the",
        "the",
        "dog",
        "sat",
        "a",
        "cat",
        "a",
        "dog",
    ]
    assert sent.tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2]


# --- subsampling and negatives ----------------------------------------------------------------------------


def test_keep_probabilities_follow_the_reference_formula():
    counts = torch.tensor([5000, 1000, 100, 10, 1])
    t, total = 1e-3, 6111
    keep = w2v.keep_probabilities(counts, t)
    for c, k in zip(counts.tolist(), keep.tolist(), strict=True):
        assert k == pytest.approx(
            min(1.0, (math.sqrt(c / (t * total)) + 1) * (t * total) / c), rel=1e-12
        )
    paper = w2v.keep_probabilities(counts, t, formula="paper")
    assert paper.tolist() == pytest.approx(
        [min(1.0, math.sqrt(t / (c / total))) for c in counts.tolist()]
    )
    assert torch.equal(
        w2v.keep_probabilities(counts, 0), torch.ones(5, dtype=torch.float64)
    )
    with raises(ValueError, "sample"):
        w2v.keep_probabilities(counts, 1.5)
    with raises(ValueError, "positive"):
        w2v.keep_probabilities(torch.tensor([3, 0]))


def test_vocabulary_has_gensims_words_and_counts_with_ties_in_first_appearance_order(
    lee,
):
    from gensim.models import Word2Vec

    model = Word2Vec(vector_size=8, min_count=5)
    model.build_vocab(lee)
    vocab = w2v.build_vocab(lee, 5)
    gensim_words = list(model.wv.index_to_key)
    gensim_counts = [model.wv.get_vecattr(w, "count") for w in gensim_words]
    assert set(gensim_words) == set(vocab.words)
    # the same counts in the same (decreasing) order
    assert gensim_counts == vocab.counts.tolist()
    assert all(
        vocab.counts[vocab[w]] == c
        for w, c in zip(gensim_words, gensim_counts, strict=True)
    )
    # ties: ours by first appearance, gensim's the other way round
    first_seen = {}
    for word in (w for sentence in lee for w in sentence):
        first_seen.setdefault(word, len(first_seen))
    tied = [
        w
        for w, c in zip(vocab.words, vocab.counts.tolist(), strict=True)
        if c == vocab.counts[-1]
    ]
    assert len(tied) > 1
    assert tied == sorted(tied, key=first_seen.get)
    assert [w for w in gensim_words if w in set(tied)] == tied[::-1]


def test_keep_probabilities_equal_gensims(lee):
    from gensim.models import Word2Vec

    model = Word2Vec(vector_size=8, min_count=5, sample=1e-3)
    model.build_vocab(lee)
    vocab = w2v.build_vocab(lee, 5)
    keep = w2v.keep_probabilities(vocab.counts, 1e-3)
    gensim_keep = np.array(
        [model.wv.get_vecattr(w, "sample_int") for w in vocab.words]
    ) / (2**32 - 1)
    assert np.allclose(keep.numpy(), gensim_keep, atol=1e-8)


def test_subsampling_keeps_tokens_at_the_right_rate():
    keep = torch.tensor([0.1, 0.5, 1.0], dtype=torch.float64)
    ids = torch.arange(3).repeat(20_000)
    g = torch.Generator().manual_seed(0)
    mask = w2v.subsample(ids, keep, g)
    rates = torch.stack([mask[ids == i].double().mean() for i in range(3)])
    assert torch.allclose(rates, keep, atol=0.01) and bool(mask[ids == 2].all())


def test_negatives_follow_the_unigram_distribution_to_the_three_quarters():
    counts = torch.tensor([400, 100, 50, 25, 10, 5, 1])
    noise = w2v.noise_distribution(counts)
    assert torch.allclose(
        noise, counts.double() ** 0.75 / (counts.double() ** 0.75).sum()
    )
    g = torch.Generator().manual_seed(1)
    n = 200_000
    draws = w2v.sample_negatives(noise, (n // 5, 5), g)
    assert draws.shape == (n // 5, 5) and draws.dtype == torch.long
    observed = torch.bincount(draws.flatten(), minlength=7).numpy()
    assert stats.chisquare(observed, noise.numpy() * n).pvalue > 1e-3
    # the test has power: the same draws are far from the plain unigram distribution
    unigram = counts.double() / counts.sum()
    assert stats.chisquare(observed, unigram.numpy() * n).pvalue < 1e-12


def test_reduced_windows_are_uniform_on_1_to_window():
    b = w2v.reduced_windows(50_000, 5, torch.Generator().manual_seed(2))
    assert int(b.min()) == 1 and int(b.max()) == 5
    assert stats.chisquare(torch.bincount(b)[1:].numpy()).pvalue > 1e-3


# --- windows and pairs ------------------------------------------------------------------------------------


def test_professor_sentence_context():
    words = "the professor is scribbling on the board and the student is writing down the scribbles".split()
    index = {w: i for i, w in enumerate(dict.fromkeys(words))}
    ids = torch.tensor([index[w] for w in words])
    centres, contexts = w2v.skipgram_pairs(ids, 2)
    inverse = {i: w for w, i in index.items()}
    of = lambda pos: [inverse[c] for c in contexts[centres == ids[pos]].tolist()]
    assert of(1) == ["the", "is", "scribbling"]  # the seed's window of "professor"
    assert of(9) == ["and", "the", "is", "writing"]  # ... and of "student"


@pytest.mark.parametrize("seed", range(4))
def test_vectorised_pairs_equal_the_loop(seed):
    g = torch.Generator().manual_seed(seed)
    n, window = 60, 4
    ids = torch.randint(0, 9, (n,), generator=g)
    sentences = torch.sort(torch.randint(0, 5, (n,), generator=g)).values
    loop = w2v.skipgram_pairs_loop(ids, window, sentences)
    centres, contexts = w2v.skipgram_pairs(ids, window, sentences)
    assert list(zip(centres.tolist(), contexts.tolist(), strict=True)) == loop
    assert w2v.skipgram_pairs_loop(ids, window) == list(
        zip(*[t.tolist() for t in w2v.skipgram_pairs(ids, window)], strict=True)
    )


def test_context_windows_mask():
    ids = torch.tensor([7, 8, 9])
    ctx, mask = w2v.context_windows(ids, 2, torch.tensor([0, 0, 1]))
    assert ctx.shape == (3, 4)
    assert mask.tolist() == [
        [False, False, True, False],
        [False, True, False, False],
        [False, False, False, False],
    ]
    with raises(ValueError, "sentence_ids must have the shape of ids (3,)"):
        w2v.context_windows(ids, 2, torch.tensor([0, 0]))


# --- the loss and its gradients ---------------------------------------------------------------------------


def test_negative_sampling_loss_by_hand():
    v = torch.tensor([[1.0, 0.0]])
    u_pos = torch.tensor([[2.0, 0.0]])
    u_neg = torch.tensor([[[0.0, 1.0], [-1.0, 0.0]]])
    log_sigmoid = lambda x: -math.log1p(math.exp(-x))
    by_hand = -log_sigmoid(2.0) - log_sigmoid(-0.0) - log_sigmoid(1.0)
    assert float(w2v.negative_sampling_loss(v, u_pos, u_neg)) == pytest.approx(
        by_hand, rel=1e-6
    )
    two = w2v.negative_sampling_loss(
        v.repeat(2, 1), u_pos.repeat(2, 1), u_neg.repeat(2, 1, 1), reduction="none"
    )
    assert two.shape == (2,)
    with raises(ValueError, "u_neg must have shape (1, K, 2)"):
        w2v.negative_sampling_loss(v, u_pos, torch.zeros(1, 3, 4))


def test_hand_derived_gradients_equal_autograd():
    g = torch.Generator().manual_seed(0)
    G, C, K, D = 5, 4, 3, 6
    v = torch.randn(G, C, D, generator=g, dtype=torch.float64, requires_grad=True)
    u = torch.randn(G, 1 + K, D, generator=g, dtype=torch.float64, requires_grad=True)
    cmask = torch.rand(G, C, generator=g) < 0.7
    omask = torch.rand(G, 1 + K, generator=g) < 0.8
    omask[:, 0] = True
    grad_v, grad_u, loss = w2v.skipgram_window_gradients(
        v.detach(), u.detach(), cmask, omask
    )
    # the same loss written pair by pair with negative_sampling_loss
    total = 0
    for gi in range(G):
        for ci in range(C):
            if cmask[gi, ci]:
                negs = u[gi, 1:][omask[gi, 1:]].unsqueeze(0)
                total = total + w2v.negative_sampling_loss(
                    v[gi, ci : ci + 1], u[gi, 0:1], negs, reduction="sum"
                )
    total.backward()
    assert float(loss) == pytest.approx(float(total.detach()), rel=1e-10)
    assert torch.allclose(grad_v, v.grad) and torch.allclose(grad_u, u.grad)


def test_teaching_module_trains_with_autograd():
    model = w2v.SkipGramNegativeSampling(10, 4, seed=0)
    assert (
        torch.equal(model.output.weight, torch.zeros(10, 4))
        and model.input.weight.abs().max() <= 0.125
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    centres, contexts = torch.tensor([1, 2, 3]), torch.tensor([2, 3, 1])
    negatives = torch.tensor([[5, 6], [7, 8], [9, 5]])
    first = model(centres, contexts, negatives).item()
    assert first == pytest.approx(3 * math.log(2), rel=1e-6)  # all scores start at 0
    for _ in range(50):
        opt.zero_grad()
        loss = model(centres, contexts, negatives)
        loss.backward()
        opt.step()
    assert loss.item() < 0.5 * first


# --- training ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_training_is_deterministic_and_thread_count_independent(lee, lee_model):
    again = trainer.train_word2vec(lee, lee_model.config, progress=False)
    assert (
        torch.equal(again.vectors, lee_model.vectors)
        and again.loss_history == lee_model.loss_history
    )
    two = trainer.train_word2vec(
        lee,
        trainer.Word2VecConfig(**{**lee_model.config.__dict__, "threads": 2}),
        progress=False,
    )
    assert torch.equal(two.vectors, lee_model.vectors)
    other = trainer.train_word2vec(
        lee,
        trainer.Word2VecConfig(**{**lee_model.config.__dict__, "seed": 1}),
        progress=False,
    )
    assert not torch.equal(other.vectors, lee_model.vectors)


def test_training_restores_the_thread_setting(lee, three_threads):
    trainer.train_word2vec(
        lee[:20],
        trainer.Word2VecConfig(vector_size=8, epochs=1, threads=2),
        progress=False,
    )
    assert torch.get_num_threads() == three_threads


@pytest.mark.slow
def test_skipgram_learns(lee_model):
    m = lee_model
    assert (
        m.vectors.shape == (len(m.vocab), 32)
        and m.output_vectors.shape == m.vectors.shape
    )
    assert m.epoch_losses[-1] < m.epoch_losses[0] < 4.2  # 6 log 2 = 4.16 at the start
    assert m.pairs_trained > 100_000 and len(m.loss_history) > 50
    assert torch.isfinite(m.vectors).all()


@pytest.mark.slow
def test_cbow_and_per_pair_negatives_learn(lee):
    small = lee[:100]
    for cfg in (
        trainer.Word2VecConfig(
            architecture="cbow", vector_size=16, epochs=3, min_count=3, threads=1
        ),
        trainer.Word2VecConfig(
            vector_size=16, epochs=3, min_count=3, shared_negatives=False, threads=1
        ),
    ):
        m = trainer.train_word2vec(small, cfg, progress=False)
        assert m.epoch_losses[-1] < m.epoch_losses[0], cfg
    with raises(ValueError, "skip-gram only"):
        trainer.Word2VecConfig(architecture="cbow", shared_negatives=False)


def test_config_validation():
    with raises(ValueError, "architecture"):
        trainer.Word2VecConfig(architecture="glove")
    with raises(ValueError, "window", ">= 1", "got 0"):
        trainer.Word2VecConfig(window=0)
    with raises(ValueError, "min_alpha"):
        trainer.Word2VecConfig(alpha=0.01, min_alpha=0.1)


@pytest.mark.slow
def test_export_to_gensim(lee_model):
    kv = lee_model.to_keyed_vectors()
    assert list(kv.index_to_key) == list(lee_model.words)
    assert np.array_equal(kv.vectors, lee_model.vectors.numpy())
    word = lee_model.words[3]
    assert kv.get_vecattr(word, "count") == int(lee_model.vocab.counts[3])
    assert torch.equal(lee_model[word], lee_model.vectors[3])
    with raises(ValueError, "one word per row"):
        trainer.to_keyed_vectors(torch.zeros(3, 2), ["a", "b"])
