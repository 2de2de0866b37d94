"""The linear-attention checkers accept independently written right answers, reject typical wrong ones with the
message that names the mistake, report a stub as not attempted, and turn crashes into a 'wrong' verdict."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from checker_testing import assert_passes, assert_wrong, correct_answers, stub

from companion import linear_attention as la
from companion.exercises.linear_attention import (
    check_causal_linear_attention_chunked,
    check_linear_attention,
    check_linear_attention_rnn,
    check_linear_attention_step,
)

CHECKERS = [
    check_linear_attention,
    check_linear_attention_step,
    check_linear_attention_rnn,
    check_causal_linear_attention_chunked,
]


@pytest.mark.parametrize("checker", CHECKERS)
def test_stub_is_not_attempted(checker):
    verdict = checker.verdict(stub)
    assert verdict.status == "not attempted" and str(verdict).startswith(
        "NOT ATTEMPTED YET"
    )


@pytest.mark.parametrize("checker", CHECKERS)
def test_a_crash_is_a_wrong_verdict(checker):
    def crashes(*args):
        return 1 / 0

    assert_wrong(checker.verdict(crashes), "raised ZeroDivisionError")


# --- non-causal linear attention ------------------------------------------------------------------------------


def linear_by_einsum(q, k, v):
    phi_q, phi_k = la.elu_plus_one(q), la.elu_plus_one(k)
    s = torch.einsum("...jr,...jd->...rd", phi_k, v)
    z = phi_k.sum(-2)
    return torch.einsum("...ir,...rd->...id", phi_q, s) / (
        torch.einsum("...ir,...r->...i", phi_q, z)[..., None] + 1e-6
    )


def linear_by_loops(q, k, v):
    """Query by query on the flattened leading dimensions, with the state summed once: the definition."""
    lead = q.shape[:-2]
    qs, ks, vs = (t.reshape(-1, *t.shape[-2:]) for t in (q, k, v))
    out = torch.zeros(qs.shape[0], qs.shape[1], vs.shape[-1], dtype=q.dtype)
    for b in range(qs.shape[0]):
        fk = torch.nn.functional.elu(ks[b]) + 1
        s, z = fk.T @ vs[b], fk.sum(0)
        for i in range(qs.shape[1]):
            fq = torch.nn.functional.elu(qs[b, i]) + 1
            out[b, i] = (fq @ s) / (fq @ z + 1e-6)
    return out.reshape(*lead, qs.shape[1], vs.shape[-1])


# right values, but the n × n kernel: rejected by the memory check
def linear_quadratic_order(q, k, v):
    kernel = la.elu_plus_one(q) @ la.elu_plus_one(k).transpose(-2, -1)
    return (kernel @ v) / (kernel.sum(-1, keepdim=True) + 1e-6)


def linear_numpy_square(q, k, v):  # the n × n kernel built in NumPy
    fq, fk = (
        np.where(t.numpy() > 0, t.numpy() + 1, np.exp(np.minimum(t.numpy(), 0)))
        for t in (q, k)
    )
    kernel = fq @ np.swapaxes(fk, -1, -2)
    return torch.from_numpy(
        (kernel @ v.numpy()) / (kernel.sum(-1, keepdims=True) + 1e-6)
    )


def linear_by_where(q, k, v):
    """elu + 1 written with torch.where, the (r, d_v) state by matmul, the normaliser as a column."""
    phi_q, phi_k = (torch.where(t > 0, t + 1, torch.exp(t)) for t in (q, k))
    state = phi_k.transpose(-2, -1) @ v
    normaliser = phi_q @ phi_k.sum(dim=-2, keepdim=True).transpose(-2, -1)
    return (phi_q @ state) / (normaliser + 1e-6)


@correct_answers(
    (check_linear_attention, linear_by_einsum),
    (check_linear_attention, linear_by_loops),
    (check_linear_attention, linear_by_where),
)
def test_linear_attention_right_answers(checker, student):
    assert_passes(checker, student)


def _phi_q_only(q, k, v):
    phi_q = la.elu_plus_one(q)
    return (phi_q @ (k.transpose(-2, -1) @ v)) / (
        phi_q @ k.sum(-2).unsqueeze(-1) + 1e-6
    )


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (
            lambda q, k, v: (
                la.elu_plus_one(q) @ (la.elu_plus_one(k).transpose(-2, -1) @ v)
            ),
            ["Divide by the normaliser", "n = 4 tokens"],
        ),
        (
            lambda q, k, v: (
                (q @ (k.transpose(-2, -1) @ v)) / (q @ k.sum(-2).unsqueeze(-1) + 1e-6)
            ),
            ["Apply the feature map"],
        ),
        (
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
            ["That is softmax attention"],
        ),
        (
            lambda q, k, v: linear_by_einsum(q / q.shape[-1] ** 0.5, k, v),
            ["no 1/√d_k"],
        ),
        (
            lambda q, k, v: (
                lambda a: (a @ v) / (a.sum(-2, keepdim=True).transpose(-2, -1) + 1e-6)
            )(la.elu_plus_one(q) @ la.elu_plus_one(k).transpose(-2, -1)),
            ["sums its kernel values over the keys"],
        ),
        (_phi_q_only, ["wrong values"]),
        (lambda q, k, v: linear_by_einsum(q, k, v)[..., :1, :], ["shape"]),
    ],
)
def test_linear_attention_wrong_answers(student, fragments):
    assert_wrong(check_linear_attention.verdict(student), *fragments)


# --- one recurrent step ---------------------------------------------------------------------------------------


def step_by_einsum(q, k, v, s, z):
    phi_q, phi_k = la.elu_plus_one(q), la.elu_plus_one(k)
    s = s + torch.einsum("...r,...d->...rd", phi_k, v)
    z = z + phi_k
    return (
        torch.einsum("...r,...rd->...d", phi_q, s)
        / ((phi_q * z).sum(-1, keepdim=True) + 1e-6),
        s,
        z,
    )


def step_by_library(q, k, v, s, z):
    y, state = la.linear_attention.step(q, k, v, la.LinearAttentionState(s, z))
    return y, state.s, state.z


def step_as_list(q, k, v, s, z):
    phi_q, phi_k = la.elu_plus_one(q), la.elu_plus_one(k)
    s_new = s + phi_k[..., :, None] * v[..., None, :]
    z_new = z + phi_k
    y = (phi_q[..., None, :] @ s_new)[..., 0, :] / (
        (phi_q * z_new).sum(-1, keepdim=True) + 1e-6
    )
    return [y, s_new, z_new]


def step_by_outer(q, k, v, s, z):
    fk, fq = (
        torch.where(k > 0, k + 1, k.clamp(max=0).exp()),
        torch.where(q > 0, q + 1, q.clamp(max=0).exp()),
    )
    s = s + torch.einsum("...i,...j->...ij", fk, v)
    z = z + fk
    return (
        torch.einsum("...i,...ij->...j", fq, s)
        / ((fq * z).sum(-1, keepdim=True) + 1e-6),
        s,
        z,
    )


@correct_answers(
    (check_linear_attention_step, step_by_einsum),
    (check_linear_attention_step, step_by_outer),
    (check_linear_attention_step, step_as_list),
)
def test_step_right_answers(checker, student):
    assert_passes(checker, student)


def _read_first(q, k, v, s, z):
    phi_q, phi_k = la.elu_plus_one(q), la.elu_plus_one(k)
    y = torch.einsum("...r,...rd->...d", phi_q, s) / (
        (phi_q * z).sum(-1, keepdim=True) + 1e-6
    )
    return y, s + torch.einsum("...r,...d->...rd", phi_k, v), z + phi_k


def _in_place(q, k, v, s, z):
    phi_q, phi_k = la.elu_plus_one(q), la.elu_plus_one(k)
    s += torch.einsum("...r,...d->...rd", phi_k, v)
    z += phi_k
    return (
        torch.einsum("...r,...rd->...d", phi_q, s)
        / ((phi_q * z).sum(-1, keepdim=True) + 1e-6),
        s,
        z,
    )


def _z_stays(q, k, v, s, z):
    y, s_new, _ = step_by_einsum(q, k, v, s, z)
    phi_q = la.elu_plus_one(q)
    return (
        torch.einsum("...r,...rd->...d", phi_q, s_new)
        / ((phi_q * z).sum(-1, keepdim=True) + 1e-6),
        s_new,
        z,
    )


def _raw_key(q, k, v, s, z):
    phi_q = la.elu_plus_one(q)
    s, z = s + torch.einsum("...r,...d->...rd", k, v), z + k
    return (
        torch.einsum("...r,...rd->...d", phi_q, s)
        / ((phi_q * z).sum(-1, keepdim=True) + 1e-6),
        s,
        z,
    )


def _no_normaliser(q, k, v, s, z):
    phi_q, phi_k = la.elu_plus_one(q), la.elu_plus_one(k)
    s, z = s + torch.einsum("...r,...d->...rd", phi_k, v), z + phi_k
    return torch.einsum("...r,...rd->...d", phi_q, s), s, z


def _transposed_outer(q, k, v, s, z):
    phi_q, phi_k = la.elu_plus_one(q), la.elu_plus_one(k)
    # (d_v, d_k): the wrong shape when d_k != d_v
    s = s + torch.einsum("...d,...r->...dr", v, phi_k)
    return phi_q, s, z + phi_k


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (_read_first, ["then read it", "S, z = 0"]),
        (_z_stays, ["z ← z + φ(k)"]),
        (_raw_key, ["Apply φ to the key"]),
        (_no_normaliser, ["Divide by φ(q)ᵀz + eps"]),
        (_in_place, ["in place"]),
        (_transposed_outer, ["raised RuntimeError", "the first token"]),
        (lambda q, k, v, s, z: step_by_einsum(q, k, v, s, z)[0], ["(y, s, z)"]),
    ],
)
def test_step_wrong_answers(student, fragments):
    assert_wrong(check_linear_attention_step.verdict(student), *fragments)


# --- the chunked causal form ----------------------------------------------------------------------------------


def chunked_by_blocks(q, k, v, chunk_size):
    fq, fk = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
    s = v.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1])
    z = v.new_zeros(*q.shape[:-2], q.shape[-1])
    out = []
    for a, b, c in zip(
        fq.split(chunk_size, -2),
        fk.split(chunk_size, -2),
        v.split(chunk_size, -2),
        strict=True,
    ):
        w = (a @ b.transpose(-2, -1)).tril()
        out.append(
            (w @ c + a @ s) / (w.sum(-1, keepdim=True) + (a @ z.unsqueeze(-1)) + 1e-6)
        )
        s, z = s + b.transpose(-2, -1) @ c, z + b.sum(-2)
    return torch.cat(out, -2)


def chunked_by_cumsum_of_blocks(q, k, v, chunk_size):
    """The states before each block from a cumulative sum over blocks, then each block on its own."""
    fq, fk = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
    blocks = list(
        zip(
            fq.split(chunk_size, -2),
            fk.split(chunk_size, -2),
            v.split(chunk_size, -2),
            strict=True,
        )
    )
    outs, s, z = [], 0, 0
    for a, b, c in blocks:
        w = torch.einsum("...id,...jd->...ij", a, b).tril()
        num = w @ c + (a @ s if torch.is_tensor(s) else 0)
        den = (
            w.sum(-1)
            + ((a * z.unsqueeze(-2)).sum(-1) if torch.is_tensor(z) else 0)
            + 1e-6
        )
        outs.append(num / den.unsqueeze(-1))
        s = s + torch.einsum("...jd,...je->...de", b, c)
        z = z + b.sum(-2)
    return torch.cat(outs, -2)


def chunked_by_recurrence(q, k, v, chunk_size):
    """Ignores the blocks: the recurrence token by token gives the same numbers."""
    fq, fk = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
    s = v.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1])
    z = v.new_zeros(*q.shape[:-2], q.shape[-1])
    out = []
    for t in range(q.shape[-2]):
        s = s + fk[..., t, :, None] * v[..., t, None, :]
        z = z + fk[..., t, :]
        out.append(
            (fq[..., t, None, :] @ s).squeeze(-2)
            / ((fq[..., t, :] * z).sum(-1, keepdim=True) + 1e-6)
        )
    return torch.stack(out, -2)


def chunked_with_masks(q, k, v, chunk_size):
    """Block by block with an explicit boolean mask and the state from a prefix sum over all earlier keys."""
    phi_q, phi_k = la.elu_plus_one(q), la.elu_plus_one(k)
    n = q.shape[-2]
    outs = []
    for start in range(0, n, chunk_size):
        end = min(start + chunk_size, n)
        before_k, before_v = phi_k[..., :start, :], v[..., :start, :]
        s = before_k.transpose(-2, -1) @ before_v
        z = before_k.sum(-2)
        fq, fk, vb = (
            phi_q[..., start:end, :],
            phi_k[..., start:end, :],
            v[..., start:end, :],
        )
        keep = torch.ones(end - start, end - start, dtype=torch.bool).tril()
        a = (fq @ fk.transpose(-2, -1)).masked_fill(~keep, 0.0)
        outs.append(
            (a @ vb + fq @ s)
            / (
                a.sum(-1, keepdim=True)
                + (fq * z.unsqueeze(-2)).sum(-1, keepdim=True)
                + 1e-6
            )
        )
    return torch.cat(outs, dim=-2)


def chunked_in_float64(q, k, v, chunk_size):
    """Blocks computed in float64 (issue 30: once over the memory limit, with a message about an n × n matrix)."""
    fq, fk, v64 = la.elu_plus_one(q.double()), la.elu_plus_one(k.double()), v.double()
    s, z, out = (
        v64.new_zeros(*v.shape[:-2], q.shape[-1], v.shape[-1]),
        v64.new_zeros(*v.shape[:-2], q.shape[-1]),
        [],
    )
    for start in range(0, q.shape[-2], chunk_size):
        b = slice(start, start + chunk_size)
        a = torch.tril(fq[..., b, :] @ fk[..., b, :].transpose(-2, -1))
        num = a @ v64[..., b, :] + fq[..., b, :] @ s
        out.append(
            num / (a.sum(-1, keepdim=True) + fq[..., b, :] @ z[..., None] + 1e-6)
        )
        s, z = (
            s + fk[..., b, :].transpose(-2, -1) @ v64[..., b, :],
            z + fk[..., b, :].sum(-2),
        )
    return torch.cat(out, dim=-2).to(v.dtype)


@correct_answers(
    (check_causal_linear_attention_chunked, chunked_in_float64),
    (check_causal_linear_attention_chunked, chunked_by_blocks),
    (check_causal_linear_attention_chunked, chunked_by_cumsum_of_blocks),
    (check_causal_linear_attention_chunked, chunked_with_masks),
)
def test_chunked_right_answers(checker, student):
    assert_passes(checker, student)


def _mutate(**changes):
    """chunked_with_masks with one thing changed: the triangle, the state, or its start."""

    def chunked(q, k, v, chunk_size):
        phi_q, phi_k = la.elu_plus_one(q), la.elu_plus_one(k)
        n = q.shape[-2]
        outs = []
        for start in range(0, n, chunk_size):
            end = min(start + chunk_size, n)
            upto = end if changes.get("inclusive") else start
            first = start if changes.get("no_carry") else 0
            s = phi_k[..., first:upto, :].transpose(-2, -1) @ v[..., first:upto, :]
            z = phi_k[..., first:upto, :].sum(-2)
            fq, fk, vb = (
                phi_q[..., start:end, :],
                phi_k[..., start:end, :],
                v[..., start:end, :],
            )
            a = fq @ fk.transpose(-2, -1)
            if changes.get("triangle", "tril") == "tril":
                a = a.tril()
            elif changes["triangle"] == "strict":
                a = a.tril(-1)
            outs.append(
                (a @ vb + fq @ s)
                / (a.sum(-1, keepdim=True) + fq @ z.unsqueeze(-1) + 1e-6)
            )
        return torch.cat(outs, dim=-2)

    return chunked


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (_mutate(triangle="none"), ["keep the lower triangle", "2 blocks of 4"]),
        (_mutate(triangle="strict"), ["keep the diagonal"]),
        (_mutate(no_carry=True), ["Carry the state"]),
        (_mutate(inclusive=True), ["earlier blocks only"]),
        (lambda q, k, v, c: linear_by_einsum(q, k, v), ["non-causal linear attention"]),
        (lambda q, k, v, c: chunked_by_blocks(q, k, v, c)[..., :-1, :], ["shape"]),
    ],
)
def test_chunked_wrong_answers(student, fragments):
    assert_wrong(check_causal_linear_attention_chunked.verdict(student), *fragments)


def test_the_named_mistakes_are_really_wrong():
    """Each mistake of a checker differs from the reference on the checker's own cases (else it could not fire)."""
    q, k, v = (torch.randn(8, 3) for _ in range(3))
    right = la.LinearAttention(chunk_size=4).chunked(q, k, v)
    for wrong in (
        _mutate(triangle="none"),
        _mutate(triangle="strict"),
        _mutate(no_carry=True),
        _mutate(inclusive=True),
    ):
        assert (wrong(q, k, v, 4) - right).abs().max() > 1e-3


