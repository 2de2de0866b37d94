"""Checkers for the chapter *Linear attention*.

=========================================  =============================================================
checker                                    what the student writes
=========================================  =============================================================
``check_linear_attention``                 ``linear_attention(q, k, v) -> (..., n_q, d_v)``: non-causal
                                           linear attention by associativity, φ = elu + 1, eps = 1e-6
``check_linear_attention_step``            ``linear_attention_step(q, k, v, s, z) -> (y, s, z)``: one
                                           token of causal linear attention as an RNN
``check_linear_attention_rnn``             ``linear_attention_rnn(q, k, v, s, z) -> (y, s, z)``: causal
                                           linear attention as an RNN, token by token from a given
                                           state (generation), the state O(d_k d_v)
``check_causal_linear_attention_chunked``  ``causal_linear_attention_chunked(q, k, v, chunk_size)``:
                                           blocks of queries, quadratic inside a block, the running
                                           state between blocks
=========================================  =============================================================

The first two are checked in ``companion.exercises.linear_attention_forms`` (with the inputs and the memory
measure the others share) and re-exported here.
"""

from __future__ import annotations

import torch

from .. import linear_attention as ref
from .checking import (
    Checker,
    Mismatch,
    call,
    case,
    compare,
    expect,
    expect_memory,
    show,
)
from .linear_attention_forms import (
    _LINEAR_FORMS,
    EPS,
    _long_inputs,
    _randn,
    _square_bytes,
    check_linear_attention,
    check_linear_attention_step,
    phi,
)

__all__ = [
    "check_linear_attention",
    "check_linear_attention_step",
    "check_linear_attention_rnn",
    "check_causal_linear_attention_chunked",
]

# ----- the RNN: generating token by token -------------------------------------------------------------------


