"""GPT: equal to Hugging Face's GPT2LMHeadModel with the same weights, parameter counts, sampling, errors."""

import math

import pytest
import torch
import torch.nn.functional as F
from raising import raises

from companion.gpt import (
    GPT,
    GPT2_SIZES,
    GPTConfig,
    Sampling,
    generate,
    next_token_loss,
    parameter_count,
    sample_next,
)
from companion.positional import RotaryEmbedding
from companion.training import train
from companion.transformer import BlockConfig, CausalBlock

# Only the tests that compare with Hugging Face need `transformers` (they skip without it); the rest never import it.


def tiny_config(**overrides):
    fields = {
        "vocab_size": 97,
        "context_length": 24,
        "n_layers": 2,
        "n_heads": 4,
        "d_model": 32,
    }
    return GPTConfig(**(fields | overrides))


def hf_gpt2(n_layer=3, dtype=torch.float32, seed=0, **overrides):
    pytest.importorskip("transformers")
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    options = dict(
        vocab_size=101,
        n_positions=32,
        n_embd=48,
        n_layer=n_layer,
        n_head=4,
        bos_token_id=0,
        eos_token_id=0,
    )
    options |= (
        dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=0.1)
        | overrides
    )
    model = GPT2LMHeadModel(GPT2Config(**options)).to(dtype).eval()
    # random, non-trivial layer norms and biases (Hugging Face starts them at 1 and 0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


