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
from companion.exercises.fmm_fields import check_best_rank_k, check_near_far_split
from companion.exercises.fmmformer import check_banded_softmax, check_fmm_attention


@pytest.mark.parametrize(
    "checker",
    [
        check_best_rank_k,
        check_near_far_split,
        check_banded_softmax,
        check_fmm_attention,
    ],
)
def test_stub_is_not_attempted(checker):
    verdict = checker.verdict(StubFMMAttention if checker.kind == "class" else stub)
    assert verdict.status == "not attempted" and str(verdict).startswith(
        "NOT ATTEMPTED YET"
    )


class StubFMMAttention(torch.nn.Module):  # the homework's stub
    def __init__(self, bandwidth: int, n_heads: int, n_maps: int = 2):
        super().__init__()
        raise NotImplementedError  # your code here

    def forward(self, q, k, v, mask=None, causal=True):
        raise NotImplementedError  # your code here


# --- independently written right answers ---------------------------------------------------------------------


def banded_by_loop(q, k, v, b):
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    for i in range(q.shape[-2]):
        lo = max(0, i - b + 1)
        s = (
            q[..., i : i + 1, :] @ k[..., lo : i + 1, :].transpose(-2, -1)
        ) / math.sqrt(q.shape[-1])
        out[..., i, :] = (torch.softmax(s, -1) @ v[..., lo : i + 1, :])[..., 0, :]
    return out


def banded_by_unfold(q, k, v, b):
    n, d = q.shape[-2], q.shape[-1]
    kp = F.pad(k, (0, 0, b - 1, 0)).unfold(-2, b, 1)  # (..., n, d, b)
    vp = F.pad(v, (0, 0, b - 1, 0)).unfold(-2, b, 1)  # (..., n, d_v, b)
    s = (q.unsqueeze(-2) @ kp).squeeze(-2) / math.sqrt(d)  # (..., n, b)
    # (n, b): not padding
    real = torch.arange(n).unsqueeze(1) + torch.arange(b) - (b - 1) >= 0
    w = torch.softmax(s.masked_fill(~real, -math.inf), -1)
    return (vp @ w.unsqueeze(-1)).squeeze(-1)


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


def banded_numpy_dense(q, k, v, b):  # right values, but the dense n × n scores in NumPy
    n = q.shape[-2]
    s = q.numpy() @ k.numpy().swapaxes(-1, -2) / math.sqrt(q.shape[-1])
    i = np.arange(n)
    s = np.where((i[:, None] - i >= 0) & (i[:, None] - i < b), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    return torch.from_numpy((w / w.sum(-1, keepdims=True)) @ v.numpy()).to(q.dtype)


def rank_k_by_slices(a, k):
    u, s, vh = torch.linalg.svd(a, full_matrices=False)
    return u[:, :k] @ torch.diag(s[:k]) @ vh[:k, :]


def rank_k_by_eigh(a, k):
    """Project the rows of A on the top k eigenvectors of AᵀA."""
    w, v = torch.linalg.eigh(a.T @ a)  # eigenvalues in ascending order
    top = v[:, torch.argsort(w, descending=True)[:k]]
    return a @ top @ top.T


def rank_k_by_numpy(a, k):
    u, s, vt = np.linalg.svd(a.numpy(), full_matrices=False)
    return torch.from_numpy((u[:, :k] * s[:k]) @ vt[:k])


def rank_k_by_outer_products(a, k):
    u, s, v = torch.svd(a)
    out = torch.zeros_like(a)
    for i in range(k):
        out += s[i] * torch.outer(u[:, i], v[:, i])
    return out


def split_by_offsets(a, b, k):
    offset = torch.arange(a.shape[0])[:, None] - torch.arange(a.shape[1])[None, :]
    near = torch.where((offset >= 0) & (offset < b), a, torch.zeros_like(a))
    return near, rank_k_by_slices(a - near, k)


def split_by_loops(a, b, k):
    near = torch.zeros_like(a)
    for i in range(a.shape[0]):
        for j in range(max(0, i - b + 1), i + 1):
            near[i, j] = a[i, j]
    return near, rank_k_by_numpy(a - near, k)


def split_by_triangles(a, b, k):
    near = torch.tril(a) - torch.tril(a, diagonal=-b)
    return near.clone(), rank_k_by_eigh(a - near, k)


@correct_answers(
    (check_best_rank_k, rank_k_by_slices),
    (check_banded_softmax, banded_by_chunks_of_keys),
    (check_near_far_split, split_by_offsets),
    (check_best_rank_k, rank_k_by_eigh),
    (check_best_rank_k, rank_k_by_numpy),
    (check_best_rank_k, rank_k_by_outer_products),
    (check_banded_softmax, banded_by_loop),
    (check_banded_softmax, banded_by_unfold),
    (check_near_far_split, split_by_loops),
    (check_near_far_split, split_by_triangles),
)
def test_correct_answers_pass(checker, student):
    assert_passes(checker, student)


# --- wrong answers, each with its message --------------------------------------------------------------------


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
        (
            lambda q, k, v, b: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            ["full causal attention"],
        ),
        (dense_band, ["MiB", "n × n", "unfold"]),
        (naive_exp, ["NaN", "large scores"]),
        (lambda q, k, v, b: banded_by_unfold(q, k, v, b)[..., :-1, :], ["shape"]),
    ],
)
def test_banded_softmax_rejects(student, fragments):
    assert_wrong(check_banded_softmax.verdict(student), *fragments)


