"""Task metrics: hand-worked examples, and agreement with scikit-learn and SciPy."""

import math

import numpy as np
import pytest
import torch
from raising import raises

from companion.data.metrics import (
    GLUE_TASKS,
    accuracy,
    f1_binary,
    glue_score,
    matthews_corrcoef,
    normalize_answer,
    pearson,
    spearman,
    squad_exact_match,
    squad_f1,
)

# --- SQuAD -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, normalised",
    [
        ("The  Eiffel Tower!", "eiffel tower"),
        ("an apple a day", "apple day"),
        ("Theatre and Anthem", "theatre and anthem"),  # articles only as whole words
        # punctuation goes first, so "the" is no longer a word of its own
        ("the-cat", "thecat"),
        ("(the) cat", "cat"),
        ("  \tDenver\nBroncos ", "denver broncos"),
        ("A", ""),
    ],
)
def test_normalize_answer(raw, normalised):
    assert normalize_answer(raw) == normalised


def test_squad_exact_match():
    assert (
        squad_exact_match("Denver Broncos", ["Denver Broncos", "The Denver Broncos"])
        == 1.0
    )
    assert squad_exact_match("the Denver Broncos.", "Denver Broncos") == 1.0
    assert squad_exact_match("Broncos", ["Denver Broncos", "The Denver Broncos"]) == 0.0


def test_squad_f1_by_hand():
    # "cat sat on mat" vs "cat on mat": 3 tokens in common, P = 3/4, R = 3/3, F1 = 2 (3/4) / (7/4) = 6/7.
    assert squad_f1("the cat sat on the mat", "a cat on a mat") == pytest.approx(6 / 7)
    # Common tokens count with multiplicity: "x x x y" vs "x y" share one x and one y: P = 2/4, R = 1, F1 = 2/3.
    assert squad_f1("x x x y", "x y") == pytest.approx(2 / 3)
    # "x x y" vs "x x z" share two x's: P = R = 2/3, F1 = 2/3 (counting distinct tokens would give 1/3).
    assert squad_f1("x x y", "x x z") == pytest.approx(2 / 3)
    assert squad_f1("dog", "cat") == 0.0
    # The best gold answer counts: F1 against "cat on mat" (6/7) beats "dog" (0).
    assert squad_f1(
        "the cat sat on the mat", ["dog", "a cat on a mat"]
    ) == pytest.approx(6 / 7)
    # Empty after normalisation: 1 if both are empty, else 0 (SQuAD 2.0's rule).
    assert squad_f1("the", "a") == 1.0 and squad_f1("the", "cat") == 0.0


def test_squad_bad_input():
    with raises(ValueError, "non-empty list of str"):
        squad_f1("x", [])
    with raises(TypeError, "an answer", "got a int"):
        squad_exact_match(3, "3")


# --- against scikit-learn and SciPy ------------------------------------------------------------------------


def test_classification_by_hand():
    y_true = [1, 1, 1, 0, 0, 0]
    y_pred = [1, 1, 1, 1, 0, 0]  # TP 3, FN 0, FP 1, TN 2
    assert accuracy(y_true, y_pred) == pytest.approx(5 / 6)
    assert f1_binary(y_true, y_pred) == pytest.approx(2 * 3 / (2 * 3 + 1 + 0))
    assert matthews_corrcoef(y_true, y_pred) == pytest.approx(
        (3 * 2 - 1 * 0) / math.sqrt(4 * 3 * 3 * 2)
    )
    assert matthews_corrcoef(y_true, [1 - y for y in y_true]) == pytest.approx(-1.0)
    # one predicted class: undefined, reported as 0
    assert matthews_corrcoef(y_true, [1] * 6) == 0.0


def test_classification_metrics_equal_scikit_learn():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    for trial in range(50):
        n = int(rng.integers(1, 40))
        classes = 2 if trial < 30 else int(rng.integers(3, 6))
        y_true, y_pred = rng.integers(0, classes, n), rng.integers(0, classes, n)
        if trial % 5 == 0:
            y_pred = np.where(rng.random(n) < 0.8, y_true, y_pred)  # mostly right
        assert accuracy(y_true, y_pred) == pytest.approx(
            sklearn_metrics.accuracy_score(y_true, y_pred)
        )
        assert matthews_corrcoef(y_true, y_pred) == pytest.approx(
            sklearn_metrics.matthews_corrcoef(y_true, y_pred), abs=1e-12
        )
        if classes == 2:
            expected = sklearn_metrics.f1_score(y_true, y_pred, zero_division=0.0)
            assert f1_binary(y_true, y_pred) == pytest.approx(expected)
    # string labels and a chosen positive class; torch tensors are accepted too
    t, p = ["yes", "no", "yes", "yes"], ["yes", "yes", "no", "yes"]
    assert f1_binary(t, p, positive="yes") == pytest.approx(
        sklearn_metrics.f1_score(t, p, pos_label="yes")
    )
    assert accuracy(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 0])) == pytest.approx(
        2 / 3
    )


