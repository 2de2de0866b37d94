"""Checkers for chapter 10, *Random features*.

Every random quantity (the frequencies ``w``, the phases ``b``) is an argument, so each verdict is
deterministic: the checker draws them once under its own seed and gives the same ones to the student's function
and to the reference.

=========================================  =============================================================
checker                                    what the student writes
=========================================  =============================================================
``check_orthogonal_gaussian``              ``orthogonal_gaussian(d, m, seed) -> (d, m)``: m frequencies in
                                           blocks of d orthogonal columns with χ_d lengths (checked by
                                           statistical tests of stated false-reject probability)
``check_causal_performer_attention``       ``causal_performer_attention(q, k, v, w) -> (..., n, d_v)``:
                                           causal FAVOR+, chapter 8's recurrence with positive features
=========================================  =============================================================
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .. import linear_attention as la
from .. import random_features as ref
from .checking import (
    Checker,
    Mismatch,
    call,
    case,
    compare,
    draw_trials,
    run_student,
    show,
)
from .linear_attention import _expect_gradients_flow

__all__ = [
    "check_orthogonal_gaussian",
    "check_causal_performer_attention",
]


# ----- orthogonal random features ------------------------------------------------------------------------------

ALPHA = 1e-7
"""The false-reject probability of each statistical test of ``check_orthogonal_gaussian`` (five tests, so a
right answer is judged wrong on fewer than one run in two million). Both bounds hold for every sample size:
Dvoretzky–Kiefer–Wolfowitz–Massart for the Kolmogorov–Smirnov distance, P(sup |F_n − F| > λ/√n) ≤ 2e^{−2λ²},
and Hoeffding for a count of signs, P(|k − n/2| > t) ≤ 2e^{−2t²/n}."""

STAT_D, STAT_M, STAT_DRAWS = 5, 12, 120
"""The statistical tests draw STAT_DRAWS matrices of shape (d, m) = (STAT_D, STAT_M): blocks of 5, 5 and 2."""


def _reference_orthogonal(d: int, m: int, seed: int) -> torch.Tensor:
    return ref.orthogonal_gaussian(
        d, m, torch.Generator().manual_seed(seed), torch.float64
    )


def _blocks(w: torch.Tensor, d: int) -> list[torch.Tensor]:
    return [w[:, i : i + d] for i in range(0, w.shape[1], d)]


def _cosines(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a / a.norm(dim=0, keepdim=True), b / b.norm(dim=0, keepdim=True)
    return a.T @ b


def _ks_distance(samples: torch.Tensor, cdf) -> float:  # noqa: ANN001
    """sup_x |F_n(x) − F(x)| of the samples' empirical distribution against ``cdf``."""
    x = samples.double().sort().values
    n, f = len(x), cdf(x)
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return float(torch.maximum(i / n - f, f - (i - 1) / n).max())


def _dkw_bound(n: int) -> float:
    return math.sqrt(math.log(2 / ALPHA) / 2) / math.sqrt(n)


def _chi_cdf(d: int):  # noqa: ANN202
    return lambda x: torch.special.gammainc(
        torch.tensor(d / 2, dtype=torch.float64), x * x / 2
    )


def _normal_cdf(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1 + torch.erf(x / math.sqrt(2)))


_ORTHOGONAL_HINT = (
    "For each block of d columns: Q, R = torch.linalg.qr(G) of a fresh d × d Gaussian G; Q times the signs of "
    "R's diagonal; scale its columns by the lengths of d new Gaussian vectors (χ_d); keep the first m columns "
    "of the blocks side by side. Draw everything from torch.Generator().manual_seed(seed)."
)


def _orthogonal_cases() -> list:
    return [
        case(4, 4, 11, why="one block of 4"),
        case(4, 10, 12, why="m = 10 in d = 4: blocks of 4, 4 and 2 columns"),
        case(8, 20, 13, why="d = 8, m = 20"),
        case(3, 2, 14, why="m < d: part of one block"),
        case(6, 6, 15, why="one block of 6"),
        case(4, 10, 16, why="the shape of the second case, another seed"),
    ]


