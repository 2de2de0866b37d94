"""The chapter-5 checkers accept the reference answers and reject plausible wrong ones, naming the mistake."""

import math

import pytest
import torch
import torch.nn.functional as F
from checker_testing import (
    assert_passes,
    assert_wrong,
    correct_answers,
    raises_boom,
    stub,
    unwithheld,
)
from torch import nn

from companion import decoding, positional
from companion.exercises.beam_search import Bigram, check_beam_search
from companion.exercises.transformer import (
    check_label_smoothed_cross_entropy,
    check_layer_norm,
    check_layer_norm_module,
    check_rope,
    check_sinusoidal_positional_encoding,
)
from companion.transformer import LayerNorm

ref = unwithheld(positional)


def good_layer_norm(x, weight, bias, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


ALL = [
    (check_sinusoidal_positional_encoding, ref.sinusoidal_positional_encoding),
    (check_rope, lambda x: rope()(x)),
    (check_layer_norm, good_layer_norm),
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
    assert_wrong(checker.verdict(lambda *a, **k: torch.zeros(1, 2, 3)), "wrong shape")
    assert_wrong(
        checker.verdict(lambda *a, **k: reference(*a, **k) * float("nan")), "NaN"
    )


# --- sinusoidal positional encoding -------------------------------------------------------------------------


def sinusoid(swap=False, exponent="2i", start=0, halves=False):
    def student(n, d):
        pe = torch.zeros(n, d)
        pos = torch.arange(start, start + n, dtype=torch.float32)[:, None]
        for j in range(d):
            i = j // 2
            power = {"2i": 2 * i / d, "i": i / d, "col": j / d}[exponent]
            angle = pos[:, 0] / 10000**power
            even = (j < (d + 1) // 2) if halves else (j % 2 == 0)
            if halves:
                k = j if even else j - (d + 1) // 2
                angle = pos[:, 0] / 10000 ** (2 * k / d)
            use_sin = even != swap
            pe[:, j] = torch.sin(angle) if use_sin else torch.cos(angle)
        return pe

    return student


def test_sinusoid_student_loop_version_passes():
    assert check_sinusoidal_positional_encoding.verdict(sinusoid()).passed


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (sinusoid(swap=True), ["sin and cos are swapped"]),
        (
            sinusoid(exponent="col"),
            ["column 2i+1 uses the exponent of its even neighbour"],
        ),
        (sinusoid(exponent="i"), ["The exponent is 2i/d_model"]),
        (sinusoid(halves=True), ["Interleave"]),
        (sinusoid(start=1), ["Positions start at 0"]),
        (
            lambda n, d: ref.sinusoidal_positional_encoding(n, d).T,
            ["wrong shape", "expected: shape (4, 6)"],
        ),
    ],
)
def test_sinusoid_rejects(student, fragments):
    assert_wrong(check_sinusoidal_positional_encoding.verdict(student), *fragments)


# --- RoPE ---------------------------------------------------------------------------------------------------


def rope(sign=1.0, start=0, exponent="2i", halves=False):
    def student(x):
        n, d = x.shape[-2], x.shape[-1]
        out = x.clone()
        for p in range(n):
            for i in range(d // 2):
                phi = (
                    sign
                    * (start + p)
                    * 10000 ** (-(2 * i if exponent == "2i" else i) / d)
                )
                a, b = (i, i + d // 2) if halves else (2 * i, 2 * i + 1)
                xa, xb = x[..., p, a], x[..., p, b]
                out[..., p, a] = xa * math.cos(phi) - xb * math.sin(phi)
                out[..., p, b] = xa * math.sin(phi) + xb * math.cos(phi)
        return out

    return student


def test_rope_student_loop_version_passes():
    assert check_rope.verdict(rope()).passed


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (rope(sign=-1.0), ["Wrong direction"]),
        (rope(halves=True), ["adjacent pairs"]),
        (rope(start=1), ["Positions start at 0"]),
        (rope(exponent="i"), ["with 2i in the exponent"]),
        (lambda x: x, ["wrong values"]),
        (lambda x: rope()(x)[..., :-1], ["wrong shape"]),
    ],
)
def test_rope_rejects(student, fragments):
    assert_wrong(check_rope.verdict(student), *fragments)


# --- layer normalisation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (
            lambda x, w, b, eps=1e-5: (
                (x - x.mean(-1, keepdim=True))
                / torch.sqrt(x.var(-1, keepdim=True) + eps)
                * w
                + b
            ),
            ["Bessel's correction", "dividing by d"],
        ),
        (
            lambda x, w, b, eps=1e-5: (
                (x - x.mean(-1, keepdim=True))
                / (x.std(-1, keepdim=True, unbiased=False) + eps)
                * w
                + b
            ),
            ["nearly constant row", "eps goes inside the square root"],
        ),
        (
            lambda x, w, b, eps=1e-5: (
                (x - x.mean(-1, keepdim=True))
                / (x.var(-1, keepdim=True, unbiased=False) + eps)
                * w
                + b
            ),
            ["not by the variance"],
        ),
        (
            lambda x, w, b, eps=1e-5: (
                (x - x.mean(0, keepdim=True))
                / torch.sqrt(x.var(0, keepdim=True, unbiased=False) + eps)
                * w
                + b
            ),
            ["not over the batch"],
        ),
        (
            lambda x, w, b, eps=1e-5: good_layer_norm(x, 1.0, 0.0, eps),
            ["random γ and β", "Scale by γ (weight)"],
        ),
        # eps ignored
        (
            lambda x, w, b, eps=1e-5: good_layer_norm(x, w, b),
            ["eps = 0.1", "wrong values"],
        ),
    ],
)
def test_layer_norm_rejects(student, fragments):
    assert_wrong(check_layer_norm.verdict(student), *fragments)


