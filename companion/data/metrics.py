"""The metrics of the tasks the field measures: SQuAD, SNLI and GLUE.

SQuAD scores a predicted answer span against several gold answers with *exact match* and a token-overlap
*F1*, after a normalisation (lower-case, no punctuation, no articles, single spaces); each question takes its
best gold answer. SNLI and most GLUE tasks use *accuracy*; CoLA the *Matthews correlation*; MRPC and QQP *F1*
and accuracy; STS-B the *Pearson* and *Spearman* correlations. The GLUE score averages the nine tasks, each
task's metrics averaged first.

Scores are fractions in [0, 1] (correlations in [-1, 1]); leaderboards print them times 100.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from ..validation import describe, require_instance, require_number

__all__ = [
    "normalize_answer",
    "squad_exact_match",
    "squad_f1",
    "accuracy",
    "matthews_corrcoef",
    "f1_binary",
    "pearson",
    "spearman",
    "GLUE_TASKS",
    "glue_score",
]


# --- SQuAD -------------------------------------------------------------------------------------------------

_PUNCTUATION = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """SQuAD's normalisation: lower-case, drop punctuation and a/an/the, one space."""
    require_instance(s, str, "an answer")
    s = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _gold_list(gold: str | Sequence[str]) -> list[str]:
    golds = (
        [gold]
        if isinstance(gold, str)
        else list(gold)
        if isinstance(gold, Sequence)
        else None
    )
    if not golds:
        raise ValueError(
            f"gold answers must be a str or a non-empty list of str, got {gold!r}"
        )
    return golds