def _statistical_cases() -> list:
    seeds = torch.randint(0, 2**31 - 1, (STAT_DRAWS,)).tolist()
    return [
        case(
            STAT_D,
            STAT_M,
            s,
            why=f"one of {STAT_DRAWS} draws for the statistical tests",
        )
        for s in seeds
    ]


def _all(trials, test) -> bool:  # noqa: ANN001
    return all(test(t.case.args[0], t.got) for t in trials)


def _expect_half(
    count: int,
    n: int,
    problem: str,
    what: str,
    where: str,
    hint: str,
    unit: str = "first columns of the blocks",
) -> None:
    """``count`` of ``n`` independent fair coin flips, within Hoeffding's band of false-reject probability ALPHA."""
    t_max = math.sqrt(n * math.log(2 / ALPHA) / 2)
    if abs(count - n / 2) > t_max:
        raise Mismatch(
            problem,
            input=where,
            expected=f"between {n / 2 - t_max:.0f} and {n / 2 + t_max:.0f} of the {n} {unit} "
            f"{what} (a right answer falls outside with probability below {ALPHA:g})",
            got=f"{count} {what}",
            hint=hint,
        )


def _length_concordance(draws: list[torch.Tensor]) -> tuple[int, int]:
    """(concordant, pairs): the blocks of the (STAT_D, STAT_M) draws taken two by two, a and b, the pair is
    concordant when (L_a0 − L_b0)(L_a1 − L_b1) > 0 for the lengths L of each block's first two columns. With
    independent lengths that has probability 1/2 exactly, independently from pair to pair. Ties (a difference
    within rounding, as when every length is 1) are left out: continuous lengths never tie, and lengths that do
    are judged by the test of their distribution."""
    firsts = torch.stack(
        [w.norm(dim=0)[i : i + 2] for w in draws for i in range(0, STAT_M, STAT_D)]
    )
    half = len(firsts) // 2
    a, b = firsts[0 : 2 * half : 2], firsts[1 : 2 * half : 2]
    first, second = a[:, 0] - b[:, 0], a[:, 1] - b[:, 1]
    tol = 1e-9 * float(firsts.abs().max().clamp(min=1e-300))
    untied = (first.abs() > tol) & (second.abs() > tol)
    return int((first * second > 0)[untied].sum()), int(untied.sum())


