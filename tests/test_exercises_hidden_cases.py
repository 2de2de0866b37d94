"""Chapters 1-5 (issue 30): hidden random cases that exercise each checker's rule, so that an answer that tables
the shown cases fails; the cases that were too narrow (parallel rows, overflowing scores); what the task states
but no case checked (Python floats, one matrix per role); and hints that named the student's own mistake."""

import math

import pytest
import torch
from checker_testing import assert_passes, assert_wrong
from torch import nn

from companion.exercises.attention import (
    check_causal_mask,
    check_self_attention_module,
    check_split_heads,
    check_weightless_self_attention,
)
from companion.exercises.embedding_lm import (
    check_next_token_probabilities,
    check_train_loop,
)
from companion.exercises.transformer import check_sinusoidal_positional_encoding
from companion.exercises.word2vec import (
    check_glove_loss,
    check_glove_weight,
    check_nearest_neighbours,
)

HIDDEN = "hidden"


def right_mask(n):
    return torch.arange(n)[:, None] >= torch.arange(n)


def right_split(x, h):
    b, n, d = x.shape
    return x.reshape(b, n, h, d // h).transpose(1, 2)


def right_sinusoid(n, d):
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    angle = pos / 10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1).float()


def right_weight(x, x_max, alpha):
    return torch.where(x < x_max, (x / x_max) ** alpha, torch.ones_like(x))


def right_glove_loss(e, u, b, b_tilde, c, x_max, alpha):
    return (
        right_weight(c, x_max, alpha) * ((e * u).sum(1) + b + b_tilde - c.log()) ** 2
    ).sum()


def tabled(shown, fallback, key):
    """An answer that looks the shown cases up in a table made from the right answer and is wrong elsewhere."""

    def student(*args):
        return shown[key(*args)] if key(*args) in shown else fallback(*args)

    return student


def _table(right, cases, key):
    return {key(*args): right(*args) for args in cases}


def _values(x):
    return tuple(x.flatten().tolist())


def _arange(*shape):
    return torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)


_X = torch.tensor([0.0, 0.5, 1.0, 10.0, 50.0, 99.0, 100.0, 150.0, 1000.0])
_SPLITS = [
    (_arange(b, n, d), h)
    for b, n, d, h in [
        (1, 3, 4, 2),
        (2, 3, 8, 2),
        (1, 5, 12, 3),
        (2, 4, 6, 1),
        (1, 2, 4, 4),
    ]
]
_WEIGHT_CASES = [
    (_X, 100.0, 0.75),
    (_X, 10.0, 0.75),
    (_X, 100.0, 1.0),
    (torch.tensor([[2.0, 20.0], [200.0, 0.1]]), 50.0, 0.5),
]

TABLED = [
    (
        check_causal_mask,
        tabled(
            _table(right_mask, [(4,), (1,), (2,), (7,)], int),
            lambda n: torch.ones(n, n, dtype=torch.bool),
            int,
        ),
    ),
    (
        check_split_heads,
        tabled(
            _table(right_split, _SPLITS, lambda x, h: (_values(x), h)),
            lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1),
            lambda x, h: (_values(x), h),
        ),
    ),
    (
        check_sinusoidal_positional_encoding,
        tabled(
            _table(
                right_sinusoid,
                [(4, 6), (50, 16), (1, 2), (10, 128)],
                lambda n, d: (n, d),
            ),
            lambda n, d: right_sinusoid(n, d).flip(1),
            lambda n, d: (n, d),
        ),
    ),
    (
        check_glove_weight,
        tabled(
            _table(right_weight, _WEIGHT_CASES, lambda x, m, a: (_values(x), m, a)),
            lambda x, m, a: (x / m) ** a,
            lambda x, m, a: (_values(x), m, a),
        ),
    ),
]


@pytest.mark.parametrize(
    ("checker", "student"), TABLED, ids=[c.exercise for c, _ in TABLED]
)
def test_a_table_of_the_shown_cases_fails_the_hidden_ones(checker, student):
    verdict = checker.verdict(student)
    assert_wrong(verdict, HIDDEN)


def test_the_tabled_answers_pass_the_shown_cases():
    """Without hidden cases each table above would pass: its shown cases are right."""
    for args in [(4,), (1,), (2,), (7,)]:
        assert torch.equal(TABLED[0][1](*args), right_mask(*args))
    for x, h in _SPLITS:
        assert torch.equal(TABLED[1][1](x, h), right_split(x, h))