# --- issue 17: each class of gap, with answers written to slip through it -------------------------------------


# ignores chunk_size: the masked n × n matrix
def chunked_masked_square(q, k, v, chunk_size):
    a = (la.elu_plus_one(q) @ la.elu_plus_one(k).transpose(-2, -1)).tril()
    return (a @ v) / (a.sum(-1, keepdim=True) + 1e-6)


# the n × n matrix once, its triangle kept in place
def chunked_masked_square_in_place(q, k, v, chunk_size):
    a = la.elu_plus_one(q) @ la.elu_plus_one(k).transpose(-2, -1)
    a.tril_()
    return (a @ v) / (a.sum(-1, keepdim=True) + 1e-6)


def rnn_masked_square(q, k, v, s, z):
    """Right values from the masked t × t form of the call's tokens plus the state: not a recurrence (issue 30)."""
    fq, fk = la.elu_plus_one(q), la.elu_plus_one(k)
    a = torch.tril(fq @ fk.transpose(-2, -1))
    num, den = a @ v + fq @ s, a.sum(-1, keepdim=True) + fq @ z[..., None]
    return num / (den + 1e-6), s + fk.transpose(-2, -1) @ v, z + fk.sum(-2)


def rnn_by_cumsum_of_scores(q, k, v, s, z):
    """The t × t scores again, their triangle by a mask multiplied in."""
    fq, fk = la.elu_plus_one(q), la.elu_plus_one(k)
    t = q.shape[-2]
    a = (fq @ fk.transpose(-2, -1)) * torch.ones(t, t).tril()
    y = (a @ v + fq @ s) / (a.sum(-1, keepdim=True) + fq @ z[..., None] + 1e-6)
    return y, s + fk.transpose(-2, -1) @ v, z + fk.sum(-2)


