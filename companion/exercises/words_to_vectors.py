"""Checkers for chapter 1, *From words to vectors*.

========================  ==========================================================================
checker                   what the student writes
========================  ==========================================================================
``check_encode``          ``encode(tokens, stoi) -> LongTensor``, unknown tokens to stoi['<unk>']
``check_one_hot``         ``one_hot(ids, vocab_size) -> (n, V)`` float tensor
``check_cosine``          ``cosine_similarity(u, v) -> 0-d tensor`` for two ``(D,)`` vectors
``check_embedding``       ``class Embedding(nn.Module)`` with an ``(N, D)`` weight, the seeds' homework
========================  ==========================================================================
"""

from __future__ import annotations

import torch
from torch import nn

from .. import embeddings as ref
from .checking import (
    Checker,
    Mismatch,
    OneCall,
    call,
    case,
    compare,
    expect,
    expect_module,
    expect_raises,
    show,
)
from .checking.random_state import hidden_inputs

__all__ = ["check_encode", "check_one_hot", "check_cosine", "check_embedding"]

_STOI = {"<unk>": 0, "the": 1, "dog": 2, "barks": 3, ".": 4}


def _encode(tokens: list[str], stoi: dict[str, int]) -> torch.Tensor:
    return torch.tensor([stoi.get(t, stoi["<unk>"]) for t in tokens], dtype=torch.long)


_WORDS = [
    "the",
    "The",
    "THE",
    "dog",
    "Dog",
    "barks",
    "cat",
    "sat",
    "on",
    "mat",
    ".",
    ",",
    "a",
    "A",
    "runs",
]


def _random_encodings() -> list:
    """Hidden cases: a random vocabulary of (case-sensitive) words whose '<unk>' sits at a random id, and texts
    with repeated, upper-case and unknown tokens; so that no table of the shown answers passes."""
    out = []
    for _ in range(3):
        words = [
            _WORDS[i]
            for i in torch.randperm(len(_WORDS))[
                : int(torch.randint(4, 10, ()))
            ].tolist()
        ]
        # an upper-case token whose lower-case form is known and which is not: a lookup that
        # lower-cases finds an id where the rule gives '<unk>'
        lower, upper = [("the", "The"), ("dog", "Dog"), ("a", "A")][
            int(torch.randint(3, ()))
        ]
        words = [w for w in words if w not in (lower, upper)] + [lower]
        known = ["<unk>", *words]
        # not 0..V-1, '<unk>' anywhere
        ids = torch.randperm(len(known) + 5)[: len(known)].tolist()
        stoi = dict(zip(known, ids, strict=True))
        text = [
            _WORDS[i]
            for i in torch.randint(
                len(_WORDS), (int(torch.randint(3, 12, ())),)
            ).tolist()
        ]
        # a repeated token, one that no vocabulary holds, and the upper-case one
        text += [text[0], "zebra", upper]
        out.append(
            case(
                text,
                stoi,
                why="a random vocabulary, '<unk>' at id " + str(stoi["<unk>"]),
            )
        )
    return out


check_encode = compare(
    "encode",
    _encode,
    [
        case(["the", "dog", "barks", "."], _STOI),
        case(["the", "cat", "barks", "."], _STOI, why="'cat' is unknown"),
        case(["zebra"], _STOI),
        case([], _STOI, why="no tokens at all"),
    ],
    hidden=_random_encodings,
    ids=True,
    mistakes=[
        (
            lambda tokens, stoi: torch.tensor(
                [stoi[t] for t in tokens if t in stoi], dtype=torch.long
            ),
            "A token that is not in stoi gets the id of '<unk>'; it is not dropped.",
        ),
        (
            lambda tokens, stoi: torch.tensor(
                [stoi.get(t, 0) for t in tokens], dtype=torch.long
            ),
            "Unknown tokens get the id of '<unk>', stoi['<unk>'], which need not be 0.",
        ),
        (
            lambda tokens, stoi: torch.tensor(
                [stoi.get(t.lower(), stoi["<unk>"]) for t in tokens], dtype=torch.long
            ),
            "Look each token up as it is: stoi is case-sensitive ('The' and 'the' are different tokens).",
        ),
        (
            lambda tokens, stoi: torch.tensor(
                [stoi.get(t, stoi["<unk>"]) for t in tokens]
            ),
            "torch.tensor([]) is a float tensor: say dtype=torch.long, so that no tokens give integer ids too.",
        ),
    ],
    hint="Look each token up in stoi; a token that is not there gets the id of '<unk>'.",
    what="The id tensor",
    atol=0,
    rtol=0,
)

