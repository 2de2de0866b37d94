"""The chapter-10 checkers accept independently written right answers, reject plausible wrong ones saying why,
report a stub as not attempted, and give the same verdict on every run (the random matrices are arguments)."""

import math

import pytest
import torch
from checker_testing import assert_passes, assert_wrong, correct_answers, stub

from companion import linear_attention as la
from companion import random_features as rf
from companion.exercises.random_features import (
    check_causal_performer_attention,
    check_orthogonal_gaussian,
)

CHECKERS = [
    check_orthogonal_gaussian,
    check_causal_performer_attention,
]


@pytest.mark.parametrize("checker", CHECKERS)
def test_stub_is_not_attempted(checker):
    verdict = checker.verdict(stub)
    assert verdict.status == "not attempted" and str(verdict).startswith(
        "NOT ATTEMPTED YET"
    )


@pytest.mark.parametrize("checker", CHECKERS)
def test_verdicts_do_not_depend_on_the_global_random_state(checker):
    wrong = {
        "orthogonal_gaussian": lambda d, m, seed: torch.ones(d, m, dtype=torch.float64),
        "causal_performer_attention": lambda q, k, v, w: v.cumsum(-2),
    }[checker.exercise]
    torch.manual_seed(1)
    first = str(checker.verdict(wrong))
    torch.manual_seed(2)
    assert str(checker.verdict(wrong)) == first


# --- orthogonal_gaussian -------------------------------------------------------------------------------------------


def orthogonal_by_blocks(d, m, seed):
    g = torch.Generator().manual_seed(seed)
    blocks = []
    for _ in range(math.ceil(m / d)):
        q, r = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
        q = q * torch.sign(torch.diagonal(r))
        lengths = torch.randn(d, d, generator=g, dtype=torch.float64).norm(dim=0)
        blocks.append(q * lengths)
    return torch.cat(blocks, dim=1)[:, :m]


def orthogonal_by_rows_transposed(d, m, seed):
    """Rows of Q (equally Haar) as the frequencies, random signs instead of R's, lengths from chi via gamma."""
    g = torch.Generator().manual_seed(seed)
    columns = []
    while sum(c.shape[1] for c in columns) < m:
        q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
        signs = torch.randint(0, 2, (d,), generator=g).double() * 2 - 1
        lengths = (
            2
            * torch._standard_gamma(
                torch.full((d,), d / 2, dtype=torch.float64), generator=g
            )
        ).sqrt()
        columns.append((q * signs[:, None]).T * lengths)
    return torch.cat(columns, dim=1)[:, :m]


def orthogonal_by_gram_schmidt(d, m, seed):
    """Gram–Schmidt by hand on each block of Gaussian vectors (no QR at all), then a fresh Gaussian vector's
    length for each column."""
    g = torch.Generator().manual_seed(seed)
    out = torch.empty(d, 0, dtype=torch.float64)
    for _ in range(0, m, d):
        a = torch.randn(d, d, generator=g, dtype=torch.float64)
        basis = []
        for j in range(d):
            u = a[:, j].clone()
            for b in basis:
                u = u - (u @ b) * b
            basis.append(u / u.norm())
        lengths = torch.randn(d, d, generator=g, dtype=torch.float64).norm(dim=0)
        out = torch.cat([out, torch.stack(basis, 1) * lengths], dim=1)
    return out[:, :m]


@correct_answers(
    (check_orthogonal_gaussian, orthogonal_by_blocks),
    (check_orthogonal_gaussian, orthogonal_by_rows_transposed),
    (check_orthogonal_gaussian, orthogonal_by_gram_schmidt),
)
def test_orthogonal_right_answers(checker, student):
    assert_passes(checker, student)


def _blocks_with(*, sign_fix=True, lengths="chi", fresh=True, float64=True):
    def orthogonal(d, m, seed):
        g = torch.Generator().manual_seed(seed)
        q0 = None
        blocks = []
        for _ in range(math.ceil(m / d)):
            if q0 is None or fresh:
                q, r = torch.linalg.qr(
                    torch.randn(d, d, generator=g, dtype=torch.float64)
                )
                q0 = q * torch.sign(torch.diagonal(r)) if sign_fix else q
            if lengths == "chi":
                scale = torch.randn(d, d, generator=g, dtype=torch.float64).norm(dim=0)
            # χ_d, but one draw for the whole block (issue 30)
            elif lengths == "one per block":
                scale = (
                    torch.randn(d, generator=g, dtype=torch.float64).norm().expand(d)
                )
            # each length shared by two neighbouring columns
            elif lengths == "one per pair":
                scale = torch.randn(d, d, generator=g, dtype=torch.float64).norm(dim=0)[
                    torch.arange(d) // 2 * 2
                ]
            else:
                scale = torch.full(
                    (d,),
                    {"unit": 1.0, "root": math.sqrt(d)}[lengths],
                    dtype=torch.float64,
                )
            blocks.append(q0 * scale)
        w = torch.cat(blocks, 1)[:, :m]
        return w if float64 else w.float()

    return orthogonal