@pytest.mark.parametrize(
    ("checker", "student", "fragments"),
    [
        (check_linear_attention_step, step_by_library, ["write this one yourself"]),
        (check_linear_attention, linear_quadratic_order, ["MiB", "n × n matrix"]),
        (
            check_linear_attention,
            linear_numpy_square,
            ["MiB", "NumPy arrays count too"],
        ),
        (
            check_linear_attention,
            lambda q, k, v: la.linear_attention(q, k, v),
            ["write this one yourself"],
        ),
        (
            check_linear_attention,
            lambda q, k, v: la.linear_attention.quadratic(q, k, v),
            ["write this one yourself"],
        ),
        (
            check_causal_linear_attention_chunked,
            chunked_masked_square,
            ["MiB", "n × n"],
        ),
        (
            check_causal_linear_attention_chunked,
            chunked_masked_square_in_place,
            ["MiB", "n × n"],
        ),
        (
            check_linear_attention_rnn,
            rnn_masked_square,
            ["MiB", "masked t × t form", "one at a time"],
        ),
        (
            check_linear_attention_rnn,
            rnn_by_cumsum_of_scores,
            ["MiB", "masked t × t form"],
        ),
        (
            check_causal_linear_attention_chunked,
            chunked_by_recurrence,
            ["does not seem to use blocks"],
        ),
        (
            check_causal_linear_attention_chunked,
            lambda q, k, v, c: la.LinearAttention(chunk_size=c).chunked(q, k, v),
            ["write this one yourself"],
        ),
    ],
)
def test_issue_17_gaps_are_closed(checker, student, fragments):
    assert_wrong(checker.verdict(student), *fragments)


