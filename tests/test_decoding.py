"""The one generation loop and the one sampler (companion.decoding), run by both model kinds.

Every decoding here is compared with an independent loop written below: it reruns the whole model on the whole
sequence at every step (the encoder–decoder's forward, encoder included; GPT without its cache), picks by its own
argmax or its own filtered draw from the same seeded generator, and handles the end-of-sequence token row by row.
"""

import math

import pytest
import torch
from raising import raises

import companion.gpt
import companion.transformer
from companion import decoding
from companion.decoding import (
    Beam,
    Sampling,
    beam_search,
    decode,
    length_penalty,
    sample_next,
    top_p_logits,
)
from companion.gpt import GPT, GPTConfig, generate
from companion.transformer import (
    EncoderDecoder,
    TransformerConfig,
    beam_decode,
    greedy_decode,
)


def tiny_gpt(seed=0):
    torch.manual_seed(seed)
    config = GPTConfig(
        vocab_size=31, context_length=24, n_layers=2, n_heads=2, d_model=16
    )
    return GPT(config).double()


def tiny_seq2seq(seed=0, pad_id=0):
    torch.manual_seed(seed)
    config = TransformerConfig(12, 12, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=2, d_ff=32,
                               dropout=0.0, context_length=16, pad_id=pad_id)  # fmt: skip
    return EncoderDecoder(config).double()


def reference_pick(logits, temperature, top_k, top_p, generator):
    """The next token by hand: argmax at temperature 0, else a draw after dividing, top-k and top-p by sorting."""
    if temperature == 0:
        return logits.max(dim=-1).indices[:, None]
    logits = logits / temperature
    kept = torch.ones_like(logits, dtype=torch.bool)
    for b in range(logits.shape[0]):
        values, order = logits[b].sort(descending=True)
        if top_k is not None:
            kept[b, logits[b] < values[top_k - 1]] = False
        if top_p is not None:  # on what top-k kept, renormalised
            probs = torch.softmax(
                logits[b].masked_fill(~kept[b], float("-inf"))[order], dim=-1
            )
            total, needed = 0.0, 0
            while total < top_p:  # the fewest most likely tokens that reach top_p
                total, needed = total + float(probs[needed]), needed + 1
            kept[b, order[needed:]] = False
    probs = torch.softmax(logits.masked_fill(~kept, float("-inf")), dim=-1)
    return torch.multinomial(probs, 1, generator=generator)


def reference_loop(logits_of, ids, steps, *, eos_id=None, filler=None, temperature=0, top_k=None, top_p=None,
                   generator=None):  # fmt: skip
    """Rerun ``logits_of`` on the whole sequence each step; after EOS a row gets ``filler``; stop when all have."""
    rows = ids.tolist()
    finished = [False] * len(rows)
    for _ in range(steps):
        with torch.no_grad():
            picked = reference_pick(
                logits_of(torch.tensor(rows))[:, -1],
                temperature,
                top_k,
                top_p,
                generator,
            )
        for b, token in enumerate(picked[:, 0].tolist()):
            rows[b].append(filler if finished[b] else token)
            finished[b] = finished[b] or token == eos_id
        if eos_id is not None and all(finished):
            break
    return torch.tensor(rows)


def an_eos(generated):
    """A token that row 0 writes first at step s >= 1 and the other rows write at other steps or never."""
    rows = generated.tolist()
    for s, token in enumerate(rows[0]):
        first = [row.index(token) if token in row else None for row in rows]
        if s >= 1 and first[0] == s and any(f != s for f in first[1:]):
            return token, s
    raise AssertionError(f"no token ends the rows at different steps in {rows}")


def gpt_reference(model, prompt, steps, **options):
    model.eval()
    return reference_loop(model, prompt, steps, **options)