@pytest.mark.parametrize(
    ("dtype", "atol"), [(torch.float32, 1e-5), (torch.float64, 1e-12)]
)
def test_logits_equal_hugging_face(dtype, atol):
    from companion.interop.hf_gpt import gpt_from_hf

    hf = hf_gpt2(dtype=dtype)
    ours = gpt_from_hf(hf).eval()
    ids = torch.randint(0, 101, (3, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        theirs, mine = hf(ids).logits, ours(ids)
    assert mine.dtype == dtype
    assert theirs.abs().max() > 2  # logits of a size where atol means something
    torch.testing.assert_close(mine, theirs, atol=atol, rtol=0)


def test_loss_and_gradients_equal_hugging_face():
    from companion.interop.hf_gpt import gpt_from_hf

    hf = hf_gpt2(dtype=torch.float64).train()
    ours = gpt_from_hf(hf).train()
    ids = torch.randint(0, 101, (2, 20), generator=torch.Generator().manual_seed(2))
    mine = next_token_loss(ours, ids)
    # Hugging Face shifts the labels itself, and computes its loss in float32
    assert mine.item() == pytest.approx(hf(ids, labels=ids).loss.item(), abs=1e-6)
    logits = hf(ids).logits
    # float64 throughout
    theirs = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    torch.testing.assert_close(mine, theirs, atol=1e-12, rtol=0)
    theirs.backward()
    mine.backward()
    # the tied table collects the gradient of the input embedding and of the output layer
    torch.testing.assert_close(
        ours.embed.weight.grad, hf.transformer.wte.weight.grad, atol=1e-12, rtol=0
    )
    c_fc = hf.transformer.h[1].mlp.c_fc.weight.grad.t()
    torch.testing.assert_close(
        ours.blocks[1].ff.linear1.weight.grad, c_fc, atol=1e-12, rtol=0
    )


def test_greedy_generation_equals_hugging_face():
    from companion.interop.hf_gpt import gpt_from_hf

    hf = hf_gpt2(dtype=torch.float64)
    ours = gpt_from_hf(hf)
    prompt = torch.tensor([[5, 17, 3]])
    theirs = hf.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
    mine = generate(ours, prompt, Sampling(12, temperature=0))
    assert torch.equal(mine, theirs)


def test_kv_cache_generation_equals_recomputing_the_prefix():
    torch.manual_seed(0)
    model = GPT(tiny_config())
    prompt = torch.randint(0, 97, (2, 4))
    greedy = [
        generate(model, prompt, Sampling(16, temperature=0), use_cache=c)
        for c in (True, False)
    ]
    assert torch.equal(greedy[0], greedy[1])
    sampled = [
        generate(
            model,
            prompt,
            Sampling(16, top_k=20),
            generator=torch.Generator().manual_seed(3),
            use_cache=c,
        )
        for c in (True, False)
    ]
    assert torch.equal(sampled[0], sampled[1])
    caches = model.new_caches()
    model.eval()
    with torch.no_grad():
        whole = model(sampled[0])
        step_by_step = torch.cat(
            [model(sampled[0][:, t : t + 1], caches) for t in range(20)], dim=1
        )
    torch.testing.assert_close(step_by_step, whole, atol=1e-5, rtol=0)


def test_causal_a_later_token_does_not_change_earlier_logits():
    torch.manual_seed(0)
    model = GPT(tiny_config()).eval()
    ids = torch.randint(0, 97, (1, 10))
    changed = ids.clone()
    changed[0, 6] = (ids[0, 6] + 1) % 97
    with torch.no_grad():
        a, b = model(ids), model(changed)
    torch.testing.assert_close(a[:, :6], b[:, :6])
    assert (a[:, 6:] - b[:, 6:]).abs().max() > 1e-4


def test_output_layer_is_tied_to_the_embedding():
    torch.manual_seed(0)
    model = GPT(tiny_config()).eval()
    assert model.lm_head.weight is model.embed.weight
    ids = torch.randint(0, 97, (2, 5))
    with torch.no_grad():
        x = model.pos(model.embed(ids))
        for block in model.blocks:
            x = block(x)
        # the logit of token v is <h, E_v>
        expected = model.norm(x) @ model.embed.weight.T
        assert torch.equal(model(ids), model(ids))
    torch.testing.assert_close(model(ids), expected)


def test_next_token_loss_is_a_loop_over_positions():
    torch.manual_seed(0)
    model = GPT(tiny_config()).eval()
    ids = torch.randint(0, 97, (2, 7))
    with torch.no_grad():
        total = 0.0
        for b in range(2):
            for t in range(6):
                logits = model(ids[b : b + 1, : t + 1])[0, -1]
                total += -F.log_softmax(logits, -1)[ids[b, t + 1]].item()
        assert next_token_loss(model, ids).item() == pytest.approx(total / 12, abs=1e-5)
    untrained = next_token_loss(model, ids).item()
    # small initial weights: nearly uniform predictions
    assert abs(untrained - math.log(97)) < 0.1


@pytest.mark.parametrize("size", sorted(GPT2_SIZES))
def test_parameter_counts_equal_hugging_face(size):
    pytest.importorskip("transformers")
    from transformers import GPT2Config, GPT2LMHeadModel

    n_layer, n_head, n_embd = GPT2_SIZES[size]
    with torch.device("meta"):
        hf = GPT2LMHeadModel(GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd))
        ours = GPT(GPTConfig.gpt2(size))
    assert (
        parameter_count(GPTConfig.gpt2(size))
        == hf.num_parameters()
        == ours.num_parameters()
    )


def test_parameter_count_formula_on_odd_configurations():
    for config in (
        tiny_config(),
        tiny_config(d_ff=50, n_layers=3),
        tiny_config(vocab_size=5, context_length=3),
    ):
        assert parameter_count(config) == GPT(config).num_parameters()
    # the published "117M"/"124M" GPT-2 small
    assert parameter_count(GPTConfig.gpt2()) == 124_439_808
    assert 174e9 < parameter_count(GPTConfig.gpt3()) < 176e9


#: The configuration chapters 8 to 10 train: rotary positions, an untied output layer, ReLU, PyTorch's init.
SMALL_LM = dict(positional="rope", activation="relu", tie_weights=False, init="pytorch")


@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "rope"])
@pytest.mark.parametrize("tie_weights", [True, False])
def test_parameter_count_formula_in_every_configuration(positional, tie_weights):
    config = tiny_config(positional=positional, tie_weights=tie_weights, d_ff=40)
    model = GPT(config)
    assert parameter_count(config) == model.num_parameters()
    assert (model.lm_head.weight is model.embed.weight) is tie_weights
    assert (model.lm_head.bias is None) is tie_weights
    assert (model.pos is None) is (positional == "rope")
    assert all(
        (b.self_attn.rotary is not None) is (positional == "rope") for b in model.blocks
    )