def _orthogonal_checks(student) -> tuple[int, int]:  # noqa: ANN001
    trials = draw_trials(_reference_orthogonal, _orthogonal_cases, _statistical_cases)
    run_student(student, _reference_orthogonal, trials)
    shown = [t for t in trials if t.hidden_seed is None]
    for t in trials:
        if t.error is not None:
            raise t.error
        d, m, _ = t.case.args
        label = t.label(_reference_orthogonal)
        got = t.got
        if (
            not isinstance(got, torch.Tensor)
            or got.shape != (d, m)
            or got.dtype != torch.float64
        ):
            transposed = (
                isinstance(got, torch.Tensor) and got.shape == (m, d) and m != d
            )
            raise Mismatch(
                "The frequencies have the wrong shape or dtype.",
                input=label,
                expected=f"a float64 tensor of shape (d, m) = ({d}, {m})",
                got=show(got, 120),
                hint="The frequencies are the columns, as in chapter 10's w of shape (d, m): transpose your matrix."
                if transposed
                else _ORTHOGONAL_HINT,
            )
        if not bool(torch.isfinite(got).all()):
            raise Mismatch(
                "The frequencies contain NaN or infinity.",
                input=label,
                got=show(got),
                hint=_ORTHOGONAL_HINT,
            )
    # The seed decides everything, and nothing else does (not PyTorch's global generator).
    for t in shown:
        d, m, seed = t.case.args
        label = t.label(_reference_orthogonal)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(12345)
            again = call(student, d, m, seed, input=label)
        if not (
            isinstance(again, torch.Tensor)
            and again.shape == t.got.shape
            and torch.equal(again, t.got)
        ):
            raise Mismatch(
                "Called twice with the same seed, your function returned two different matrices.",
                input=label + "; called again after torch.manual_seed(12345)",
                expected=show(t.got, 300),
                got=show(again, 300),
                hint="Draw every random number from one generator made from the seed, "
                "g = torch.Generator().manual_seed(seed), passing generator=g to torch.randn, never from "
                "PyTorch's global generator.",
            )
    for a in shown:
        for b in shown:
            if (
                a.case.args[:2] == b.case.args[:2]
                and a.case.args[2] < b.case.args[2]
                and torch.equal(a.got, b.got)
            ):
                raise Mismatch(
                    "Two different seeds gave the same frequencies.",
                    input=f"{a.label(_reference_orthogonal)} and {b.label(_reference_orthogonal)}",
                    got=show(a.got, 600),
                    hint="Use the seed you are given: g = torch.Generator().manual_seed(seed), and generator=g in "
                    "every torch.randn.",
                )
    # Each block of d columns is orthogonal.
    for t in trials:
        d, m, _ = t.case.args
        for b, block in enumerate(_blocks(t.got, d)):
            cos = _cosines(block, block)
            off = (cos - torch.diag(torch.diagonal(cos))).abs().max()
            if float(off) > 1e-8:
                small = [u for u in trials if u.case.args[1] <= u.case.args[0]]
                whole = m > d and all(
                    float(
                        (
                            _cosines(u.got, u.got)
                            - torch.eye(u.got.shape[1], dtype=u.got.dtype)
                        )
                        .abs()
                        .max()
                    )
                    < 1e-8
                    for u in small
                )
                raise Mismatch(
                    f"The columns {b * d}…{b * d + block.shape[1] - 1} (block {b + 1}) are not orthogonal.",
                    input=t.label(_reference_orthogonal, full=True),
                    expected="|cos| < 1e-8 between any two columns of one block of d",
                    got=f"largest |cos| = {float(off):.3g}; the matrix:\n{show(t.got, 1500)}",
                    hint="Your columns are orthogonal when m <= d but not beyond: a d-dimensional space has only d "
                    "orthogonal directions, so one QR of the whole matrix cannot do it. Do one QR per block of d "
                    "columns, each of a fresh d × d Gaussian matrix."
                    if whole
                    else _ORTHOGONAL_HINT,
                )
    # Different blocks are independent: no column of one block repeats a column of another.
    for t in trials:
        d, m, _ = t.case.args
        blocks = _blocks(t.got, d)
        for i in range(len(blocks)):
            for j in range(i + 1, len(blocks)):
                if float(_cosines(blocks[i], blocks[j]).abs().max()) > 1 - 1e-6:
                    reused = all(
                        float(
                            _cosines(
                                _blocks(u.got, u.case.args[0])[0],
                                _blocks(u.got, u.case.args[0])[1],
                            )
                            .abs()
                            .max()
                        )
                        > 1 - 1e-6
                        for u in trials
                        if u.case.args[1] > u.case.args[0]
                    )
                    raise Mismatch(
                        f"Block {j + 1} repeats the directions of block {i + 1}.",
                        input=t.label(_reference_orthogonal, full=True),
                        expected="independent blocks: their columns point in unrelated directions",
                        got=show(t.got, 1500),
                        hint="Draw a new Gaussian matrix (and take its QR) for every block; reusing one Q makes "
                        "the blocks copies of each other."
                        if reused
                        else _ORTHOGONAL_HINT,
                    )
    # The statistics: lengths χ_d, each frequency N(0, I) (its coordinates N(0, 1), symmetric).
    stats = [t for t in trials if t.hidden_seed is not None]
    seed = stats[0].hidden_seed if stats else None
    where = f"{len(stats)} matrices of shape ({STAT_D}, {STAT_M}), hidden random seeds drawn under seed {seed}"
    # The lengths are independent: within a block, the lengths of its first two columns. Over two blocks (a, b),
    # (L_a0 − L_b0)(L_a1 − L_b1) > 0 with probability 1/2 when the four lengths are independent draws of χ_d; one
    # length per block makes it always positive. Tested before their distribution: lengths shared within a block
    # keep the χ_d marginal but make its Kolmogorov–Smirnov distance vary more than the bound allows for, so the
    # marginal's test would reject them for the wrong reason on some runs (issue 30). Equal lengths (unit, √d)
    # make every pair a tie, left out here and caught by the marginal's test.
    concordant, n_pairs = _length_concordance([t.got for t in stats])
    same = all(
        bool(((block.norm(dim=0) - block.norm(dim=0)[0]).abs() < 1e-9).all())
        for u in trials
        for block in _blocks(u.got, u.case.args[0])
    )
    _expect_half(
        concordant,
        n_pairs,
        "The lengths of the columns of a block are not independent: two columns of one block are longer or "
        "shorter together too often.",
        "concordant",
        where + "; the first two columns of each block, the blocks taken in pairs",
        "Give every column its own length, the length of its own fresh N(0, I_d) vector: one length for a "
        "whole block makes its frequencies dependent, and the kernel estimate's variance grows."
        if same
        else _ORTHOGONAL_HINT,
        unit="pairs of blocks",
    )
    norms = torch.cat([t.got.norm(dim=0) for t in stats])
    dist = _ks_distance(norms, _chi_cdf(STAT_D))
    if dist > _dkw_bound(len(norms)):
        unit = all(bool(((u.got.norm(dim=0) - 1).abs() < 1e-6).all()) for u in trials)
        root = all(
            bool(((u.got.norm(dim=0) - math.sqrt(u.case.args[0])).abs() < 1e-6).all())
            for u in trials
        )
        raise Mismatch(
            f"The lengths of the columns do not follow the χ distribution with d = {STAT_D} degrees of freedom "
            "(the lengths of Gaussian vectors).",
            input=where,
            expected=f"Kolmogorov–Smirnov distance at most {_dkw_bound(len(norms)):.3f} (a right answer exceeds "
            f"it with probability below {ALPHA:g})",
            got=f"distance {dist:.3f}; lengths from {float(norms.min()):.3f} to {float(norms.max()):.3f}, mean "
            f"{float(norms.mean()):.3f} (χ_{STAT_D}'s mean is {math.sqrt(2) * math.gamma(3) / math.gamma(2.5):.3f})",
            hint="The columns of Q have length 1: rescale each by the length of a fresh N(0, I_d) vector, so that "
            "every frequency is distributed as N(0, I)."
            if unit
            else "Every column has length √d: that is the mean-square length, not a draw from χ_d; rescale each "
            "column by the length of its own fresh N(0, I_d) vector."
            if root
            else _ORTHOGONAL_HINT,
        )
    # each block's first column, (d, blocks)
    firsts = torch.cat([t.got[:, ::STAT_D] for t in stats], dim=1)
    positive = int((firsts[0] > 0).sum())
    _expect_half(
        positive,
        firsts.shape[1],
        "The first coordinate of each block's first column is not symmetric about 0: the frequencies are not "
        "distributed as N(0, I).",
        "positive",
        where,
        "torch.linalg.qr returns Q with a sign convention (R's diagonal has fixed signs), so Q is not uniformly "
        "random: multiply each column of Q by the sign of the matching diagonal entry of R."
        if positive == 0  # Householder QR: Q's first column starts negative
        else _ORTHOGONAL_HINT,
    )
    _expect_half(
        int((firsts[0] * firsts[1] > 0).sum()),
        firsts.shape[1],
        "The first two coordinates of a frequency have the same sign too often (or too rarely): they are not "
        "independent, as the coordinates of an N(0, I) vector are.",
        "with the same sign in its first two coordinates",
        where,
        _ORTHOGONAL_HINT,
    )
    entries = torch.cat([t.got[:, ::STAT_D].flatten() for t in stats])
    dist = _ks_distance(entries, _normal_cdf)
    if dist > _dkw_bound(len(entries)):
        raise Mismatch(
            "The coordinates of the frequencies are not distributed as N(0, 1).",
            input=where,
            expected=f"Kolmogorov–Smirnov distance to N(0, 1) at most {_dkw_bound(len(entries)):.3f} (a right "
            f"answer exceeds it with probability below {ALPHA:g})",
            got=f"distance {dist:.3f}; mean {float(entries.mean()):.3f}, standard deviation {float(entries.std()):.3f}",
            hint=_ORTHOGONAL_HINT,
        )
    return len(trials) + len(shown) + 5, len(stats)