# --- the RNN: generating token by token from a given state ----------------------------------------------------


def rnn_by_outer_products(q, k, v, s, z):
    fq, fk = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
    outputs = []
    for i in range(q.shape[-2]):
        s = s + fk[..., i, :, None] * v[..., i, None, :]
        z = z + fk[..., i, :]
        outputs.append(
            (fq[..., i, None, :] @ s)[..., 0, :]
            / ((fq[..., i, :] * z).sum(-1, keepdim=True) + 1e-6)
        )
    return torch.stack(outputs, dim=-2), s, z


def rnn_by_einsum_and_unbind(q, k, v, s, z):
    phi = lambda x: torch.where(x > 0, x + 1, torch.exp(x.clamp(max=0)))  # noqa: E731
    ys = []
    for qi, ki, vi in zip(
        phi(q).unbind(-2), phi(k).unbind(-2), v.unbind(-2), strict=True
    ):
        s = s + torch.einsum("...a,...b->...ab", ki, vi)
        z = z + ki
        ys.append(
            torch.einsum("...a,...ab->...b", qi, s)
            / (torch.einsum("...a,...a->...", qi, z)[..., None] + 1e-6)
        )
    return torch.stack(ys, -2), s, z


def _my_step(q, k, v, s, z):
    """A student's own step (the exercise before), called in a loop."""
    fq, fk = la.elu_plus_one(q), la.elu_plus_one(k)
    s, z = s + torch.einsum("...r,...d->...rd", fk, v), z + fk
    return (
        torch.einsum("...r,...rd->...d", fq, s)
        / ((fq * z).sum(-1, keepdim=True) + 1e-6),
        s,
        z,
    )