def _whole_matrix_qr(d, m, seed):
    """One QR of an m × d Gaussian: the d rows of Qᵀ are orthonormal, its m columns are not orthogonal."""
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(max(m, d), d, generator=g, dtype=torch.float64))
    q = (q * torch.sign(torch.diagonal(r))).T[:, :m]
    return q * torch.randn(d, m, generator=g, dtype=torch.float64).norm(dim=0)


def _gaussian_not_orthogonal(d, m, seed):
    return torch.randn(
        d, m, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
    )


def _global_generator(d, m, seed):
    # the student's own reseeding, anything but the seed
    torch.manual_seed(torch.randint(0, 1000, ()).item())
    return orthogonal_by_blocks(d, m, torch.randint(0, 2**31 - 1, ()).item())


def _rows_not_columns(d, m, seed):
    return orthogonal_by_blocks(d, m, seed).T


def _lengths_of_q_columns(d, m, seed):
    """A plausible confusion: the lengths of the Gaussian matrix's own columns (χ_d, but then Q's directions are
    those of the same matrix: fine) -- squared by mistake."""
    g = torch.Generator().manual_seed(seed)
    blocks = []
    for _ in range(math.ceil(m / d)):
        a = torch.randn(d, d, generator=g, dtype=torch.float64)
        q, r = torch.linalg.qr(a)
        blocks.append(q * torch.sign(torch.diagonal(r)) * (a * a).sum(0))
    return torch.cat(blocks, 1)[:, :m]


def _uniform_not_gaussian(flip):
    """torch.rand for torch.randn in the matrix that QR makes orthogonal: its columns lean towards the positive
    orthant, so the directions are not uniform (with ``flip``, a random sign per block hides it from the sign
    test; the coordinates' distribution still shows it)."""

    def orthogonal(d, m, seed):
        g = torch.Generator().manual_seed(seed)
        blocks = []
        for _ in range(math.ceil(m / d)):
            q, r = torch.linalg.qr(torch.rand(d, d, generator=g, dtype=torch.float64))
            sign = float(torch.randint(0, 2, (), generator=g)) * 2 - 1 if flip else 1.0
            lengths = torch.randn(d, d, generator=g, dtype=torch.float64).norm(dim=0)
            blocks.append(sign * q * torch.sign(torch.diagonal(r)) * lengths)
        return torch.cat(blocks, 1)[:, :m]

    return orthogonal


def _near_the_axes(d, m, seed):
    """Each block a randomly signed permutation of the axes, turned slightly: orthogonal, χ_d lengths, signs
    symmetric and independent, no block repeating another, but the directions crowd the axes."""
    g = torch.Generator().manual_seed(seed)
    blocks = []
    for _ in range(math.ceil(m / d)):
        turn, r = torch.linalg.qr(
            torch.eye(d, dtype=torch.float64) + 0.1 * torch.randn(d, d, generator=g)
        )
        perm = torch.eye(d, dtype=torch.float64)[torch.randperm(d, generator=g)]
        signs = torch.randint(0, 2, (d,), generator=g).double() * 2 - 1
        q = perm * signs @ (turn * torch.sign(torch.diagonal(r)))
        blocks.append(
            q * torch.randn(d, d, generator=g, dtype=torch.float64).norm(dim=0)
        )
    return torch.cat(blocks, 1)[:, :m]


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (
            _uniform_not_gaussian(flip=False),
            ["not symmetric about 0", "fresh d × d Gaussian"],
        ),
        (
            _uniform_not_gaussian(flip=True),
            ["same sign too often", "fresh d × d Gaussian"],
        ),
        (
            _near_the_axes,
            ["not distributed as N(0, 1)", "Kolmogorov–Smirnov distance to N(0, 1)"],
        ),
        (_blocks_with(lengths="unit"), ["χ distribution", "have length 1: rescale"]),
        (_blocks_with(lengths="root"), ["χ distribution", "length √d"]),
        (
            _blocks_with(lengths="one per block"),
            ["not independent", "its own length", "variance grows"],
        ),
        (
            _blocks_with(lengths="one per pair"),
            ["not independent", "fresh d × d Gaussian"],
        ),
        (
            _blocks_with(sign_fix=False),
            ["not symmetric about 0", "sign of the matching diagonal entry of R"],
        ),
        (_blocks_with(fresh=False), ["repeats the directions", "new Gaussian matrix"]),
        (
            _whole_matrix_qr,
            [
                "not orthogonal",
                "orthogonal when m <= d but not beyond",
                "m = 10 in d = 4",
            ],
        ),
        (
            _gaussian_not_orthogonal,
            ["not orthogonal", "a fresh d × d Gaussian G", "one block of 4"],
        ),
        (_global_generator, ["same seed", "generator=g"]),
        (_rows_not_columns, ["shape", "transpose"]),
        (_blocks_with(float64=False), ["float64"]),
        (_lengths_of_q_columns, ["χ distribution", "d = 5"]),
        (
            lambda d, m, seed: orthogonal_by_blocks(d, d * math.ceil(m / d), seed),
            ["shape", "(4, 10)"],
        ),
        (
            lambda d, m, seed: rf.orthogonal_gaussian(
                d, m, torch.Generator().manual_seed(seed)
            ).double(),
            ["yourself"],
        ),
    ],
)
def test_orthogonal_wrong_answers(student, fragments):
    assert_wrong(check_orthogonal_gaussian.verdict(student), *fragments)


