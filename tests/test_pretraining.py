"""Pretraining helpers and the shipped checkpoint of chapter 6."""

import hashlib
import math
import re

import pytest
import torch
from raising import raises

from companion.bpe import BPETokenizer
from companion.gpt import GPT, GPTConfig, next_token_loss
from companion.training import gpt_pretraining


def test_split_windows_and_loss():
    ids = torch.arange(1000) % 50
    train, val = gpt_pretraining.train_val_split(ids.tolist(), 0.1)
    assert torch.equal(torch.cat([train, val]), ids) and len(val) == 100
    g = torch.Generator().manual_seed(0)
    windows = gpt_pretraining.random_windows(train, 8, 16, g)
    assert windows.shape == (8, 17)
    for w in windows:  # consecutive ids of the stream
        start = int(w[0])
        assert torch.equal(w, (torch.arange(start, start + 17)) % 50)
    torch.manual_seed(0)
    model = GPT(
        GPTConfig(vocab_size=50, context_length=16, n_layers=1, n_heads=2, d_model=8)
    )
    loss = gpt_pretraining.evaluate_loss(model, val, 16, batch_size=2)
    n = (len(val) - 1) // 16
    expected = (
        sum(
            next_token_loss(model.eval(), val[i * 16 : i * 16 + 17][None]).item()
            for i in range(n)
        )
        / n
    )
    assert loss == pytest.approx(expected, abs=1e-5)
    assert abs(loss - math.log(50)) < 0.1
    with raises(ValueError, "fewer than a window"):
        gpt_pretraining.random_windows(val[:5], 2, 16, g)
    with raises(ValueError, "val_fraction"):
        gpt_pretraining.train_val_split(ids, 1.5)


def test_checkpoint_round_trip(tmp_path):
    text = "the cat sat on the mat. " * 40
    tokenizer = BPETokenizer.train(text, 270)
    torch.manual_seed(0)
    model = GPT(
        GPTConfig(vocab_size=270, context_length=16, n_layers=1, n_heads=2, d_model=8)
    )
    gpt_pretraining.save_checkpoint(
        tmp_path / "m.pt", model, tokenizer, note="hello", history=[1.0, 0.5]
    )
    loaded, tok, extras = gpt_pretraining.load_checkpoint(tmp_path / "m.pt")
    assert extras == {"note": "hello", "history": [1.0, 0.5]}
    assert tok.merges == tokenizer.merges and tok.encode(text) == tokenizer.encode(text)
    ids = torch.tensor([tokenizer.encode(text)[:16]])
    torch.testing.assert_close(loaded(ids), model.eval()(ids), atol=0, rtol=0)
    assert loaded.lm_head.weight is loaded.embed.weight
    with raises(FileNotFoundError, "no checkpoint"):
        gpt_pretraining.load_checkpoint(tmp_path / "missing.pt")


def test_shipped_checkpoint_matches_its_sha256_and_has_learned():
    path = gpt_pretraining.PRETRAINED_PATH
    recorded = path.with_name(path.name + ".sha256").read_text().split()[0]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == recorded
    assert path.stat().st_size < 5e6
    model, tokenizer, extras = gpt_pretraining.pretrained_pydoc_gpt()
    history = extras["history"]
    assert history["val_loss"][0] > 6.5 and history["val_loss"][-1] < 4.5
    assert len(history["train_loss"]) == extras["steps"]
    text = gpt_pretraining.pydoc_text()
    # The checkpoint was trained on the shipped snapshot, whatever Python runs this test.
    assert extras["text_sha256"] == gpt_pretraining.text_sha256(text)
    ids = BPETokenizer.train(text, extras["recipe"]["vocab_size"]).encode(text)
    assert ids == tokenizer.encode(text)
    _, val = gpt_pretraining.train_val_split(ids)
    loss = gpt_pretraining.evaluate_loss(model, val, extras["recipe"]["length"])
    # another CPU: other last bits
    assert loss == pytest.approx(history["val_loss"][-1], abs=1e-3)


def test_python_docs_snapshot_is_checked_and_independent_of_the_interpreter(
    tmp_path, monkeypatch
):
    from companion.data import python_docs

    topics = python_docs.topics()
    assert len(topics) == 79 and list(topics) == sorted(topics)
    assert sum(map(len, topics.values())) == 464_970
    assert python_docs.text("\n\n") == "\n\n".join(topics[k] for k in sorted(topics))
    assert "Operator precedence" in topics["operator-summary"]
    licence = (python_docs.PATH.parent / "PYTHON_DOCS_LICENSE.txt").read_text()
    assert licence.count("PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2") == 1
    # A corrupted snapshot is refused by name.
    broken = tmp_path / "python_docs.json.xz"
    broken.write_bytes(python_docs.PATH.read_bytes()[:-1] + b"\0")
    monkeypatch.setattr(python_docs, "PATH", broken)
    python_docs.topics.cache_clear()
    try:
        with raises(ValueError, "SHA-256 mismatch"):
            python_docs.topics()
    finally:
        python_docs.topics.cache_clear()


def test_no_source_reads_data_from_the_interpreter(root):
    """``pydoc_data`` changes with every Python release: chapters, package, tools and tests read the snapshot."""
    sources = [
        p
        for pattern in (
            "companion/**/*.py",
            "book/*.md",
            "tools/*.py",
            "benchmarks/*.py",
            "tests/*.py",
        )
        for p in root.glob(pattern)
    ]
    pattern = re.compile(r"^\s*(from|import)\s+pydoc_data", re.MULTILINE)
    assert [
        str(p.relative_to(root)) for p in sources if pattern.search(p.read_text())
    ] == []
