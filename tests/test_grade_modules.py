"""``python -m homework_grader`` on chapter 9's module exercise, ``FMMAttention``: the student's class is built in
the answer's process, the checker loads its own weights into it (``load_state_dict`` on the mirror), runs it alone
and inside a pre-norm ``CausalBlock`` of the grader's, and backpropagates through it; the verdicts are the
in-notebook checker's. The answers are written here, independently of the book's solution.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from grading_support import gradebook, run_grader

from companion.exercises.fmmformer import MEMORY_N, MEMORY_N_FMM

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = "09_fmmformer"

RIGHT = """\
import math
from torch import nn


class FMMAttention(nn.Module):
    def __init__(self, bandwidth, n_heads, n_maps=2):
        super().__init__()
        self.b, self.r = bandwidth, n_maps
        start = math.log(math.expm1(0.5))
        self.near_raw = nn.Parameter(torch.full((n_heads, 1, 1), start))
        self.far_raw = nn.Parameter(torch.full((n_heads, 1, 1), start))

    def forward(self, q, k, v, mask=None, causal=True):
        b, n = self.b, q.shape[-2]
        kw = F.pad(k, (0, 0, b - 1, 0)).unfold(-2, b, 1)
        vw = F.pad(v, (0, 0, b - 1, 0)).unfold(-2, b, 1)
        s = torch.einsum("...nd,...ndb->...nb", q, kw) / math.sqrt(q.shape[-1])
        s = s.masked_fill(~((torch.arange(n)[:, None] + torch.arange(b)) >= b - 1), -math.inf)
        near = torch.einsum("...nb,...ndb->...nd", torch.softmax(s, -1), vw)
        far = 0
        for phi in [lambda x: F.elu(x) + 1, lambda x: F.elu(-x) + 1, lambda x: torch.tanh(x) + 1][: self.r]:
            fq, fk = phi(q), phi(k)
            S = torch.cumsum(fk.unsqueeze(-1) * v.unsqueeze(-2), dim=-3)
            z = torch.cumsum(fk, dim=-2)
            far = far + (fq.unsqueeze(-2) @ S).squeeze(-2) / ((fq * z).sum(-1, keepdim=True) + 1e-6)
        return F.softplus(self.near_raw) * near + F.softplus(self.far_raw) * far
"""

# the chapter's building blocks, allowed: the companion's banded and linear attention
BY_PARTS = """\
class FMMAttention(torch.nn.Module):
    def __init__(self, bandwidth, n_heads, n_maps=2):
        super().__init__()
        self.bandwidth, self.maps = bandwidth, fmm.FMM_FEATURE_MAPS[:n_maps]
        self.near_raw = torch.nn.Parameter(torch.full((n_heads, 1, 1), -0.43275212956718856))
        self.far_raw = torch.nn.Parameter(torch.full((n_heads, 1, 1), -0.43275212956718856))

    def forward(self, q, k, v, mask=None, causal=True):
        near = ba.BandedAttention(self.bandwidth)(q, k, v, causal=True)
        far = sum(la.LinearAttention(feature_map=f)(q, k, v, causal=True) for f in self.maps)
        return F.softplus(self.near_raw) * near + F.softplus(self.far_raw) * far
"""

# right on every case, but the memory check's n × n matrices (the band's scores, exp'd and masked in place, then each
# far-field map's) are built in a buffer of that size taken when the class is defined (its size read from the
# checker, as an attacker would): held memory beyond 8 MiB counts, and the check's n makes the matrix more than that
# plus the limit
HOLDS_THE_MATRIX = RIGHT.replace(
    "class FMMAttention(nn.Module):\n",
    f"class FMMAttention(nn.Module):\n    scratch = torch.ones({MEMORY_N_FMM**2})\n",
).replace(
    "        b, n = self.b, q.shape[-2]\n",
    """\
        b, n = self.b, q.shape[-2]
        maps = [lambda x: F.elu(x) + 1, lambda x: F.elu(-x) + 1, lambda x: torch.tanh(x) + 1][: self.r]
        if q.shape[:2] == (1, 1) and not q.requires_grad and n * n == self.scratch.numel():
            qq, kk, vv = q[0, 0], k[0, 0], v[0, 0]
            a = torch.matmul(qq, kk.T, out=self.scratch.view(n, n)).div_(math.sqrt(q.shape[-1]))
            a = a.exp_().tril_().triu_(1 - b)
            near = (a @ vv) / a.sum(-1, keepdim=True)
            far = 0
            for phi in maps:
                a = torch.matmul(phi(qq), phi(kk).T, out=self.scratch.view(n, n)).tril_()
                far = far + (a @ vv) / (a.sum(-1, keepdim=True) + 1e-6)
            return F.softplus(self.near_raw) * near[None, None] + F.softplus(self.far_raw) * far[None, None]
""",
)

ANSWERS = {
    "right": RIGHT,
    "parts": BY_PARTS,
    "band_plus_one": RIGHT.replace("(0, 0, b - 1, 0)).unfold(-2, b, 1)", "(0, 0, b, 0)).unfold(-2, b + 1, 1)").replace(
        "torch.arange(b)) >= b - 1", "torch.arange(b + 1)) >= b"
    ),
    "raw_weights": RIGHT.replace(
        "F.softplus(self.near_raw) * near + F.softplus(self.far_raw) * far", "self.near_raw * near + self.far_raw * far"
    ),
    "no_block_keywords": RIGHT.replace("(self, q, k, v, mask=None, causal=True):", "(self, q, k, v):"),
    # right values, but the far field as n × n matrices
    "dense_far": BY_PARTS.replace(
        "far = sum(la.LinearAttention(feature_map=f)(q, k, v, causal=True) for f in self.maps)",
        "far = 0\n        for f in self.maps:\n            a = torch.tril(f(q) @ f(k).transpose(-2, -1))\n"
        "            far = far + (a @ v) / (a.sum(-1, keepdim=True) + 1e-6)",
    ),
    "holds_the_matrix": HOLDS_THE_MATRIX,
}  # fmt: skip


# chapter 9's first exercise, banded_softmax, right on every case, but at the memory check's n the n × n scores are
# built in a buffer of that size taken when the function is defined (exp'd and cut to the band in place, so that
# nothing else of that size is made): held memory beyond 8 MiB counts, and the check's n makes the matrix (16 MiB)
# more than that plus its limit (4 MiB)
BANDED_HOLDS_THE_SCORES = f"""\
import math