def test_the_statistical_tests_reject_a_right_answer_rarely_and_a_subtle_wrong_one_surely():
    """The tests' bounds hold (DKW–Massart, Hoeffding): the companion's own sampler, drawn as a student's
    would be on 30 fresh sets of hidden seeds, passes the tests of lengths, their independence, coordinates and
    sign agreement every time; lengths χ_{d+1} instead of χ_d (a subtle error: 7 % longer on average) fail every
    time."""
    from companion.exercises import random_features as ex

    for _ in range(30):
        draws = [
            ex._reference_orthogonal(5, 12, s)
            for s in torch.randint(0, 2**31 - 1, (ex.STAT_DRAWS,)).tolist()
        ]
        norms = torch.cat([w.norm(dim=0) for w in draws])
        assert ex._ks_distance(norms, ex._chi_cdf(5)) <= ex._dkw_bound(len(norms))
        entries = torch.cat([w[:, ::5].flatten() for w in draws])
        assert ex._ks_distance(entries, ex._normal_cdf) <= ex._dkw_bound(len(entries))
        firsts = torch.cat([w[:, ::5] for w in draws], dim=1)
        agree, n = int((firsts[0] * firsts[1] > 0).sum()), firsts.shape[1]
        assert abs(agree - n / 2) <= math.sqrt(n * math.log(2 / ex.ALPHA) / 2)
        concordant, n = ex._length_concordance(draws)
        assert n == 180 and abs(concordant - n / 2) <= math.sqrt(
            n * math.log(2 / ex.ALPHA) / 2
        )
        # χ_6 lengths
        longer = torch.randn(6, len(norms), dtype=torch.float64).norm(dim=0)
        assert ex._ks_distance(longer, ex._chi_cdf(5)) > ex._dkw_bound(len(longer))


def test_the_independence_of_lengths_is_tested_before_their_distribution():
    """One length per block keeps the χ_d marginal but makes the lengths' Kolmogorov–Smirnov distance vary more
    than its bound allows for (that test rejected it on 12 of 300 runs, for the wrong reason): the concordance
    test comes first and rejects it every time. Equal lengths (all 1, all √d) are ties there, left out, so that
    the distribution's test names them."""
    from companion.exercises import random_features as ex

    one_per_block = _blocks_with(lengths="one per block")
    draws = [one_per_block(5, 12, s) for s in range(ex.STAT_DRAWS)]
    assert ex._length_concordance(draws) == (180, 180)
    for lengths in ("unit", "root"):
        draws = [_blocks_with(lengths=lengths)(5, 12, s) for s in range(ex.STAT_DRAWS)]
        assert ex._length_concordance(draws) == (0, 0)


# --- causal_performer_attention (causal FAVOR+) --------------------------------------------------------------------


def performer_by_cumsum(q, k, v, w):
    d, m = q.shape[-1], w.shape[1]

    def phi(x):
        x = x / d**0.25
        return torch.exp(x @ w - (x * x).sum(-1, keepdim=True) / 2) / math.sqrt(m)

    fq, fk = phi(q), phi(k)
    states = (fk[..., :, :, None] * v[..., :, None, :]).cumsum(-3)
    norms = fk.cumsum(-2)
    return (fq[..., None, :] @ states)[..., 0, :] / (
        (fq * norms).sum(-1, keepdim=True) + 1e-6
    )


