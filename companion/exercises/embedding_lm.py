"""Checkers for chapter 2, *A word-embedding language model*.

====================================  ==============================================================
checker                               what the student writes
====================================  ==============================================================
``check_next_token_probabilities``    ``next_token_probabilities(scores, temperature) -> (..., N)``:
                                      softmax of ``scores / temperature``; ``temperature = 0``
                                      gives the one-hot row of the (first) argmax
``check_bigram_counts``               ``bigram_counts(ids, vocab_size) -> (N, N)`` integer counts,
                                      ``C[i, j]`` = how often token ``j`` follows token ``i``
====================================  ==============================================================
"""

from __future__ import annotations

import math

import torch

from .. import embedding_lm as ref
from .checking import Checker, Mismatch, call, case, compare, show
from .checking.random_state import hidden_inputs

__all__ = [
    "check_next_token_probabilities",
    "check_bigram_counts",
    "check_bigram_probabilities",
]

_SEED_SCORES = torch.tensor(
    [-0.823, 0.683, -6.376, 4.174, 4.860, -3.803, -7.149, 4.152]
)


def _naive_softmax(scores: torch.Tensor, temperature: float) -> torch.Tensor:
    e = torch.exp(scores / temperature)
    return e / e.sum(-1, keepdim=True)


def _last_argmax(scores: torch.Tensor, temperature: float) -> torch.Tensor:
    flipped = scores.flip(-1)
    return ref.next_token_probabilities(flipped, 0).flip(-1)


def _shared_tie(scores: torch.Tensor, temperature: float) -> torch.Tensor:
    if temperature != 0:
        return torch.softmax(scores / temperature, -1)
    top = (scores == scores.max(-1, keepdim=True).values).to(scores.dtype)
    return top / top.sum(-1, keepdim=True)


check_next_token_probabilities = compare(
    "next_token_probabilities",
    ref.next_token_probabilities,
    lambda: [
        case(_SEED_SCORES, 1.0, why="the notes' scores for prev = 'the'"),
        case(_SEED_SCORES, 2.0, why="a higher temperature flattens the distribution"),
        case(_SEED_SCORES, 0.5, why="a lower temperature sharpens it"),
        case(
            torch.randn(3, 5),
            1.0,
            why="a batch of 3 rows: softmax over the last dimension",
        ),
        case(torch.randn(2, 4, 6), 0.7, why="a (2, 4, 6) batch"),
        case(
            torch.tensor([1.0, 3.0, 2.0]),
            0.0,
            why="temperature 0 means: always the most likely token",
        ),
        case(
            torch.tensor([1.0, 3.0, 3.0, 2.0]),
            0.0,
            why="a tie at temperature 0: the first maximum wins",
        ),
        case(
            torch.randn(3, 4),
            0.0,
            why="a batch at temperature 0: one one-hot row per row",
        ),
        case(
            torch.tensor([100.0, 101.0, 99.5]),
            1.0,
            why="scores around 100: exp(101) overflows float32",
        ),
        case(
            torch.tensor([[100.0, 90.0], [-100.0, -95.0]]),
            0.5,
            why="large scores at a low temperature",
        ),
    ],
    mistakes=[
        (
            lambda s, t: torch.softmax(s / t, -1),
            "Dividing by a temperature of 0 gives inf and NaN: treat temperature == 0 on its own.",
        ),
        (
            lambda s, t: torch.softmax(s, -1),
            "The temperature has no effect in your code: divide the scores by it before the softmax.",
        ),
        (
            lambda s, t: torch.softmax(s * t, -1),
            "Divide the scores by the temperature; you multiplied.",
        ),
        (
            lambda s, t: torch.softmax(s / t, 0),
            "Take the softmax over the last dimension (the N candidate tokens), dim=-1.",
        ),
        (
            _naive_softmax,
            "exp of a score around 100 overflows to inf: subtract the largest score first (softmax is unchanged "
            "by a shift), or let torch.softmax do it.",
        ),
        (
            lambda s, t: s.argmax(-1),
            "At temperature 0 return probabilities, a one-hot row, not the index of the largest score.",
        ),
        (
            lambda s, t: (s == s.max(-1, keepdim=True).values).to(s.dtype),
            "On a tie, only the first largest score gets the 1 (as torch.argmax returns the first).",
        ),
        (_last_argmax, "On a tie, the first largest score gets the 1, not the last."),
        (
            _shared_tie,
            "At temperature 0 the task asks for a one-hot row: the whole 1 goes to the first largest score (as "
            "torch.argmax picks it), not shared among the tied scores.",
        ),
    ],
    hint="p_j = exp(s_j / T) / Σ_k exp(s_k / T); every row must sum to 1.",
    what="The probability tensor",
)