# --- the LayerNorm class ------------------------------------------------------------------------------------


def make_layer_norm(
    unbiased=False,
    gamma_name="weight",
    init=1.0,
    detach=False,
    fixed_eps=False,
    no_eps=False,
):
    class StudentLayerNorm(nn.Module):
        def __init__(self, d_model, eps=1e-5):
            super().__init__()
            self.eps = 1e-5 if fixed_eps else eps
            setattr(self, gamma_name, nn.Parameter(torch.full((d_model,), init)))
            self.bias = nn.Parameter(torch.zeros(d_model))

        def forward(self, x):
            gamma = getattr(self, gamma_name)
            if detach:
                gamma = gamma.detach()
            mean = x.mean(-1, keepdim=True)
            var = x.var(-1, keepdim=True, unbiased=unbiased)
            return (x - mean) / torch.sqrt(var + self.eps) * gamma + self.bias

    if no_eps:

        class NoEps(StudentLayerNorm):
            def __init__(self, d_model):
                super().__init__(d_model)

        return NoEps
    return StudentLayerNorm


class StubLayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        raise NotImplementedError

    def forward(self, x):
        raise NotImplementedError


class NotAModule:
    def __init__(self, d_model, eps=1e-5):
        self.weight = torch.ones(d_model)


class Raising(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        raises_boom()

    def forward(self, x):
        return x


def test_layer_norm_module_reference_and_student_pass():
    assert check_layer_norm_module.verdict(make_layer_norm()).passed
    assert check_layer_norm_module.verdict(StubLayerNorm).status == "not attempted"
    # PyTorch's own has the same interface, and is no answer to an exercise that asks to build it
    assert_wrong(
        check_layer_norm_module.verdict(nn.LayerNorm),
        "That is PyTorch's own `torch.nn.LayerNorm`",
    )


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (make_layer_norm(unbiased=True), ["Bessel's correction"]),
        (make_layer_norm(gamma_name="gamma"), ["needs a parameter `weight`"]),
        (
            make_layer_norm(init=0.5),
            ["The initial `weight` has the wrong values", "γ starts at ones"],
        ),
        (make_layer_norm(detach=True), ["No gradient reached weight and bias"]),
        (make_layer_norm(fixed_eps=True), ["eps=0.1", "Use the eps you are given"]),
        (make_layer_norm(no_eps=True), ["raised TypeError", "eps"]),
        (NotAModule, ["should create an nn.Module"]),
        (Raising, ["raised RuntimeError: boom"]),
        (lambda d: LayerNorm(d), ["Expected the class LayerNorm itself"]),
        (LayerNorm(6), ["Expected the class LayerNorm itself", "not LayerNorm(...)"]),
    ],
)
def test_layer_norm_module_rejects(student, fragments):
    assert_wrong(check_layer_norm_module.verdict(student), *fragments)


