"""Hugging Face interop: copy the weights of ``transformers``' models into the companion's (chapter 6 on).

- :func:`gpt_config_from_hf`: a ``GPT2Config`` → :class:`~companion.gpt.GPTConfig`;
- :func:`gpt_state_dict_from_hf`: a ``GPT2LMHeadModel`` (or ``GPT2Model``) state dict → a :class:`~companion.gpt.GPT`
  state dict;
- :func:`gpt_from_hf`: a ``GPT2LMHeadModel`` → a :class:`~companion.gpt.GPT` with the same weights.

GPT-2's linear layers are ``Conv1D`` modules that store their weight as (in, out), the transpose of
``nn.Linear``'s (out, in); its attention projects queries, keys and values with one ``c_attn`` of width 3d.
Nothing here imports ``transformers``: the functions read configuration attributes and tensors.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from ..gpt import GPT, GPTConfig
from ..validation import describe

__all__ = ["gpt_config_from_hf", "gpt_state_dict_from_hf", "gpt_from_hf"]

_TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")


def gpt_config_from_hf(config: object) -> GPTConfig:
    """The :class:`~companion.gpt.GPTConfig` of a Hugging Face ``GPT2Config`` (dropout from ``resid_pdrop``).

    Raises ``ValueError`` for options the companion's GPT does not have (another activation, untied output
    layer, attention scaled by the layer index or upcast).
    """
    needed = (
        "vocab_size",
        "n_positions",
        "n_layer",
        "n_head",
        "n_embd",
        "layer_norm_epsilon",
        "activation_function",
    )
    missing = [name for name in needed if not hasattr(config, name)]
    if missing:
        raise TypeError(
            f"config must be a transformers GPT2Config, got {describe(config)} without {missing}"
        )
    c = config
    if c.activation_function not in _TANH_GELUS:
        raise ValueError(
            f"activation_function must be one of {_TANH_GELUS}, got {c.activation_function!r}"
        )
    unsupported = {
        "tie_word_embeddings": (getattr(c, "tie_word_embeddings", True), True),
        "scale_attn_weights": (getattr(c, "scale_attn_weights", True), True),
        "scale_attn_by_inverse_layer_idx": (
            getattr(c, "scale_attn_by_inverse_layer_idx", False),
            False,
        ),
        "reorder_and_upcast_attn": (
            getattr(c, "reorder_and_upcast_attn", False),
            False,
        ),
    }
    for name, (got, expected) in unsupported.items():
        if bool(got) != expected:
            raise ValueError(f"only {name}={expected} is supported, got {name}={got!r}")
    return GPTConfig(
        vocab_size=c.vocab_size,
        context_length=c.n_positions,
        n_layers=c.n_layer,
        n_heads=c.n_head,
        d_model=c.n_embd,
        d_ff=getattr(c, "n_inner", None),
        dropout=float(getattr(c, "resid_pdrop", 0.0)),
        eps=c.layer_norm_epsilon,
    )


def gpt_state_dict_from_hf(
    state_dict: Mapping[str, torch.Tensor], config: GPTConfig
) -> dict[str, torch.Tensor]:
    """Rename and transpose a GPT-2 state dict (``transformer.wte.weight`` …) into a :class:`~companion.gpt.GPT` one.

    Keys may carry the ``transformer.`` prefix (``GPT2LMHeadModel``) or not (``GPT2Model``). Every key GPT-2
    has must be there with its shape under ``config``, and no other (the causal-mask buffers ``attn.bias`` and
    ``attn.masked_bias`` of old checkpoints are skipped); a ``lm_head.weight`` must equal ``wte.weight`` (tied).
    Errors name the keys and shapes expected and found.
    """
    if not isinstance(state_dict, Mapping):
        raise TypeError(
            f"state_dict must be a mapping name -> tensor, got {describe(state_dict)}"
        )
    if not isinstance(config, GPTConfig):
        raise TypeError(f"config must be a GPTConfig, got {describe(config)}")
    gpt2_choices = dict(positional="learned", activation="gelu_tanh", tie_weights=True)
    if other := {
        k: getattr(config, k)
        for k, v in gpt2_choices.items()
        if getattr(config, k) != v
    }:
        raise ValueError(
            f"GPT-2's weights need a GPT-2 configuration ({gpt2_choices}), got {other}"
        )
    V, T, d, d_ff = (
        config.vocab_size,
        config.context_length,
        config.d_model,
        config.d_ff,
    )
    expected = {
        "wte.weight": (V, d),
        "wpe.weight": (T, d),
        "ln_f.weight": (d,),
        "ln_f.bias": (d,),
    }
    for i in range(config.n_layers):
        expected |= {
            f"h.{i}.ln_1.weight": (d,), f"h.{i}.ln_1.bias": (d,),
            f"h.{i}.attn.c_attn.weight": (d, 3 * d), f"h.{i}.attn.c_attn.bias": (3 * d,),
            f"h.{i}.attn.c_proj.weight": (d, d), f"h.{i}.attn.c_proj.bias": (d,),
            f"h.{i}.ln_2.weight": (d,), f"h.{i}.ln_2.bias": (d,),
            f"h.{i}.mlp.c_fc.weight": (d, d_ff), f"h.{i}.mlp.c_fc.bias": (d_ff,),
            f"h.{i}.mlp.c_proj.weight": (d_ff, d), f"h.{i}.mlp.c_proj.bias": (d,),
        }  # fmt: skip
    sd: dict[str, torch.Tensor] = {}
    lm_head = None
    for key, value in state_dict.items():
        name = key.removeprefix("transformer.")
        if name == "lm_head.weight":
            lm_head = value
        elif not name.endswith((".attn.bias", ".attn.masked_bias")) or name in expected:
            sd[name] = value
    missing, unexpected = (
        sorted(expected.keys() - sd.keys()),
        sorted(sd.keys() - expected.keys()),
    )
    if missing or unexpected:
        raise ValueError(
            f"the state dict does not match a GPT-2 with {config.n_layers} layers: missing {missing[:6]}"
            f"{' …' if len(missing) > 6 else ''}, unexpected {unexpected[:6]}{' …' if len(unexpected) > 6 else ''}"
        )
    for name, shape in expected.items():
        if tuple(sd[name].shape) != shape:
            raise ValueError(
                f"{name} must have shape {shape} for this config, got {tuple(sd[name].shape)}"
            )
    if lm_head is not None and not torch.equal(lm_head, sd["wte.weight"]):
        raise ValueError(
            "lm_head.weight differs from wte.weight: only a tied output layer is supported"
        )

    out = {"embed.weight": sd["wte.weight"], "pos.embedding.weight": sd["wpe.weight"]}
    out |= {
        "norm.weight": sd["ln_f.weight"],
        "norm.bias": sd["ln_f.bias"],
        "lm_head.weight": sd["wte.weight"],
    }
    for i in range(config.n_layers):
        h, b = f"h.{i}.", f"blocks.{i}."
        for j, ln in enumerate(("ln_1", "ln_2")):
            out[f"{b}residuals.{j}.norm.weight"] = sd[f"{h}{ln}.weight"]
            out[f"{b}residuals.{j}.norm.bias"] = sd[f"{h}{ln}.bias"]
        # Conv1D (d, 3d) → three (d, d) for nn.Linear
        w_q, w_k, w_v = sd[f"{h}attn.c_attn.weight"].t().chunk(3)
        b_q, b_k, b_v = sd[f"{h}attn.c_attn.bias"].chunk(3)
        for proj, w, bias in (
            ("q_proj", w_q, b_q),
            ("k_proj", w_k, b_k),
            ("v_proj", w_v, b_v),
        ):
            out[f"{b}self_attn.{proj}.weight"], out[f"{b}self_attn.{proj}.bias"] = (
                w,
                bias,
            )
        out[f"{b}self_attn.out_proj.weight"] = sd[f"{h}attn.c_proj.weight"].t()
        out[f"{b}self_attn.out_proj.bias"] = sd[f"{h}attn.c_proj.bias"]
        out[f"{b}ff.linear1.weight"] = sd[f"{h}mlp.c_fc.weight"].t()
        out[f"{b}ff.linear1.bias"] = sd[f"{h}mlp.c_fc.bias"]
        out[f"{b}ff.linear2.weight"] = sd[f"{h}mlp.c_proj.weight"].t()
        out[f"{b}ff.linear2.bias"] = sd[f"{h}mlp.c_proj.bias"]
    return {k: v.contiguous() for k, v in out.items()}


def gpt_from_hf(model: nn.Module) -> GPT:
    """A :class:`~companion.gpt.GPT` holding copies of the weights of a ``GPT2LMHeadModel``, in its dtype."""
    if not isinstance(model, nn.Module) or not hasattr(model, "config"):
        raise TypeError(
            f"model must be a transformers GPT2LMHeadModel, got {describe(model)}"
        )
    config = gpt_config_from_hf(model.config)
    state = gpt_state_dict_from_hf(model.state_dict(), config)
    dtype = state["embed.weight"].dtype
    ours = GPT(config).to(dtype)
    ours.load_state_dict(state)
    return ours.train(model.training)
