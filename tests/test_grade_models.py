"""The grader on the exercises whose checker hands the answer a model (issue 19): chapter 2's ``train``, chapter 6's
``gpt_forward`` and ``next_token_loss``.

The model goes to the answer's process as data, is rebuilt there and comes back as the answer left it; the
checker, the comparison and the verdict stay in the grader's process (``how == "remote"``), as for every other
exercise. Right answers written in several styles pass; wrong ones get the checker's named mistakes, the
mutation check and the gradient check; attacks (patching comparisons, reaching for the companion's answer, the
model's own forward, the checker's module, changing the weights) get no PASSED.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from grading_support import run_isolated
from test_grade_attacks import TRAIN_PATCH

from homework_grader import sandbox, wire
from homework_grader.chapters import Exercise
from homework_grader.remote import Limits, check_exercise

ROOT = Path(__file__).resolve().parents[1]

TRAIN = Exercise(
    name="train", checker="check_train_loop", module="companion.exercises.embedding_lm"
)
FORWARD = Exercise(
    name="gpt_forward", checker="check_gpt_forward", module="companion.exercises.gpt"
)
LOSS = Exercise(
    name="next_token_loss",
    checker="check_next_token_loss",
    module="companion.exercises.gpt",
)

# ----- chapter 2: train ----------------------------------------------------------------------------------------

TRAIN_RIGHT = {
    "functional": """\
import torch
import torch.nn.functional as F


