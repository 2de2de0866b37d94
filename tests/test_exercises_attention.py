"""The chapter-4 checkers accept the reference answers and reject plausible wrong ones, naming the mistake."""

import math

import pytest
import torch
from checker_testing import (
    assert_passes,
    assert_wrong,
    correct_answers,
    raises_boom,
    stub,
    unwithheld,
)
from torch import nn

from companion import attention as ref
from companion.exercises.attention import (
    check_causal_mask,
    check_merge_heads,
    check_multi_head_attention,
    check_scaled_dot_product_attention,
    check_split_heads,
    check_weightless_self_attention,
)

# the companion's functions, as other objects than those the checkers withhold
ref = unwithheld(ref)


def attention_written_out(q, k, v, mask=None):
    """softmax(q kᵀ / √d_k) v written out: the companion's own version calls a helper that the checker withholds"""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


ALL = [
    (check_weightless_self_attention, lambda x: ref.weightless_self_attention(x)),
    (check_scaled_dot_product_attention, attention_written_out),
    (check_causal_mask, lambda n: torch.ones(n, n, dtype=torch.bool).tril()),
    (check_split_heads, ref.split_heads),
    (check_merge_heads, ref.merge_heads),
]


@pytest.mark.parametrize(("checker", "reference"), ALL)
def test_reference_passes_stub_is_not_attempted_and_garbage_is_wrong(
    checker, reference, capsys
):
    verdict = checker.verdict(reference)
    assert verdict.passed, str(verdict)
    checker(reference)
    assert capsys.readouterr().out.startswith("PASSED")
    assert checker.verdict(stub).status == "not attempted"
    assert_wrong(checker.verdict(raises_boom), "raised RuntimeError: boom")
    assert_wrong(checker.verdict(lambda *a, **k: None), "should be a torch.Tensor")
    dtype = torch.bool if checker is check_causal_mask else torch.float32
    assert_wrong(
        checker.verdict(lambda *a, **k: torch.zeros(1, 2, 3, dtype=dtype)),
        "wrong shape",
    )
    assert_wrong(checker.verdict(lambda *a, **k: reference(*a, **k) * float("nan")))
    if checker is not check_causal_mask:
        assert_wrong(
            checker.verdict(lambda *a, **k: reference(*a, **k) * float("nan")),
            "NaN",
            "division by zero",
        )
    assert_wrong(checker.verdict(42), "Expected a function or class")


# --- weightless self-attention ------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (
            lambda x: torch.softmax(x @ x.transpose(-2, -1), dim=-2) @ x,
            ["wrong values", "dim=-1"],
        ),
        (
            lambda x: (
                torch.softmax(x @ x.transpose(-2, -1) / math.sqrt(x.shape[-1]), dim=-1)
                @ x
            ),
            ["no division by √d"],
        ),
        (lambda x: (x @ x.transpose(-2, -1)) @ x, ["go through a softmax"]),
        (
            lambda x: torch.softmax(x @ x.transpose(-2, -1), dim=-1),
            ["wrong shape", "the output is y = w x"],
        ),
        (
            lambda x: torch.softmax(x @ x.T, dim=-1) @ x,
            ["x=tensor of shape (2, 4, 3)", "raised RuntimeError"],
        ),  # .T breaks on batches
    ],
)
def test_weightless_rejects(student, fragments):
    assert_wrong(check_weightless_self_attention.verdict(student), *fragments)


# --- scaled dot-product attention ---------------------------------------------------------------------------


def sdpa_variant(scale="sqrt", dim=-1, mask_mode="right", return_weights=False):
    def student(q, k, v, mask=None):
        d = q.shape[-1]
        s = (
            q
            @ k.transpose(-2, -1)
            * {"sqrt": 1 / math.sqrt(d), "none": 1.0, "d": 1 / d}[scale]
        )
        if mask is not None and mask_mode != "ignore":
            fill = 0.0 if mask_mode == "zero" else float("-inf")
            s = s.masked_fill(mask if mask_mode == "inverted" else ~mask, fill)
        w = torch.softmax(s, dim=dim)
        return w if return_weights else w @ v

    return student