def rank_k_in_place(a, k):
    a[:] = rank_k_by_slices(a, k)
    return a


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (
            lambda a, k: torch.linalg.svd(a).U[:, :k] @ torch.linalg.svd(a).Vh[:k],
            ["singular value", "k=2"],
        ),
        (
            lambda a, k: (
                rank_k_by_outer_products(a.flip(0, 1), k).flip(0, 1) * 0
                + _smallest(a, k)
            ),
            ["largest"],
        ),
        (lambda a, k: rank_k_by_slices(a, k + 1), ["k + 1"]),
        (
            lambda a, k: (
                rank_k_by_slices(a, k) - rank_k_by_slices(a, k - 1) if k else 0 * a
            ),
            ["k-th alone"],
        ),
        (lambda a, k: a - rank_k_by_numpy(a, k), ["leaves out"]),
        (
            lambda a, k: (
                torch.linalg.svd(a).U[:, :k]
                * torch.linalg.svd(a).S[:k]
                @ torch.linalg.svd(a).Vh[:, :k].T
            ),
            ["rows of vh"],
        ),
        (
            lambda a, k: torch.cat([a[:, :k], torch.zeros_like(a[:, k:])], dim=1),
            ["Eckart–Young", "Σ_{i>k} σ_i²"],
        ),
        (
            lambda a, k: (
                a @ torch.linalg.svd(a).Vh[:k].T,
                torch.linalg.svd(a).Vh[:k].T,
            ),
            ["should be a torch.Tensor"],
        ),
        (rank_k_in_place, ["in place"]),
        (
            lambda a, k: (
                (torch.svd(a).U[:, :k] * torch.svd(a).S[:k]) @ torch.svd(a).V[:k]
            ),
            ["rows of vh"],
        ),
    ],
)
def test_best_rank_k_rejects(student, fragments):
    assert_wrong(check_best_rank_k.verdict(student), *fragments)


def _smallest(a, k):
    u, s, vh = torch.linalg.svd(a, full_matrices=False)
    keep = torch.zeros_like(s)
    if k:
        keep[-k:] = 1
    return (u * (s * keep)) @ vh


def near_both_ways(a, b, k):
    d = (torch.arange(a.shape[0])[:, None] - torch.arange(a.shape[0])).abs()
    near = a * (d < b)
    return near, rank_k_by_slices(a - near, k)