check_orthogonal_gaussian = Checker(
    "orthogonal_gaussian",
    _orthogonal_checks,
    kind="function",
    withhold=[
        "companion.random_features.orthogonal_gaussian",
        "companion.random_features.sample_frequencies",
    ],
)


# ----- causal FAVOR+ -----------------------------------------------------------------------------------------------


def _reference_performer(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, w: torch.Tensor
) -> torch.Tensor:
    scale = q.shape[-1] ** -0.25
    return la.LinearAttention(
        feature_map=lambda x: ref.positive_softmax_features(x * scale, w), chunk_size=4
    ).chunked(
        q,
        k,
        v,
    )


def _performer_mistake(
    *,
    scale: float | None = None,
    half_norm: bool = True,
    causal: str = "inclusive",
    **kw,
):
    """Causal FAVOR+ with one thing wrong: the scaling of the inputs, the −‖x‖²/2, the mask, the normaliser."""

    def performer(q, k, v, w):  # noqa: ANN001, ANN202
        c = q.shape[-1] ** -0.25 if scale is None else q.shape[-1] ** scale

        def phi(x):  # noqa: ANN001, ANN202
            x = x * c
            return torch.exp(
                x @ w - (x * x).sum(-1, keepdim=True) / 2 * half_norm
            ) / math.sqrt(w.shape[1])

        fq, fk = (
            (la.elu_plus_one(q), la.elu_plus_one(k))
            if kw.get("elu")
            else (phi(q), phi(k))
        )
        a = fq @ fk.transpose(-2, -1)
        a = {"inclusive": a.tril(), "strict": a.tril(-1), "none": a}[causal]
        den = a.sum(-1, keepdim=True) + la.DEFAULT_EPS
        return a @ v if kw.get("no_normaliser") else (a @ v) / den

    return performer