def test_correlations_by_hand():
    # 1 - 6 sum d^2 / n(n^2-1)
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(1 - 6 * 2 / (4 * 15))
    # x = [1, 2, 3], y = [2, 4, 7]: deviations [-1, 0, 1], [-7/3, -1/3, 8/3]: products sum to 5, squares 2, 114/9
    assert pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(5 / math.sqrt(2 * 114 / 9))
    # ties share their average rank: [10, 20, 20, 30] -> [1, 2.5, 2.5, 4]
    assert spearman([10, 20, 20, 30], [1, 2.5, 2.5, 4]) == pytest.approx(1.0)
    assert spearman([10, 20, 20, 30], [1, 2, 3, 4]) == pytest.approx(
        pearson([1, 2.5, 2.5, 4], [1, 2, 3, 4])
    )
    assert spearman([1, 2, 3], [1, 8, 27]) == pytest.approx(1.0)  # monotone, not linear
    assert pearson([1, 2, 3], [1, 8, 27]) < 1.0


def test_correlations_equal_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    for trial in range(50):
        n = int(rng.integers(3, 60))
        if trial % 2:
            # many ties
            x, y = (
                rng.integers(0, 4, n).astype(float),
                rng.integers(0, 4, n).astype(float),
            )
        else:
            x = rng.normal(size=n)
            y = x + rng.normal(size=n)
        if np.ptp(x) == 0 or np.ptp(y) == 0:
            continue
        assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)
        assert spearman(x, y) == pytest.approx(
            stats.spearmanr(x, y).statistic, abs=1e-12
        )


def test_bad_input_gets_clear_errors():
    with raises(ValueError, "same length, got 3 and 2"):
        accuracy([1, 2, 3], [1, 2])
    with raises(ValueError, "empty"):
        matthews_corrcoef([], [])
    with raises(ValueError, "one-dimensional, got shape (2, 2)"):
        f1_binary([[1, 0], [0, 1]], [[1, 0], [0, 1]])
    with raises(TypeError, "got a str"):
        accuracy("abc", "abd")
    with raises(ValueError, "constant"):
        pearson([1, 1, 1], [1, 2, 3])
    with raises(ValueError, "constant"):
        spearman([1, 2, 3], [5, 5, 5])


# --- GLUE --------------------------------------------------------------------------------------------------


def test_glue_averages_each_tasks_metrics_first():
    # Single-metric tasks score 1, two-metric tasks (1, 0): task means are 1 (x5) and 0.5 (x4), so 7/9.
    # Averaging all 13 numbers flat would give 9/13 instead.
    scores = {
        task: (1.0, 0.0) if len(metrics) == 2 else 1.0
        for task, metrics in GLUE_TASKS.items()
    }
    assert len(GLUE_TASKS) == 9
    assert glue_score(scores) == pytest.approx(7 / 9)


def test_glue_score_of_bert_large():
    # BERT-large on the GLUE test sets (times 100): Table 1 of the BERT paper gives CoLA, SST-2, MRPC F1, STS-B
    # Spearman, QQP F1, MNLI-m/mm, QNLI, RTE; the leaderboard row adds MRPC accuracy, STS-B Pearson, QQP accuracy
    # and WNLI, and the abstract states the resulting "GLUE score to 80.5%". (The paper's own "Average" column,
    # 82.1, leaves out WNLI and the second metrics.)
    row = {
        "CoLA": 60.5,
        "SST-2": 94.9,
        "MRPC": (89.3, 85.4),
        "STS-B": (87.6, 86.5),
        "QQP": (72.1, 89.3),
        "MNLI": (86.7, 85.9),
        "QNLI": 92.7,
        "RTE": 70.1,
        "WNLI": 65.1,
    }
    assert round(glue_score(row), 1) == 80.5


def test_glue_bad_input():
    with raises(ValueError, "missing ['WNLI'], unknown ['SNLI']"):
        glue_score({**{t: 1.0 for t in GLUE_TASKS if t != "WNLI"}, "SNLI": 1.0})
    scores = {
        task: (1.0, 0.0) if len(metrics) == 2 else 1.0
        for task, metrics in GLUE_TASKS.items()
    }
    with raises(ValueError, "STS-B needs 2 number(s) (pearson, spearman)"):
        glue_score({**scores, "STS-B": 0.9})
    with raises(TypeError, "scores must be a dict"):
        glue_score([1.0] * 9)
