"""The dates recipe: the model configuration composes a TransformerConfig, the first loss is the smoothed
cross-entropy of the first batch, and exact-match accuracy counts exactly right answers."""

import dataclasses

import torch

from companion.data import date_task
from companion.data.date_task import make_date_dataset
from companion.training import date_recipe
from companion.training.date_recipe import date_task_config, exact_match_accuracy
from companion.transformer import EncoderDecoder, TransformerConfig


def test_the_config_composes_a_transformer_config_and_fits_it_to_the_data():
    config = date_task_config(steps=10, d_model=32, n_heads=2)
    assert isinstance(config.model, TransformerConfig) and config.steps == 10
    assert (config.model.d_model, config.model.n_heads, config.model.d_ff) == (
        32,
        2,
        256,
    )
    assert not {f.name for f in dataclasses.fields(date_recipe.DateTaskConfig)} & {
        f.name for f in dataclasses.fields(TransformerConfig)
    }
    data = make_date_dataset(50, 20, seed=0, level="char")
    model = config.model_config(data)
    assert (model.src_vocab_size, model.tgt_vocab_size) == (
        len(data.src_vocab),
        len(data.tgt_vocab),
    )
    assert model.context_length >= max(data.train_src.shape[1], data.test_src.shape[1])
    default = date_task_config().model
    assert (default.src_vocab_size, default.tgt_vocab_size) == (
        len(date_task.source_vocab()),
        15,
    )


def test_exact_match_accuracy_runs_on_an_untrained_model():
    data = make_date_dataset(50, 20, seed=0)
    config = date_task_config(
        d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=32
    )
    model = EncoderDecoder(config.model_config(data))
    assert exact_match_accuracy(model, data) == 0.0


def test_exact_match_accuracy_counts_exactly_right_answers(monkeypatch):
    data = make_date_dataset(50, 20, seed=0)
    test_answers = [iso for _, iso in data.test_pairs]
    # 5 of 20 off by their last character
    test_answers[::4] = [iso[:-1] + "x" for iso in test_answers[::4]]
    train_answers = [iso for _, iso in data.train_pairs]

    def decode(model, data_, src):
        return test_answers if src is data_.test_src else train_answers

    monkeypatch.setattr(date_recipe, "decode_dates", decode)
    assert exact_match_accuracy(None, data) == 15 / 20
    assert exact_match_accuracy(None, data, split="train") == 1.0


def test_the_first_loss_is_the_smoothed_cross_entropy_of_the_first_batch():
    """train_date_model scores the first batch with seq2seq_loss and the configured label smoothing."""
    from companion.transformer import seq2seq_loss

    for smoothing in (0.0, 0.1):
        config = date_recipe.date_task_config(n_train=200, n_test=10, steps=1, warmup_steps=1,
                                            label_smoothing=smoothing, dropout=0.0,
                                            progress=False)  # fmt: skip
        _, data, history = date_recipe.train_date_model(config)
        torch.manual_seed(config.seed)
        model = EncoderDecoder(config.model_config(data))
        batch = date_task.date_batches(data, config.batch_size, seed=config.seed)(0)
        expected = seq2seq_loss(model, batch, label_smoothing=smoothing).item()
        assert abs(history[0] - expected) < 1e-6, (smoothing, history[0], expected)
    assert date_recipe.date_task_config().adam_betas == (0.9, 0.98)