SAMPLINGS = [
    {"temperature": 0},
    {"temperature": 1.0},
    {"temperature": 0.7, "top_k": 5},
    {"temperature": 1.3, "top_p": 0.8},
    {"temperature": 1.0, "top_k": 10, "top_p": 0.9},
]


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("options", SAMPLINGS)
def test_gpt_generate_gives_the_tokens_of_the_reference_loop(options, use_cache):
    model = tiny_gpt()
    prompt = torch.randint(0, 31, (3, 4), generator=torch.Generator().manual_seed(1))
    mine = generate(
        model,
        prompt,
        Sampling(12, **options),
        use_cache=use_cache,
        generator=torch.Generator().manual_seed(5),
    )
    theirs = gpt_reference(
        model, prompt, 12, generator=torch.Generator().manual_seed(5), **options
    )
    assert torch.equal(mine, theirs)
    assert len(set(mine[:, 4:].flatten().tolist())) > 3  # not one token repeated


@pytest.mark.parametrize("use_cache", [True, False])
def test_gpt_generate_stops_at_eos_and_fills_like_the_reference(use_cache):
    model = tiny_gpt()
    prompt = torch.randint(0, 31, (3, 4), generator=torch.Generator().manual_seed(1))
    free = generate(model, prompt, Sampling(12, temperature=0))
    eos, s = an_eos(free[:, 4:])  # row 0 finishes at step s, the others at other steps
    greedy = Sampling(12, temperature=0, eos_id=eos)
    mine = generate(model, prompt, greedy, use_cache=use_cache)
    assert torch.equal(mine, gpt_reference(model, prompt, 12, eos_id=eos, filler=eos))
    assert (mine[0, 4 + s :] == eos).all() and torch.equal(
        mine[:, : 4 + s + 1], free[:, : 4 + s + 1]
    )
    # every row finishes at once: the loop stops after one step
    stop = int(free[0, 4])
    prompt_1 = prompt[:1]
    assert generate(
        model, prompt_1, Sampling(12, temperature=0, eos_id=stop), use_cache=use_cache
    ).shape == (1, 5)
    # sampling with an EOS: the same draws as the reference's
    draw = dict(temperature=1.0, top_k=8)
    sampled = generate(
        model,
        prompt,
        Sampling(12, eos_id=eos, **draw),
        generator=torch.Generator().manual_seed(2),
    )
    assert torch.equal(sampled, gpt_reference(model, prompt, 12, eos_id=eos, filler=eos,
                                              generator=torch.Generator().manual_seed(2), **draw))  # fmt: skip


def test_the_cached_form_feeds_the_prompt_once_then_only_the_newest_token():
    model = tiny_gpt()
    fed = []
    hook = model.register_forward_pre_hook(
        lambda module, args: fed.append(tuple(args[0].shape))
    )
    greedy = Sampling(4, temperature=0)
    generate(model, torch.zeros(2, 5, dtype=torch.long), greedy)
    assert fed == [(2, 5), (2, 1), (2, 1), (2, 1)]
    fed.clear()
    generate(model, torch.zeros(2, 5, dtype=torch.long), greedy, use_cache=False)
    assert fed == [(2, 5), (2, 6), (2, 7), (2, 8)]
    hook.remove()


def seq2seq_reference(model, src, bos_id, steps, eos_id=None):
    """Rerun the whole model, encoder and decoder, on the target so far; after EOS a row gets <pad>."""
    model.eval()
    start = torch.full((src.shape[0], 1), bos_id)
    filler = model.config.pad_id if model.config.pad_id is not None else eos_id
    return reference_loop(
        lambda tgt: model(src, tgt), start, steps, eos_id=eos_id, filler=filler
    )


@pytest.mark.parametrize("pad_id", [0, None])
def test_greedy_decode_gives_the_tokens_of_the_reference_loop(pad_id):
    model = tiny_seq2seq(pad_id=pad_id)
    src = torch.randint(3, 12, (4, 5), generator=torch.Generator().manual_seed(0))
    free = greedy_decode(model, src, Sampling(10, 0))
    assert torch.equal(free, seq2seq_reference(model, src, 1, 10))
    assert len(set(free[:, 1:].flatten().tolist())) > 2, free
    eos, s = an_eos(free[:, 1:])  # row 0 finishes at step s, the others at other steps
    mine = greedy_decode(model, src, Sampling(10, 0, eos_id=eos))
    assert torch.equal(mine, seq2seq_reference(model, src, 1, 10, eos_id=eos))
    assert (mine[0, 2 + s :] == (eos if pad_id is None else pad_id)).all() and mine[
        0, 1 + s
    ] == eos