check_one_hot = compare(
    "one_hot",
    ref.one_hot,
    lambda: [
        case(torch.tensor([2, 0, 1]), 3),
        case(torch.tensor([4, 4, 0]), 6, why="a repeated id"),
        case(torch.tensor([0]), 1),
        case(torch.randint(0, 50, (7,)), 50),
    ],
    mistakes=[
        (
            lambda ids, v: nn.functional.one_hot(ids, v),
            "torch.nn.functional.one_hot returns integers; the exercise asks for a float tensor.",
        ),
        (
            lambda ids, v: ref.one_hot(ids, v).T,
            "One row per id and vocab_size columns, not the other way round.",
        ),
    ],
    hint="Row i is all zeros except a single 1.0 in column ids[i].",
    what="The one-hot matrix",
)

check_cosine = compare(
    "cosine_similarity",
    ref.cosine_similarity,
    lambda: [
        case(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), why="orthogonal"),
        case(
            torch.tensor([1.0, 2.0, 3.0]),
            torch.tensor([2.0, 4.0, 6.0]),
            why="same direction",
        ),
        case(
            torch.tensor([3.0, 4.0]),
            torch.tensor([-3.0, -4.0]),
            why="opposite directions",
        ),
        case(torch.tensor([0.85, 0.6]), torch.tensor([0.54, 0.36])),
        case(torch.randn(16), torch.randn(16)),
        case(10 * torch.randn(5), 0.1 * torch.randn(5)),
    ],
    mistakes=[
        (
            lambda u, v: u @ v,
            "That is the dot product uᵀv; cosine similarity also divides by ‖u‖ ‖v‖.",
        ),
        (lambda u, v: u @ v / u.norm(), "Divide by both norms, ‖u‖ and ‖v‖."),
        (
            lambda u, v: u @ v / (u @ u),
            "Divide by the product of the norms ‖u‖ ‖v‖, not by the squared norm of one.",
        ),
    ],
    hint="cos(u, v) = uᵀv / (‖u‖ ‖v‖).",
    what="The cosine similarity",
    one_call=[
        OneCall(name, instead="a dot product and two norms")
        for name in ("torch.nn.functional.cosine_similarity", "torch.cosine_similarity")
    ],
)


def _embedding_cases(Embedding) -> tuple[int, int]:
    label = "Embedding(10, 4)"
    layer = call(Embedding, 10, 4, input=label)
    expect_module(layer, label)
    weight = getattr(layer, "weight", None)
    if not isinstance(weight, nn.Parameter):
        raise Mismatch(
            "The layer needs an attribute `weight` that is an nn.Parameter, so that training can update it.",
            input=label,
            expected="an nn.Parameter of shape (10, 4)",
            got=show(weight),
            hint="A tensor becomes a parameter of the module when it is wrapped in nn.Parameter(...).",
        )
    expect(
        tuple(weight.shape),
        (10, 4),
        input=label,
        what="The shape of weight",
        hint="The table has num_embeddings rows and embedding_dim columns: (N, D).",
    )
    _check_initialisation(Embedding)

    ids = torch.tensor([[1, 3, 3], [0, 9, 1]])
    label = f"layer(ids) with ids={ids.tolist()} of shape (batch=2, seq=3)"
    out = call(layer, ids, input=label)
    expect(
        out,
        weight.detach()[ids],
        input=label,
        what="The output",
        hint="Output[b, t] must be the row weight[ids[b, t]]; the shape is (batch, seq, D).",
    )
    if not out.requires_grad:
        raise Mismatch(
            "The output does not carry gradients back to the weight.",
            input=label,
            hint="Index the nn.Parameter itself; a copy made through .data, .detach(), numpy or "
            "torch.tensor(...) is cut off from it.",
        )
    weight.grad = None
    label += "; then out.sum().backward()"
    try:
        out.sum().backward()
    except Exception as e:
        raise Mismatch(
            f"Backpropagating through your output raised {type(e).__name__}: {e}",
            input=label,
        ) from e
    counts = torch.bincount(ids.flatten(), minlength=10).to(torch.float32)
    if weight.grad is None:
        raise Mismatch(
            "No gradient reached the weight.",
            input=label,
            hint="Return rows of self.weight so autograd can trace them.",
        )
    expect(
        weight.grad,
        counts[:, None].expand(10, 4),
        input=label,
        what="weight.grad",
        hint="Each row's gradient counts how often that token was looked up; rows never used stay 0.",
    )
    single = torch.tensor([[7]])
    expect(
        call(layer, single, input="ids=[[7]]"),
        weight.detach()[single],
        input="ids=[[7]]",
        what="The output",
    )

    for bad, what in (
        (torch.tensor([[10]]), "ids=[[10]] (the table has rows 0..9)"),
        (torch.tensor([[-1]]), "ids=[[-1]]"),
    ):
        expect_raises(
            layer,
            bad,
            exceptions=(ValueError,),
            input=what,
            hint="Check that every id lies in [0, num_embeddings) and raise ValueError naming the bad "
            "id; a negative id would silently pick a row from the end.",
        )
    expect_raises(
        layer,
        torch.tensor([[1.0, 2.0]]),
        exceptions=(TypeError,),
        input="ids=[[1.0, 2.0]] (a float tensor)",
        hint="Token ids must be integers: raise TypeError when ids.dtype is floating point.",
    )
    _hidden_embedding_case(Embedding)
    return 8, 1