def _performer_case(
    shape: tuple[int, ...],
    n: int,
    d: int,
    d_v: int,
    m: int,
    why: str,
    dtype=torch.float32,
):  # noqa: ANN001
    q, k = (0.5 * _randn_like(shape, n, d) for _ in range(2))
    v = _randn_like(shape, n, d_v)
    w = ref.orthogonal_gaussian(d, m, dtype=torch.float64)
    return case(q.to(dtype), k.to(dtype), v.to(dtype), w.to(dtype), why=why)


def _randn_like(shape: tuple[int, ...], n: int, d: int) -> torch.Tensor:
    return torch.randn(*shape, n, d)


def _performer_cases() -> list:
    return [
        _performer_case(
            (), 6, 4, 3, 8, "n = 6 tokens, d_k = 4, d_v = 3, m = 8 features"
        ),
        _performer_case(
            (), 9, 8, 2, 16, "n = 9, d_k = 8, m = 16: the d^(1/4) = 1.68 scaling shows"
        ),
        _performer_case(
            (2, 3), 5, 4, 4, 6, "a batch of 2 with 3 heads, m = 6 (not a multiple of d)"
        ),
        _performer_case((), 7, 16, 3, 32, "float64, d_k = 16", dtype=torch.float64),
    ]


_performer_values = compare(
    "causal_performer_attention",
    _reference_performer,
    _performer_cases,
    mistakes=[
        (
            _performer_mistake(scale=0.0),
            "Divide q and k by d_k^(1/4) before the features: φ₊(q/d^(1/4))ᵀφ₊(k/d^(1/4)) estimates "
            "exp(qᵀk/√d_k), softmax attention's score.",
        ),
        (
            _performer_mistake(scale=-0.5),
            "Divide q and k by d_k^(1/4), not by √d_k: the product of the two scalings must be 1/√d_k.",
        ),
        (
            _performer_mistake(half_norm=False),
            "Subtract ‖x‖²/2 in the exponent: φ₊(x) = exp(wᵀx − ‖x‖²/2)/√m, with x the scaled q or k.",
        ),
        (
            _performer_mistake(causal="none"),
            "That is not causal: query i may see only the keys j ≤ i.",
        ),
        (
            _performer_mistake(causal="strict"),
            "Query i also sees its own key: j ≤ i, the diagonal included (add the token to the state, then read).",
        ),
        (
            _performer_mistake(no_normaliser=True),
            "Divide by the normaliser φ(q_i)ᵀ Σ_{j≤i} φ(k_j) + 1e-6.",
        ),
        (
            _performer_mistake(elu=True),
            "Use the positive random features φ₊ with the frequencies w, not chapter 8's elu + 1.",
        ),
    ],
    hint="φ₊(x) = exp(x' @ w − ‖x'‖²/2)/√m with x' = x / d_k^(1/4), for q and for k; then chapter 8's causal "
    "linear attention: y_i = φ₊(q_i)ᵀS_i / (φ₊(q_i)ᵀz_i + 1e-6), S_i = Σ_{j≤i} φ₊(k_j)v_jᵀ, z_i = Σ_{j≤i} φ₊(k_j).",
    what="The output",
    withhold=[
        "companion.random_features.positive_softmax_features",
        "companion.random_features.PerformerFeatures",
        "companion.linear_attention.LinearAttention.attend",
        "companion.linear_attention.LinearAttention.quadratic",
        "companion.linear_attention.kernel_attention",
        "companion.linear_attention.LinearAttention.step",
        "companion.linear_attention.LinearAttention.recurrent",
        "companion.linear_attention.LinearAttention.chunked",
        "companion.linear_attention.LinearAttention.cumsum",
    ],
    same_dtype=True,
)