def _wrapped(ids: torch.Tensor, n: int) -> torch.Tensor:
    return ref.bigram_counts(torch.cat([ids, ids[:1]]), n)


check_bigram_counts = compare(
    "bigram_counts",
    ref.bigram_counts,
    lambda: [
        case(torch.tensor([0, 1, 0, 1, 2]), 3, why="a short stream"),
        case(
            torch.tensor([2, 2, 2]),
            4,
            why="a token following itself; tokens 0, 1, 3 never occur",
        ),
        case(
            ref.encode(ref.toy_tokens(), ref.toy_vocabulary()),
            len(ref.toy_vocabulary()),
            why="the toy corpus",
        ),
        case(torch.randint(0, 6, (40,)), 6, why="a random stream"),
    ],
    mistakes=[
        (
            ref.bigram_probabilities,
            "You returned probabilities; this exercise asks for the raw counts.",
        ),
        (
            lambda ids, n: ref.bigram_counts(ids, n).T,
            "Rows are the previous token, columns the next: C[i, j] counts 'i then j'; yours is C.T.",
        ),
        (
            _wrapped,
            "There are n - 1 bigrams in a stream of n tokens: do not wrap around from the last token to the first.",
        ),
    ],
    hint="C[i, j] = the number of positions t with ids[t] = i and ids[t + 1] = j.",
    what="The count table",
    atol=0,
    rtol=0,
)


def _counts(ids: torch.Tensor, n: int) -> torch.Tensor:
    return ref.bigram_counts(ids, n).double()


check_bigram_probabilities = compare(
    "bigram_probabilities",
    ref.bigram_probabilities,
    lambda: [
        case(
            torch.tensor([0, 1, 0, 1, 2]),
            3,
            why="token 2 only occurs last: its row stays 0",
        ),
        case(torch.randint(0, 6, (40,)), 6, why="a random stream"),
    ],
    mistakes=[
        (
            lambda ids, n: _counts(ids, n) / _counts(ids, n).sum(),
            "Divide each row by its own total.",
        ),
        (
            lambda ids, n: _counts(ids, n) / _counts(ids, n).sum(1, keepdim=True),
            "A token never followed by another has a row of zeros: 0 / 0 is NaN, so leave that row at 0.",
        ),
    ],
    hint="P*[i, j] = C[i, j] / Σ_k C[i, k]; a row without bigrams stays 0.",
    what="The probability table",
)


# ==========================================================================================================
# Exercises added for issue 7 (the training loop). Kept in a section of their own to ease merging.
# ==========================================================================================================


def _reference_history(
    model: ref.WordEmbeddingLM,
    ids: torch.Tensor,
    steps: int,
    lr: float,
    *,
    zero_grad: bool,
):
    """The reference loop, or the same loop without ``zero_grad`` (a common mistake), on ``model``."""
    prev, nxt = ids[:-1], ids[1:]
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    history = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(prev), nxt)
        if zero_grad:
            opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(loss.item())
    return history


def _as_floats(got: object, label: str, steps: int) -> list[float]:
    tensors = (
        [x for x in got if isinstance(x, torch.Tensor)]
        if isinstance(got, (list, tuple))
        else []
    )
    if tensors:
        held = (
            "loss tensors that hold the computation graph"
            if tensors[0].requires_grad
            else "tensors"
        )
        raise Mismatch(
            "The losses should be Python floats, as the task states; your list holds "
            + held
            + ".",
            input=label,
            expected=f"a list of {steps} Python floats",
            got=show(got, 160),
            hint="Append loss.item() (a float), not loss: a list of loss tensors keeps every step's graph alive.",
        )
    try:
        values = [float(x) for x in got]  # accepts floats, 0-d tensors, numpy numbers
    except Exception:
        raise Mismatch(
            "The result should be a list of losses, one number per step.",
            input=label,
            expected=f"a list of {steps} floats",
            got=show(got),
            hint="Append loss.item() to a list at every step and return the list.",
        ) from None
    if len(values) != steps:
        raise Mismatch(
            "The list of losses has the wrong length.",
            input=label,
            expected=f"{steps} losses, one per step",
            got=f"{len(values)} values",
            hint="Record exactly one loss per step, inside the loop.",
        )
    return values