def _hidden_embedding_case(Embedding) -> None:
    """A hidden random table size, id tensor and out-of-range ids: new on every run."""
    with hidden_inputs() as seed:
        n, d = int(torch.randint(3, 30, ())), int(torch.randint(1, 8, ()))
        shape = tuple(torch.randint(1, 4, (int(torch.randint(1, 4, ())),)).tolist())
        ids = torch.randint(0, n, shape)
        bad = (n + int(torch.randint(0, 5, ())), -int(torch.randint(1, n + 1, ())))
    label = f"Embedding({n}, {d}), ids of shape {shape}  (a hidden random case, seed {seed})"
    layer = call(Embedding, n, d, input=label)
    weight = getattr(layer, "weight", None)
    if not isinstance(weight, torch.Tensor) or tuple(weight.shape) != (n, d):
        raise Mismatch(
            f"Embedding({n}, {d}) should have a weight of shape ({n}, {d}).",
            input=label,
            got=show(weight),
        )
    out = call(layer, ids.clone(), input=label)
    expect(
        out,
        weight.detach()[ids],
        input=label,
        what="The output",
        hint="Output[...] must be weight[ids[...]].",
    )
    for b in bad:
        expect_raises(
            layer,
            torch.tensor([[b]]),
            exceptions=(ValueError,),
            input=f"Embedding({n}, {d}), ids=[[{b}]] (rows 0..{n - 1}; a hidden random case, seed {seed})",
            hint="Check every id against this table's own num_embeddings, 0 <= id < num_embeddings, and raise "
            "ValueError otherwise.",
        )


def _check_initialisation(Embedding) -> None:
    """The weight of a large table has the statistics of a standard normal (mean 0, std 1, 4.6 % beyond ±2)."""
    label = "Embedding(1000, 64): the statistics of its 64 000 initial weights"
    weight = getattr(call(Embedding, 1000, 64, input=label), "weight", None)
    if not isinstance(weight, torch.Tensor) or tuple(weight.shape) != (1000, 64):
        raise Mismatch(
            "Embedding(1000, 64) should have a weight of shape (1000, 64).",
            input=label,
            got=show(weight),
        )
    w = weight.detach().double()
    stats = {
        "mean": w.mean().item(),
        "std": w.std().item(),
        "share beyond ±2": (w.abs() > 2).double().mean().item(),
    }
    # a standard normal: mean 0 ± 0.004, std 1 ± 0.003, 4.55 % ± 0.08 % beyond ±2 (these bounds are > 5 sigma)
    if (
        abs(stats["mean"]) > 0.03
        or abs(stats["std"] - 1) > 0.03
        or abs(stats["share beyond ±2"] - 0.0455) > 0.006
    ):
        raise Mismatch(
            "The initial weights are not drawn from a standard normal distribution.",
            input=label,
            expected="mean 0, std 1, about 4.6 % of the weights beyond ±2",
            got=", ".join(f"{k} {v:.4g}" for k, v in stats.items()),
            hint="torch.randn draws from the standard normal; zeros, ones or torch.rand (uniform) do not.",
        )


check_embedding = Checker(
    "Embedding",
    _embedding_cases,
    withhold=[
        "companion.embeddings.Embedding.__init__",
        "companion.embeddings.Embedding.forward",
    ],
    one_call=[OneCall("torch.nn.Embedding", instead="an nn.Parameter and indexing")],
)