def test_sdpa_student_version_with_minus_inf_passes():
    assert check_scaled_dot_product_attention.verdict(sdpa_variant()).passed


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (
            sdpa_variant(scale="none"),
            ["Thinking Machines", "Divide the scores by √d_k", "d_k = 64"],
        ),
        (sdpa_variant(scale="d"), ["Divide by √d_k, not by d_k"]),
        (sdpa_variant(dim=-2), ["softmax runs over the keys (dim=-1)"]),
        (sdpa_variant(mask_mode="inverted"), ["a causal mask", "The mask is inverted"]),
        (sdpa_variant(mask_mode="ignore"), ["a causal mask", "The mask was ignored"]),
        (sdpa_variant(mask_mode="zero"), ["a causal mask", "exp(0) = 1"]),
        (
            sdpa_variant(return_weights=True),
            ["wrong shape", "That is the weight matrix"],
        ),
        (
            lambda q, k, v, mask=None: attention_written_out(
                q.float(), k.float(), v.float(), mask
            )[..., :1],
            ["wrong shape", "expected: shape (2, 3)"],
        ),
    ],
)
def test_sdpa_rejects(student, fragments):
    assert_wrong(check_scaled_dot_product_attention.verdict(student), *fragments)


def test_sdpa_naive_softmax_overflows_on_huge_scores():
    def naive(q, k, v, mask=None):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        e = torch.exp(s)
        return e / e.sum(-1, keepdim=True) @ v

    assert_wrong(
        check_scaled_dot_product_attention.verdict(naive),
        "scores as large as 1e4",
        "contains NaN",
    )


# --- causal mask --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (lambda n: torch.ones(n, n, dtype=torch.bool).triu(), ["lower-triangular"]),
        (
            lambda n: torch.ones(n, n, dtype=torch.bool).triu(1),
            ["marks the future", "what may be attended"],
        ),
        (
            lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1),
            ["The diagonal is missing"],
        ),
        (lambda n: torch.ones(n, n, dtype=torch.bool).tril(1), ["Off by one"]),
        (
            lambda n: torch.ones(n, n).tril(),
            ["boolean tensor", "got:      dtype torch.float32"],
        ),
        (
            lambda n: torch.ones(n, n, dtype=torch.bool).tril()[:, : n - 1],
            ["wrong shape"],
        ),
    ],
)
def test_causal_mask_rejects(student, fragments):
    assert_wrong(check_causal_mask.verdict(student), *fragments)


# --- split and merge heads ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (
            lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1),
            ["mixes positions into heads"],
        ),
        (
            lambda x, h: x.reshape(x.shape[0], x.shape[1], -1, h).permute(0, 3, 1, 2),
            ["Wrong split order"],
        ),
        (
            lambda x, h: x.reshape(x.shape[0], x.shape[1], h, -1),
            ["wrong shape", "the heads axis comes before the positions"],
        ),
        (
            lambda x, h: x.reshape(x.shape[0], x.shape[1], h, -1).transpose(1, 3),
            ["wrong shape"],
        ),
    ],
)
def test_split_heads_rejects(student, fragments):
    assert_wrong(check_split_heads.verdict(student), *fragments)


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (
            lambda x: x.reshape(x.shape[0], x.shape[2], -1),
            ["mixes heads into positions"],
        ),
        (
            lambda x: x.permute(0, 2, 3, 1).reshape(x.shape[0], x.shape[2], -1),
            ["Wrong concatenation order"],
        ),
        (lambda x: x.transpose(1, 2), ["wrong shape", "still need concatenating"]),
        (
            lambda x: x.transpose(1, 2).view(x.shape[0], x.shape[2], -1),
            ["raised RuntimeError", "view"],
        ),
    ],
)
def test_merge_heads_rejects(student, fragments):
    assert_wrong(check_merge_heads.verdict(student), *fragments)


# --- multi-head attention -----------------------------------------------------------------------------------