def _reference_rnn(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, s: torch.Tensor, z: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The companion's recurrence from the state (s, z): its step, token after token."""
    state, ys = ref.LinearAttentionState(s, z), []
    for i in range(q.shape[-2]):
        y, state = ref.linear_attention.step(
            q[..., i, :], k[..., i, :], v[..., i, :], state
        )
        ys.append(y)
    return torch.stack(ys, dim=-2), state.s, state.z


def _rnn_mistake(
    *,
    read_first: bool = False,
    normalise: bool = True,
    phi_v: bool = False,
    causal: bool = True,
    eps_inside: bool = True,
    use_state: bool = True,
    return_state: bool = True,
    phi_k: bool = True,
):
    """The recurrence with one thing wrong (each flag off its right value names one mistake)."""

    def rnn(q, k, v, s, z):  # noqa: ANN001, ANN202
        fq, fk = phi(q), (phi(k) if phi_k else k)
        fv = phi(v) if phi_v else v
        s0, z0 = (s, z) if use_state else (torch.zeros_like(s), torch.zeros_like(z))
        if not causal:  # every query reads the state after all the tokens of the call
            s0 = s0 + fk.transpose(-2, -1) @ fv
            z0 = z0 + fk.sum(-2)
        state_s, state_z, ys = s0, z0, []
        for i in range(q.shape[-2]):
            new_s = (
                state_s + fk[..., i, :, None] * fv[..., i, None, :]
                if causal
                else state_s
            )
            new_z = state_z + fk[..., i, :] if causal else state_z
            read_s, read_z = (state_s, state_z) if read_first else (new_s, new_z)
            num = (fq[..., i, :, None] * read_s).sum(-2)
            den = (fq[..., i, :] * read_z).sum(-1, keepdim=True)
            ys.append(
                num
                if not normalise
                else num / (den + EPS)
                if eps_inside
                else num / den + EPS
            )
            state_s, state_z = new_s, new_z
        out_s, out_z = (state_s, state_z) if return_state else (s, z)
        return torch.stack(ys, dim=-2), out_s, out_z

    return rnn


def _rnn_case(
    shape: tuple[int, ...], t: int, prompt: int, d_k: int, d_v: int, why: str, **kw
) -> object:
    """t new tokens after a prompt of ``prompt`` tokens (whose state is passed in), inputs of shape (*shape, t, d)."""
    dtype, q_scale = kw.get("dtype", torch.float32), kw.get("q_shift", 0.0)
    keys, values = (
        _randn(*shape, prompt, d_k).to(dtype),
        _randn(*shape, prompt, d_v).to(dtype),
    )
    state = ref.linear_attention.state(keys, values)
    q = (_randn(*shape, t, d_k) + q_scale).to(dtype)
    k, v = _randn(*shape, t, d_k).to(dtype), _randn(*shape, t, d_v).to(dtype)
    return case(q, k, v, state.s, state.z, why=why)


def _rnn_cases() -> list:
    return [
        _rnn_case((), 5, 0, 3, 2, "the first 5 tokens: S, z = 0, d_k = 3, d_v = 2"),
        _rnn_case(
            (), 3, 4, 3, 2, "3 more tokens after a prompt of 4 (its S, z passed in)"
        ),
        _rnn_case((), 1, 6, 4, 3, "one token: a single step of generation"),
        _rnn_case((2, 3), 4, 5, 4, 2, "a batch of 2 with 3 heads, after a prompt of 5"),
        _rnn_case((), 6, 3, 3, 4, "float64", dtype=torch.float64),
        _rnn_case(
            (),
            4,
            2,
            3,
            2,
            "queries near -30: φ(q) ≈ 1e-13, so eps decides",
            dtype=torch.float64,
            q_shift=-30.0,
        ),
    ]


_RNN_FORMS = [
    "companion.linear_attention.LinearAttention.step",
    "companion.linear_attention.LinearAttention.state",
    *_LINEAR_FORMS,
]

_rnn_values = compare(
    "linear_attention_rnn",
    _reference_rnn,
    _rnn_cases,
    mistakes=[
        (
            _rnn_mistake(read_first=True),
            "Token i attends to itself: add φ(k_i)v_iᵀ to the state first, then read it with φ(q_i).",
        ),
        (
            _rnn_mistake(normalise=False),
            "Divide by the normaliser φ(q_i)ᵀz_i + eps, with z_i = z + Σ φ(k_j).",
        ),
        (
            _rnn_mistake(phi_v=True),
            "The values go into the state as they are: S ← S + φ(k)vᵀ, with no φ on v.",
        ),
        (
            _rnn_mistake(causal=False),
            "That is not causal: token i may read only the tokens up to i, so update the state and read it one "
            "token at a time.",
        ),
        (
            _rnn_mistake(eps_inside=False),
            "Add eps to the denominator itself, y = φ(q)ᵀS / (φ(q)ᵀz + eps): it keeps a tiny φ(q)ᵀz from "
            "blowing the output up.",
        ),
        (
            _rnn_mistake(use_state=False),
            "Start from the state (s, z) you are given, not from zeros: it holds the tokens before these.",
        ),
        (
            _rnn_mistake(return_state=False),
            "Return the state after the last token, not the one you were given.",
        ),
        (
            _rnn_mistake(phi_k=False),
            "Apply φ to each key before adding it to the state: S ← S + φ(k)vᵀ, z ← z + φ(k).",
        ),
    ],
    hint="For each token i in order: S ← S + φ(k_i)v_iᵀ, z ← z + φ(k_i), then y_i = φ(q_i)ᵀS / (φ(q_i)ᵀz + 1e-6).",
    what="(y, s, z)",
    withhold=_RNN_FORMS,
    same_dtype=True,
)

RNN_N, RNN_D = 128, 256
"""The size of the RNN's memory check, n tokens with d_k = d_v = d: the states of every position, n × d × d
numbers, take 32 MiB in float32 there, 128 times one state, and the check allows a quarter of it, 8 MiB. Four right
answers of different styles peaked at 0.9–1.3 MiB in a test process; the cumulative-sum form at 64 MiB. The states
of every position in a buffer taken before the call (a grader counts what an answer holds only beyond 8 MiB) are
still charged 24 MiB. (Few tokens: memory is traced op by op, slowly.)"""

MASK_B, MASK_T = 2048, 64
"""The second memory check: MASK_B sequences of MASK_T tokens with d_k = d_v = 1, so that the masked t × t form
(every query against every key of the call, the lower triangle kept) holds MASK_B matrices of t × t scores, 32 MiB
in float32, where a recurrence holds a few (MASK_B, t, 1) tensors. Measured in a test process: the masked form
peaked at 65 MiB, four right answers of different styles (one of them two tokens at a time) at 1.0–2.2 MiB; the
check allows a quarter of the scores, 8 MiB, and the scores in a buffer taken before the call (counted by a grader
only beyond 8 MiB) are still charged 24 MiB. (A batch, not a long sequence: memory is traced op by op, and the loop
is over t.)"""


def _expect_gradients_flow(
    student, reference, args: tuple, label: str, what: str
) -> None:  # noqa: ANN001
    """The student's outputs carry gradient; where their graph is at hand (the student's code ran in this
    process), the gradients of a random projection of them with respect to every input are the reference's."""
    mine = [a.detach().clone().requires_grad_(True) for a in args]
    ours = [a.detach().clone().requires_grad_(True) for a in args]
    got = call(student, *mine, input=label)
    expected = reference(*ours)
    got_list = list(got) if isinstance(got, (tuple, list)) else [got]
    expected_list = list(expected) if isinstance(expected, tuple) else [expected]
    expect(got, expected, input=label, what=what, atol=1e-4, rtol=1e-3)
    if not all(isinstance(g, torch.Tensor) and g.requires_grad for g in got_list):
        raise Mismatch(
            f"{what} carries no gradient: a model trains through this attention, so the output must stay "
            "connected to q, k and v.",
            input=label,
            got=", ".join(show(g, 60).split(chr(10))[0] for g in got_list),
            hint="Leave out .detach(), .item(), .numpy(), torch.no_grad() and torch.tensor(...) of results: build "
            "every output with torch operations on the inputs.",
        )
    if any(g.grad_fn is None for g in got_list):
        # computed elsewhere (a grader's sandbox): the values came back, the graph stayed there
        return
    weights = [torch.randn(e.shape, dtype=e.dtype) for e in expected_list]
    sum(
        ((g * w).sum() for g, w in zip(got_list, weights, strict=True)), torch.zeros(())
    ).backward()
    sum(
        ((e * w).sum() for e, w in zip(expected_list, weights, strict=True)),
        torch.zeros(()),
    ).backward()
    for name, a, b in zip("qkvsz", mine, ours, strict=False):
        grad = a.grad if a.grad is not None else torch.zeros_like(a)
        expect(
            grad,
            b.grad,
            input=label + f"; then backward through a random weighting of {what}",
            what=f"The gradient with respect to {name}",
            hint="The values are right but the graph is not: compute the output with differentiable operations "
            "only (no in-place writes into tensors that need gradients).",
            atol=1e-4,
            rtol=1e-3,
        )


def _rnn_checks(student) -> tuple[int, int]:
    count, hidden = _rnn_values._cases(student)
    q, k, v = (_randn(2, 7, d) for d in (3, 3, 2))
    s, z = _randn(2, 3, 2).abs(), _randn(2, 3).abs()
    _expect_gradients_flow(
        student,
        _reference_rnn,
        (q, k, v, s, z),
        "2 heads, 7 tokens after a prompt, inputs requiring grad",
        "(y, s, z)",
    )
    g = torch.Generator().manual_seed(4)
    long = [torch.randn(RNN_N, RNN_D, generator=g) for _ in range(3)]
    zeros = (torch.zeros(RNN_D, RNN_D), torch.zeros(RNN_D))
    dense = RNN_N * RNN_D * RNN_D * 4
    expect_memory(
        student,
        _reference_rnn,
        (*long, *zeros),
        input=f"q, k, v of shape ({RNN_N}, {RNN_D}), s and z zero",
        limit=dense // 4,
        problem=f"the states of all {RNN_N} positions, n × d_k × d_v numbers, take {dense / 2**20:.0f} MiB",
        hint="Keep one state (S, z) and update it token by token: an RNN's memory does not grow with the "
        "sequence (only the outputs do).",
        what="(y, s, z)",
    )
    g = torch.Generator().manual_seed(5)
    batch = [torch.randn(MASK_B, MASK_T, 1, generator=g) for _ in range(3)]
    scores = MASK_B * MASK_T * MASK_T * 4
    expect_memory(
        student,
        _reference_rnn,
        (*batch, torch.zeros(MASK_B, 1, 1), torch.zeros(MASK_B, 1)),
        input=f"q, k, v of shape ({MASK_B}, {MASK_T}, 1): {MASK_B} sequences of {MASK_T} tokens, s and z zero",
        limit=scores // 4,
        problem=f"that is the size of the masked t × t form: {MASK_B} matrices of {MASK_T} × {MASK_T} scores take "
        f"{scores / 2**20:.0f} MiB, where one state per sequence and the outputs take a few hundred KiB",
        hint="Go through the tokens one at a time: add token i to the state (S, z), then read it with q_i. The "
        "masked matrix φ(Q)φ(K)ᵀ of all the tokens is the training form, not the recurrence.",
        what="(y, s, z)",
    )
    return count + 3, hidden


check_linear_attention_rnn = Checker(
    "linear_attention_rnn", _rnn_checks, kind="function", withhold=_RNN_FORMS
)


# ----- the chunked causal form ------------------------------------------------------------------------------


def _reference_chunked(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk_size: int
) -> torch.Tensor:
    return ref.LinearAttention(chunk_size=chunk_size).chunked(q, k, v)


def _blockwise(mask_within: str, carry: bool, inclusive: bool = False):  # noqa: ANN202
    """A chunked form with one thing wrong: the mask inside a block, the carried state, or where it starts."""

    def chunked(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk_size: int
    ) -> torch.Tensor:
        phi_q, phi_k = phi(q), phi(k)
        n, d_v = q.shape[-2], v.shape[-1]
        s = v.new_zeros(*q.shape[:-2], phi_k.shape[-1], d_v)
        z = v.new_zeros(*q.shape[:-2], phi_k.shape[-1])
        out = []
        for start in range(0, n, chunk_size):
            fq, fk, vc = (
                t[..., start : start + chunk_size, :] for t in (phi_q, phi_k, v)
            )
            a = fq @ fk.transpose(-2, -1)
            a = {"tril": a.tril(), "strict": a.tril(-1), "none": a}[mask_within]
            s_new, z_new = s + fk.transpose(-2, -1) @ vc, z + fk.sum(-2)
            s_read, z_read = (s_new, z_new) if inclusive else (s, z)
            out.append(
                (a @ vc + fq @ s_read)
                / (a.sum(-1, keepdim=True) + fq @ z_read.unsqueeze(-1) + EPS)
            )
            if carry:
                s, z = s_new, z_new
        return torch.cat(out, dim=-2)

    return chunked


def _chunked_cases() -> list:
    return [
        case(
            _randn(8, 3),
            _randn(8, 3),
            _randn(8, 2),
            4,
            why="n = 8 tokens in 2 blocks of 4",
        ),
        case(
            _randn(10, 4),
            _randn(10, 4),
            _randn(10, 3),
            4,
            why="n = 10: the last block has 2 tokens",
        ),
        case(
            _randn(2, 3, 12, 4),
            _randn(2, 3, 12, 4),
            _randn(2, 3, 12, 5),
            5,
            why="batch 2, 3 heads, blocks of 5",
        ),
        case(
            _randn(6, 3),
            _randn(6, 3),
            _randn(6, 2),
            1,
            why="blocks of one token: the recurrent form",
        ),
        case(
            _randn(6, 3),
            _randn(6, 3),
            _randn(6, 2),
            16,
            why="one block longer than the sequence",
        ),
        case(
            _randn(9, 3).double(),
            _randn(9, 3).double(),
            _randn(9, 2).double(),
            3,
            why="float64",
        ),
    ]


_chunked_values = compare(
    "causal_linear_attention_chunked",
    _reference_chunked,
    _chunked_cases,
    mistakes=[
        (
            _blockwise("none", carry=True),
            "Inside a block, query i may only see keys j <= i: keep the lower triangle.",
        ),
        (
            _blockwise("strict", carry=True),
            "Query i also sees its own key j = i: keep the diagonal (tril(), not tril(-1)).",
        ),
        (
            _blockwise("tril", carry=False),
            "Carry the state from block to block: the queries of a block also see every earlier block.",
        ),
        (
            _blockwise("tril", carry=True, inclusive=True),
            "The state a block reads must hold the earlier blocks only; its own keys are in the triangle already.",
        ),
        (
            lambda q, k, v, c: ref.linear_attention(q, k, v),
            "That is non-causal linear attention: query i must not see the keys after it.",
        ),
    ],
    hint="For each block: (tril(φQ_c φK_cᵀ) V_c + φQ_c S) / (tril(φQ_c φK_cᵀ) 1 + φQ_c z + eps), then "
    "S += φK_cᵀ V_c, z += φK_cᵀ 1.",
    what="The output",
)


BLOCKS_ALLOWED = 4
"""The chunked form's memory limit at chunk size c: a quarter of one n × n float32 matrix plus BLOCKS_ALLOWED
c × c matrices in float64, so that an answer computing its blocks in float64 (a triangle, its mask, a copy) passes.
Measured in a test process at n = CHUNKED_N = 4096, c = 512: right answers peaked at 3.4 to 7.0 MiB (7.0 computing
in float64), the companion's at 16.4 MiB, the masked n × n form at 128 MiB or more; the limit is 24 MiB there, 16.0
MiB at c = 16."""

CHUNKED_N = 4096
"""The sequence length of the chunked form's memory check: one n × n float32 matrix is 64 MiB there, so that the
matrix in a buffer taken before the call (a grader counts what an answer holds only beyond 8 MiB) is still
charged 56 MiB, more than twice the 24 MiB allowed at c = 512 (at n = 2048 a 16 MiB buffer was charged 8 MiB
against 12 MiB allowed)."""


def _chunked_memory(student) -> tuple[int, int]:
    """Blocks of ``chunk_size`` queries: never the n × n matrix, and a c × c block for every c asked for."""
    count, hidden = _chunked_values._cases(student)
    n, square = CHUNKED_N, _square_bytes(CHUNKED_N)
    q, k, v = _long_inputs(3, n=n)
    peaks = {}
    for c in (16, 512):
        blocks = BLOCKS_ALLOWED * c * c * 8
        limit = square // 4 + blocks
        peaks[c] = expect_memory(
            student,
            _reference_chunked,
            (q, k, v, c),
            input=f"q, k, v of shape ({n}, 8), chunk_size={c}",
            limit=limit,
            problem=f"the check allows {limit / 2**20:.1f} MiB, room for {BLOCKS_ALLOWED} blocks of {c} × {c} in "
            f"float64 ({blocks / 2**20:.2f} MiB) and {square / 4 / 2**20:.0f} MiB more, a quarter of one "
            f"n × n float32 matrix ({square / 2**20:.0f} MiB at n = {n}): more than that takes "
            "a matrix of the size of the whole n × n one",
            hint="Work block by block: only a chunk_size × chunk_size matrix inside a block, and the running "
            "state (S, z) between blocks.",
        )
    block = 512 * 512 * 4
    if peaks[512] - peaks[16] < block // 2:
        raise Mismatch(
            "Your function does not seem to use blocks of chunk_size queries: its memory hardly changes from "
            f"chunk_size=16 ({peaks[16] / 2**20:.2f} MiB) to chunk_size=512 ({peaks[512] / 2**20:.2f} MiB).",
            input=f"q, k, v of shape ({n}, 8), chunk_size=16 and 512",
            expected=f"at least {block / 2 / 2**20:.1f} MiB more at chunk_size=512 (one 512 × 512 block is "
            f"{block / 2**20:.0f} MiB)",
            got=f"{(peaks[512] - peaks[16]) / 2**20:.2f} MiB more",
            hint="Split the n queries into blocks of chunk_size, each with its own chunk_size × chunk_size matrix.",
        )
    return count + 2, hidden


check_causal_linear_attention_chunked = Checker(
    "causal_linear_attention_chunked",
    _chunked_memory,
    kind="function",
    withhold=_LINEAR_FORMS,
)
