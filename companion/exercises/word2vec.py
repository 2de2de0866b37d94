"""Checkers for chapter 3, *Word2vec and GloVe*.

================================  ===============================================================
checker                           what the student writes
================================  ===============================================================
``check_skipgram_pairs``          ``skipgram_pairs(ids, window) -> (centres, contexts)``: every
                                  ``(ids[i], ids[j])`` with ``0 < |i - j| <= window``, in any order
``check_negative_sampling_loss``  ``negative_sampling_loss(v, u_pos, u_neg) -> 0-d tensor``:
                                  mean of ``-log σ(u_pos·v) - Σ_k log σ(-u_neg[k]·v)``
``check_nearest_neighbours``      ``nearest_neighbours(vectors, query, k) -> (k,)`` ids of the rows
                                  most cosine-similar to row ``query``, itself excluded, best first
``check_glove_weight``            ``glove_weight(x, x_max, alpha)``: ``(x/x_max)^alpha`` capped at 1
================================  ===============================================================
"""

from __future__ import annotations

import math

import torch
from torch.nn.functional import logsigmoid

from .. import glove as glove_ref
from .. import word2vec as w2v_ref
from ..embeddings import nearest_neighbours as _reference_neighbours
from .checking import (
    Checker,
    Mismatch,
    call,
    case,
    compare,
    expect_close,
    expect_long,
    same,
    show,
)
from .checking.gradients import expect_gradient_kept, expect_loss_gradients
from .checking.random_state import hidden_inputs

__all__ = [
    "check_skipgram_pairs",
    "check_negative_sampling_loss",
    "check_nearest_neighbours",
    "check_glove_weight",
]


# --- skip-gram pairs: compared as sorted lists of (centre, context), so any order passes ----------------------


def _pairs(
    ids: torch.Tensor, window: int, offsets=None, wrap: bool = False
) -> list[tuple[int, int]]:
    """The sorted pairs at the given offsets (default: ±1 … ±window), optionally wrapping around the ends."""
    n, tokens = len(ids), ids.tolist()
    offsets = (
        offsets if offsets is not None else [d for d in range(-window, window + 1) if d]
    )
    return sorted(
        (tokens[i], tokens[(i + d) % n])
        for i in range(n)
        for d in offsets
        if wrap or 0 <= i + d < n
    )


def _pair_mistakes(
    ids: torch.Tensor, window: int
) -> list[tuple[list[tuple[int, int]], str]]:
    right = _pairs(ids, window)
    return [
        (
            sorted(set(right)),
            "Keep repeated pairs: each occurrence of a (centre, context) pair is one more "
            "training example, so do not de-duplicate them.",
        ),
        (
            _pairs(ids, window, range(-window, window + 1)),
            "A word is not its own context: skip the offset 0.",
        ),
        (
            _pairs(ids, window, [d for d in range(-window + 1, window) if d]),
            "The window includes the offsets ±window themselves: 0 < |i - j| <= window.",
        ),
        (
            _pairs(ids, window, range(1, window + 1)),
            "The context lies on both sides of the centre word.",
        ),
        (
            _pairs(ids, window, wrap=True) if len(ids) > 2 * window else None,
            "Near the ends of the text the window is cut off: do not wrap around to the other end.",
        ),
    ]