def test_decode_runs_any_next_logits_function():
    """A fake model: row 0 says 5 then EOS (= 2); row 1 says 7 forever; the loop stops when both are done."""
    calls = []

    def next_logits(ids):
        calls.append(ids.shape[1])
        logits = torch.zeros(2, 9)
        logits[0, 5 if ids.shape[1] < 3 else 2] = 1.0
        logits[1, 7 if ids.shape[1] < 4 else 2] = 1.0
        return logits

    start = torch.tensor([[1], [1]])
    assert decode(next_logits, start, Sampling(6, temperature=0)).tolist() == [
        [1, 5, 5, 2, 2, 2, 2],
        [1, 7, 7, 7, 2, 2, 2],
    ]
    calls.clear()
    out = decode(next_logits, start, Sampling(6, temperature=0, eos_id=2, filler=0))
    assert out.tolist() == [[1, 5, 5, 2, 0], [1, 7, 7, 7, 2]] and calls == [1, 2, 3, 4]
    assert decode(next_logits, start, Sampling(6, 0, eos_id=2)).tolist() == [
        [1, 5, 5, 2, 2],
        [1, 7, 7, 7, 2],
    ]
    assert decode(next_logits, start, Sampling(2, 0, eos_id=2)).tolist() == [
        [1, 5, 5],
        [1, 7, 7],
    ]


def test_one_sampler_and_the_old_names():
    assert companion.gpt.sample_next is sample_next is decoding.sample_next
    assert (
        companion.gpt.top_k_logits is decoding.top_k_logits
        and companion.gpt.top_p_logits is decoding.top_p_logits
    )
    # both models run the loop
    assert companion.transformer.decode is decode and companion.gpt.decode is decode
    logits = torch.randn(
        3, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    )
    assert torch.equal(
        sample_next(logits, Sampling(temperature=0)),
        logits.max(dim=-1).indices[:, None],
    )
    for options in SAMPLINGS[1:]:
        mine = sample_next(
            logits, Sampling(**options), torch.Generator().manual_seed(4)
        )
        theirs = reference_pick(logits, options["temperature"], options.get("top_k"), options.get("top_p"),
                                torch.Generator().manual_seed(4))  # fmt: skip
        assert torch.equal(mine, theirs), options


# --- beam search ---------------------------------------------------------------------------------------------


def full_log_p(model, src, y):
    """log p(y_1 … y_m | src, <bos>) by one forward pass of the whole model over y = [<bos>, y_1 … y_m]."""
    model.eval()
    with torch.no_grad():
        logp = torch.log_softmax(model(src, y[:, :-1]), dim=-1)[0]  # (m, V)
    return sum(logp[t, y[0, t + 1]].item() for t in range(y.shape[1] - 1))


def every_output(vocab_size, steps, eos_id):
    """Every sequence a search of ``steps`` tokens can return: ending at its first EOS, or ``steps`` long."""
    outputs = [[]]
    for _ in range(steps):
        outputs = [
            y + [v] for y in outputs if eos_id not in y for v in range(vocab_size)
        ] + [y for y in outputs if eos_id in y]
    return outputs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_of_one_is_greedy_decoding(seed):
    model = tiny_seq2seq(seed)
    for row in torch.randint(
        3, 12, (4, 5), generator=torch.Generator().manual_seed(seed)
    ):
        src = row[None]
        greedy = greedy_decode(model, src, Sampling(10, 0, eos_id=2))
        for alpha in (0.0, 0.6):
            beam, _ = beam_decode(model, src, Beam(10, 1, alpha, eos_id=2))
            assert torch.equal(beam[0], greedy[0, : beam.shape[1]]), (beam, greedy)
            assert (
                beam.shape[1] == greedy.shape[1]
                or (greedy[0, beam.shape[1] :] == 0).all()
            )


@pytest.mark.parametrize("beam_size", [1, 3, 4])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_beam_search_score_is_the_log_probability_of_a_full_forward_pass(
    beam_size, alpha
):
    model = tiny_seq2seq(3)
    src = torch.tensor([[4, 7, 5, 9]])
    y, score = beam_decode(model, src, Beam(8, beam_size, alpha, eos_id=2))
    assert abs(score - full_log_p(model, src, y)) < 1e-9
    assert y[0, 0] == 1 and (y[0, -1] == 2 or y.shape[1] == 9)