def test_small_lm_configuration_is_the_stack_of_its_pieces():
    """Rotary positions (none added to E[ids]), pre-norm causal ReLU blocks, the final norm, then W h + b."""
    torch.manual_seed(0)
    model = GPT(tiny_config(**SMALL_LM)).double().eval()
    rotary = RotaryEmbedding(32 // 4, 24)
    blocks = [
        CausalBlock(
            BlockConfig(32, 4, 128, norm_first=True, activation="relu"), rotary=rotary
        ).double()
        for _ in range(2)
    ]
    for ours, theirs in zip(model.blocks, blocks, strict=True):
        theirs.load_state_dict(ours.state_dict())
        theirs.eval()
    ids = torch.randint(0, 97, (2, 10))
    x = model.embed(ids)
    for block in blocks:
        x = block(x)
    expected = model.norm(x) @ model.lm_head.weight.T + model.lm_head.bias
    torch.testing.assert_close(model(ids), expected, rtol=0, atol=1e-12)
    gelu = GPT(tiny_config(**(SMALL_LM | {"activation": "gelu_tanh"}))).double().eval()
    gelu.load_state_dict(model.state_dict())
    # the same weights: the activation is the configuration's
    assert not torch.allclose(gelu(ids), model(ids))


def test_gpt2_initialisation_and_pytorch_defaults():
    """GPT-2: N(0, 0.02²), W_O and W_2 N(0, 0.02²/2L), biases 0; "pytorch": N(0, 1) embeddings, nn.Linear's init."""
    torch.manual_seed(0)
    gpt2 = GPT(tiny_config(vocab_size=2000, n_layers=2))
    pytorch = GPT(tiny_config(vocab_size=2000, n_layers=2, init="pytorch"))
    assert (
        0.019 < gpt2.embed.weight.std() < 0.021
        and 0.9 < pytorch.embed.weight.std() < 1.1
    )
    for b in gpt2.blocks:
        assert (
            0.009 < b.self_attn.out_proj.weight.std() < 0.011
            and 0.009 < b.ff.linear2.weight.std() < 0.011
        )
        assert 0.019 < b.ff.linear1.weight.std() < 0.021 and not b.ff.linear1.bias.any()
    bound = 1 / math.sqrt(32)  # nn.Linear: U(-1/√fan_in, 1/√fan_in), std bound/√3
    linear1 = pytorch.blocks[0].ff.linear1
    assert (
        linear1.weight.abs().max() <= bound
        and 0.9 < linear1.weight.std() * math.sqrt(3) / bound < 1.1
    )
    assert linear1.bias.any()


def test_sampling_is_deterministic_with_a_seeded_generator():
    torch.manual_seed(0)
    model = GPT(tiny_config())
    prompt = torch.tensor([[1, 2, 3]])
    runs = [
        generate(
            model,
            prompt,
            Sampling(15, top_p=0.9),
            generator=torch.Generator().manual_seed(7),
        )
        for _ in range(2)
    ]
    assert torch.equal(runs[0], runs[1])
    other = generate(
        model,
        prompt,
        Sampling(15, top_p=0.9),
        generator=torch.Generator().manual_seed(8),
    )
    assert not torch.equal(runs[0], other)


def test_top_k_and_top_p_keep_the_right_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.05, 0.3, 0.15]]))
    g = torch.Generator().manual_seed(0)
    draws = lambda **kw: {
        int(sample_next(logits, Sampling(**kw), generator=g)) for _ in range(300)
    }  # noqa: E731
    assert draws(top_k=2) == {0, 2}
    assert draws(top_p=0.8) == {0, 2}  # 0.5 + 0.3 reaches 0.8
    assert draws(top_p=0.81) == {0, 2, 3}
    assert draws(top_p=0.1) == {0}
    assert draws() == {0, 1, 2, 3}
    assert int(sample_next(logits, Sampling(temperature=0))) == 0


def test_sampling_frequencies_follow_the_tempered_distribution():
    logits = torch.tensor([[1.0, 0.0, -1.0]])
    g = torch.Generator().manual_seed(0)
    n = 4000
    for temperature in (0.5, 2.0):
        counts = torch.bincount(
            torch.cat(
                [
                    sample_next(
                        logits.expand(n, 3),
                        Sampling(temperature=temperature),
                        generator=g,
                    )
                ]
            ).flatten(),
            minlength=3,
        )
        p = torch.softmax(logits[0] / temperature, -1)
        sd = torch.sqrt(p * (1 - p) / n)
        assert ((counts / n - p).abs() < 4 * sd).all(), (temperature, counts / n, p)