def glove_loss_mean_unless_shown(e, u, b, b_tilde, c, x_max, alpha):
    """Right on the three shown cases (x_max 100, 10 and 4 with their powers), the mean elsewhere."""
    loss = right_glove_loss(e, u, b, b_tilde, c, x_max, alpha)
    return (
        loss
        if (x_max, alpha) in {(100.0, 0.75), (10.0, 0.75), (4.0, 1.0)}
        else loss / len(c)
    )


def test_glove_loss_hidden_cases_catch_a_table_of_the_shown_settings():
    assert_wrong(
        check_glove_loss.verdict(glove_loss_mean_unless_shown),
        "hidden random case, seed",
    )
    assert check_glove_loss.verdict(right_glove_loss).passed


def train_with_a_table_of_rates(model, ids, steps, lr):
    """The right loop, but with the learning rate of the shown case that has as many steps (a table)."""
    lr = {30: 0.05, 12: 0.1, 8: 0.02}.get(steps, 0.5)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(ids[:-1]), ids[1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train_keeping_tensors(model, ids, steps, lr):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(ids[:-1]), ids[1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        # the task says Python floats: this keeps every step's graph
        losses.append(loss)
    return losses


def train_zero_grad_between(model, ids, steps, lr):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(ids[:-1]), ids[1:])
        loss.backward()
        opt.zero_grad()  # between backward() and step(): the step sees no gradient
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (train_with_a_table_of_rates, ["hidden random case, seed"]),
        (train_keeping_tensors, ["should be Python floats", "loss.item()"]),
        (
            train_zero_grad_between,
            [
                "did not change",
                "in this order",
                "zero_grad() between backward() and step()",
            ],
        ),
    ],
)
def test_train_loop_new_checks(student, fragments):
    verdict = check_train_loop.verdict(student)
    assert_wrong(verdict, *fragments)
    assert "call loss.backward() and then optimiser.step()" not in str(verdict)


def test_train_loop_hidden_case_is_counted():
    verdict = check_train_loop.verdict(_right)
    assert verdict.passed and verdict.hidden == 1, str(verdict)


def _right(model, ids, steps, lr):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(ids[:-1]), ids[1:])
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def temperature_shared_tie(scores, temperature):
    if temperature == 0:
        top = (scores == scores.max(-1, keepdim=True).values).float()
        return top / top.sum(-1, keepdim=True)
    return torch.softmax(scores / temperature, -1)


def test_a_shared_tie_at_temperature_0_is_told_what_the_task_asks():
    verdict = check_next_token_probabilities.verdict(temperature_shared_tie)
    assert_wrong(
        verdict, "a tie at temperature 0", "the whole 1 goes to the first largest score"
    )
    assert "every row must sum to 1" not in str(verdict)


def weightless_naive(x):
    # no largest score subtracted: exp(100) is inf
    e = torch.exp(x @ x.transpose(-2, -1))
    return e / e.sum(-1, keepdim=True) @ x


def test_weightless_attention_that_overflows_is_wrong_with_the_max_hint():
    assert_wrong(
        check_weightless_self_attention.verdict(weightless_naive),
        "overflows",
        "subtract each row's largest",
    )


def neighbours_dropping_cosine_one(vectors, query, k):
    cos = nn.functional.cosine_similarity(vectors, vectors[query], dim=-1)
    return cos.masked_fill(cos >= 0.9999, -math.inf).topk(k).indices


def test_a_parallel_row_is_a_neighbour_not_the_query():
    assert_wrong(
        check_nearest_neighbours.verdict(neighbours_dropping_cosine_one),
        "parallel",
        "by its index",
    )