@pytest.mark.parametrize("seed", [0, 4])
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_a_wide_enough_beam_finds_the_best_output_of_brute_force_enumeration(
    seed, alpha
):
    """Vocabulary 4 (EOS = 2), 3 steps: 1 + 3 + 9 end with EOS, 27 do not: 40 outputs, each scored alone."""
    torch.manual_seed(seed)
    config = TransformerConfig(6, 4, d_model=8, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=16,
                               dropout=0.0, context_length=8, pad_id=0)  # fmt: skip
    model = EncoderDecoder(config).double()
    with torch.no_grad():
        model.lm_head.weight.mul_(8)  # sharper distributions: greedy is not always best
    src = torch.tensor([[3, 5, 4]])
    outputs = every_output(4, 3, 2)
    scored = [(full_log_p(model, src, torch.tensor([[1] + y])), y) for y in outputs]
    # EOS as token 1, 2 or 3; three tokens without EOS
    assert len(scored) == 1 + 3 + 9 + 27
    best_score, best = max(
        scored, key=lambda sy: sy[0] / length_penalty(len(sy[1]), alpha)
    )
    y, score = beam_decode(model, src, Beam(3, beam_size=64, alpha=alpha, eos_id=2))
    assert y[0, 1:].tolist() == best and abs(score - best_score) < 1e-9


def toy_next_logits(table):
    """A fake model whose next-token probabilities depend only on the last token: table[last] (V,)."""
    return lambda ids: torch.tensor(table, dtype=torch.float64)[ids[:, -1]].log()


def test_beam_search_beats_greedy_on_a_constructed_case():
    """From <bos> (0): A (1) 0.5 or B (2) 0.4; after A everything is flat, after B EOS (3) is sure."""
    table = [
        [0.0, 0.5, 0.4, 0.1],
        [0.0, 0.3, 0.3, 0.4],
        [0.0, 0.05, 0.05, 0.9],
        [0.0, 0.0, 0.0, 1.0],
    ]
    start = torch.tensor([[0]])
    greedy = decode(toy_next_logits(table), start, Sampling(3, 0, eos_id=3))
    assert greedy.tolist() == [[0, 1, 3]]  # p = 0.5 · 0.4 = 0.20
    beam, score = beam_search(toy_next_logits(table), start, Beam(3, 2, 0.0, eos_id=3))
    # p = 0.36
    assert beam.tolist() == [[0, 2, 3]] and abs(score - math.log(0.4 * 0.9)) < 1e-12
    greedy_too, _ = beam_search(toy_next_logits(table), start, Beam(3, 1, eos_id=3))
    assert torch.equal(greedy_too, greedy)


