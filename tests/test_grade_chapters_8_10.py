"""``python -m homework_grader`` on the homework of chapters 8 and 10: the exercises that build each chapter's
algorithm (the RNN of linear attention, orthogonal random features, causal FAVOR+) are graded passed for a right
answer and wrong for a wrong one, with the answer's code run in its own process and checked from the grader's
(arguments and results travel as data: nothing is flagged)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from grading_support import gradebook, run_grader

ROOT = Path(__file__).resolve().parents[1]
HOMEWORK = ROOT / "book" / "homework"

# Written for this test, independently of the book's solutions.
RNN = """\
import torch


def linear_attention_rnn(q, k, v, s, z):
    fq = torch.where(q > 0, q + 1, torch.exp(q.clamp(max=0)))
    fk = torch.where(k > 0, k + 1, torch.exp(k.clamp(max=0)))
    ys = []
    for i in range(q.shape[-2]):
        s = s + torch.einsum("...a,...b->...ab", fk[..., i, :], v[..., i, :])
        z = z + fk[..., i, :]
        y = torch.einsum("...a,...ab->...b", fq[..., i, :], s)
        ys.append(y / ((fq[..., i, :] * z).sum(-1, keepdim=True) + 1e-6))
    return torch.stack(ys, -2), s, z
"""
RNN_OFF_BY_ONE = """\
import torch


def linear_attention_rnn(q, k, v, s, z):
    fq, fk = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
    ys = []
    for i in range(q.shape[-2]):  # reads the state before adding token i
        ys.append((fq[..., i, None, :] @ s)[..., 0, :] / ((fq[..., i, :] * z).sum(-1, keepdim=True) + 1e-6))
        s = s + fk[..., i, :, None] * v[..., i, None, :]
        z = z + fk[..., i, :]
    return torch.stack(ys, -2), s, z
"""
# Right values, but it keeps the state of every position (n × d_k × d_v numbers): the memory check must see the
# allocation in the answer's own process, where it happens.
RNN_EVERY_STATE = """\
import torch


def linear_attention_rnn(q, k, v, s, z):
    fq = torch.where(q > 0, q + 1, torch.exp(q.clamp(max=0)))
    fk = torch.where(k > 0, k + 1, torch.exp(k.clamp(max=0)))
    states = s.unsqueeze(-3) + torch.cumsum(fk.unsqueeze(-1) * v.unsqueeze(-2), dim=-3)  # (..., n, d_k, d_v)
    norms = z.unsqueeze(-2) + torch.cumsum(fk, dim=-2)  # (..., n, d_k)
    y = torch.einsum("...na,...nab->...nb", fq, states) / ((fq * norms).sum(-1, keepdim=True) + 1e-6)
    return y, states[..., -1, :, :], norms[..., -1, :]
"""
# Right values from the masked t × t form of the call's tokens (issue 30): not a recurrence, and its t × t scores
# are measured in the answer's own process.
RNN_MASKED = """\
import torch


def linear_attention_rnn(q, k, v, s, z):
    fq, fk = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
    a = (fq @ fk.transpose(-2, -1)).tril()
    y = (a @ v + fq @ s) / (a.sum(-1, keepdim=True) + fq @ z[..., None] + 1e-6)
    return y, s + fk.transpose(-2, -1) @ v, z + fk.sum(-2)
"""

ORTHOGONAL = """\
import math

import torch


def orthogonal_gaussian(d, m, seed):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(math.ceil(m / d)):
        q, r = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
        out.append(q * r.diagonal().sign() * torch.randn(d, d, generator=g, dtype=torch.float64).norm(dim=0))
    return torch.cat(out, dim=1)[:, :m]
"""
ORTHOGONAL_UNIT = ORTHOGONAL.replace(
    " * torch.randn(d, d, generator=g, dtype=torch.float64).norm(dim=0)", ""
)

PERFORMER = """\
import math

import torch


def causal_performer_attention(q, k, v, w):
    def features(x):
        x = x * x.shape[-1] ** -0.25
        return torch.exp(x @ w - 0.5 * (x**2).sum(-1, keepdim=True)) / math.sqrt(w.shape[-1])

    a = (features(q) @ features(k).transpose(-1, -2)).tril()
    return a @ v / (a.sum(-1, keepdim=True) + 1e-6)
"""
PERFORMER_UNSCALED = PERFORMER.replace("x = x * x.shape[-1] ** -0.25", "x = x")


def _answered(chapter: str, answers: dict[str, str]) -> dict:
    nb = json.loads((HOMEWORK / f"{chapter}.ipynb").read_text())
    for name, code in answers.items():
        (cell,) = [
            c
            for c in nb["cells"]
            if "exercise-stub" in c.get("metadata", {}).get("tags", [])
            and f"def {name}(" in "".join(c["source"])
        ]
        cell["source"] = code
    return nb


@pytest.mark.slow
def test_the_new_exercises_of_chapters_8_and_10_are_graded(tmp_path):
    submissions = {
        "08_linear_attention": {
            "right": {"linear_attention_rnn": RNN},
            "wrong": {"linear_attention_rnn": RNN_OFF_BY_ONE},
            "every_state": {"linear_attention_rnn": RNN_EVERY_STATE},
            "masked": {"linear_attention_rnn": RNN_MASKED},
        },
        "10_random_features": {
            "right": {
                "orthogonal_gaussian": ORTHOGONAL,
                "causal_performer_attention": PERFORMER,
            },
            "wrong": {
                "orthogonal_gaussian": ORTHOGONAL_UNIT,
                "causal_performer_attention": PERFORMER_UNSCALED,
            },
        },
    }
    books, feedback = {}, {}
    # one assignment per run of the grader
    for chapter, students in submissions.items():
        folder, out = tmp_path / chapter, tmp_path / f"{chapter}-out"
        folder.mkdir()
        for student, answers in students.items():
            (folder / f"{student}.ipynb").write_text(
                json.dumps(_answered(chapter, answers))
            )
        run_grader(folder, out)
        books[chapter] = gradebook(out)
        feedback[chapter] = (out / "feedback" / "wrong.md").read_text()
    for chapter, students in submissions.items():
        book = books[chapter]
        for name in students["right"]:
            assert book["right"][name] == "passed", book["right"]
            assert book["wrong"][name] == "wrong", book["wrong"]
        assert all(row["flags"] == "" for row in book.values()), book
    assert (
        books["08_linear_attention"]["every_state"]["linear_attention_rnn"] == "wrong"
    )
    assert books["08_linear_attention"]["masked"]["linear_attention_rnn"] == "wrong"
    assert (
        "masked t × t form"
        in (tmp_path / "08_linear_attention-out" / "feedback" / "masked.md").read_text()
    )
    assert "attends to itself" in feedback["08_linear_attention"]
    assert "have length 1: rescale" in feedback["10_random_features"]
    assert "d_k^(1/4) before the features" in feedback["10_random_features"]
