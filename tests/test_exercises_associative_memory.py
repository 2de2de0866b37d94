"""Chapter 8's hand-built associative memory: the checker judges what W_K does (linear attention with ReLU
features reads every stored value back), so every right construction passes and each wrong one is told why."""

import pytest
import torch
from checker_testing import assert_passes, assert_wrong, correct_answers, randn, stub

from companion import linear_attention as la
from companion.exercises.associative_memory import _read_back, check_memory_keys


def keys_by_pinv(x):
    return torch.linalg.pinv(x).T


def keys_by_gram(x):
    """W_K = (X Xᵀ)⁻¹ X: then W_K Xᵀ = I."""
    return torch.linalg.solve(x @ x.T, x)


def keys_by_qr(x):
    """Xᵀ = QR (Q: d × r orthonormal columns), so W_K = R⁻¹ Qᵀ gives W_K Xᵀ = R⁻¹ Qᵀ Q R = I."""
    q, r = torch.linalg.qr(x.T)
    return torch.linalg.solve(r, q.T)


def keys_scaled_and_clipped(x):
    """Features 3 e_i minus a positive amount elsewhere: ReLU clips the rest to 0, and the scale cancels."""
    target = 3 * torch.eye(len(x), dtype=x.dtype) - 0.5 * (
        1 - torch.eye(len(x), dtype=x.dtype)
    )
    # X W_Kᵀ = targetᵀ, least norm
    return torch.linalg.lstsq(x, target.T, driver="gelsd").solution.T


@correct_answers(
    (check_memory_keys, keys_by_pinv),
    (check_memory_keys, keys_by_gram),
    (check_memory_keys, keys_by_qr),
    (check_memory_keys, keys_scaled_and_clipped),
)
def test_right_answers(checker, student):
    assert_passes(checker, student)


def test_the_right_weights_recall_exactly_and_r_plus_one_pairs_cannot():
    """With W_K Xᵀ = I the read-outs are the values (a loop over the queries, by hand); one token more than the
    r features makes two keys share the space, and no W_K recalls distinct one-hot values then (rank ≤ r)."""
    x = randn(4, 6, seed=1)
    v = randn(4, 3, seed=2)
    w_k = keys_by_pinv(x)
    for i in range(4):
        phi = torch.relu(x @ w_k.T)
        state, norm = phi.T @ v, phi.sum(0)
        torch.testing.assert_close(
            phi[i] @ state / (phi[i] @ norm + 1e-6), v[i], atol=1e-5, rtol=1e-5
        )
    x5 = randn(5, 6, seed=3)
    w5 = randn(4, 6, seed=4)  # any W_K with 4 features
    out = _read_back(x5, w5, torch.eye(5, dtype=torch.float64))
    assert torch.linalg.matrix_rank(out) <= 4


@pytest.mark.parametrize(
    ("student", "fragments"),
    [
        (lambda x: x.clone(), ["does not return the values", "overlap"]),
        (lambda x: torch.linalg.pinv(x), ["does not return the values"]),
        (
            lambda x: (
                torch.linalg.pinv(x) if x.shape[0] != x.shape[1] else x.inverse().T
            ),
            ["shape", "Transpose it"],
        ),
        (lambda x: torch.eye(*x.shape, dtype=x.dtype), ["does not return the values"]),
        (lambda x: torch.linalg.inv(x).T, ["raised", "r = 3 tokens in d = 5"]),
        (lambda x: 1e-8 * torch.linalg.pinv(x).T, ["too small", "ε"]),
        (lambda x: -torch.linalg.pinv(x).T, ["does not return the values"]),
        (lambda x: torch.linalg.pinv(x).T + 0.3, ["overlap"]),
        (lambda x: torch.linalg.pinv(x @ x.T) @ x @ x.T @ x, ["overlap"]),
        (
            lambda x: torch.linalg.pinv(x).T.float().half(),
            ["does not return the values"],
        ),
        (lambda x: torch.linalg.pinv(x).T.tolist(), ["shape or type"]),
        (lambda x: torch.linalg.pinv(x).T * float("nan"), ["NaN"]),
        (
            lambda x: (
                torch.linalg.pinv(x).T if x.shape == (2, 2) or x.shape[1] == 5 else x
            ),
            ["does not return the values"],
        ),
        (
            lambda x: torch.tensor(
                {(2, 2): [[1.0, 0.0], [0.0, 1.0]]}.get(
                    tuple(x.shape), torch.linalg.pinv(x).T.tolist()
                )
            ).double(),
            ["r = 2 tokens in d = 2"],
        ),
    ],
)
def test_wrong_answers(student, fragments):
    assert_wrong(check_memory_keys.verdict(student), *fragments)


def test_stub_and_crash():
    assert check_memory_keys.verdict(stub).status == "not attempted"
    assert_wrong(check_memory_keys.verdict(lambda x: 1 / 0), "ZeroDivisionError")


def test_a_table_of_the_shown_answers_fails_the_hidden_cases():
    from companion.exercises.associative_memory import _cases

    table = {
        tuple(c.args[0].flatten().tolist()): keys_by_pinv(c.args[0]) for c in _cases(0)
    }

    def lookup(x):
        return table.get(tuple(x.flatten().tolist()), x.clone())

    assert_wrong(check_memory_keys.verdict(lookup), "hidden random case")


def test_the_read_back_is_the_chapters_linear_attention():
    x, v = randn(3, 5, seed=4), randn(3, 2, seed=5)
    w_k = randn(3, 5, seed=6)
    k = x @ w_k.T
    torch.testing.assert_close(
        _read_back(x, w_k, v), la.LinearAttention(feature_map=torch.relu)(k, k, v)
    )