def near_by_loops(a, b, lo, hi):
    """The entries with lo <= i - j <= hi kept."""
    near = torch.zeros_like(a)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            if lo <= i - j <= hi:
                near[i, j] = a[i, j]
    return near


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (near_both_ways, ["both ways", "non-causal"]),
        (
            lambda a, b, k: (
                n := near_by_loops(a, b, 0, b),
                rank_k_by_slices(a - n, k),
            ),
            ["b + 1 keys"],
        ),
        (
            lambda a, b, k: (
                n := near_by_loops(a, b, 1, b),
                rank_k_by_slices(a - n, k),
            ),
            ["diagonal"],
        ),
        (
            lambda a, b, k: (
                n := near_by_loops(a, b, 1 - b, 0),
                rank_k_by_slices(a - n, k),
            ),
            ["transpose"],
        ),
        (
            lambda a, b, k: (near_by_loops(a, b, 0, b - 1), rank_k_by_numpy(a, k)),
            ["not A itself"],
        ),
        (lambda a, b, k: (n := near_by_loops(a, b, 0, b - 1), a - n), ["not all of"]),
        (
            lambda a, b, k: (
                near_by_loops(a, b, 0, b - 1),
                (f := rank_k_by_slices(a, k)) - near_by_loops(f, b, 0, b - 1),
            ),
            ["first"],
        ),
        (
            lambda a, b, k: (
                rank_k_by_slices(a - near_by_loops(a, b, 0, b - 1), k),
                near_by_loops(a, b, 0, b - 1),
            ),
            ["(near, far)"],
        ),
        (
            lambda a, b, k: (
                a - near_by_loops(a, b, 0, b - 1),
                rank_k_by_slices(near_by_loops(a, b, 0, b - 1), k),
            ),
            ["inside the band"],
        ),
        (
            lambda a, b, k: split_by_offsets(a, b, k)[0] + split_by_offsets(a, b, k)[1],
            ["tuple of 2 items"],
        ),
        (lambda a, b, k: split_by_offsets(a, min(b, a.shape[0] - 1), k), ["b=6"]),
    ],
)
def test_near_far_split_rejects(student, fragments):
    assert_wrong(check_near_far_split.verdict(student), *fragments)


# --- issue 17 -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("checker", "student", "fragments"),
    [
        (check_banded_softmax, banded_numpy_dense, ["MiB", "NumPy arrays count too"]),
        (
            check_best_rank_k,
            lambda a, k: la.best_rank_r_approximation(a, k),
            ["write this one yourself"],
        ),
        (
            check_best_rank_k,
            lambda a, k: (lambda left, right: left @ right.T)(
                *la.low_rank_factors(a, k)
            ),
            ["write this one yourself"],
        ),
        (
            check_near_far_split,
            lambda a, b, k: (
                n := ba.band_matrix(a, b, causal=True),
                rank_k_by_slices(a - n, k),
            ),
            ["write this one yourself"],
        ),
        (
            check_banded_softmax,
            lambda q, k, v, b: ba.BandedAttention(b)(q, k, v, causal=True),
            ["write this one yourself"],
        ),  # fmt: skip
    ],
)
def test_issue_17_gaps_are_closed(checker, student, fragments):
    assert_wrong(checker.verdict(student), *fragments)


# --- FMMAttention: the module, alone and in a pre-norm block ----------------------------------------------------
# Right answers in four styles, written independently of the companion's FMMAttention; each wrong one changes one
# thing in a right one.

THETA0 = math.log(math.expm1(0.5))  # softplus(THETA0) = 0.5
MAPS = (lambda x: F.elu(x) + 1, lambda x: F.elu(-x) + 1, lambda x: torch.tanh(x) + 1)


class FMMByParts(torch.nn.Module):
    """The chapter's building blocks: the companion's banded and linear attention (allowed)."""

    def __init__(self, bandwidth, n_heads, n_maps=2):
        super().__init__()
        self.b, self.maps = bandwidth, MAPS[:n_maps]
        self.near_raw = torch.nn.Parameter(torch.full((n_heads, 1, 1), THETA0))
        self.far_raw = torch.nn.Parameter(torch.full((n_heads, 1, 1), THETA0))

    def near(self, q, k, v):
        return ba.BandedAttention(self.b)(q, k, v, causal=True)

    def far(self, q, k, v):
        return sum(
            la.LinearAttention(feature_map=phi)(q, k, v, causal=True)
            for phi in self.maps
        )

    def weights(self):
        return F.softplus(self.near_raw), F.softplus(self.far_raw)

    def forward(self, q, k, v, mask=None, causal=True):
        w_near, w_far = self.weights()
        return w_near * self.near(q, k, v) + w_far * self.far(q, k, v)