PERFORMER_MS = (8, 512)
"""The statistical check runs the student's function with m = 8 and m = 512 orthogonal frequencies. With the
companion's answer, over 6 draws of the inputs (4 draws of w each): mean relative error 0.30–0.59 at m = 8,
0.07–0.12 at m = 512, a ratio of 4.3 or more; the check asks for an error below 0.2 at m = 512 and a ratio
above 2."""


def _softmax_error(student, q, k, v, m: int, seeds: range) -> float:  # noqa: ANN001
    """The mean relative error ‖ŷ − y‖ / ‖y‖ of the student's causal FAVOR+ against causal softmax attention."""
    exact = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    errors = []
    for s in seeds:
        w = ref.orthogonal_gaussian(
            q.shape[-1], m, torch.Generator().manual_seed(s), q.dtype
        )
        out = call(
            student,
            q,
            k,
            v,
            w,
            input=f"q, k, v of shape {tuple(q.shape)}, w of shape ({q.shape[-1]}, {m})",
        )
        errors.append(float((torch.as_tensor(out) - exact).norm() / exact.norm()))
    return sum(errors) / len(errors)


def _performer_checks(student) -> tuple[int, int]:  # noqa: ANN001
    count, hidden = _performer_values._cases(student)
    q, k = (0.5 * torch.randn(2, 6, 8) for _ in range(2))
    v, w = torch.randn(2, 6, 3), ref.orthogonal_gaussian(8, 16)
    _expect_gradients_flow(
        student,
        _reference_performer,
        (q, k, v, w),
        "2 heads of 6 tokens, d_k = 8, m = 16, inputs requiring grad",
        "The output",
    )
    # Against exact softmax attention: the error falls as m grows (a statistical check, seeds fixed).
    q, k = (0.5 * torch.randn(2, 32, 16, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, 32, 4, dtype=torch.float64)
    few, many = (_softmax_error(student, q, k, v, m, range(4)) for m in PERFORMER_MS)
    if not (many < 0.2 and many < few / 2):
        raise Mismatch(
            "As the number of features grows, your output does not approach causal softmax attention.",
            input=f"2 heads of 32 tokens, d_k = 16, queries and keys of standard deviation 0.5; m = {PERFORMER_MS[0]} "
            f"and {PERFORMER_MS[1]} orthogonal frequencies, 4 draws each",
            expected=f"a mean relative error below 0.2 at m = {PERFORMER_MS[1]}, and below half the error at "
            f"m = {PERFORMER_MS[0]}",
            got=f"{few:.3f} at m = {PERFORMER_MS[0]}, {many:.3f} at m = {PERFORMER_MS[1]}",
            hint="φ₊(q/d^(1/4))ᵀφ₊(k/d^(1/4)) must estimate exp(qᵀk/√d_k) without bias: check the scaling and the "
            "−‖x‖²/2.",
        )
    return count + 3, hidden


check_causal_performer_attention = Checker(
    "causal_performer_attention",
    _performer_checks,
    kind="function",
    withhold=_performer_values.withhold,
)