def _exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def _f1(prediction: str, gold: str) -> float:
    pred, true = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not true:
        # both empty: 1; one empty: 0 (SQuAD 2.0's rule for "no answer")
        return float(pred == true)
    # tokens in common, with multiplicity
    same = sum((Counter(pred) & Counter(true)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(true)
    return 2 * precision * recall / (precision + recall)


def squad_exact_match(prediction: str, gold: str | Sequence[str]) -> float:
    """1.0 if the normalised prediction equals some normalised gold answer, else 0.0."""
    return max(_exact_match(prediction, g) for g in _gold_list(gold))


def squad_f1(prediction: str, gold: str | Sequence[str]) -> float:
    """Best, over the gold answers, F1 of the bags of normalised tokens: 2 P R / (P + R)."""
    return max(_f1(prediction, g) for g in _gold_list(gold))


# --- classification and regression ------------------------------------------------------------------------


def _as_pair(y_true: object, y_pred: object) -> tuple[np.ndarray, np.ndarray]:
    arrays = []
    for name, y in (("y_true", y_true), ("y_pred", y_pred)):
        if isinstance(y, (str, bytes)):
            raise TypeError(
                f"{name} must be a sequence of labels or numbers, got a str"
            )
        if hasattr(y, "detach"):  # a torch tensor
            y = y.detach().cpu().numpy()
        a = np.asarray(y)
        if a.ndim != 1:
            raise ValueError(f"{name} must be one-dimensional, got shape {a.shape}")
        arrays.append(a)
    if len(arrays[0]) != len(arrays[1]):
        raise ValueError(
            f"y_true and y_pred must have the same length, got {len(arrays[0])} and {len(arrays[1])}"
        )
    if len(arrays[0]) == 0:
        raise ValueError("y_true and y_pred are empty")
    return arrays[0], arrays[1]


def accuracy(y_true: Sequence, y_pred: Sequence) -> float:
    """Fraction of predictions equal to the label."""
    t, p = _as_pair(y_true, y_pred)
    return float(np.mean(t == p))


def matthews_corrcoef(y_true: Sequence, y_pred: Sequence) -> float:
    """Matthews correlation (binary: (TP TN - FP FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)); also multi-class).

    Computed from the confusion matrix C as (c s - t.p) / sqrt((s^2 - p.p)(s^2 - t.t)), with c correct
    predictions, s samples, t and p the counts of each class among labels and predictions. 0 when a
    denominator is 0 (all labels or all predictions in one class), as scikit-learn does.
    """
    t, p = _as_pair(y_true, y_pred)
    classes = np.union1d(t, p)
    t_counts = np.array([np.sum(t == k) for k in classes], dtype=float)
    p_counts = np.array([np.sum(p == k) for k in classes], dtype=float)
    c, s = float(np.sum(t == p)), float(len(t))
    denominator = math.sqrt(
        (s * s - p_counts @ p_counts) * (s * s - t_counts @ t_counts)
    )
    return (
        0.0 if denominator == 0 else float((c * s - t_counts @ p_counts) / denominator)
    )


def f1_binary(y_true: Sequence, y_pred: Sequence, positive: object = 1) -> float:
    """F1 of the positive class: 2 TP / (2 TP + FP + FN); 0 when there is no positive label or prediction."""
    t, p = _as_pair(y_true, y_pred)
    tp = np.sum((p == positive) & (t == positive))
    fp = np.sum((p == positive) & (t != positive))
    fn = np.sum((p != positive) & (t == positive))
    return 0.0 if tp == 0 else float(2 * tp / (2 * tp + fp + fn))


def _correlation(name: str, x: Sequence[float], y: Sequence[float]) -> float:
    from scipy import stats  # the same correlations as companion.evaluation's

    x, y = _as_pair(x, y)
    if np.all(x == x[0]) or np.all(y == y[0]):
        raise ValueError(
            f"{name} correlation is undefined when one of the inputs is constant"
        )
    test = stats.pearsonr if name == "Pearson" else stats.spearmanr
    return float(test(x.astype(float), y.astype(float))[0])


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation: cov(x, y) / (std x std y) (SciPy's ``pearsonr``)."""
    return _correlation("Pearson", x, y)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman correlation: the Pearson correlation of the ranks, ties sharing their average rank (SciPy's
    ``spearmanr``)."""
    return _correlation("Spearman", x, y)


# --- GLUE --------------------------------------------------------------------------------------------------

GLUE_TASKS: dict[str, tuple[str, ...]] = {
    "CoLA": ("matthews",),
    "SST-2": ("accuracy",),
    "MRPC": ("f1", "accuracy"),
    "STS-B": ("pearson", "spearman"),
    "QQP": ("f1", "accuracy"),
    "MNLI": ("accuracy matched", "accuracy mismatched"),
    "QNLI": ("accuracy",),
    "RTE": ("accuracy",),
    "WNLI": ("accuracy",),
}
"""The nine GLUE tasks and the metrics each reports; MNLI reports accuracy on its matched and mismatched test sets."""


def glue_score(scores: Mapping[str, float | Sequence[float]]) -> float:
    """The GLUE score: the mean over the nine tasks of each task's mean metric."""
    if not isinstance(scores, Mapping):
        raise TypeError(
            f"scores must be a dict {{task: score or (score, score)}}, got {describe(scores)}"
        )
    if set(scores) != set(GLUE_TASKS):
        missing, unknown = (
            sorted(set(GLUE_TASKS) - set(scores)),
            sorted(set(scores) - set(GLUE_TASKS)),
        )
        raise ValueError(
            f"scores must have the nine GLUE tasks; missing {missing}, unknown {unknown}"
        )
    task_means = []
    for task, metrics in GLUE_TASKS.items():
        values = scores[task]
        values = [values] if isinstance(values, (int, float)) else list(values)
        if len(values) != len(metrics):
            raise ValueError(
                f"{task} needs {len(metrics)} number(s) ({', '.join(metrics)}), got {scores[task]!r}"
            )
        values = [
            require_number(v, f"the scores of {task}", finite=False) for v in values
        ]
        task_means.append(sum(values) / len(values))
    return sum(task_means) / len(task_means)