class FMMByLoop(torch.nn.Module):
    """Position by position: the band's keys sliced out, the far field as a running state (S_i, z_i)."""

    def __init__(self, bandwidth, n_heads, n_maps=2):
        super().__init__()
        self.bandwidth = bandwidth
        self.n_maps = n_maps
        self.near_raw = torch.nn.Parameter(
            torch.log(torch.expm1(torch.full((n_heads, 1, 1), 0.5)))
        )
        self.far_raw = torch.nn.Parameter(
            torch.log(torch.expm1(torch.full((n_heads, 1, 1), 0.5)))
        )

    def forward(self, q, k, v, mask=None, causal=True):
        n, d = q.shape[-2], q.shape[-1]
        wn = torch.log1p(torch.exp(self.near_raw)).to(q.dtype)
        wf = torch.log1p(torch.exp(self.far_raw)).to(q.dtype)
        states = [(0, 0) for _ in range(self.n_maps)]
        rows = []
        for i in range(n):
            lo = max(0, i - self.bandwidth + 1)
            s = (k[..., lo : i + 1, :] @ q[..., i, :, None])[..., 0] / math.sqrt(d)
            near = (torch.softmax(s, dim=-1)[..., None] * v[..., lo : i + 1, :]).sum(-2)
            far = 0
            for m in range(self.n_maps):
                phi = MAPS[m]
                S, z = states[m]
                S = S + phi(k[..., i, :])[..., :, None] * v[..., i, None, :]
                z = z + phi(k[..., i, :])
                states[m] = (S, z)
                fq = phi(q[..., i, :])
                far = far + (fq[..., None, :] @ S)[..., 0, :] / (
                    (fq * z).sum(-1, keepdim=True) + 1e-6
                )
            rows.append(wn[..., 0, :] * near + wf[..., 0, :] * far)
        return torch.stack(rows, dim=-2)


class FMMByWindows(torch.nn.Module):
    """Vectorised: unfold windows of b keys with a mask of the padding, cumulative sums for the far field."""

    def __init__(self, bandwidth: int, n_heads: int, n_maps: int = 2):
        super().__init__()
        self.bandwidth, self.n_maps = bandwidth, n_maps
        init = math.log(math.exp(0.5) - 1)
        self.register_parameter(
            "near_raw", torch.nn.Parameter(init * torch.ones(n_heads, 1, 1))
        )
        self.register_parameter(
            "far_raw", torch.nn.Parameter(init * torch.ones(n_heads, 1, 1))
        )

    def forward(self, q, k, v, mask=None, causal=True):
        b, n = self.bandwidth, q.shape[-2]
        kw = F.pad(k, (0, 0, b - 1, 0)).unfold(-2, b, 1)  # (..., n, d, b)
        vw = F.pad(v, (0, 0, b - 1, 0)).unfold(-2, b, 1)
        s = torch.einsum("...nd,...ndb->...nb", q, kw) / q.shape[-1] ** 0.5
        real = (torch.arange(n)[:, None] + torch.arange(b)[None, :]) >= b - 1
        s = s.masked_fill(~real, float("-inf"))
        near = torch.einsum("...nb,...ndb->...nd", torch.softmax(s, -1), vw)
        far = torch.zeros_like(near)
        for phi in [
            lambda x: F.elu(x) + 1,
            lambda x: F.elu(-x) + 1,
            lambda x: torch.tanh(x) + 1,
        ][: self.n_maps]:
            fq, fk = phi(q), phi(k)
            S = torch.cumsum(torch.einsum("...nd,...ne->...nde", fk, v), dim=-3)
            z = torch.cumsum(fk, dim=-2)
            den = torch.einsum("...nd,...nd->...n", fq, z)[..., None] + 1e-6
            far = far + torch.einsum("...nd,...nde->...ne", fq, S) / den
        return F.softplus(self.near_raw) * near + F.softplus(self.far_raw) * far