def rnn_with_my_step(q, k, v, s, z):
    ys = []
    for i in range(q.shape[-2]):
        y, s, z = _my_step(q[..., i, :], k[..., i, :], v[..., i, :], s, z)
        ys.append(y)
    return torch.stack(ys, dim=-2), s, z


def rnn_in_blocks_of_two(q, k, v, s, z):
    """Two tokens at a time, a 2 × 2 triangle inside: still one state of size d_k × d_v between blocks."""
    fq, fk = la.elu_plus_one(q), la.elu_plus_one(k)
    out = []
    for start in range(0, q.shape[-2], 2):
        b = slice(start, start + 2)
        a = (fq[..., b, :] @ fk[..., b, :].transpose(-2, -1)).tril()
        num = a @ v[..., b, :] + fq[..., b, :] @ s
        den = a.sum(-1, keepdim=True) + fq[..., b, :] @ z[..., None]
        out.append(num / (den + 1e-6))
        s, z = (
            s + fk[..., b, :].transpose(-2, -1) @ v[..., b, :],
            z + fk[..., b, :].sum(-2),
        )
    return torch.cat(out, dim=-2), s, z


@correct_answers(
    (check_linear_attention_rnn, rnn_by_outer_products),
    (check_linear_attention_rnn, rnn_by_einsum_and_unbind),
    (check_linear_attention_rnn, rnn_with_my_step),
    (check_linear_attention_rnn, rnn_in_blocks_of_two),
)
def test_rnn_right_answers(checker, student):
    assert_passes(checker, student)