def _train_loop_cases(train) -> int:
    g = torch.Generator().manual_seed(5)
    toy_vocab = ref.toy_vocabulary()
    toy_ids = ref.encode(ref.toy_tokens(), toy_vocab)
    cases = [
        (
            len(toy_vocab),
            2,
            False,
            toy_ids,
            30,
            0.05,
            "the toy corpus, d = 2, 30 steps",
        ),
        (
            5,
            3,
            False,
            torch.randint(0, 5, (40,), generator=g),
            12,
            0.1,
            "40 random ids of 5 tokens, d = 3",
        ),
        (
            6,
            4,
            True,
            torch.randint(0, 6, (20,), generator=g),
            8,
            0.02,
            "a model with one tied table",
        ),
    ]
    shown = len(cases)
    # new on every run: sizes, stream, steps and learning rate
    with hidden_inputs() as seed:
        vocab_size, dim = int(torch.randint(3, 9, ())), int(torch.randint(2, 6, ()))
        ids = torch.randint(0, vocab_size, (int(torch.randint(8, 40, ())),))
        steps, lr = (
            int(torch.randint(2, 9, ())),
            round(float(torch.empty(()).uniform_(0.01, 0.2)), 3),
        )
        tied = bool(torch.randint(0, 2, ()))
        cases.append(
            (
                vocab_size,
                dim,
                tied,
                ids,
                steps,
                lr,
                f"a hidden random case, seed {seed}",
            )
        )
    for vocab_size, dim, tied, ids, steps, lr, why in cases:
        label = f"WordEmbeddingLM({vocab_size}, dim={dim}, tied={tied}), ids={show(ids, 120)}, steps={steps}, lr={lr}"
        label += f"  ({why})"
        student_model = ref.WordEmbeddingLM(vocab_size, dim, seed=7, tied=tied)
        before = [p.detach().clone() for p in student_model.parameters()]
        got = call(
            train,
            student_model,
            ids.clone(),
            steps,
            lr,
            input=label,
            _changes_arguments=True,
        )
        values = _as_floats(got, label, steps)
        expected_model = ref.WordEmbeddingLM(vocab_size, dim, seed=7, tied=tied)
        expected = _reference_history(expected_model, ids, steps, lr, zero_grad=True)
        unchanged = all(
            torch.equal(a, p.detach())
            for a, p in zip(before, student_model.parameters(), strict=True)
        )
        if not math.isclose(values[0], expected[0], rel_tol=1e-5, abs_tol=1e-6):
            hint = (
                "The first loss is the mean cross-entropy of model(ids[:-1]) against ids[1:], computed before any "
                "step: check the bigrams and use torch.nn.functional.cross_entropy(scores, targets)."
            )
            raise Mismatch(
                "The first loss is wrong.",
                input=label,
                expected=f"{expected[0]:.6g}",
                got=f"{values[0]:.6g}",
                hint=hint,
            )
        if unchanged:
            raise Mismatch(
                "The model's tables did not change.",
                input=label,
                hint="Each step runs optimiser.zero_grad(), loss.backward(), optimiser.step(), in this order: "
                "zero_grad() between backward() and step() clears the gradients before step() can use them, and "
                "step() must belong to an optimiser built from model.parameters().",
            )
        no_zero = _reference_history(
            ref.WordEmbeddingLM(vocab_size, dim, seed=7, tied=tied),
            ids,
            steps,
            lr,
            zero_grad=False,
        )
        close = all(
            math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6)
            for a, b in zip(values, expected, strict=True)
        )
        if not close:
            if all(
                math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6)
                for a, b in zip(values, no_zero, strict=True)
            ):
                hint = "Clear the gradients at every step (optimiser.zero_grad()): backward() adds to them."
            else:
                hint = (
                    "Create one torch.optim.Adam(model.parameters(), lr=lr) before the loop "
                    "and step it once per loss."
                )
            worst = max(range(steps), key=lambda t: abs(values[t] - expected[t]))
            raise Mismatch(
                f"The losses differ from the reference loop's (first at step {worst}).",
                input=label,
                expected=show([round(x, 5) for x in expected], 200),
                got=show([round(x, 5) for x in values], 200),
                hint=hint,
            )
        for p, q in zip(
            student_model.parameters(), expected_model.parameters(), strict=True
        ):
            if not torch.allclose(p.detach(), q.detach(), atol=1e-5, rtol=1e-4):
                raise Mismatch(
                    "The losses are right but the trained tables are not.",
                    input=label,
                    hint="Train the model you were given, in place, and take exactly `steps` optimiser steps.",
                )
    return len(cases), len(cases) - shown


check_train_loop = Checker(
    "train", _train_loop_cases, withhold=["companion.embedding_lm.train_embedding_lm"]
)
__all__ += ["check_train_loop"]