def _as_pair_list(got: object, label: str) -> list[tuple[int, int]]:
    """The student's ``(centres, contexts)`` as a sorted list of pairs, or a Mismatch saying what is off."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Mismatch(
            "skipgram_pairs should return (centres, contexts), two tensors.",
            input=label,
            expected="(centres, contexts)",
            got=show(got),
        )
    for t, name in zip(got, ("centres", "contexts"), strict=True):
        if (
            not isinstance(t, torch.Tensor)
            or t.ndim != 1
            or t.dtype.is_floating_point
            or t.dtype.is_complex
        ):
            raise Mismatch(
                f"{name} should be a 1-D tensor of integer ids, one entry per pair.",
                input=label,
                expected="shape (P,), dtype torch.long",
                got=show(t, 200),
            )
    for t, name in zip(got, ("centres", "contexts"), strict=True):
        expect_long(t, torch.zeros(0, dtype=torch.long), input=label, what=name)
    if got[0].shape != got[1].shape:
        raise Mismatch(
            "centres and contexts must have one entry per pair each.",
            input=label,
            expected="two tensors of the same length",
            got=f"{tuple(got[0].shape)} and {tuple(got[1].shape)}",
        )
    return sorted(zip(got[0].tolist(), got[1].tolist(), strict=True))


def _pairs_cases(skipgram_pairs) -> int:
    cases = [
        (torch.tensor([10, 11, 12, 13, 14]), 1, "window 1: only neighbours"),
        (torch.tensor([10, 11, 12, 13, 14]), 2, "window 2"),
        (torch.tensor([4, 7, 4, 7, 4]), 1, "a repeated pair: (4, 7) occurs twice"),
        (
            torch.tensor([4, 7, 4, 9]),
            3,
            "the window reaches past both ends of the text",
        ),
        (torch.tensor([5]), 2, "a single token has no context"),
        (torch.randint(0, 20, (30,)), 4, "a random text"),
    ]
    shown = len(cases)
    # new on every run: texts with repeats, windows of 1 to n - 1
    with hidden_inputs() as seed:
        for _ in range(3):
            n = int(torch.randint(2, 14, ()))
            cases.append(
                (
                    torch.randint(0, 6, (n,)),
                    int(torch.randint(1, n, ())),
                    f"a hidden random case, seed {seed}",
                )
            )
    for ids, window, why in cases:
        label = f"ids={ids.tolist()}, window={window}  ({why})"
        got = _as_pair_list(
            call(skipgram_pairs, ids.clone(), window, input=label), label
        )
        expected = _pairs(ids, window)
        if got != expected:
            hint = next(
                (
                    h
                    for wrong, h in _pair_mistakes(ids, window)
                    if got == wrong != expected
                ),
                None,
            )
            raise Mismatch(
                "The pairs are wrong (compared in sorted order).",
                input=label,
                expected=f"{len(expected)} pairs: {expected[:12]}{' ...' if len(expected) > 12 else ''}",
                got=f"{len(got)} pairs: {got[:12]}{' ...' if len(got) > 12 else ''}",
                hint=hint
                or "For each position i, pair ids[i] with ids[j] for every j inside the text with "
                "0 < |i - j| <= window.",
            )
    return len(cases), len(cases) - shown


check_skipgram_pairs = Checker(
    "skipgram_pairs",
    _pairs_cases,
    withhold=[
        "companion.word2vec.skipgram_pairs",
        "companion.word2vec.skipgram_pairs_loop",
    ],
)


# --- the negative-sampling loss -------------------------------------------------------------------------------


def _scores(v, u_pos, u_neg):
    return (u_pos * v).sum(-1), (u_neg @ v.unsqueeze(-1)).squeeze(-1)


check_negative_sampling_loss = compare(
    "negative_sampling_loss",
    w2v_ref.negative_sampling_loss,
    lambda: [
        case(
            torch.tensor([[1.0, 0.0]]),
            torch.tensor([[2.0, 0.0]]),
            torch.tensor([[[0.0, 1.0], [-1.0, 0.0]]]),
            why="one pair by hand: -log σ(2) - log σ(-0) - log σ(1) = 1.1333",
        ),
        case(
            torch.randn(4, 3),
            torch.randn(4, 3),
            torch.randn(4, 5, 3),
            why="B = 4, K = 5, D = 3",
        ),
        case(
            3 * torch.randn(6, 8),
            3 * torch.randn(6, 8),
            3 * torch.randn(6, 2, 8),
            why="large scores: log(sigmoid()) underflows where logsigmoid does not",
        ),
        case(
            torch.tensor([[20.0]]),
            torch.tensor([[-10.0]]),
            torch.tensor([[[-5.0]]]),
            why="a score of -200: σ(-200) rounds to 0 in float32",
        ),
    ],
    mistakes=[
        (
            lambda v, p, n: (
                -logsigmoid(_scores(v, p, n)[0])
                - logsigmoid(_scores(v, p, n)[1]).sum(-1)
            ).mean(),
            "The negatives need σ(-u·v): their dot products enter with a minus sign.",
        ),
        (
            lambda v, p, n: (
                -logsigmoid(_scores(v, p, n)[0])
                - logsigmoid(-_scores(v, p, n)[1]).mean(-1)
            ).mean(),
            "Sum the K negative terms (you averaged them).",
        ),
        (
            lambda v, p, n: -w2v_ref.negative_sampling_loss(v, p, n),
            "The loss is minus the log-likelihood: put a minus sign in front of the log-sigmoids.",
        ),
        (
            lambda v, p, n: w2v_ref.negative_sampling_loss(v, p, n, "sum"),
            "Average over the batch (you summed).",
        ),
        (
            lambda v, p, n: w2v_ref.negative_sampling_loss(v, p, n, "none"),
            "The loss is one number, the mean over the batch (you returned one loss per example).",
        ),
        (
            lambda v, p, n: (
                -torch.log(torch.sigmoid(_scores(v, p, n)[0]))
                - torch.log(torch.sigmoid(-_scores(v, p, n)[1])).sum(-1)
            ).mean(),
            "log(sigmoid(s)) is -inf once sigmoid(s) rounds to 0: torch.nn.functional.logsigmoid stays finite.",
        ),
    ],
    hint="loss = the mean over the batch of -log σ(u_pos·v) - Σ_k log σ(-u_neg[k]·v).",
    what="The loss",
    atol=1e-4,
    differentiable=True,
)


# --- nearest neighbours ---------------------------------------------------------------------------------------


def _neighbours(vectors: torch.Tensor, query: int, k: int) -> torch.Tensor:
    return _reference_neighbours(vectors, query, k)[0]


def _by_dot_product(vectors: torch.Tensor, query: int, k: int) -> torch.Tensor:
    return (
        (vectors @ vectors[query])
        .index_fill(0, torch.tensor([query]), -math.inf)
        .topk(k)
        .indices
    )


_SKEWED = torch.tensor(
    [
        [1.0, 0.0],
        [10.0, 9.0],
        [0.5, 0.02],
        [0.0, 1.0],
        [-1.0, 0.1],
        [3.0, 1.5],
        [0.9, -0.3],
    ]
)

#: a row parallel to another (cosine 1 up to rounding): the query is left out by its index, not by its cosine
_PARALLEL = torch.tensor(
    [
        [1.0, 0.0, 0.0],
        [0.6, 0.8, 0.0],
        [0.0, 0.0, 1.0],
        [1.5, 2.0, 0.0],
        [0.5, 0.5, 0.5],
    ]
)


def _drop_by_value(vectors: torch.Tensor, query: int, k: int) -> torch.Tensor:
    cos = torch.nn.functional.cosine_similarity(vectors, vectors[query], dim=-1)
    return cos.masked_fill(cos > 1 - 1e-6, -math.inf).topk(k).indices


check_nearest_neighbours = compare(
    "nearest_neighbours",
    _neighbours,
    lambda: [
        case(
            _SKEWED,
            0,
            3,
            why="vectors of very different lengths tell the cosine from the dot product",
        ),
        case(_SKEWED, 3, 2, why="query row 3"),
        case(
            _PARALLEL,
            1,
            3,
            why="row 3 is 2.5 times row 1: a cosine of 1, yet another row, the nearest",
        ),
        case(torch.randn(30, 8), 7, 5, why="30 random vectors in 8 dimensions"),
    ],
    mistakes=[
        (
            lambda x, q, k: (
                torch.nn.functional.cosine_similarity(x, x[q], dim=-1).topk(k).indices
            ),
            "Leave the query itself out: it is always its own nearest neighbour.",
        ),
        (
            _drop_by_value,
            "Leave the query out by its index (row query), not by its cosine: another row parallel to it also has "
            "cosine 1, and it is the nearest neighbour.",
        ),
        (
            _by_dot_product,
            "Use the cosine, u·v / (‖u‖ ‖v‖): the plain dot product favours long vectors.",
        ),
        (
            lambda x, q, k: _neighbours(x, q, k).flip(0),
            "Return the ids best first (largest cosine first).",
        ),
    ],
    hint="Compute the cosine of row query with every row, leave query out, take the k largest.",
    what="The neighbour ids",
    withhold=["companion.embeddings.nearest_neighbours"],
    atol=0,
    rtol=0,
)


# --- GloVe's weighting function -------------------------------------------------------------------------------

_X = torch.tensor([0.0, 0.5, 1.0, 10.0, 50.0, 99.0, 100.0, 150.0, 1000.0])


def _random_weights() -> list:
    """Hidden cases: counts on both sides of a random cap x_max (one exactly at it), a random power alpha."""
    out = []
    for _ in range(3):
        x_max = float(torch.randint(2, 200, ()))
        alpha = round(float(torch.empty(()).uniform_(0.2, 1.0)), 3)
        x = torch.cat([torch.rand(6) * 2 * x_max, torch.tensor([x_max, 0.0])])
        out.append(case(x, x_max, alpha, why=f"x_max = {x_max:g}, alpha = {alpha:g}"))
    return out


check_glove_weight = compare(
    "glove_weight",
    glove_ref.glove_weight,
    [
        case(_X, 100.0, 0.75, why="the paper's x_max = 100, alpha = 3/4"),
        case(_X, 10.0, 0.75),
        case(_X, 100.0, 1.0, why="alpha = 1: a straight line up to x_max"),
        case(
            torch.tensor([[2.0, 20.0], [200.0, 0.1]]), 50.0, 0.5, why="a (2, 2) matrix"
        ),
    ],
    mistakes=[
        (lambda x, m, a: (x / m) ** a, "Cap the weight at 1: f(x) = 1 for x >= x_max."),
        (lambda x, m, a: (x / m).clamp(max=1.0), "Raise x / x_max to the power alpha."),
        (
            lambda x, m, a: torch.where(x < m, torch.ones_like(x), (x / m) ** a),
            "The power applies below x_max and the cap of 1 above it, not the other way round.",
        ),
    ],
    hint="f(x) = (x / x_max)^alpha if x < x_max, else 1.",
    what="The weight tensor",
    hidden=_random_weights,
)


# ==========================================================================================================
# Exercises added for issue 7 (the GloVe loss). Kept in a section of their own to ease merging.
# ==========================================================================================================


def _glove_loss_inputs(
    g: torch.Generator, batch: int, dim: int, low: float, high: float
) -> tuple:
    e = torch.randn(batch, dim, generator=g, dtype=torch.float64)
    u = torch.randn(batch, dim, generator=g, dtype=torch.float64)
    b = torch.randn(batch, generator=g, dtype=torch.float64)
    b_tilde = torch.randn(batch, generator=g, dtype=torch.float64)
    c = low + (high - low) * torch.rand(batch, generator=g, dtype=torch.float64)
    return e, u, b, b_tilde, c


def _glove_loss_cases(glove_loss) -> int:
    g = torch.Generator().manual_seed(21)
    hand = (
        torch.tensor([[1.0, 0.0], [0.5, -0.5], [0.2, 0.3]], dtype=torch.float64),
        torch.tensor([[0.5, 1.0], [1.0, 1.0], [-1.0, 2.0]], dtype=torch.float64),
        torch.tensor([0.1, -0.2, 0.0], dtype=torch.float64),
        torch.tensor([0.0, 0.3, -0.1], dtype=torch.float64),
        torch.tensor([2.0, 150.0, 0.5], dtype=torch.float64),
    )
    cases = [
        (hand, 100.0, 0.75, "3 entries by hand, one above x_max = 100"),
        (
            _glove_loss_inputs(g, 8, 4, 0.5, 30.0),
            10.0,
            0.75,
            "8 entries, d = 4, x_max = 10",
        ),
        (_glove_loss_inputs(g, 5, 3, 0.2, 5.0), 4.0, 1.0, "5 entries, alpha = 1"),
    ]
    shown = len(cases)
    # new on every run: sizes, cap and power drawn at random
    with hidden_inputs() as seed:
        for _ in range(2):
            hidden = torch.Generator().manual_seed(int(torch.randint(2**31, ())))
            x_max, alpha = (
                float(torch.randint(2, 60, ())),
                round(float(torch.empty(()).uniform_(0.3, 1.0)), 3),
            )
            # 2+ entries: sum, not mean
            size = (int(torch.randint(2, 12, ())), int(torch.randint(1, 6, ())))
            tensors = _glove_loss_inputs(hidden, *size, 0.1, 2 * x_max)
            cases.append((tensors, x_max, alpha, f"a hidden random case, seed {seed}"))
    for tensors, x_max, alpha, why in cases:
        e, u, b, b_tilde, c = tensors
        label = (
            f"e {tuple(e.shape)}, u {tuple(u.shape)}, b, b_tilde, c={show(c, 120)}, "
            f"x_max={x_max}, alpha={alpha}  ({why})"
        )
        # the counts are data
        copies = [t.clone().requires_grad_() for t in tensors[:4]] + [
            tensors[4].clone()
        ]
        got = call(glove_loss, *copies, x_max, alpha, input=label)
        if any(not torch.equal(a, t) for a, t in zip(copies, tensors, strict=True)):
            raise Mismatch(
                "Your function changed the tensors it was given.",
                input=label,
                hint="Compute new tensors (x = x * 2, not x *= 2 or x.mul_(2)): the caller still needs its own.",
            )
        expected = glove_ref.glove_loss(e, u, b, b_tilde, c, x_max=x_max, alpha=alpha)
        residual = (e * u).sum(1) + b + b_tilde - c.log()
        weight = glove_ref.glove_weight(c, x_max, alpha)
        if isinstance(got, torch.Tensor) and got.numel() == c.numel() and c.numel() > 1:
            hint = (
                "Return one number: sum the weighted squared residuals over the batch."
            )
        elif same(got, (weight * residual.pow(2)).mean()):
            hint = "Sum over the batch; you took the mean."
        elif same(got, residual.pow(2).sum()):
            hint = "Multiply each squared residual by its weight f(c)."
        elif same(got, (weight * residual).sum()):
            hint = "Square the residual e·u + b + b_tilde - log c."
        elif same(got, (weight * ((e * u).sum(1) + b + b_tilde - c).pow(2)).sum()):
            hint = "The target is log c, not c."
        elif same(got, (weight * ((e * u).sum(1) - c.log()).pow(2)).sum()):
            hint = "Add both biases, b and b_tilde, to the dot product."
        else:
            hint = "sum_n f(c_n) (e_n·u_n + b_n + b_tilde_n - log c_n)^2, with f(x) = min(1, (x/x_max)^alpha)."
        expect_gradient_kept(got, label, "The loss")
        expect_close(
            got, float(expected), input=label, what="The loss", tol=1e-6, hint=hint
        )
        ours = [t.clone().requires_grad_() for t in tensors[:4]]
        names = ["`e`", "`u`", "`b`", "`b_tilde`"]
        expect_loss_gradients(
            got,
            glove_ref.glove_loss(*ours, c, x_max=x_max, alpha=alpha),
            list(zip(names, copies[:4], strict=True)),
            list(zip(names, ours, strict=True)),
            [],
            [],
            label,
        )
    return len(cases), len(cases) - shown


check_glove_loss = Checker(
    "glove_loss", _glove_loss_cases, withhold=["companion.glove.glove_loss"]
)
__all__ += ["check_glove_loss"]