def make_mha(
    scale_by="d_head", out_proj=True, split="right", softmax_dim=-1, return_tuple=False
):
    class StudentMHA(nn.Module):
        def __init__(self, d_model, n_heads):
            super().__init__()
            self.n_heads = n_heads
            self.q_proj = nn.Linear(d_model, d_model)
            self.k_proj = nn.Linear(d_model, d_model)
            self.v_proj = nn.Linear(d_model, d_model)
            self.out_proj = nn.Linear(d_model, d_model)

        def forward(self, query, key, value, mask=None):
            b, n_q, d = query.shape
            h = self.n_heads

            def heads(t):
                if split == "right":
                    return t.reshape(b, t.shape[1], h, d // h).transpose(1, 2)
                return t.reshape(b, h, t.shape[1], d // h)

            q, k, v = (
                heads(self.q_proj(query)),
                heads(self.k_proj(key)),
                heads(self.v_proj(value)),
            )
            scale = (
                math.sqrt(d // h)
                if scale_by == "d_head"
                else math.sqrt(d)
                if scale_by == "d_model"
                else 1.0
            )
            s = q @ k.transpose(-2, -1) / scale
            if mask is not None:
                s = s.masked_fill(~mask, float("-inf"))
            out = torch.softmax(s, dim=softmax_dim) @ v
            merged = (
                out.transpose(1, 2).reshape(b, n_q, d)
                if split == "right"
                else out.reshape(b, n_q, d)
            )
            result = self.out_proj(merged) if out_proj else merged
            return (result, None) if return_tuple else result

    return StudentMHA


def make_stub():
    class Stub(nn.Module):
        def __init__(self, d_model, n_heads):
            super().__init__()
            raise NotImplementedError

        def forward(self, query, key, value, mask=None):
            raise NotImplementedError

    return Stub


def test_mha_reference_and_student_pass():
    reference = lambda d, h: ref.MultiHeadAttention(d, h)
    wrapped = type(
        "Wrapped",
        (ref.MultiHeadAttention,),
        {
            "forward": lambda self, q, k, v, mask=None: ref.MultiHeadAttention.forward(
                self, q, k, mask
            )
        },
    )
    assert check_multi_head_attention.verdict(wrapped).passed
    assert check_multi_head_attention.verdict(make_mha()).passed
    assert check_multi_head_attention.verdict(make_mha(return_tuple=True)).passed
    assert check_multi_head_attention.verdict(make_stub()).status == "not attempted"
    assert_wrong(
        check_multi_head_attention.verdict(reference),
        "Expected the class MultiHeadAttention itself",
    )
    assert_wrong(
        check_multi_head_attention.verdict(reference(8, 2)),
        "Expected the class",
        "not MultiHeadAttention(...)",
    )


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (
            make_mha(scale_by="d_model"),
            ["Scale by √d_head = √(d_model / n_heads) = √4, not √d_model"],
        ),
        (make_mha(scale_by="none"), ["Divide each head's scores by √d_head"]),
        (make_mha(out_proj=False), ["output projection out_proj"]),
        (make_mha(split="reshape"), ["mixes positions"]),
        (make_mha(softmax_dim=-2), ["wrong values", "self-attention"]),
    ],
)
def test_mha_rejects(student, fragments):
    assert_wrong(check_multi_head_attention.verdict(student), *fragments)


def test_mha_structure_problems():
    class NoProjections(nn.Module):
        def __init__(self, d_model, n_heads):
            super().__init__()
            self.qkv = nn.Linear(d_model, 3 * d_model)

        def forward(self, query, key, value, mask=None):
            return query

    class MisIndentedForward(make_mha()):
        # `def forward` indented inside __init__ leaves nn.Module's own
        forward = nn.Module.forward

    class NotAModule:
        def __init__(self, d_model, n_heads):
            pass

    assert_wrong(
        check_multi_head_attention.verdict(NoProjections),
        "attribute `q_proj`",
        "nn.Linear(8, 8)",
    )
    assert_wrong(
        check_multi_head_attention.verdict(MisIndentedForward),
        "has no method `forward`",
    )
    assert_wrong(
        check_multi_head_attention.verdict(NotAModule), "should create an nn.Module"
    )


# --- several independently written correct answers pass -----------------------------------------------------


def weightless_loop(x):
    flat = x.reshape(-1, *x.shape[-2:])
    out = torch.empty_like(flat)
    for b, seq in enumerate(flat):
        for i in range(seq.shape[0]):
            w = torch.softmax(
                torch.stack([seq[i] @ seq[j] for j in range(seq.shape[0])]), 0
            )
            out[b, i] = sum(w[j] * seq[j] for j in range(seq.shape[0]))
    return out.reshape(x.shape)


def weightless_einsum(x):
    x = x.double()  # a float64 answer is fine
    return torch.einsum(
        "...ij,...jd->...id", torch.einsum("...id,...jd->...ij", x, x).softmax(-1), x
    )


def sdpa_einsum(q, k, v, mask=None):
    s = torch.einsum("...id,...jd->...ij", q, k) / q.shape[-1] ** 0.5
    if mask is not None:
        s = torch.where(mask, s, torch.tensor(float("-inf")))
    return torch.einsum("...ij,...jd->...id", s.softmax(-1), v)


def sdpa_by_query(q, k, v, mask=None):
    """One query at a time: its scores over the keys, the forbidden ones dropped, a softmax, a weighted sum."""
    if mask is not None:
        mask = mask.expand(*q.shape[:-1], k.shape[-2])
    out = []
    for i in range(q.shape[-2]):
        s = (q[..., i, None, :] * k).sum(-1) / math.sqrt(q.shape[-1])
        if mask is not None:
            s = torch.where(mask[..., i, :], s, -math.inf)
        out.append((torch.softmax(s, dim=-1)[..., None] * v).sum(-2))
    return torch.stack(out, dim=-2)


def sdpa_stable_by_hand(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(mask.logical_not(), -1e30)
    e = torch.exp(s - s.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)) @ v


def causal_compare(n):
    i = torch.arange(n)
    return i[None, :] <= i[:, None]


def causal_loop(n):
    return torch.tensor(
        [[j <= i for j in range(n)] for i in range(n)], dtype=torch.bool
    ).reshape(n, n)


def split_view_permute(x, n_heads):
    b, n, d = x.shape
    return x.view(b, n, n_heads, d // n_heads).permute(0, 2, 1, 3)


def split_chunks(x, n_heads):
    return torch.stack(x.chunk(n_heads, dim=-1), dim=1)


def merge_cat(x):
    return torch.cat(x.unbind(1), dim=-1)


def merge_flatten(x):
    return x.transpose(1, 2).flatten(2)


def merge_permute(x):
    b, h, n, dh = x.shape
    return x.permute(0, 2, 1, 3).contiguous().view(b, n, h * dh)


@correct_answers(
    (check_weightless_self_attention, weightless_loop),
    (check_weightless_self_attention, weightless_einsum),
    (check_scaled_dot_product_attention, sdpa_einsum),
    (check_scaled_dot_product_attention, sdpa_by_query),
    (check_scaled_dot_product_attention, sdpa_stable_by_hand),
    (check_causal_mask, causal_compare),
    (check_causal_mask, causal_loop),
    (check_split_heads, split_view_permute),
    (check_split_heads, split_chunks),
    (check_merge_heads, merge_cat),
    (check_merge_heads, merge_permute),
    (check_merge_heads, merge_flatten),
)
def test_independent_correct_answers_pass(checker, student):
    assert_passes(checker, student)


def test_scaled_attention_in_place_change_is_named():
    def scaling_q_in_place(q, k, v, mask=None):
        q /= math.sqrt(q.shape[-1])
        s = q @ k.transpose(-2, -1)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        return s.softmax(-1) @ v

    assert_wrong(
        check_scaled_dot_product_attention.verdict(scaling_q_in_place),
        "changed its argument `q` in place",
    )

    assert_wrong(
        check_multi_head_attention.verdict(lambda d, h: "module"),
        "Expected the class MultiHeadAttention",
    )


# ============================================================================================================
# --- SelfAttention module (ex-self-attention-module) --------------------------------------------------------
# ============================================================================================================

from companion.exercises.attention import check_self_attention_module  # noqa: E402


class SelfAttentionPlain(nn.Module):
    def __init__(self, d_in, d_k, d_v):
        super().__init__()
        self.W_Q = nn.Linear(d_in, d_k, bias=False)
        self.W_K = nn.Linear(d_in, d_k, bias=False)
        self.W_V = nn.Linear(d_in, d_v, bias=False)

    def forward(self, x, mask=None):
        q, k, v = self.W_Q(x), self.W_K(x), self.W_V(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


class SelfAttentionFused(nn.Module):
    """Written with PyTorch's fused kernel and explicit weight matrices."""

    def __init__(self, d_in, d_k, d_v):
        super().__init__()
        self.W_Q, self.W_K = (
            nn.Linear(d_in, d_k, bias=False),
            nn.Linear(d_in, d_k, bias=False),
        )
        self.W_V = nn.Linear(d_in, d_v, bias=False)

    def forward(self, x, mask=None):
        q = x @ self.W_Q.weight.T
        k = x @ self.W_K.weight.T
        v = x @ self.W_V.weight.T
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class SelfAttentionEinsum(nn.Module):
    """Index notation, the mask added as -inf, and (output, weights) returned."""

    def __init__(self, d_in, d_k, d_v):
        super().__init__()
        self.d_k = d_k
        for name, width in (("W_Q", d_k), ("W_K", d_k), ("W_V", d_v)):
            setattr(self, name, nn.Linear(d_in, width, bias=False))

    def forward(self, x, mask=None):
        q, k, v = self.W_Q(x), self.W_K(x), self.W_V(x)
        scores = torch.einsum("...id,...jd->...ij", q, k) / self.d_k**0.5
        if mask is not None:
            scores = scores + torch.zeros_like(scores).masked_fill(~mask, -math.inf)
        weights = scores.softmax(-1)
        return torch.einsum("...ij,...jd->...id", weights, v), weights


class SelfAttentionLoop(nn.Module):
    """One query at a time (Algorithm 1), any leading batch shape flattened."""

    def __init__(self, d_in, d_k, d_v):
        super().__init__()
        self.W_Q = nn.Linear(d_in, d_k, bias=False)
        self.W_K = nn.Linear(d_in, d_k, bias=False)
        self.W_V = nn.Linear(d_in, d_v, bias=False)

    def forward(self, x, mask=None):
        q, k, v = self.W_Q(x), self.W_K(x), self.W_V(x)
        n = x.shape[-2]
        rows = []
        for i in range(n):
            s = (k @ q[..., i, :, None])[..., 0] / math.sqrt(k.shape[-1])  # (..., n)
            if mask is not None:
                s = torch.where(mask[i], s, torch.tensor(float("-inf"), dtype=s.dtype))
            rows.append((torch.softmax(s, -1)[..., None] * v).sum(-2))
        return torch.stack(rows, dim=-2)


@pytest.mark.parametrize(
    "student",
    [SelfAttentionPlain, SelfAttentionFused, SelfAttentionEinsum, SelfAttentionLoop],
)
def test_self_attention_module_accepts_independent_correct_answers(student):
    verdict = check_self_attention_module.verdict(student)
    assert verdict.passed, str(verdict)


def _variant(forward=None, bias=False, init=None):
    class Student(SelfAttentionPlain):
        def __init__(self, d_in, d_k, d_v):
            super().__init__(d_in, d_k, d_v)
            if bias:
                self.W_Q = nn.Linear(d_in, d_k)
            if init is not None:
                init(self, d_in, d_k, d_v)

    if forward is not None:
        Student.forward = forward
    return Student


def _scores(self, x, mask, scale=None, dim=-1, keys=None, values=None):
    q = self.W_Q(x)
    k = (keys or self.W_K)(x)
    v = x if values == "x" else self.W_V(x)
    s = (
        q
        @ k.transpose(-2, -1)
        * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    )
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=dim) @ v


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (
            _variant(lambda self, x, mask=None: _scores(self, x, mask, scale=1.0)),
            ["wrong values", "by √d_k"],
        ),
        (
            _variant(lambda self, x, mask=None: _scores(self, x, mask, scale=6**-0.5)),
            ["√d_k = √4", "not by √d_in"],
        ),
        (
            _variant(lambda self, x, mask=None: _scores(self, x, mask, dim=-2)),
            ["over the keys (dim=-1)"],
        ),
        (
            _variant(lambda self, x, mask=None: _scores(self, x, mask, keys=self.W_Q)),
            ["K = x W_Kᵀ"],
        ),
        (
            _variant(lambda self, x, mask=None: _scores(self, x, None)),
            ["mask = causal_mask(5)", "Apply the mask"],
        ),
        (
            _variant(lambda self, x, mask=None: _scores(self, x, mask, values="x")),
            ["not the inputs x"],
        ),
        (_variant(bias=True), ["`W_Q`", "bias=False"]),
        (
            _variant(
                init=lambda self, d_in, d_k, d_v: setattr(
                    self, "W_V", nn.Linear(d_in, d_k, bias=False)
                )
            ),
            ["`W_V`", "nn.Linear(6, 3, bias=False)"],
        ),
        (
            _variant(
                lambda self, x, mask=None: _scores(self, x.detach(), mask).detach()
            ),
            ["No gradient reached W_Q"],
        ),
        (
            _variant(
                lambda self, x, mask=None: (
                    _scores(self, x, mask)
                    + 0 * self.W_V.weight.sum()
                    - _scores(self, x, mask)
                    + _scores(self, x, mask).detach()
                )
            ),
            ["No gradient reached W_Q.weight"],
        ),
        (
            _variant(
                lambda self, x, mask=None: torch.softmax(
                    self.W_Q(x) @ self.W_K(x).transpose(-2, -1) / 2, -1
                )
            ),
            ["wrong shape"],
        ),
    ],
)
def test_self_attention_module_rejects_wrong_answers(student, fragments):
    assert_wrong(check_self_attention_module.verdict(student), *fragments)


def test_self_attention_module_not_attempted_and_not_a_module():
    class Stub(nn.Module):
        def __init__(self, d_in, d_k, d_v):
            super().__init__()
            raise NotImplementedError

        def forward(self, x, mask=None):
            raise NotImplementedError

    assert check_self_attention_module.verdict(Stub).status == "not attempted"
    assert_wrong(
        check_self_attention_module.verdict(lambda d_in, d_k, d_v: 3),
        "Expected the class SelfAttention",
    )