def test_length_penalty_is_gnmts_and_changes_the_choice():
    assert length_penalty(1, 0.6) == 1.0 and length_penalty(7, 0.0) == 1.0
    assert abs(length_penalty(13, 0.6) - 3**0.6) < 1e-12
    # EOS now (p = 0.4) or two more tokens (p = 0.6 · 0.5 · 1 = 0.3): α = 0 stops, a strong α prefers longer
    table = [
        [0.0, 0.6, 0.0, 0.4],
        [0.0, 0.0, 0.5, 0.5],
        [0.0, 0.0, 0.0, 1.0],
        [0.0, 0.0, 0.0, 1.0],
    ]
    start = torch.tensor([[0]])
    short, _ = beam_search(toy_next_logits(table), start, Beam(4, 3, 0.0, eos_id=3))
    long, _ = beam_search(toy_next_logits(table), start, Beam(4, 3, 2.0, eos_id=3))
    assert short.tolist() == [[0, 3]] and long.tolist() == [[0, 1, 2, 3]]


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: decode("model", torch.ones(1, 2, dtype=torch.long), Sampling(3)), TypeError,
         ("next_logits", "got a str")),
        (lambda: decode(torch.zeros, torch.ones(1, 2), Sampling(3)), TypeError, ("ids", "integer")),
        (lambda: decode(torch.zeros, torch.ones(2, dtype=torch.long), Sampling(3)), ValueError,
         ("ids", "dimensions", "got shape (2,)")),
        (lambda: decode(torch.zeros, torch.ones(2, 0, dtype=torch.long), Sampling(3)), ValueError,
         ("ids", "at least 1 token", "(2, 0)")),
        (lambda: decode(torch.zeros, torch.ones(1, 2, dtype=torch.long), 3), TypeError,
         ("s must be", "Sampling", "got a int")),
        (lambda: Sampling(0), ValueError, ("max_new_tokens", ">= 1", "got 0")),
        (lambda: Sampling(2, eos_id=-1), ValueError, ("eos_id", "None or a token id", "got -1")),
        (lambda: Sampling(2, eos_id=1, filler=1.5), TypeError, ("filler", "got a float")),
        (lambda: Sampling(temperature=-1), ValueError, ("temperature", "got -1")),
        (lambda: Sampling(top_k=0), ValueError, ("top_k", ">= 1", "got 0")),
        (lambda: Sampling(top_p=0.0), ValueError, ("top_p", "got 0.0")),
        (lambda: sample_next(torch.zeros(1, 4), Sampling(top_k=5)), ValueError,
         ("top_k", "at most vocab_size", "got 5")),
        (lambda: decode(lambda ids: torch.zeros(1), torch.ones(1, 2, dtype=torch.long), Sampling(2)), ValueError,
         ("logits", "(batch, vocab_size)", "got shape (1,)")),
        (lambda: generate(tiny_gpt(), torch.ones(1, 2, dtype=torch.long), Sampling(2, eos_id=31)), ValueError,
         ("eos_id", "[0, 30]", "got 31")),
        (lambda: generate(tiny_gpt(), torch.ones(1, 2, dtype=torch.long), Sampling(2, top_k=32)), ValueError,
         ("top_k", "at most vocab_size", "got 32")),
        (lambda: beam_search(torch.zeros, torch.ones(2, 1, dtype=torch.long), Beam(2, 2)), ValueError,
         ("beam_search decodes one sequence: ids", "(1, n)")),
        (lambda: beam_search(torch.zeros, torch.ones(1, 1, dtype=torch.long), 2), TypeError,
         ("b must be", "Beam", "got a int")),
        (lambda: Beam(2, beam_size=0), ValueError, ("beam_size", ">= 1", "got 0")),
        (lambda: Beam(0), ValueError, ("max_new_tokens", ">= 1", "got 0")),
        (lambda: Beam(2, alpha=-1.0), ValueError, ("alpha", "got -1.0")),
        (lambda: Beam(2, eos_id=-1), ValueError, ("eos_id", "None or a token id", "got -1")),
        (lambda: beam_decode(tiny_seq2seq(), torch.ones(2, 3, dtype=torch.long), Beam(4)),
         ValueError,
         ("beam_decode translates one source: src", "(1, n_src)")),
        (lambda: beam_decode(tiny_seq2seq(), torch.ones(1, 3, dtype=torch.long), Beam(4, eos_id=12)),
         ValueError,
         ("eos_id", "[0, 11]", "got 12")),
    ],
)  # fmt: skip
def test_bad_input_is_named(call, error, match):
    with raises(error, *match):
        call()


def test_top_p_logits_against_a_sorted_loop_ties_included():
    """The nucleus by hand: add the probabilities from the largest down until they reach p; every token whose
    probability is at least the last one added stays (so a tie with it stays too)."""
    g = torch.Generator().manual_seed(0)
    for integers in (False, True):
        logits = (
            torch.randint(-3, 4, (40, 9), generator=g).double()
            if integers
            else torch.randn(40, 9, generator=g)
        )
        for p in (0.05, 0.3, 0.5, 0.77, 0.9, 1.0):
            got = top_p_logits(logits, p)
            for row, out in zip(logits, got, strict=True):
                probs = torch.softmax(row, dim=-1)
                total = 0.0
                for last in sorted(probs.tolist(), reverse=True):
                    total += last
                    if total >= p - 1e-12:
                        break
                keep = probs >= last - 1e-12
                assert torch.equal(out, row.masked_fill(~keep, float("-inf"))), (row, p)
    assert torch.equal(
        top_p_logits(torch.tensor([[2.0, 2.0, 0.0]]), 0.1),
        torch.tensor([[2.0, 2.0, float("-inf")]]),
    )