def train(model, ids, steps, lr):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(model(ids[:-1]), ids[1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
""",
    "tables_by_hand": """\
import torch


def _loss(model, prev, nxt):
    scores = model.E[prev] @ model.U.T
    logp = scores - torch.logsumexp(scores, dim=1, keepdim=True)
    return -logp[torch.arange(len(nxt)), nxt].mean()


def train(model, ids, steps, lr):
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=lr)
    history = []
    step = 0
    while step < steps:
        for p in params:
            p.grad = None
        loss = _loss(model, ids[:-1], ids[1:])
        loss.backward()
        opt.step()
        history.append(float(loss.detach()))
        step += 1
    return history
""",
    "numpy_floats": """\
import numpy as np
import torch
from torch import nn


def train(model, ids, steps, lr):
    criterion = nn.CrossEntropyLoss()
    optimiser = torch.optim.Adam(model.parameters(), lr)
    out = np.zeros(steps)
    for t in range(steps):
        optimiser.zero_grad(set_to_none=False)
        loss = criterion(model(ids[:-1]), ids[1:])
        loss.backward()
        optimiser.step()
        out[t] = loss.item()
    return list(out)
""",
}

_TRAIN_LOOP = """\
import torch
import torch.nn.functional as F


def train(model, ids, steps, lr):
    {setup}
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(model(ids[:-1]), ids[1:])
        {zero}
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
"""
TRAIN_WRONG = {
    "no_zero_grad": (
        _TRAIN_LOOP.format(
            setup="opt = torch.optim.Adam(model.parameters(), lr=lr)", zero="pass"
        ),
        "zero_grad",
    ),
    "sgd": (
        _TRAIN_LOOP.format(
            setup="opt = torch.optim.SGD(model.parameters(), lr=lr)",
            zero="opt.zero_grad()",
        ),
        "torch.optim.Adam",
    ),
    "copy_of_model": (
        "import copy\n"
        + _TRAIN_LOOP.format(
            setup="model = copy.deepcopy(model)\n    opt = torch.optim.Adam(model.parameters(), lr=lr)",
            zero="opt.zero_grad()",
        ),
        "did not change",
    ),
    "one_step_too_many": (
        _TRAIN_LOOP.format(
            setup="opt = torch.optim.Adam(model.parameters(), lr=lr)",
            zero="opt.zero_grad()",
        )
        + "\n\n_inner = train\n\n\ndef train(model, ids, steps, lr):\n"
        "    return _inner(model, ids, steps + 1, lr)[:steps]\n",
        "trained tables are not",
    ),
}
TRAIN_ATTACKS = {
    # the checker's comparisons replaced, the weights nudged, losses made up (tests/test_grade_attacks.py, ch 2)
    "patches_isclose": TRAIN_PATCH,
    # the companion's own training loop: withheld
    "library_loop": """\
from companion import embedding_lm


def train(model, ids, steps, lr):
    return embedding_lm.train_embedding_lm(model, ids, embedding_lm.Training(steps, lr, False))
""",
    # the checker's reference loop, from the checker's module: not importable in the answer's process
    "checker_reference": """\
import importlib


def train(model, ids, steps, lr):
    checker = importlib.import_module("companion.exercises.embedding_lm")
    return checker._reference_history(model, ids, steps, lr, zero_grad=True)
""",
}

# ----- chapter 6: gpt_forward ----------------------------------------------------------------------------------

FORWARD_RIGHT = {
    "loop": """\
def gpt_forward(model, ids):
    x = model.pos(model.embed(ids))
    for block in model.blocks:
        x = block(x)
    return model.norm(x) @ model.embed.weight.T
""",
    "reduce_lm_head": """\
import functools

import torch


def gpt_forward(model, ids):
    with torch.no_grad():
        h = functools.reduce(lambda x, block: block(x), model.blocks, model.pos(model.embed(ids)))
        return model.lm_head(model.norm(h))
""",
    "tables_by_hand": """\
import torch
import torch.nn.functional as F


def gpt_forward(model, ids):
    n = ids.shape[1]
    x = F.embedding(ids, model.embed.weight) + model.pos.embedding.weight[:n]
    for i in range(len(model.blocks)):
        x = model.blocks[i](x)
    return torch.einsum("bnd,vd->bnv", model.norm(x), model.embed.weight)
""",
}
FORWARD_WRONG = {
    "no_final_norm": (
        "def gpt_forward(model, ids):\n    x = model.pos(model.embed(ids))\n    for b in model.blocks:\n"
        "        x = b(x)\n    return x @ model.embed.weight.T\n",
        "model.norm",
    ),
    "parallel_blocks": (
        "def gpt_forward(model, ids):\n    x0 = model.pos(model.embed(ids))\n    x = x0\n    for b in model.blocks:\n"
        "        x = b(x0)\n    return model.norm(x) @ model.embed.weight.T\n",
        "Chain the blocks",
    ),
    # the right computation, after scaling the final norm's weight in place
    "changes_the_weights": (
        "import torch\n\n\ndef gpt_forward(model, ids):\n    with torch.no_grad():\n"
        "        model.norm.bias.add_(0.5)\n    x = model.pos(model.embed(ids))\n    for b in model.blocks:\n"
        "        x = b(x)\n    return model.norm(x) @ model.embed.weight.T\n",
        "in place",
    ),
}
FORWARD_ATTACKS = {
    "model_call": "def gpt_forward(model, ids):\n    return model(ids)\n",
    "parent_forward": "def gpt_forward(model, ids):\n    return super(type(model), model).forward(ids)\n",
    "library_forward": (
        "import companion.gpt\n\n\ndef gpt_forward(model, ids):\n    return companion.gpt.GPT.forward(model, ids)\n"
    ),
    "mro_forward": "def gpt_forward(model, ids):\n    return type(model).__mro__[1].forward(model, ids)\n",
    "checker_reference": (
        "def gpt_forward(model, ids):\n    from companion.exercises import gpt\n\n"
        "    return gpt._forward_reference(model, ids)\n"
    ),
    "patches_allclose_and_returns_zeros": (
        "import torch\n\n\ndef gpt_forward(model, ids):\n    torch.allclose = lambda *a, **k: True\n"
        "    torch.equal = lambda *a, **k: True\n    return torch.zeros(*ids.shape, model.embed.weight.shape[0])\n"
    ),
}

# ----- chapter 6: next_token_loss ------------------------------------------------------------------------------

LOSS_RIGHT = {
    "flatten": """\
import torch.nn.functional as F


def next_token_loss(model, ids):
    logits = model(ids[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
""",
    "log_softmax_gather": """\
import torch


def next_token_loss(model, ids):
    logp = torch.log_softmax(model(ids[:, :-1]), dim=-1)
    picked = logp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return -picked.mean()
""",
    "classes_second": """\
from torch import nn


def next_token_loss(model, ids):
    inputs, targets = ids[:, :-1], ids[:, 1:]
    return nn.CrossEntropyLoss()(model(inputs).transpose(1, 2), targets)
""",
}
LOSS_WRONG = {
    "no_shift": (
        "import torch.nn.functional as F\n\n\ndef next_token_loss(model, ids):\n"
        "    return F.cross_entropy(model(ids).flatten(0, 1), ids.flatten())\n",
        "Shift",
    ),
    "summed": (
        "import torch.nn.functional as F\n\n\ndef next_token_loss(model, ids):\n    logits = model(ids[:, :-1])\n"
        "    return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten(), reduction='sum')\n",
        "do not sum",
    ),
    "plain_number": (
        "import torch.nn.functional as F\n\n\ndef next_token_loss(model, ids):\n    logits = model(ids[:, :-1])\n"
        "    return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()).item()\n",
        "plain number",
    ),
    "detached": (
        "import torch.nn.functional as F\n\n\ndef next_token_loss(model, ids):\n    logits = model(ids[:, :-1])\n"
        "    return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()).detach().requires_grad_()\n",
        "carries no gradient",
    ),
    # the right value, with a graph that reaches the parameters but gives them no gradient
    "right_value_wrong_gradient": (
        "import torch.nn.functional as F\n\n\ndef next_token_loss(model, ids):\n    logits = model(ids[:, :-1])\n"
        "    loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())\n"
        "    return loss.detach() + 0 * sum(p.sum() for p in model.parameters())\n",
        "gradient of your result",
    ),
    "changes_the_weights": (
        "import torch\nimport torch.nn.functional as F\n\n\ndef next_token_loss(model, ids):\n"
        "    with torch.no_grad():\n        model.embed.weight.mul_(0.5)\n    logits = model(ids[:, :-1])\n"
        "    return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())\n",
        "in place",
    ),
}
LOSS_ATTACKS = {
    "library_loss": (
        "import companion.gpt as g\n\n\ndef next_token_loss(model, ids):\n"
        "    return getattr(g, 'next_' + 'token_loss')(model, ids)\n"
    ),
    "source_of_the_library": (
        "import inspect\nimport companion.gpt\n\n\ndef next_token_loss(model, ids):\n"
        "    ns = {}\n    exec(inspect.getsource(companion.gpt), ns)\n    return ns['next_token_loss'](model, ids)\n"
    ),
    "patches_allclose_and_cross_entropy": (
        "import torch\nimport torch.nn.functional as F\n\n\ndef next_token_loss(model, ids):\n"
        "    torch.allclose = lambda *a, **k: True\n    F.cross_entropy = lambda *a, **k: torch.zeros(())\n"
        "    return (model(ids) * 0).sum()\n"
    ),
}

RIGHT = [(TRAIN, k, v) for k, v in TRAIN_RIGHT.items()] + [
    (FORWARD, k, v) for k, v in FORWARD_RIGHT.items()
]
RIGHT += [(LOSS, k, v) for k, v in LOSS_RIGHT.items()]
WRONG = [(TRAIN, k, *v) for k, v in TRAIN_WRONG.items()] + [
    (FORWARD, k, *v) for k, v in FORWARD_WRONG.items()
]
WRONG += [(LOSS, k, *v) for k, v in LOSS_WRONG.items()]
ATTACKS = [(TRAIN, k, v) for k, v in TRAIN_ATTACKS.items()] + [
    (FORWARD, k, v) for k, v in FORWARD_ATTACKS.items()
]
ATTACKS += [(LOSS, k, v) for k, v in LOSS_ATTACKS.items()]


@pytest.fixture(scope="module")
def verdicts():
    """Every answer above checked once through the grader (two at a time, as ``--jobs 2``)."""
    jobs = [(e, code) for e, _, code in RIGHT] + [(e, code) for e, _, code, _ in WRONG]
    jobs += [(e, code) for e, _, code in ATTACKS]
    with ThreadPoolExecutor(2) as pool:
        results = list(
            pool.map(
                lambda j: check_exercise(j[0], j[1], Limits(seconds=120), []), jobs
            )
        )
    return {code: r for (_, code), r in zip(jobs, results, strict=True)}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("exercise", "style", "code"), RIGHT, ids=[f"{e.name}-{s}" for e, s, _ in RIGHT]
)
def test_right_answers_pass_out_of_process(verdicts, exercise, style, code):
    r = verdicts[code]
    assert r["status"] == "passed", r
    # checked in the grader's process, the answer in its own
    assert r["how"] == "remote", r
    if exercise is not TRAIN:  # the checker's hidden random cases ran too
        assert "3 of them on hidden random inputs" in r["text"], r["text"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("exercise", "style", "code", "named"),
    WRONG,
    ids=[f"{e.name}-{s}" for e, s, _, _ in WRONG],
)
def test_wrong_answers_get_the_checkers_verdict(verdicts, exercise, style, code, named):
    r = verdicts[code]
    assert r["status"] == "wrong" and r["how"] == "remote", r
    assert named in r["text"], r["text"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("exercise", "attack", "code"),
    ATTACKS,
    ids=[f"{e.name}-{s}" for e, s, _ in ATTACKS],
)
def test_attacks_get_no_pass(verdicts, exercise, attack, code):
    r = verdicts[code]
    assert r["status"] in ("wrong", "error", "defining"), r
    assert r.get("how") in ("remote", None), r


@pytest.mark.slow
def test_attacks_are_told_what_they_reached_for(verdicts):
    text = {name: verdicts[code].get("text", "") for _, name, code in ATTACKS}
    for name in (
        "library_loop",
        "library_forward",
        "parent_forward",
        "mro_forward",
        "library_loss",
    ):
        assert "write this one yourself" in text[name], (name, text[name])
    assert "forbids it" in text["model_call"], text["model_call"]
    for name in ("checker_reference", "source_of_the_library"):
        reasons = (
            "cannot be read here",
            "No module named",
            "could not get source code",
        )
        assert any(r in text[name] for r in reasons), (name, text[name])


# ----- the parts: a model as data, rebuilt -------------------------------------------------------------------


def _round_trip(value, strict=True):
    read, write = os.pipe()
    try:
        data = wire.dumps({"op": "result", "value": value}, strict=strict)
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(wire.read, read)
            view = memoryview(data)
            while view:
                view = view[os.write(write, view[: 1 << 16]) :]
            return pending.result()["value"]
    finally:
        os.close(read)
        os.close(write)


def test_a_model_travels_as_data_and_is_rebuilt_alike():
    """Structure, attributes, tied weights and buffers survive; no constructor runs; a checker's own subclass
    comes back as its public base with the methods it defined raising."""
    from companion.exercises.gpt import _PartsOnlyGPT, _tiny_gpt

    model = _tiny_gpt(3, n_layers=2, cls=_PartsOnlyGPT).train()
    model.blocks[1].eval()
    data = _round_trip(model)
    assert isinstance(data, wire.ModuleData)  # reading builds nothing
    assert data.named_tensors().keys() == dict(
        model.named_parameters(remove_duplicate=False)
    ).keys() | {n for n, _ in model.named_buffers(remove_duplicate=False)}
    built = sandbox.rebuild(data)
    assert (
        type(built).__mro__[1].__qualname__ == "GPT"
        and type(built).__mro__[1].__module__ == "companion.gpt"
    )
    assert built.lm_head.weight is built.embed.weight  # tied stays tied
    assert built.state_dict().keys() == model.state_dict().keys()
    assert all(
        torch.equal(a, b)
        for a, b in zip(
            built.state_dict().values(), model.state_dict().values(), strict=True
        )
    )
    assert (
        built.config == model.config and built.training and not built.blocks[1].training
    )
    ids = torch.randint(0, 13, (2, 7))

    def by_parts(m):
        x = m.pos(m.embed(ids))
        for b in m.blocks:
            x = b(x)
        return m.norm(x) @ m.embed.weight.T

    assert torch.equal(by_parts(built.eval()), by_parts(model.eval()))
    with pytest.raises(RuntimeError, match="forbids it"):
        built(ids)


def test_what_is_not_a_model_of_torch_or_the_companion_is_refused():
    class Mine(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2))

    with pytest.raises(wire.Unportable, match="Mine"):
        # a class of nobody's library: it cannot be named in the answer's process
        _round_trip(Mine())
    layer = torch.nn.Linear(2, 2)
    layer.register_forward_hook(lambda *a: None)
    with pytest.raises(wire.Unportable, match="hooks"):
        _round_trip(layer)
    odd = torch.nn.Linear(2, 2)
    odd.note = object()
    with pytest.raises(wire.Unportable, match="object"):
        _round_trip(odd)
    forged = {"M": [{"type": "os:system", "private": [], "params": {}, "buffers": {}, "transient": [],
                     "children": {}, "attrs": {}, "training": True}]}  # fmt: skip
    data = wire._decode_module(forged["M"], [])
    with pytest.raises(
        wire.WireError, match="not a class or function of torch or the companion"
    ):
        sandbox.rebuild(data)
    for spec in (
        "companion.exercises.gpt:_PartsOnlyGPT",
        "homework_grader.sandbox:serve",
        "builtins:eval",
    ):
        with pytest.raises(wire.WireError):
            wire.named_object(spec)


CLOSED = """\
import sys
from homework_grader import sandbox, wire
import companion.exercises.gpt

refused = sandbox.hide_attributes(["companion.gpt.GPT.forward", "companion.gpt.next_token_loss"])
import companion.gpt as g
for how, f in (("method", lambda: g.GPT.forward(None, None)), ("function", lambda: g.next_token_loss(None, None))):
    try:
        f()
        print(how, "CALLED")
    except Exception as e:
        print(how, "write this one yourself" in str(e))
print("file", any(r.endswith("gpt.py") for r in refused))
"""


def test_what_a_checker_withholds_is_withheld_in_the_answers_process():
    run = run_isolated(CLOSED)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == [
        "method",
        "True",
        "function",
        "True",
        "file",
        "True",
    ], run.stdout


def test_an_argument_that_cannot_be_sent_gives_an_error_that_says_so():
    """Nothing is checked in the answer's process any more: a checker handing the answer something that is not
    data (here a lambda) gets an error verdict addressed to the instructor, not a weaker check."""
    from companion.exercises import checking
    from homework_grader import answers, remote, worker

    checker = checking.compare(
        "f", lambda g: 1, [checking.case(lambda: 0)], hidden=None
    )
    box = remote.Sandbox(Limits())
    with pytest.raises(wire.Unportable):
        # raised when the arguments are sent, before any call
        checker.verdict(remote.remote_function(box, "f"))
    answer = answers.extract(["def f(g):\n    return 1\n"], "f")
    entry = worker._entry(
        "f",
        {"status": "unportable", "why": "cannot send a function as data"},
        answer,
        Limits(),
    )
    assert (
        entry["status"] == "error"
        and "cannot send the checker's arguments" in entry["problem"]
    ), entry
    assert "tell your instructor" in entry["text"]


# ----- a class to time (README, "Grading homework") ------------------------------------------------------------

STYLES = {
    "train": [*TRAIN_RIGHT.values(), TRAIN_WRONG["no_zero_grad"][0]],
    "gpt_forward": [*FORWARD_RIGHT.values(), FORWARD_WRONG["no_final_norm"][0]],
    "next_token_loss": [*LOSS_RIGHT.values(), LOSS_WRONG["summed"][0]],
}


def build_copies(folder: Path, chapter: str, count: int) -> None:
    """``count`` solved notebooks of ``chapter`` (``02`` or ``06``): the book's solutions, except that each
    model-receiving exercise gets one of the three right styles above or a wrong answer, in turn."""
    import json
    import re

    book = next((ROOT / "book").glob(f"{chapter}_*.md")).read_text()
    solutions = {}
    for body in re.findall(
        r"^```\{code-cell\}[^\n]*\n(.*?)^```", book, re.MULTILINE | re.DOTALL
    ):
        if "# BEGIN SOLUTION" in body:
            lines = (
                body.split("---\n")[-1].splitlines()
                if body.startswith("---")
                else body.splitlines()
            )
            text = "\n".join(
                line
                for line in lines
                if "SOLUTION" not in line and not line.startswith(":")
            )
            solutions |= dict.fromkeys(
                re.findall(r"^(?:def|class) (\w+)", text, re.MULTILINE), text
            )
    homework = next((ROOT / "book" / "homework").glob(f"{chapter}_*.ipynb"))
    folder.mkdir(parents=True)
    for k in range(count):
        nb = json.loads(homework.read_text())
        for cell in nb["cells"]:
            source = (
                "".join(cell["source"])
                if isinstance(cell["source"], list)
                else cell["source"]
            )
            name = re.search(r"^(?:def|class) (\w+)", source, re.MULTILINE)
            if "exercise-stub" in cell.get("metadata", {}).get("tags", []) and name:
                n = name.group(1)
                cell["source"] = f"# written by student {k}\n" + (
                    STYLES[n][k % 4] if n in STYLES else solutions[n]
                )
        (folder / f"student{k:02d}.ipynb").write_text(json.dumps(nb))


# python tests/test_grade_models.py FOLDER CHAPTER COUNT: a class to grade by hand
if __name__ == "__main__":
    build_copies(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
    print(f"{sys.argv[3]} notebooks of chapter {sys.argv[2]} in {sys.argv[1]}")