def test_bad_input_gets_clear_errors():
    model = GPT(tiny_config())
    with raises(ValueError, "ids", "[0, 96]", "got index 97"):
        model(torch.tensor([[1, 97]]))
    with raises(ValueError, "ids", "25 positions", "T = 24"):
        model(torch.zeros(1, 25, dtype=torch.long))
    with raises(ValueError, "ids", "at least 1 token", "got shape (1, 0)"):
        generate(model, torch.zeros(1, 0, dtype=torch.long), Sampling(3))
    with raises(ValueError, "max_new_tokens 5 = 25", "T = 24"):
        generate(model, torch.zeros(1, 20, dtype=torch.long), Sampling(5))
    with raises(TypeError, "integer"):
        model(torch.zeros(1, 3))
    with raises(ValueError, "top_k"):
        sample_next(torch.zeros(1, 4), Sampling(top_k=5))
    with raises(ValueError, "top_p"):
        sample_next(torch.zeros(1, 4), Sampling(top_p=0.0))
    with raises(ValueError, "temperature"):
        sample_next(torch.zeros(1, 4), Sampling(temperature=-1))
    with raises(ValueError, "n >= 2"):
        next_token_loss(model, torch.zeros(2, 1, dtype=torch.long))
    with raises(ValueError, "d_model = 30", "divisible by n_heads = 4"):
        GPTConfig(d_model=30, n_heads=4)
    for field, value, fragments in (
        (
            "positional",
            "alibi",
            ("positional", "'rope'", "got 'alibi'"),
        ),
        (
            "activation",
            "tanh",
            ("activation", "'gelu_tanh'", "got 'tanh'"),
        ),
        ("init", "xavier", ("init", "'pytorch'", "got 'xavier'")),
    ):
        with raises(ValueError, *fragments):
            tiny_config(**{field: value})
    with raises(TypeError, "tie_weights", "bool", "got a str"):
        tiny_config(tie_weights="yes")


def test_wrong_state_dicts_get_clear_errors():
    from companion.interop.hf_gpt import (
        gpt_config_from_hf,
        gpt_from_hf,
        gpt_state_dict_from_hf,
    )

    hf = hf_gpt2(n_layer=2)
    config = gpt_config_from_hf(hf.config)
    sd = dict(hf.state_dict())
    with raises(ValueError, "missing ['h.1.attn.c_attn.bias'"):
        gpt_state_dict_from_hf(
            {k: v for k, v in sd.items() if k != "transformer.h.1.attn.c_attn.bias"},
            config,
        )
    with raises(ValueError, "unexpected ['h.2.ln_1.weight']"):
        gpt_state_dict_from_hf(
            sd | {"transformer.h.2.ln_1.weight": torch.ones(48)}, config
        )
    with raises(ValueError, "h.0.mlp.c_fc.weight", "(48, 192)", "got (192, 48)"):
        gpt_state_dict_from_hf(
            sd | {"transformer.h.0.mlp.c_fc.weight": torch.zeros(192, 48)}, config
        )
    with raises(ValueError, "tied"):
        gpt_state_dict_from_hf(sd | {"lm_head.weight": torch.zeros(101, 48)}, config)
    # a 3-layer config for a 2-layer state dict
    with raises(ValueError, "missing"):
        gpt_state_dict_from_hf(
            sd, tiny_config(vocab_size=101, context_length=32, d_model=48, n_layers=3)
        )
    with raises(
        ValueError,
        "GPT-2's weights need a GPT-2 configuration",
        "got {'positional': 'rope'",
    ):
        gpt_state_dict_from_hf(sd, GPTConfig(**(vars(config) | {"positional": "rope"})))
    with raises(ValueError, "activation_function"):
        gpt_config_from_hf(hf_gpt2(n_layer=1, activation_function="relu").config)
    with raises(TypeError, "GPT2LMHeadModel"):
        gpt_from_hf(torch.nn.Linear(2, 2))
    # GPT2Model's keys have no "transformer." prefix; they work too
    assert (
        gpt_state_dict_from_hf(hf.transformer.state_dict(), config).keys()
        == GPT(config).state_dict().keys()
    )


def test_training_lowers_the_loss_on_a_repeating_sequence():
    torch.manual_seed(0)
    model = GPT(tiny_config(vocab_size=11))
    # 0 1 2 … 10 0 1 …: fully predictable
    data = torch.arange(24).remainder(11).repeat(4, 1)
    history = train(
        model, [data], next_token_loss, steps=60, lr=3e-3, progress=False, seed=0
    )
    assert history[0] > 2.0 and history[-1] < 0.2
