"""The FMMformer chapter's checkers accept independently written answers and reject typical wrong ones, saying why."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from checker_testing import assert_passes, assert_wrong, correct_answers, stub

from companion import banded_attention as ba
from companion import fmmformer as fmm
from companion import linear_attention as la
from companion.exercises.fmmformer import (
    check_banded_softmax,
    check_causal_band_mask,
    check_fmm_blend,
    check_numerical_rank,
)


@pytest.mark.parametrize(
    "checker", [check_causal_band_mask, check_banded_softmax, check_fmm_blend, check_numerical_rank]
)
def test_stub_is_not_attempted(checker):
    verdict = checker.verdict(stub)
    assert verdict.status == "not attempted" and str(verdict).startswith("NOT ATTEMPTED YET")


# --- independently written right answers ---------------------------------------------------------------------


def mask_by_loops(n, b):
    out = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(max(0, i - b + 1), i + 1):
            out[i, j] = True
    return out


def mask_by_triangles(n, b):
    ones = torch.ones(n, n, dtype=torch.bool)
    return torch.tril(ones) & ~torch.tril(ones, diagonal=-b)


def banded_by_loop(q, k, v, b):
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    for i in range(q.shape[-2]):
        lo = max(0, i - b + 1)
        s = (q[..., i : i + 1, :] @ k[..., lo : i + 1, :].transpose(-2, -1)) / math.sqrt(q.shape[-1])
        out[..., i, :] = (torch.softmax(s, -1) @ v[..., lo : i + 1, :])[..., 0, :]
    return out


def banded_by_unfold(q, k, v, b):
    n, d = q.shape[-2], q.shape[-1]
    kp = F.pad(k, (0, 0, b - 1, 0)).unfold(-2, b, 1)  # (..., n, d, b)
    vp = F.pad(v, (0, 0, b - 1, 0)).unfold(-2, b, 1)  # (..., n, d_v, b)
    s = (q.unsqueeze(-2) @ kp).squeeze(-2) / math.sqrt(d)  # (..., n, b)
    real = torch.arange(n).unsqueeze(1) + torch.arange(b) - (b - 1) >= 0  # (n, b): not padding
    w = torch.softmax(s.masked_fill(~real, -math.inf), -1)
    return (vp @ w.unsqueeze(-1)).squeeze(-1)


def blend_by_matrices(q, k, v, b, w_near, w_far):
    n = q.shape[-2]
    i = torch.arange(n)
    band = (i.unsqueeze(1) - i >= 0) & (i.unsqueeze(1) - i < b)
    s = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~band, -math.inf)
    out = w_near * torch.softmax(s, -1) @ v
    for phi in (lambda x: F.elu(x) + 1, lambda x: F.elu(-x) + 1):
        a = torch.tril(phi(q) @ phi(k).transpose(-2, -1))
        out = out + w_far * (a @ v) / (a.sum(-1, keepdim=True) + 1e-6)
    return out


def blend_by_cumsum(q, k, v, b, w_near, w_far):
    out = w_near * banded_by_unfold(q, k, v, b)
    for phi in (lambda x: F.elu(x) + 1, lambda x: F.elu(-x) + 1):
        fq, fk = phi(q), phi(k)
        s = torch.cumsum(fk.unsqueeze(-1) * v.unsqueeze(-2), dim=-3)  # (..., n, d, d_v)
        z = torch.cumsum(fk, dim=-2)
        num = (fq.unsqueeze(-2) @ s).squeeze(-2)
        out = out + w_far * num / ((fq * z).sum(-1, keepdim=True) + 1e-6)
    return out


def rank_by_svd(a, eps):
    s = torch.linalg.svd(a).S
    return sum(1 for x in s.tolist() if x > eps * s[0].item())


def rank_by_numpy(a, eps):
    m = a.numpy()
    return int(np.linalg.matrix_rank(m, tol=eps * np.linalg.norm(m, 2)))


def mask_by_broadcast(n, b):
    d = torch.arange(n)[:, None] - torch.arange(n)[None, :]
    return (d >= 0) & (d <= b - 1)


def banded_by_chunks_of_keys(q, k, v, b):
    """Per query block of b rows, the scores against the 2b - 1 keys that can reach it: O(n·b) memory."""
    n, d = q.shape[-2], q.shape[-1]
    out = []
    for start in range(0, n, b):
        lo, end = max(0, start - b + 1), min(start + b, n)
        s = q[..., start:end, :] @ k[..., lo:end, :].transpose(-2, -1) / math.sqrt(d)
        i = torch.arange(start, end)[:, None]
        j = torch.arange(lo, end)[None, :]
        s = s.masked_fill(~((i - j >= 0) & (i - j < b)), -math.inf)
        out.append(torch.softmax(s, -1) @ v[..., lo:end, :])
    return torch.cat(out, -2)


def blend_by_parts(q, k, v, b, w_near, w_far):
    near = banded_by_chunks_of_keys(q, k, v, b)
    far = blend_by_cumsum(q, k, v, b, 0.0, 1.0)
    return w_near * near + w_far * far


def rank_by_ratio(a, eps):
    s = torch.linalg.svdvals(a)
    return int((s / s.max() > eps).sum())


def banded_numpy_dense(q, k, v, b):  # right values, but the dense n × n scores in NumPy
    n = q.shape[-2]
    s = q.numpy() @ k.numpy().swapaxes(-1, -2) / math.sqrt(q.shape[-1])
    i = np.arange(n)
    s = np.where((i[:, None] - i >= 0) & (i[:, None] - i < b), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    return torch.from_numpy((w / w.sum(-1, keepdims=True)) @ v.numpy()).to(q.dtype)


@correct_answers(
    (check_causal_band_mask, mask_by_broadcast),
    (check_banded_softmax, banded_by_chunks_of_keys),
    (check_fmm_blend, blend_by_parts),
    (check_numerical_rank, rank_by_ratio),
    (check_causal_band_mask, mask_by_loops),
    (check_causal_band_mask, mask_by_triangles),
    (check_banded_softmax, banded_by_loop),
    (check_banded_softmax, banded_by_unfold),
    (check_fmm_blend, blend_by_matrices),
    (check_fmm_blend, blend_by_cumsum),
    (check_numerical_rank, rank_by_svd),
    (check_numerical_rank, rank_by_numpy),
)
def test_correct_answers_pass(checker, student):
    assert_passes(checker, student)


# --- wrong answers, each with its message --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (lambda n, b: (torch.arange(n).unsqueeze(1) - torch.arange(n)).abs() < b, ["both ways", "n=5, b=2"]),
        (lambda n, b: mask_by_loops(n, b + 1), ["b + 1 keys"]),
        (lambda n, b: mask_by_loops(n, b + 1) & ~torch.eye(n, dtype=torch.bool), ["must see itself"]),
        (lambda n, b: mask_by_loops(n, b).T, ["transpose"]),
        (lambda n, b: ~mask_by_loops(n, b), ["may attend"]),
        (lambda n, b: mask_by_loops(n, b).int(), ["bool"]),
        (lambda n, b: mask_by_loops(n, min(b, n - 1)), ["n=4, b=4"]),
    ],
)
def test_band_mask_rejects(student, fragments):
    assert_wrong(check_causal_band_mask.verdict(student), *fragments)


def dense_band(q, k, v, b):
    n = q.shape[-2]
    i = torch.arange(n)
    band = (i.unsqueeze(1) - i >= 0) & (i.unsqueeze(1) - i < b)
    s = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~band, -math.inf)
    return torch.softmax(s, -1) @ v


def naive_exp(q, k, v, b):
    n = q.shape[-2]
    i = torch.arange(n)
    band = ((i.unsqueeze(1) - i >= 0) & (i.unsqueeze(1) - i < b)).to(q.dtype)
    e = torch.exp(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])) * band
    return (e @ v) / e.sum(-1, keepdim=True)


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (lambda q, k, v, b: dense_band(q * math.sqrt(q.shape[-1]), k, v, b), ["√d_k"]),
        (lambda q, k, v, b: banded_by_loop(q, k, v, b + 1), ["b + 1 keys"]),
        (lambda q, k, v, b: F.scaled_dot_product_attention(q, k, v, is_causal=True), ["full causal attention"]),
        (dense_band, ["MiB", "n × n", "unfold"]),
        (naive_exp, ["NaN", "large scores"]),
        (lambda q, k, v, b: banded_by_unfold(q, k, v, b)[..., :-1, :], ["shape"]),
    ],
)
def test_banded_softmax_rejects(student, fragments):
    assert_wrong(check_banded_softmax.verdict(student), *fragments)


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (lambda q, k, v, b, wn, wf: wn * banded_by_unfold(q, k, v, b) + wf * _one_map(q, k, v), ["two terms"]),
        (lambda q, k, v, b, wn, wf: blend_by_matrices(q, k, v, b, wf, wn), ["swapped"]),
        (
            lambda q, k, v, b, wn, wf: blend_by_matrices(q, k, v, b, wn, wf) / (wn + wf),
            ["Do not divide"],
        ),
        (lambda q, k, v, b, wn, wf: blend_by_matrices(q, k, v, b + 1, wn, wf), ["wrong values", "w_near"]),
    ],
)
def test_blend_rejects(student, fragments):
    assert_wrong(check_fmm_blend.verdict(student), *fragments)


def _one_map(q, k, v):
    a = torch.tril((F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-2, -1))
    return (a @ v) / (a.sum(-1, keepdim=True) + 1e-6)


def test_blend_rejects_a_shared_denominator_and_a_non_causal_far_field():
    def shared(q, k, v, b, wn, wf):
        sim = sum(f(q) @ f(k).transpose(-2, -1) for f in (lambda x: F.elu(x) + 1, lambda x: F.elu(-x) + 1)).tril()
        return wn * banded_by_unfold(q, k, v, b) + wf * (sim @ v) / sim.sum(-1, keepdim=True)

    def non_causal(q, k, v, b, wn, wf):
        out = wn * banded_by_unfold(q, k, v, b)
        for phi in (lambda x: F.elu(x) + 1, lambda x: F.elu(-x) + 1):
            a = phi(q) @ phi(k).transpose(-2, -1)
            out = out + wf * (a @ v) / a.sum(-1, keepdim=True)
        return out

    assert_wrong(check_fmm_blend.verdict(shared), "its own denominator")
    assert_wrong(check_fmm_blend.verdict(non_causal), "causal too")


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (lambda a, eps: int((torch.linalg.svdvals(a) > eps).sum()), ["relative", "1e-4"]),
        (lambda a, eps: int((torch.linalg.eigvals(a).abs() > eps).sum()) if a.shape[0] == a.shape[1] else 0, []),
        (
            lambda a, eps: (
                int((torch.linalg.eigvals(a).abs() > eps * torch.linalg.eigvals(a).abs().max()).sum())
                if a.shape[0] == a.shape[1]
                else rank_by_svd(a, eps)
            ),
            ["eigenvalues"],
        ),
        (lambda a, eps: int(torch.linalg.matrix_rank(a)), ["matrix_rank"]),
        (lambda a, eps: rank_by_svd(a, eps) - 1, ["σ_1 itself"]),
        (lambda a, eps: float(rank_by_svd(a, eps)) + 0.5, ["wrong"]),
    ],
)
def test_numerical_rank_rejects(student, fragments):
    assert_wrong(check_numerical_rank.verdict(student), *fragments)


# --- issue 17 -----------------------------------------------------------------------------------------------------


def blend_near_wrong(q, k, v, b, w_near, w_far):  # a near field with b + 1 keys, the far field right
    return w_near * banded_by_unfold(q, k, v, b + 1) + w_far * blend_by_cumsum(q, k, v, b, 0.0, 1.0)


def blend_far_wrong(q, k, v, b, w_near, w_far):  # the near field right, the far field 1 % too large
    return blend_by_cumsum(q, k, v, b, w_near, 0.0) + w_far * 1.01 * blend_by_cumsum(q, k, v, b, 0.0, 1.0)


@pytest.mark.parametrize(
    ("checker", "student", "fragments"),
    [
        (check_banded_softmax, banded_numpy_dense, ["MiB", "NumPy arrays count too"]),
        (check_fmm_blend, blend_near_wrong, ["w_far = 0: banded attention alone"]),
        (check_fmm_blend, blend_far_wrong, ["w_near = 0: the far field alone"]),
        (
            check_fmm_blend,
            lambda q, k, v, b, wn, wf: fmm.fmmformer_attention(q, k, v, causal=True, bandwidth=b, w_near=wn, w_far=wf),
            ["write this one yourself"],
        ),  # fmt: skip
        (check_causal_band_mask, lambda n, b: ba.band_mask(n, n, b, causal=True), ["write this one yourself"]),
        (check_numerical_rank, lambda a, eps: la.numerical_rank(a, rtol=eps), ["write this one yourself"]),
        (
            check_banded_softmax,
            lambda q, k, v, b: ba.banded_attention(q, k, v, causal=True, bandwidth=b),
            ["write this one yourself"],
        ),  # fmt: skip
    ],
)
def test_issue_17_gaps_are_closed(checker, student, fragments):
    assert_wrong(checker.verdict(student), *fragments)