def performer_by_recurrence(q, k, v, w):
    scale = q.shape[-1] ** -0.25
    fq = torch.exp(
        torch.einsum("...nd,dm->...nm", q * scale, w)
        - (q * scale).pow(2).sum(-1, keepdim=True) / 2
    )
    fk = torch.exp(
        torch.einsum("...nd,dm->...nm", k * scale, w)
        - (k * scale).pow(2).sum(-1, keepdim=True) / 2
    )
    fq, fk = fq / w.shape[1] ** 0.5, fk / w.shape[1] ** 0.5
    s = v.new_zeros(*v.shape[:-2], w.shape[1], v.shape[-1])
    z = v.new_zeros(*v.shape[:-2], w.shape[1])
    ys = []
    for i in range(q.shape[-2]):
        s = s + torch.einsum("...m,...e->...me", fk[..., i, :], v[..., i, :])
        z = z + fk[..., i, :]
        ys.append(
            torch.einsum("...m,...me->...e", fq[..., i, :], s)
            / ((fq[..., i, :] * z).sum(-1, keepdim=True) + 1e-6)
        )
    return torch.stack(ys, -2)


def performer_by_masked_matrix(q, k, v, w):
    """The masked quadratic form, features scaled in log space."""
    d, m = q.shape[-1], w.shape[1]
    log_phi = lambda x: (
        (x @ w) / d**0.25
        - (x * x).sum(-1, keepdim=True) / (2 * d**0.5)
        - 0.5 * math.log(m)
    )  # noqa: E731
    a = (torch.exp(log_phi(q)) @ torch.exp(log_phi(k)).transpose(-2, -1)).tril()
    return (a @ v) / (a.sum(-1, keepdim=True) + 1e-6)


@correct_answers(
    (check_causal_performer_attention, performer_by_cumsum),
    (check_causal_performer_attention, performer_by_recurrence),
    (check_causal_performer_attention, performer_by_masked_matrix),
)
def test_performer_right_answers(checker, student):
    assert_passes(checker, student)


def _performer_with(
    *,
    scale=-0.25,
    half=True,
    mask="tril",
    normalise=True,
    features="positive",
    cap=None,
):
    def performer(q, k, v, w):
        ww = w if cap is None else w[:, :cap]
        c = q.shape[-1] ** scale

        def phi(x):
            if features == "elu":  # chapter 8's feature map, on q and k as they are
                return torch.nn.functional.elu(x) + 1
            x = x * c
            return (
                torch.exp(x @ ww - half * (x * x).sum(-1, keepdim=True) / 2)
                / ww.shape[1] ** 0.5
            )

        a = phi(q) @ phi(k).transpose(-2, -1)
        a = {"tril": a.tril(), "strict": a.tril(-1), "none": a}[mask]
        return (a @ v) / (a.sum(-1, keepdim=True) + 1e-6) if normalise else a @ v

    return performer


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (_performer_with(scale=0.0), ["d_k^(1/4) before the features", "n = 6 tokens"]),
        (_performer_with(scale=-0.5), ["not by √d_k"]),
        (_performer_with(half=False), ["Subtract ‖x‖²/2"]),
        (_performer_with(mask="none"), ["not causal"]),
        (_performer_with(mask="strict"), ["also sees its own key"]),
        (_performer_with(normalise=False), ["Divide by the normaliser"]),
        (_performer_with(features="elu"), ["not chapter 8's elu + 1"]),
        (
            lambda q, k, v, w: performer_by_cumsum(q, k, v, w).double(),
            ["wrong dtype", "torch.float32"],
        ),
        (
            lambda q, k, v, w: performer_by_cumsum(q, k, v, w).detach(),
            ["carries no gradient"],
        ),
        (
            _performer_with(cap=32),
            ["does not approach causal softmax attention", "m = 8 and 512"],
        ),
        (lambda q, k, v, w: performer_by_cumsum(q, k, v, w.T), ["raised RuntimeError"]),
        (
            lambda q, k, v, w: la.LinearAttention(
                feature_map=lambda x: rf.positive_softmax_features(
                    x / q.shape[-1] ** 0.25, w
                )
            ).cumsum(
                q,
                k,
                v,
            ),
            ["yourself"],
        ),
    ],
)
def test_performer_wrong_answers(student, fragments):
    assert_wrong(check_causal_performer_attention.verdict(student), *fragments)


def test_the_performer_reference_is_the_companions_feature_map_in_every_causal_form():
    """The checker's reference is PerformerFeatures (no stabiliser, same w) in chapter 8's causal forms."""
    from companion.exercises.random_features import _reference_performer

    q, k, v = (0.5 * torch.randn(2, 9, 8, dtype=torch.float64) for _ in range(3))
    phi = rf.PerformerFeatures(8, 16, seed=3).double()
    out = _reference_performer(q, k, v, phi.w.double())
    torch.testing.assert_close(out, la.LinearAttention(feature_map=phi).cumsum(q, k, v))
    torch.testing.assert_close(
        out, la.LinearAttention(feature_map=phi).recurrent(q, k, v)
    )