def test_the_rnn_reference_is_the_companions_causal_attention():
    """The checker's reference, run from the state of a prompt, gives the last rows of every causal form of the
    companion on the whole sequence, and the state of the whole sequence."""
    from companion.exercises.linear_attention import _reference_rnn

    q, k, v = (torch.randn(2, 3, 11, 4, dtype=torch.float64) for _ in range(3))
    prompt = la.linear_attention.state(k[..., :5, :], v[..., :5, :])
    y, s, z = _reference_rnn(
        q[..., 5:, :], k[..., 5:, :], v[..., 5:, :], prompt.s, prompt.z
    )
    whole = la.linear_attention.state(k, v)
    for form in (
        la.linear_attention.cumsum,
        la.linear_attention.recurrent,
    ):
        torch.testing.assert_close(y, form(q, k, v)[..., 5:, :])
    torch.testing.assert_close(
        y, la.LinearAttention(chunk_size=3).chunked(q, k, v)[..., 5:, :]
    )
    torch.testing.assert_close((s, z), (whole.s, whole.z))


def _rnn_wrong(**changes):
    from companion.exercises.linear_attention import _rnn_mistake

    return _rnn_mistake(**changes)


def _rnn_read_first(q, k, v, s, z):  # written independently of the checker's mistakes
    fq, fk = la.elu_plus_one(q), la.elu_plus_one(k)
    ys = []
    for i in range(q.shape[-2]):
        ys.append(
            (fq[..., i, None, :] @ s)[..., 0, :]
            / ((fq[..., i, :] * z).sum(-1, keepdim=True) + 1e-6)
        )
        s, z = s + fk[..., i, :, None] * v[..., i, None, :], z + fk[..., i, :]
    return torch.stack(ys, -2), s, z