class FMMByChunks(torch.nn.Module):
    """Chunks of c positions with masks inside each: the band against the chunk's reach, the far field as the state
    carried from earlier chunks plus a masked c × c product within the chunk (chunks of 5 positions, of 64 in
    sequences of 256 or more, where the tracker of the memory check makes each small operation slow)."""

    CHUNK, LONG_CHUNK = 5, 64

    def __init__(self, bandwidth, n_heads, n_maps=2):
        super().__init__()
        self.b, self.r = bandwidth, n_maps
        theta = torch.tensor(0.5).expm1().log().item()
        self.near_raw = torch.nn.Parameter(torch.empty(n_heads, 1, 1).fill_(theta))
        self.far_raw = torch.nn.Parameter(torch.empty(n_heads, 1, 1).fill_(theta))

    def forward(self, q, k, v, mask=None, causal=True):
        n, b = q.shape[-2], self.b
        c = self.CHUNK if n < 256 else self.LONG_CHUNK
        maps = [
            lambda x: F.elu(x) + 1,
            lambda x: 1 + F.elu(-x),
            lambda x: 1 + torch.tanh(x),
        ][: self.r]
        state = [
            (
                q.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1]),
                q.new_zeros(*q.shape[:-2], q.shape[-1]),
            )
        ] * self.r
        outs = []
        for start in range(0, n, c):
            end, lo = min(start + c, n), max(0, start - b + 1)
            i = torch.arange(start, end)[:, None]
            j = torch.arange(lo, end)[None, :]
            s = (
                q[..., start:end, :]
                @ k[..., lo:end, :].transpose(-1, -2)
                / math.sqrt(q.shape[-1])
            )
            s = s.masked_fill((i - j < 0) | (i - j >= b), -math.inf)
            near = torch.softmax(s, -1) @ v[..., lo:end, :]
            far = 0
            inside = (
                torch.arange(end - start)[:, None] >= torch.arange(end - start)[None, :]
            )
            for m, phi in enumerate(maps):
                fq, fk, vc = (
                    phi(q[..., start:end, :]),
                    phi(k[..., start:end, :]),
                    v[..., start:end, :],
                )
                S, z = state[m]
                a = (fq @ fk.transpose(-1, -2)) * inside
                num = fq @ S + a @ vc
                den = (fq * z.unsqueeze(-2)).sum(-1, keepdim=True) + a.sum(
                    -1, keepdim=True
                )
                far = far + num / (den + 1e-6)
                state[m] = (S + fk.transpose(-1, -2) @ vc, z + fk.sum(-2))
            outs.append(
                F.softplus(self.near_raw) * near + F.softplus(self.far_raw) * far
            )
        return torch.cat(outs, dim=-2)


@pytest.mark.parametrize("student", [FMMByParts, FMMByWindows, FMMByChunks])
def test_fmm_attention_correct_answers_pass(student):
    assert_passes(check_fmm_attention, student)


def test_fmm_attention_loop_answer_passes(monkeypatch):
    """The loop over positions passes every case; its memory check is left out here only for time (the tracker
    makes each of its 4,096 × 20 small operations slow: minutes on a shared machine); FMMByLoop keeps O(n)
    memory by construction, and the memory check itself is tested on the other answers."""
    from companion.exercises import fmmformer as exercises

    monkeypatch.setattr(exercises, "_fmm_memory", lambda cls: None)
    assert_passes(check_fmm_attention, FMMByLoop)


# --- wrong ones ------------------------------------------------------------------------------------------------


def _dense_far(q, k, v, maps, *, causal=True, skip=0, normalise=True, shared=False):
    terms = [phi(q) @ phi(k).transpose(-2, -1) for phi in maps]
    terms = [a.tril(-skip) if causal else a for a in terms]
    if shared:
        a = sum(terms)
        return (a @ v) / (a.sum(-1, keepdim=True) + 1e-6)
    return sum(
        (a @ v) / (a.sum(-1, keepdim=True) + 1e-6) if normalise else a @ v
        for a in terms
    )