class SelfAttentionSharedKey(nn.Module):
    def __init__(self, d_in, d_k, d_v):
        super().__init__()
        self.W_Q = nn.Linear(d_in, d_k, bias=False)
        self.W_K = self.W_Q  # one matrix for two roles
        self.W_V = nn.Linear(d_in, d_v, bias=False)

    def forward(self, x, mask=None):
        q, k, v = self.W_Q(x), self.W_K(x), self.W_V(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


class SelfAttentionInvertedMask(SelfAttentionSharedKey):
    def __init__(self, d_in, d_k, d_v):
        super().__init__(d_in, d_k, d_v)
        self.W_K = nn.Linear(d_in, d_k, bias=False)

    def forward(self, x, mask=None):
        return super().forward(x, None if mask is None else ~mask)


def test_self_attention_one_matrix_per_role_and_the_inverted_mask_hint():
    assert_wrong(
        check_self_attention_module.verdict(SelfAttentionSharedKey),
        "share one weight matrix",
        "W_K",
    )
    verdict = check_self_attention_module.verdict(SelfAttentionInvertedMask)
    assert_wrong(verdict, "The mask is inverted")
    assert "NaN" not in (verdict.hint or "")


# --- the module exercises: a hidden random case each, sized unlike the shown ones ------------------------------

from companion.attention import MultiHeadAttention  # noqa: E402
from companion.exercises.transformer import check_encoder_block, check_layer_norm_module  # noqa: E402
from companion.exercises.words_to_vectors import check_embedding  # noqa: E402


class EmbeddingShownBounds(nn.Module):
    """Rejects exactly the shown out-of-range ids (10 and -1) instead of checking against its own size."""

    def __init__(self, num_embeddings, embedding_dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(num_embeddings, embedding_dim))

    def forward(self, ids):
        if ids.is_floating_point():
            raise TypeError("ids must be integers")
        if ((ids == 10) | (ids == -1)).any():
            raise ValueError("id out of range")
        return self.weight[ids]


class SelfAttentionScaleTwo(SelfAttentionInvertedMask):
    """Divides by 2, the √d_k of the shown d_k = 4, whatever d_k is."""

    def forward(self, x, mask=None):
        scores = self.W_Q(x) @ self.W_K(x).transpose(-2, -1) / 2
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ self.W_V(x)


class LayerNormShownEps(nn.Module):
    """Uses the eps it is given only when it is one the shown cases use."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps if eps in (1e-5, 0.1) else 1e-5
        self.weight, self.bias = (
            nn.Parameter(torch.ones(d_model)),
            nn.Parameter(torch.zeros(d_model)),
        )

    def forward(self, x):
        mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class BlockTwoHeads(nn.Module):
    """Builds its attention with the shown 2 heads, whatever n_heads is."""

    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, 2)
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x):
        x = self.norm1(x + self.self_attn(x))
        return self.norm2(x + self.linear2(torch.relu(self.linear1(x))))


@pytest.mark.parametrize(
    ("checker", "student"),
    [
        (check_embedding, EmbeddingShownBounds),
        (check_self_attention_module, SelfAttentionScaleTwo),
        (check_layer_norm_module, LayerNormShownEps),
        (check_encoder_block, BlockTwoHeads),
    ],
    ids=lambda v: getattr(v, "exercise", getattr(v, "__name__", "")),
)
def test_module_answers_fitted_to_the_shown_sizes_fail_the_hidden_case(
    checker, student
):
    assert_wrong(checker.verdict(student), "hidden random case, seed")


# --- more independently written right answers for the checkers changed here --------------------------------


def neighbours_by_index(vectors, query, k):
    unit = vectors / vectors.norm(dim=1, keepdim=True)
    cos = unit @ unit[query]
    cos[query] = -math.inf  # the query left out by its index: a parallel row stays in
    return cos.argsort(descending=True)[:k]


class EmbeddingChecked(nn.Module):
    def __init__(self, num_embeddings, embedding_dim):
        super().__init__()
        self.n = num_embeddings
        self.weight = nn.Parameter(
            torch.normal(0.0, 1.0, (num_embeddings, embedding_dim))
        )

    def forward(self, ids):
        if torch.is_floating_point(ids):
            raise TypeError("integer ids only")
        if ids.numel() and (ids.min() < 0 or ids.max() >= self.n):
            raise ValueError(f"ids must lie in [0, {self.n})")
        return self.weight.index_select(0, ids.reshape(-1)).reshape(*ids.shape, -1)


def weightless_stable(x):
    scores = x @ x.transpose(-2, -1)
    e = torch.exp(scores - scores.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True) @ x


@pytest.mark.parametrize(
    ("checker", "student"),
    [
        (check_causal_mask, right_mask),
        (check_split_heads, right_split),
        (check_sinusoidal_positional_encoding, right_sinusoid),
        (check_glove_weight, right_weight),
        (check_glove_loss, right_glove_loss),
        (check_nearest_neighbours, neighbours_by_index),
        (check_train_loop, _right),
        (check_embedding, EmbeddingChecked),
        (check_weightless_self_attention, weightless_stable),
    ],
    ids=lambda v: getattr(v, "exercise", getattr(v, "__name__", "")),
)
def test_more_right_answers_pass(checker, student):
    assert_passes(checker, student)