def _rnn_no_eps(q, k, v, s, z):
    fq, fk = la.elu_plus_one(q), la.elu_plus_one(k)
    ys = []
    for i in range(q.shape[-2]):
        s, z = s + fk[..., i, :, None] * v[..., i, None, :], z + fk[..., i, :]
        ys.append(
            (fq[..., i, None, :] @ s)[..., 0, :]
            / (fq[..., i, :] * z).sum(-1, keepdim=True)
        )
    return torch.stack(ys, -2), s, z


def _rnn_eps_on_z(q, k, v, s, z):
    fq, fk = la.elu_plus_one(q), la.elu_plus_one(k)
    ys = []
    for i in range(q.shape[-2]):
        s, z = s + fk[..., i, :, None] * v[..., i, None, :], z + fk[..., i, :]
        ys.append(
            (fq[..., i, None, :] @ s)[..., 0, :]
            / (fq[..., i, :] * (z + 1e-6)).sum(-1, keepdim=True)
        )
    return torch.stack(ys, -2), s, z


# non-causal: all the call's keys before any query
def _rnn_whole_sequence_first(q, k, v, s, z):
    fq, fk = la.elu_plus_one(q), la.elu_plus_one(k)
    s, z = s + fk.transpose(-2, -1) @ v, z + fk.sum(-2)
    return (fq @ s) / (fq @ z[..., None] + 1e-6), s, z


def _rnn_from_zeros(q, k, v, s, z):
    return rnn_by_outer_products(q, k, v, torch.zeros_like(s), torch.zeros_like(z))


# right values, but the states of every position at once
def _rnn_cumsum(q, k, v, s, z):
    fq, fk = la.elu_plus_one(q), la.elu_plus_one(k)
    states = s[..., None, :, :] + (fk[..., :, None] * v[..., None, :]).cumsum(-3)
    norms = z[..., None, :] + fk.cumsum(-2)
    y = (fq[..., None, :] @ states)[..., 0, :] / (
        (fq * norms).sum(-1, keepdim=True) + 1e-6
    )
    return y, states[..., -1, :, :], norms[..., -1, :]