# --- several independently written correct answers pass -----------------------------------------------------


def sinusoid_exp_log(n_positions, d_model):
    pos = torch.arange(n_positions).unsqueeze(1)
    div = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe


def sinusoid_numpy(n_positions, d_model):
    import numpy as np

    angles = np.arange(n_positions)[:, None] / np.power(
        10000, (2 * (np.arange(d_model) // 2)) / d_model
    )
    angles[:, 0::2] = np.sin(angles[:, 0::2])
    angles[:, 1::2] = np.cos(angles[:, 1::2])
    return torch.tensor(angles)  # float64 is fine


def rope_complex(x):
    n, d = x.shape[-2:]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    rot = torch.polar(
        torch.ones(n, d // 2, dtype=torch.float64), torch.arange(n)[:, None] * theta
    )
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * rot).reshape(x.shape).to(x.dtype)


def rope_matrix(x):
    n, d = x.shape[-2:]
    out = torch.empty_like(x)
    for p in range(n):
        r = torch.zeros(d, d)
        for i in range(d // 2):
            phi = p / 10000 ** (2 * i / d)
            c, s_ = math.cos(phi), math.sin(phi)
            r[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s_], [s_, c]])
        out[..., p, :] = x[..., p, :] @ r.T
    return out


def layer_norm_loop(x, weight, bias, eps=1e-5):
    """Vector by vector in Python floats: the mean, the biased variance, then each coordinate."""
    rows = x.reshape(-1, x.shape[-1]).tolist()
    out = []
    for row in rows:
        d = len(row)
        mean = sum(row) / d
        var = sum((v - mean) ** 2 for v in row) / d
        out.append([(v - mean) / math.sqrt(var + eps) for v in row])
    return torch.tensor(out, dtype=x.dtype).reshape(x.shape) * weight + bias


def layer_norm_moments(x, weight, bias, eps=1e-5):
    """The variance as E[x²] − E[x]², the sums written out with sum(dim) and divided by d."""
    d = x.shape[-1]
    mean = x.sum(-1, keepdim=True) / d
    var = (x * x).sum(-1, keepdim=True) / d - mean**2
    return weight * (x - mean) / (var + eps).sqrt() + bias


def layer_norm_var_mean(x, weight, bias, eps=1e-5):
    var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


class LayerNormFunctional(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        return layer_norm_var_mean(x, self.weight, self.bias, self.eps)


class LayerNormCentred(nn.Module):
    """Centre first, then divide by the root mean square of the centred vector; eps as a buffer-free float."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        rms = centred.pow(2).mean(-1, keepdim=True).add(self.eps).sqrt()
        return torch.addcmul(self.bias, centred / rms, self.weight)


class LayerNormStd(nn.Module):
    """torch.std with correction=0 (the biased estimate), eps added under the root by hand."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        std = torch.sqrt(x.std(-1, correction=0, keepdim=True) ** 2 + self.eps)
        return self.weight * ((x - x.mean(-1, keepdim=True)) / std) + self.bias


@correct_answers(
    (check_sinusoidal_positional_encoding, sinusoid_exp_log),
    (check_sinusoidal_positional_encoding, sinusoid_numpy),
    (check_rope, rope_complex),
    (check_rope, rope_matrix),
    (check_layer_norm, layer_norm_var_mean),
    (check_layer_norm, layer_norm_loop),
    (check_layer_norm, layer_norm_moments),
    (check_layer_norm_module, LayerNormFunctional),
    (check_layer_norm_module, LayerNormCentred),
    (check_layer_norm_module, LayerNormStd),
)
def test_independent_correct_answers_pass(checker, student):
    assert_passes(checker, student)


# ============================================================================================================
# --- EncoderBlock (ex-encoder-block) ------------------------------------------------------------------------
# ============================================================================================================

from companion.attention import MultiHeadAttention  # noqa: E402
from companion.exercises.transformer import check_encoder_block  # noqa: E402
from companion.transformer import BlockConfig, FeedForward  # noqa: E402


class BlockWithCompanionParts(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x):
        x = self.norm1(x + self.self_attn(x))
        return self.norm2(x + self.linear2(torch.relu(self.linear1(x))))


class _OwnHeads(nn.Module):
    """A student's own multi-head attention, written with einsum."""

    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            nn.Linear(d, d) for _ in range(4)
        )

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = (
            p(x).view(b, n, self.h, d // self.h)
            for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        w = torch.einsum("bihe,bjhe->bhij", q, k).div((d // self.h) ** 0.5).softmax(-1)
        return self.out_proj(torch.einsum("bhij,bjhe->bihe", w, v).reshape(b, n, d))


class BlockWithOwnParts(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.self_attn = _OwnHeads(d_model, n_heads)
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x):
        h = x + self.self_attn(x)
        h = nn.functional.layer_norm(
            h, h.shape[-1:], self.norm1.weight, self.norm1.bias
        )
        f = self.linear2(nn.functional.relu(self.linear1(h)))
        return nn.functional.layer_norm(
            h + f, h.shape[-1:], self.norm2.weight, self.norm2.bias
        )


class BlockWithCompanionLayerNorm(BlockWithCompanionParts):
    """The chapter's own LayerNorm (same parameter names) and torch's fused attention inside the companion's."""

    def __init__(self, d_model, n_heads, d_ff):
        super().__init__(d_model, n_heads, d_ff)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.ff = FeedForward(
            BlockConfig(d_model, n_heads, d_ff, norm_first=False)
        )  # unused extra module: harmless
        # dropout 0, as the exercise asks: the identity in training mode too
        self.dropout = nn.Dropout(0.0)

    def forward(self, x):
        x = self.norm1(x + self.dropout(self.self_attn(x)))
        return self.norm2(x + self.dropout(self.linear2(self.linear1(x).clamp(min=0))))


# dropout kept: right in eval mode only
class BlockWithDropout(BlockWithCompanionParts):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__(d_model, n_heads, d_ff)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        x = self.norm1(x + self.dropout(self.self_attn(x)))
        return self.norm2(x + self.dropout(self.linear2(torch.relu(self.linear1(x)))))


class BlockInPlaceResidual(BlockWithCompanionParts):  # x += ...: changes the caller's x
    def forward(self, x):
        x += self.self_attn(x)
        x = self.norm1(x)
        return self.norm2(x + self.linear2(torch.relu(self.linear1(x))))


# an in-place change of a tensor backward still needs
class BlockInPlaceHidden(BlockWithCompanionParts):
    def forward(self, x):
        h = self.norm1(x + self.self_attn(x))
        r = torch.relu(self.linear1(h))
        # the same values, but relu's backward needs its output unchanged: training breaks
        r *= 1.0
        return self.norm2(h + self.linear2(r))


# the attention's output detached: it never trains
class BlockDetachedAttention(BlockWithCompanionParts):
    def forward(self, x):
        h = self.norm1(x + self.self_attn(x).detach())
        return self.norm2(h + self.linear2(torch.relu(self.linear1(h))))


@pytest.mark.parametrize(
    ("student", "fragment"),
    [
        (BlockWithDropout, "in training mode"),
        (BlockInPlaceResidual, "changed its argument `x` in place"),
        (BlockInPlaceHidden, "modified by an inplace operation"),
        (BlockDetachedAttention, "The gradient reaching x"),
    ],
)
def test_encoder_block_is_trained_one_step(student, fragment):
    assert_wrong(check_encoder_block.verdict(student), fragment)


@pytest.mark.parametrize(
    "student", [BlockWithCompanionParts, BlockWithOwnParts, BlockWithCompanionLayerNorm]
)
def test_encoder_block_accepts_independent_correct_answers(student):
    verdict = check_encoder_block.verdict(student)
    assert verdict.passed, str(verdict)


def _block(forward):
    return type("Student", (BlockWithCompanionParts,), {"forward": forward})


def _ffn(self, h, relu=True):
    return self.linear2(torch.relu(self.linear1(h)) if relu else self.linear1(h))


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (
            _block(
                lambda self, x: (lambda h: h + _ffn(self, self.norm2(h)))(
                    x + self.self_attn(self.norm1(x))
                )
            ),
            ["wrong values", "That is pre-norm"],
        ),
        (
            _block(
                lambda self, x: (lambda h: self.norm2(h + _ffn(self, h)))(
                    self.norm1(self.self_attn(x))
                )
            ),
            ["Add the input to the attention's output"],
        ),
        (
            _block(
                lambda self, x: self.norm2(
                    _ffn(self, self.norm1(x + self.self_attn(x)))
                )
            ),
            ["second residual"],
        ),
        (
            _block(
                lambda self, x: (lambda h: self.norm2(h + _ffn(self, h, False)))(
                    self.norm1(x + self.self_attn(x))
                )
            ),
            ["applies a ReLU"],
        ),
        (
            _block(
                lambda self, x: (lambda h: self.norm1(h + _ffn(self, h)))(
                    self.norm2(x + self.self_attn(x))
                )
            ),
            ["the order matters"],
        ),
        (
            _block(lambda self, x: self.norm1(x + self.self_attn(x))),
            ["feed-forward sub-layer"],
        ),
        (
            _block(
                lambda self, x: self.norm2(
                    x + _ffn(self, self.norm1(x + self.self_attn(x)))
                )
            ),
            ["wrong values", "post-norm block"],
        ),
    ],
)
def test_encoder_block_rejects_wrong_answers(student, fragments):
    assert_wrong(check_encoder_block.verdict(student), *fragments)


def test_encoder_block_missing_or_misshapen_parts_get_clear_messages():
    class NoNorm2(BlockWithCompanionParts):
        def __init__(self, d_model, n_heads, d_ff):
            super().__init__(d_model, n_heads, d_ff)
            del self.norm2

    class WideFFN(BlockWithCompanionParts):
        def __init__(self, d_model, n_heads, d_ff):
            super().__init__(d_model, n_heads, d_ff)
            self.linear1 = nn.Linear(d_model, 4 * d_model)

    class Stub(nn.Module):
        def __init__(self, d_model, n_heads, d_ff):
            super().__init__()
            raise NotImplementedError

        def forward(self, x):
            raise NotImplementedError

    assert_wrong(check_encoder_block.verdict(NoNorm2), "sub-module `norm2`")
    assert_wrong(
        check_encoder_block.verdict(WideFFN),
        "`linear1.weight` should be a parameter of shape (16, 8)",
    )
    assert check_encoder_block.verdict(Stub).status == "not attempted"
    assert_wrong(
        check_encoder_block.verdict(lambda *a: "block"),
        "Expected the class EncoderBlock",
    )


# --- label smoothing ----------------------------------------------------------------------------------------


def smoothed_loop(logits, y, epsilon, ignore_index=-100):
    """Row by row with math: q_v = 1 - ε + ε/V on y, ε/V elsewhere."""
    total, kept = 0.0, 0
    for row, target in zip(logits.tolist(), y.tolist(), strict=True):
        if target == ignore_index:
            continue
        log_z = math.log(sum(math.exp(v) for v in row))
        total -= sum(
            ((1 - epsilon) * (v == target) + epsilon / len(row)) * (s - log_z)
            for v, s in enumerate(row)
        )
        kept += 1
    return torch.tensor(total / kept)


def smoothed_mixture(logits, y, epsilon, ignore_index=-100):
    """(1 - ε) · the cross-entropy + ε · the mean over the classes of -log p: the same loss, rearranged."""
    kept = y != ignore_index
    logp = torch.log_softmax(logits[kept], dim=-1)
    nll = -logp.gather(1, y[kept][:, None]).mean()
    return (1 - epsilon) * nll + epsilon * (-logp.mean(dim=-1)).mean()


def smoothed_plain_cross_entropy(logits, y, epsilon, ignore_index=-100):
    """PyTorch's plain cross-entropy (no label_smoothing) for the one-hot part, the uniform part by hand."""
    kept = y != ignore_index
    logits = logits[kept]
    uniform = -torch.log_softmax(logits, dim=-1).mean(dim=-1).mean()
    return (1 - epsilon) * F.cross_entropy(logits, y[kept]) + epsilon * uniform


@pytest.mark.parametrize(
    "student", [smoothed_loop, smoothed_mixture, smoothed_plain_cross_entropy]
)
def test_label_smoothing_correct_answers_pass(student, capsys):
    assert_passes(check_label_smoothed_cross_entropy, student)
    check_label_smoothed_cross_entropy(student)
    assert capsys.readouterr().out.startswith("PASSED")


def smoothed_variant(*, others=False, epsilon_scale=1.0, count_pad=False, divide_all=False, raw=False,
                     total=False, dim=-1, probabilities=False):  # fmt: skip
    def student(logits, y, epsilon, ignore_index=-100):
        kept = torch.ones_like(y, dtype=torch.bool) if count_pad else y != ignore_index
        v = logits.shape[1]
        one_hot = F.one_hot(y.clamp(min=0), v).to(logits.dtype)
        eps = epsilon * epsilon_scale
        q = (1 - eps) * one_hot + (eps / (v - 1) * (1 - one_hot) if others else eps / v)
        scores = (
            logits
            if raw
            else torch.softmax(logits, dim)
            if probabilities
            else torch.log_softmax(logits, dim)
        )
        per_row = -(q * scores).sum(dim=-1) * kept
        if total:
            return per_row.sum()
        return per_row.sum() / (len(y) if divide_all else kept.sum())

    return student


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (smoothed_variant(others=True), ["Spread ε over all V classes"]),
        (smoothed_variant(epsilon_scale=0.0), ["No smoothing"]),
        (smoothed_variant(count_pad=True), ["<pad>", "wrong"]),
        (smoothed_variant(divide_all=True), ["Average over the kept rows only"]),
        (smoothed_variant(raw=True), ["not the raw logits"]),
        (smoothed_variant(total=True), ["do not sum"]),
        (smoothed_variant(dim=0), ["The loss is wrong"]),
        (smoothed_variant(probabilities=True), ["The loss is wrong"]),
        (smoothed_variant(epsilon_scale=0.5), ["The loss is wrong", "expected"]),
        (lambda logits, y, epsilon, ignore_index=-100: F.cross_entropy(
            logits, y, ignore_index=ignore_index, label_smoothing=epsilon, reduction="none"),
         ["`torch.nn.functional.cross_entropy` with label_smoothing", "one call"]),
    ],
)  # fmt: skip
def test_label_smoothing_wrong_answers_are_named(student, fragments):
    assert_wrong(check_label_smoothed_cross_entropy.verdict(student), *fragments)


def test_label_smoothing_stub_and_garbage():
    assert check_label_smoothed_cross_entropy.verdict(stub).status == "not attempted"
    assert_wrong(
        check_label_smoothed_cross_entropy.verdict(raises_boom),
        "raised RuntimeError: boom",
    )
    assert_wrong(
        check_label_smoothed_cross_entropy.verdict(lambda *a, **k: None),
        "should be a single number",
    )


class _LayerNormBase(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight, self.bias, self.eps = (
            nn.Parameter(torch.ones(d)),
            nn.Parameter(torch.zeros(d)),
            eps,
        )


class LayerNormInPlace(_LayerNormBase):  # normalises the caller's x in place
    def forward(self, x):
        x -= x.mean(-1, keepdim=True)
        return (
            x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
            + self.bias
        )


class LayerNormUpdatesItself(_LayerNormBase):  # forward changes its own parameters
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
        with torch.no_grad():
            self.bias.mul_(1.0001)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


# right values, but training never moves the weight
class LayerNormDetachedScale(_LayerNormBase):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
        return (x - mean) / torch.sqrt(
            var + self.eps
        ) * self.weight.detach() + self.bias


@pytest.mark.parametrize(
    ("student", "fragment"),
    [
        (LayerNormInPlace, "changed its argument `x` in place"),
        (LayerNormUpdatesItself, "changed the parameter `bias` in place"),
        (LayerNormDetachedScale, "No gradient reached"),
    ],
)
def test_layer_norm_module_in_place_and_training(student, fragment):
    assert_wrong(check_layer_norm_module.verdict(student), fragment)


# --- beam search (companion.exercises.beam_search) ----------------------------------------------------------


def beams_in_lists(*, step="log_softmax", rank="all", keep_finished=False, stop_at=None, penalty="divide",
                   count_prompt=False, drop_live=False, normalised_score=False, dtype=torch.long):  # fmt: skip
    """A beam search over Python lists, one prefix at a time, with the mistakes a student could make."""

    def student(next_logits, ids, b):
        max_new_tokens, beam_size, eos_id, alpha = (
            b.max_new_tokens,
            b.beam_size,
            b.eos_id,
            b.alpha,
        )
        prompt = ids[0].tolist()
        live, finished = [(0.0, prompt)], []
        for _ in range(max_new_tokens):
            candidates = []
            for score, seq in live:
                logits = next_logits(torch.tensor([seq]))[0].double()
                scores = {"log_softmax": torch.log_softmax(logits, 0), "raw": logits,
                          "probabilities": torch.softmax(logits, 0)}[step]  # fmt: skip
                options = sorted(
                    ((score + s, seq + [t]) for t, s in enumerate(scores.tolist())),
                    reverse=True,
                )
                candidates.append(
                    options[:1] if rank == "one each" and len(live) > 1 else options
                )
            ranked = sorted(
                (c for options in candidates for c in options), reverse=True
            )[:beam_size]
            ended = [c for c in ranked if c[1][-1] == eos_id]
            finished += ended
            live = (
                ranked if keep_finished else [c for c in ranked if c[1][-1] != eos_id]
            )
            if len(finished) >= (stop_at or beam_size) or not live:
                break
        if not (drop_live and finished):
            finished += live

        def lp(seq):
            m = len(seq) - (0 if count_prompt else len(prompt))
            return ((5 + m) / 6) ** alpha if penalty != "none" else 1.0

        key = (
            (lambda c: c[0] * lp(c[1]))
            if penalty == "multiply"
            else (lambda c: c[0] / lp(c[1]))
        )
        score, seq = max(finished, key=key)
        return torch.tensor([seq], dtype=dtype), (
            key((score, seq)) if normalised_score else score
        )

    return student


def beams_in_tensors(next_logits, ids, b):
    """The (k, t) tensor version, with heapq for the final choice."""
    max_new_tokens, beam_size, eos_id, alpha = (
        b.max_new_tokens,
        b.beam_size,
        b.eos_id,
        b.alpha,
    )
    import heapq

    beams, scores, done = ids, torch.zeros(1, dtype=torch.float64), []
    for _ in range(max_new_tokens):
        total = scores[:, None] + torch.log_softmax(next_logits(beams).double(), dim=-1)
        values, flat = total.flatten().topk(min(beam_size, total.numel()))
        rows, cols = (
            torch.div(flat, total.shape[1], rounding_mode="floor"),
            flat.remainder(total.shape[1]),
        )
        beams, scores = torch.cat([beams[rows], cols[:, None]], 1), values
        keep = cols != eos_id
        done.extend(
            (s, b)
            for s, b, k in zip(values.tolist(), beams, keep.tolist(), strict=True)
            if not k
        )
        beams, scores = beams[keep], scores[keep]
        if len(done) >= beam_size or not len(beams):
            break
    done.extend(zip(scores.tolist(), beams, strict=True))
    lp = lambda b: ((5 + b.shape[0] - ids.shape[1]) / 6) ** alpha  # noqa: E731
    score, best = heapq.nlargest(1, done, key=lambda h: h[0] / lp(h[1]))[0]
    return best[None], score


def beams_by_probabilities(next_logits, ids, b):
    """Keeps each hypothesis's probability product alongside, and takes log p = Σ log p_t by math.log."""
    max_new_tokens, beam_size, eos_id, alpha = (
        b.max_new_tokens,
        b.beam_size,
        b.eos_id,
        b.alpha,
    )
    hyps, finished, n = [(ids[0].tolist(), 0.0)], {}, ids.shape[1]
    for _ in range(max_new_tokens):
        probs = torch.softmax(
            next_logits(torch.tensor([h for h, _ in hyps])).double(), dim=-1
        )
        pool = [(h + [v], s + math.log(p)) for (h, s), row in zip(hyps, probs.tolist(), strict=True)
                for v, p in enumerate(row) if p > 0]  # fmt: skip
        pool.sort(key=lambda hs: -hs[1])
        hyps = []
        for h, s in pool[:beam_size]:
            if h[-1] == eos_id:
                finished[tuple(h)] = s
            else:
                hyps.append((h, s))
        if len(finished) >= beam_size or not hyps:
            break
    everything = list(finished.items()) + [(tuple(h), s) for h, s in hyps]
    best, score = max(
        everything, key=lambda hs: hs[1] / (((5 + len(hs[0]) - n) / 6) ** alpha)
    )
    return torch.tensor([best]), score


@pytest.mark.parametrize(
    "student", [beams_in_lists(), beams_in_tensors, beams_by_probabilities]
)
def test_beam_search_correct_answers_pass(student, capsys):
    assert_passes(check_beam_search, student)
    check_beam_search(student)
    assert capsys.readouterr().out.startswith("PASSED")


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (beams_in_lists(step="raw"), ["log_softmax", "unnormalised logits"]),
        (beams_in_lists(step="probabilities"), ["Add log-probabilities, not probabilities"]),
        (beams_in_lists(rank="one each"), ["Rank all k·V extensions together"]),
        (beams_in_lists(keep_finished=True), ["set it aside and take it out of the beam"]),
        (beams_in_lists(stop_at=1), ["not at the first one"]),
        (beams_in_lists(penalty="none"), ["lp(m)"]),
        (beams_in_lists(count_prompt=True), ["lp"]),
        (beams_in_lists(penalty="multiply"), ["lp(m)"]),
        (beams_in_lists(drop_live=True), ["compete too"]),
        (beams_in_lists(normalised_score=True), ["The beam search's answer", "item 1"]),
        (beams_in_lists(dtype=torch.int32), ["int64"]),
    ],
)  # fmt: skip
def test_beam_search_wrong_answers_are_named(student, fragments):
    assert_wrong(check_beam_search.verdict(student), *fragments)


def test_beam_search_stub_garbage_and_the_bigram_model():
    assert check_beam_search.verdict(stub).status == "not attempted"
    assert_wrong(check_beam_search.verdict(raises_boom), "raised RuntimeError: boom")
    assert_wrong(check_beam_search.verdict(lambda *a, **k: None), "beam search")
    called_the_companion = lambda *a, **k: decoding.beam_search(*a, **k)  # noqa: E731
    assert_wrong(
        check_beam_search.verdict(called_the_companion), "the companion's own answer"
    )
    table = torch.randn(4, 4)
    assert torch.equal(Bigram(table)(torch.tensor([[0, 3], [1, 2]])), table[[3, 2]])
    assert Bigram(table) == Bigram(table.clone()) and Bigram(table) != Bigram(table + 1)