def banded_softmax(q, k, v, b, scratch=torch.ones({MEMORY_N**2})):
    n, d = q.shape[-2], q.shape[-1]
    if q.dim() == 2 and n * n == scratch.numel() and not q.requires_grad:
        s = torch.matmul(q, k.T, out=scratch.view(n, n)).div_(math.sqrt(d))
        s = s.exp_().tril_().triu_(1 - b)
        return (s @ v) / s.sum(-1, keepdim=True)
    kw = F.pad(k, (0, 0, b - 1, 0)).unfold(-2, b, 1)
    vw = F.pad(v, (0, 0, b - 1, 0)).unfold(-2, b, 1)
    s = torch.einsum("...nd,...ndb->...nb", q, kw) / math.sqrt(d)
    s = s.masked_fill(~((torch.arange(n)[:, None] + torch.arange(b)) >= b - 1), -math.inf)
    return torch.einsum("...nb,...ndb->...nd", torch.softmax(s, -1), vw)
"""
#: {student: the banded_softmax answer}, graded in the same class (their FMMAttention left as the stub)
BANDED = {"banded_holds_the_scores": BANDED_HOLDS_THE_SCORES}


def _source(cell: dict) -> str:
    s = cell["source"]
    return "".join(s) if isinstance(s, list) else s


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("grading")
    folder = base / "class"
    folder.mkdir()
    nb = json.loads((ROOT / "book" / "homework" / f"{CHAPTER}.ipynb").read_text())
    (stub,) = [
        i
        for i, c in enumerate(nb["cells"])
        if "exercise-stub" in c.get("metadata", {}).get("tags", [])
        and "class FMMAttention(" in _source(c)
    ]
    (banded,) = [
        i
        for i, c in enumerate(nb["cells"])
        if "exercise-stub" in c.get("metadata", {}).get("tags", [])
        and "def banded_softmax(" in _source(c)
    ]
    for student, code in ANSWERS.items():
        nb["cells"][stub]["source"] = code
        (folder / f"{student}.ipynb").write_text(json.dumps(nb))
    stubs = _source(nb["cells"][stub]), _source(nb["cells"][banded])
    for student, code in BANDED.items():
        nb["cells"][banded]["source"] = code
        nb["cells"][stub]["source"] = stubs[0]
        (folder / f"{student}.ipynb").write_text(json.dumps(nb))
    nb["cells"][banded]["source"] = stubs[1]
    run_grader(folder, base / "results", "--jobs", "2", "--timeout", "120")
    return base / "results"


@pytest.mark.slow
def test_a_module_exercise_is_graded_through_the_mirror(graded):
    book = gradebook(graded)
    assert {s: book[s]["FMMAttention"] for s in ANSWERS if s not in MEMORY} == {
        "right": "passed",
        "parts": "passed",
        "band_plus_one": "wrong",
        "raw_weights": "wrong",
        "no_block_keywords": "wrong",
    }
    # checked in the grader's process, not the answer's
    assert all(book[s]["flags"] == "" for s in ANSWERS)
    feedback = {s: (graded / "feedback" / f"{s}.md").read_text() for s in ANSWERS}
    assert "Your band holds b + 1 keys" in feedback["band_plus_one"]
    assert "The blend weights must be positive" in feedback["raw_weights"]
    assert (
        "CausalBlock(BlockConfig(d_model=8" in feedback["no_block_keywords"]
        and "TypeError" in feedback["no_block_keywords"]
    )


# the answers whose values are right and whose memory is not
MEMORY = ["dense_far", "holds_the_matrix"]


@pytest.mark.slow
@pytest.mark.parametrize("student", MEMORY)
def test_the_memory_check_sees_the_answers_process(graded, student):
    """An answer with the right values whose far field is n × n matrices: its allocations happen in its own
    process, whose monitor reads the kernel's peak of it for the checker (checking.peak_bytes asks for it). So does
    an answer that builds them in a buffer of their size taken when its class is defined."""
    assert gradebook(graded)[student]["FMMAttention"] == "wrong"
    feedback = (graded / "feedback" / f"{student}.md").read_text()
    assert "Your function allocated" in feedback and "n × n matrix" in feedback, (
        feedback
    )


@pytest.mark.slow
def test_a_buffer_held_in_advance_fails_the_banded_memory_check(graded):
    """banded_softmax's n × n scores in a buffer taken when the function is defined: right on every case, and
    wrong on memory, because held memory beyond 8 MiB counts (the matrix is 16 MiB, the limit 4 MiB)."""
    row = gradebook(graded)["banded_holds_the_scores"]
    assert row["banded_softmax"] == "wrong" and row["FMMAttention"] != "passed", row
    feedback = (graded / "feedback" / "banded_holds_the_scores.md").read_text()
    assert "Your function allocated" in feedback and "MiB" in feedback, feedback