def _wrong(name, **changes):
    """FMMByParts with one method replaced."""
    return type(name, (FMMByParts,), changes)


def _windows_near(q, k, v, b):
    n = q.shape[-2]
    kw = F.pad(k, (0, 0, b - 1, 0)).unfold(-2, b, 1)
    vw = F.pad(v, (0, 0, b - 1, 0)).unfold(-2, b, 1)
    s = torch.einsum("...nd,...ndb->...nb", q, kw) / math.sqrt(q.shape[-1])
    s = s.masked_fill(
        ~((torch.arange(n)[:, None] + torch.arange(b)) >= b - 1), -math.inf
    )
    return torch.einsum("...nb,...ndb->...nd", torch.softmax(s, -1), vw)


# a normaliser over the whole sequence: reads the future
def _global_normaliser_far(self, q, k, v):
    out = 0
    for phi in self.maps:
        fq, fk = phi(q), phi(k)
        num = (
            fq.unsqueeze(-2) @ torch.cumsum(fk.unsqueeze(-1) * v.unsqueeze(-2), -3)
        ).squeeze(-2)
        out = out + num / ((fq * fk.sum(-2, keepdim=True)).sum(-1, keepdim=True) + 1e-6)
    return out


class _FMMInPlaceClamp(FMMByParts):
    def forward(self, q, k, v, mask=None, causal=True):
        with torch.no_grad():  # "keep the raw weights in a sane range"
            self.near_raw.clamp_(-10, 10)
            self.far_raw.clamp_(-10, 10)
        return super().forward(q, k, v)


class _FMMOneWeight(FMMByParts):
    def __init__(self, bandwidth, n_heads, n_maps=2):
        super().__init__(bandwidth, n_heads, n_maps)
        self.near_raw = torch.nn.Parameter(torch.tensor(THETA0))
        self.far_raw = torch.nn.Parameter(torch.tensor(THETA0))


class _FMMRawStart(FMMByParts):
    def __init__(self, bandwidth, n_heads, n_maps=2):
        super().__init__(bandwidth, n_heads, n_maps)
        self.near_raw = torch.nn.Parameter(torch.full((n_heads, 1, 1), 0.5))
        self.far_raw = torch.nn.Parameter(torch.full((n_heads, 1, 1), 0.5))


class _FMMNoKeywords(FMMByParts):
    def forward(self, q, k, v):  # no mask / causal: the block passes them
        return super().forward(q, k, v)


class _FMMCompanion(fmm.FMMAttention):
    def __init__(self, bandwidth, n_heads, n_maps=2):
        super().__init__(bandwidth, fmm.FMM_FEATURE_MAPS[:n_maps], n_heads=n_heads)

    def forward(self, q, k, v, mask=None, causal=True):
        return super().forward(q, k, v, causal=True)