def _rnn_in_place(q, k, v, s, z):
    fq, fk = la.elu_plus_one(q), la.elu_plus_one(k)
    ys = []
    for i in range(q.shape[-2]):
        s += fk[..., i, :, None] * v[..., i, None, :]
        z += fk[..., i, :]
        ys.append(
            (fq[..., i, None, :] @ s)[..., 0, :]
            / ((fq[..., i, :] * z).sum(-1, keepdim=True) + 1e-6)
        )
    return torch.stack(ys, -2), s, z


def _rnn_float32(q, k, v, s, z):
    return tuple(t.float() for t in rnn_by_outer_products(q, k, v, s, z))


def _rnn_detached(q, k, v, s, z):
    return tuple(t.detach() for t in rnn_by_outer_products(q, k, v, s, z))


def _rnn_outputs_only(q, k, v, s, z):
    return rnn_by_outer_products(q, k, v, s, z)[0]


def _rnn_no_normaliser(q, k, v, s, z):
    fq, fk = la.elu_plus_one(q), la.elu_plus_one(k)
    ys = []
    for i in range(q.shape[-2]):
        s, z = s + fk[..., i, :, None] * v[..., i, None, :], z + fk[..., i, :]
        ys.append((fq[..., i, None, :] @ s)[..., 0, :])
    return torch.stack(ys, -2), s, z


def _rnn_phi_on_v(q, k, v, s, z):
    return rnn_by_outer_products(q, k, la.elu_plus_one(v), s, z)


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (_rnn_read_first, ["attends to itself", "the first 5 tokens"]),
        (_rnn_no_normaliser, ["Divide by the normaliser"]),
        (_rnn_phi_on_v, ["no φ on v"]),
        (_rnn_whole_sequence_first, ["not causal", "the first 5 tokens"]),
        (_rnn_no_eps, ["Add eps to the denominator itself", "eps decides"]),
        (_rnn_eps_on_z, ["Add eps to the denominator itself", "eps decides"]),
        (
            _rnn_from_zeros,
            ["Start from the state (s, z) you are given", "after a prompt of 4"],
        ),
        (_rnn_wrong(return_state=False), ["Return the state after the last token"]),
        (_rnn_wrong(phi_k=False), ["Apply φ to each key"]),
        (_rnn_cumsum, ["MiB", "the states of all 128 positions"]),
        (_rnn_in_place, ["in place"]),
        (_rnn_float32, ["wrong dtype", "torch.float64"]),
        (_rnn_detached, ["carries no gradient"]),
        (_rnn_outputs_only, ["(y, s, z)"]),
        (
            lambda q, k, v, s, z: la.linear_attention.recurrent(q, k, v),
            ["write this one yourself"],
        ),
    ],
)
def test_rnn_wrong_answers(student, fragments):
    assert_wrong(check_linear_attention_rnn.verdict(student), *fragments)


def test_rnn_gradients_are_compared_where_the_graph_is_at_hand():
    """Right values with a wrong graph (a gradient that skips the keys) fail; a result computed elsewhere (a
    leaf that requires grad, as a grader's sandbox returns it) is judged by its values."""

    def keys_detached(q, k, v, s, z):
        return rnn_by_outer_products(q, k.detach(), v, s, z)

    assert_wrong(
        check_linear_attention_rnn.verdict(keys_detached), "gradient with respect to k"
    )

    def from_elsewhere(q, k, v, s, z):
        return tuple(
            t.detach().requires_grad_(True)
            for t in rnn_by_outer_products(q, k, v, s, z)
        )

    assert_passes(check_linear_attention_rnn, from_elsewhere)


def test_the_rnn_mistakes_are_named_only_when_every_case_agrees():
    """An answer right on one case (one token: no mistake of order can show) and off elsewhere by an unrelated
    error is not given the off-by-one hint."""

    def late_scale(q, k, v, s, z):
        y, s2, z2 = rnn_by_outer_products(q, k, v, s, z)
        return (y if q.shape[-2] == 1 else 1.5 * y), s2, z2

    verdict = check_linear_attention_rnn.verdict(late_scale)
    assert verdict.status == "wrong" and "attends to itself" not in str(verdict)