FMM_WRONG = [
    (_wrong("BandPlusOne", near=lambda self, q, k, v: _windows_near(q, k, v, self.b + 1)),
     ["b + 1 keys", "the near field alone"]),
    (_wrong("TwoSidedBand", near=lambda self, q, k, v: ba.BandedAttention(self.b)(q, k, v, causal=False)),
     ["reads keys after the query"]),
    (_wrong("NoScale", near=lambda self, q, k, v: _windows_near(q * math.sqrt(q.shape[-1]), k, v, self.b)),
     ["√d_k"]),
    (_wrong("FarWithoutBand", far=lambda self, q, k, v: _dense_far(q, k, v, self.maps, skip=self.b)),
     ["leaves the band's keys out", "the far field alone"]),
    (_wrong("FarNotCausal", far=lambda self, q, k, v: _dense_far(q, k, v, self.maps, causal=False)),
     ["must be causal too"]),
    (_wrong("RawWeights", weights=lambda self: (self.near_raw, self.far_raw)), ["must be positive"]),
    (_wrong("ExpWeights", weights=lambda self: (self.near_raw.exp(), self.far_raw.exp())), ["not e^θ"]),
    (_wrong("SigmoidWeights", weights=lambda self: (self.near_raw.sigmoid(), self.far_raw.sigmoid())),
     ["not sigmoid(θ)"]),
    (_wrong("NoNormaliser", far=lambda self, q, k, v: _dense_far(q, k, v, self.maps, normalise=False)),
     ["its normaliser"]),
    (_wrong("MapsReversed", far=lambda self, q, k, v: _dense_far(q, k, v, MAPS[::-1][: len(self.maps)])),
     ["order elu(x) + 1, elu(-x) + 1, tanh(x) + 1"]),
    (_wrong("SharedDenominator", far=lambda self, q, k, v: _dense_far(q, k, v, self.maps, shared=True)),
     ["its own denominator"]),
    (_wrong("Swapped", weights=lambda self: (F.softplus(self.far_raw), F.softplus(self.near_raw))), ["swapped"]),
    (_wrong("Divided", forward=lambda self, q, k, v, mask=None, causal=True: FMMByParts.forward(self, q, k, v)
            / (F.softplus(self.near_raw) + F.softplus(self.far_raw))), ["Do not divide"]),
    (_wrong("GlobalNormaliser", far=_global_normaliser_far), ["reads the future", "positions <="]),
    (_wrong("DenseFar", far=lambda self, q, k, v: _dense_far(q, k, v, self.maps)), ["MiB", "n × n", "cumulative sums"]),
    (_wrong("DetachedWeights", weights=lambda self: (F.softplus(self.near_raw.detach()), F.softplus(self.far_raw))),
     ["No gradient reached `near_raw`"]),
    (_FMMInPlaceClamp, ["changed the parameter `far_raw` in place", "-40"]),
    (_FMMOneWeight, ["parameter `near_raw` of shape (2, 1, 1)"]),
    (_FMMRawStart, ["start at 0.5", "-0.4328"]),
    (_FMMNoKeywords, ["TypeError", "CausalBlock(BlockConfig(d_model=8"]),
    (_wrong("Float32", forward=lambda self, q, k, v, mask=None, causal=True: FMMByParts.forward(
        self, q, k, v).float()), ["dtype torch.float64", "dtype torch.float32"]),
    (_FMMCompanion, ["hands the work to the companion"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("student", "fragments"), FMM_WRONG, ids=[s.__name__ for s, _ in FMM_WRONG]
)
def test_fmm_attention_rejects(student, fragments):
    assert_wrong(check_fmm_attention.verdict(student), *fragments)


def test_fmm_attention_names_a_mistake_only_when_every_case_agrees():
    """Two mistakes at once (b + 1 keys and swapped weights): neither hint, the general one."""
    both = _wrong(
        "BandPlusOneSwapped",
        near=lambda self, q, k, v: _windows_near(q, k, v, self.b + 1),
        weights=lambda self: (F.softplus(self.far_raw), F.softplus(self.near_raw)),
    )
    verdict = check_fmm_attention.verdict(both)
    assert_wrong(verdict, "softplus(near_raw) · softmax(band_b")
    for _, hint in exercises_mistakes():
        assert hint not in str(verdict)


def exercises_mistakes():
    from companion.exercises.fmm_attention_cases import FMM_MISTAKES

    return FMM_MISTAKES


def test_fmm_attention_wants_the_class():
    assert_wrong(check_fmm_attention.verdict(FMMByParts(3, 2)), "Pass the class")


def test_fmm_attention_hidden_cases_are_new_on_every_run():
    from companion.exercises import fmmformer as exercises

    with torch.random.fork_rng():
        torch.manual_seed(0)
        first, second = exercises._fmm_trials(), exercises._fmm_trials()
    hidden = [
        (a, b) for a, b in zip(first, second, strict=True) if a.hidden_seed is not None
    ]
    assert len(hidden) == 5 and hidden[0][0].hidden_seed != hidden[0][1].hidden_seed
    assert any(a.case.args[0] != b.case.args[0] for a, b in hidden)
