"""Checkers for chapter 6 (GPT): one BPE merge, BPE training, the sliding windows of (input, target) pairs, the
shifted next-token loss, the forward pass (the generation exercises are in :mod:`companion.exercises.generation`)."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import torch
import torch.nn.functional as F

from .. import bpe
from .. import gpt as ref
from ..training import windows
from .checking import case, compare

__all__ = [
    "check_merge",
    "check_learn_merges",
    "check_sliding_windows",
    "check_next_token_loss",
    "check_gpt_forward",
]


# --- one BPE merge step ----------------------------------------------------------------------------------------


def _overlapping(ids, pair, new_id):
    """Replaces every position where the pair starts, overlapping ones included: (a, a) in a a a → X X."""
    out = []
    for i, x in enumerate(ids):
        if i + 1 < len(ids) and (x, ids[i + 1]) == tuple(pair):
            out.append(new_id)
        elif not (i > 0 and (ids[i - 1], x) == tuple(pair)):
            out.append(x)
    return out


def _first_only(ids, pair, new_id):
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == tuple(pair):
            return [*ids[:i], new_id, *ids[i + 2 :]]
    return list(ids)


def _reversed_pair(ids, pair, new_id):
    return bpe.merge(ids, (pair[1], pair[0]), new_id)


def _random_merges() -> list:
    """Random lists over ids whose decimal digits overlap (1, 2, 12, 21, 121, ...), and a pair that occurs in the
    list: two neighbours at a random position (so that every case merges something), one list in six a pair that
    may not occur."""
    alphabet = [1, 2, 3, 12, 21, 23, 121, 212]
    out = []
    for k in range(6):
        ids = [
            alphabet[i]
            for i in torch.randint(
                len(alphabet), (int(torch.randint(2, 14, ())),)
            ).tolist()
        ]
        if k == 5:
            a, b = (alphabet[i] for i in torch.randint(len(alphabet), (2,)).tolist())
        else:
            i = int(torch.randint(len(ids) - 1, ()))
            a, b = ids[i], ids[i + 1]
        out.append(case(ids, (a, b), 300 + len(out), why="random ids"))
    return out


check_merge = compare(
    "merge",
    bpe.merge,
    lambda: [
        case(
            [97, 97, 97, 98, 100, 97, 97, 97, 98, 97, 99],
            (97, 97),
            256,
            why="aaabdaaabac: merge a a into Z",
        ),
        case(
            [256, 97, 98, 100, 256, 97, 98, 97, 99],
            (97, 98),
            257,
            why="the second step: merge a b into Y",
        ),
        case([1, 2, 3], (4, 5), 6, why="the pair does not occur: nothing changes"),
        case(
            [7, 7, 7, 7, 7],
            (7, 7),
            9,
            why="an odd run: left to right, the last 7 stays alone",
        ),
        case([], (1, 2), 3, why="an empty list"),
        case([5], (5, 5), 6, why="a single id"),
        case([3, 4, 3, 4, 4, 3], (4, 3), 300, why="the pair twice, not at the start"),
        case(
            [12, 3, 1, 23, 2, 3, 123],
            (2, 3),
            7,
            why="ids whose digits contain the pair's: only 2 then 3 merges",
        ),
        case(
            [1, 12, 21, 2, 1],
            (1, 2),
            4,
            why="1 then 2 is a pair; 12 and 21 are other ids",
        ),
    ],
    hidden=_random_merges,
    mistakes=[
        (
            _overlapping,
            "Occurrences may not overlap: after a merge, continue after the pair (skip two ids).",
        ),
        (_first_only, "Replace every occurrence of the pair, not only the first."),
        (_reversed_pair, "The pair is ordered: (a, b) means a directly followed by b."),
    ],
    hint="Walk left to right: where ids[i], ids[i + 1] equals the pair, emit new_id and skip two; else emit ids[i].",
    what="The merged list",
    atol=0,
    rtol=0,
)


# --- BPE training: the merges, in order ------------------------------------------------------------------------


def _learn_merges_reference(words, num_merges):
    """The companion's ``train_bpe_naive`` on the words as its chunks (one word per line, split at line breaks)."""
    merges = bpe.train_bpe_naive("\n".join(words), 256 + num_merges, pattern=r"[^\n]+")
    return list(merges)


def _learn(
    words,
    num_merges,
    *,
    encode=lambda w: list(w.encode("utf-8")),
    pick=lambda counts: min(counts, key=lambda p: (-counts[p], p)),
    apply=bpe.merge,
    recount=True,
    joined=False,
    distinct=False,
):
    """BPE training with one thing changed at a time: the typical mistakes of :data:`check_learn_merges`."""
    words = list(dict.fromkeys(words)) if distinct else list(words)
    seqs = [encode(w) for w in words]
    if joined:
        seqs = [[i for s in seqs for i in s]]
    merges = []
    counts = Counter()
    for k in range(num_merges):
        if recount or k == 0:
            counts = Counter(p for s in seqs for p in pairwise(s))
        counts = +counts  # drop pairs counted down to zero
        if not counts:
            break
        pair = pick(counts)
        seqs = [apply(s, pair, 256 + k) for s in seqs]
        if not recount:
            del counts[pair]
        merges.append(pair)
    return merges


def _learn_mistake(**how):
    def wrong(words, num_merges):
        return _learn(words, num_merges, **how)

    return wrong


def _learn_off_by(shift):
    def wrong(words, num_merges):
        return _learn(words, max(num_merges + shift, 0))

    return wrong


def _random_words() -> list:
    """Random words over a small alphabet (so that pairs repeat and ties are common), a few repeated, one non-ASCII."""
    out = []
    for _ in range(5):
        letters = "abcé" if len(out) == 4 else "abc"
        n_words = int(torch.randint(1, 9, ()))
        words = []
        for _ in range(n_words):
            length = int(torch.randint(0, 8, ()))
            words.append(
                "".join(
                    letters[i] for i in torch.randint(len(letters), (length,)).tolist()
                )
            )
        words += words[: int(torch.randint(0, 3, ()))]  # a few words occur twice
        out.append(case(words, int(torch.randint(0, 9, ())), why="random words"))
    return out


check_learn_merges = compare(
    "learn_merges",
    _learn_merges_reference,
    lambda: [
        case(
            ["aaabdaaabac"],
            3,
            why="the chapter's example: aa, then ab (a tie with Za), then ZY",
        ),
        case(
            ["low", "low", "lower", "newest", "newest", "widest"],
            6,
            why="each occurrence of a word counts",
        ),
        case(
            ["ab", "ab", "ab"],
            3,
            why="one merge leaves no pair inside a word: stop after 1",
        ),
        case(["aaaa", "aaa"], 3, why="runs of one letter: merges do not overlap"),
        case(["café", "é", "naïve"], 3, why="é and ï are two UTF-8 bytes each"),
        case(
            [" the", "the", " then", " cat", " the"],
            5,
            why="words with their leading space",
        ),
        case(["xy", "yx", "xy", "yx"], 2, why="two pairs, equally frequent"),
        case(["abc", "bca"], 0, why="no merges asked for"),
        case([], 2, why="no words"),
        case(["", "a", "b"], 2, why="no word has two bytes"),
    ],
    hidden=_random_words,
    mistakes=[
        (
            _learn_mistake(
                pick=lambda counts: max(counts, key=lambda p: (counts[p], p))
            ),
            "Ties go to the smallest pair: among the most frequent pairs take min(...) of the tuples (a, b).",
        ),
        (
            _learn_mistake(pick=lambda counts: counts.most_common(1)[0][0]),
            "Ties go to the smallest pair (a, b), not to the pair counted first (most_common keeps first-seen order).",
        ),
        (
            _learn_mistake(joined=True),
            "Count pairs inside each word only: the last byte of one word and the first of the next are no pair.",
        ),
        (
            _learn_mistake(recount=False),
            "Count the pairs again after every merge: a merge creates new pairs (with the new id) and removes others.",
        ),
        (
            _learn_mistake(apply=_overlapping),
            "Merge left to right without overlaps, as merge does: a a a with the pair (a, a) becomes Z a, not Z Z.",
        ),
        (
            _learn_off_by(-1),
            "Learn exactly num_merges merges (one too few here): range(num_merges).",
        ),
        (
            _learn_off_by(+1),
            "Learn exactly num_merges merges (one too many here): range(num_merges).",
        ),
        (
            _learn_mistake(distinct=True),
            "Every occurrence of a word counts: a word listed twice contributes its pairs twice.",
        ),
        (
            _learn_mistake(encode=lambda w: [ord(c) for c in w]),
            "Start from the UTF-8 bytes, list(word.encode('utf-8')), not the characters' code points (ord).",
        ),
    ],
    hint="For k in range(num_merges): count the pairs inside every word (Counter over pairwise(ids)); stop if there "
    "are none; pair = min(counts, key=lambda p: (-counts[p], p)); merge it into 256 + k in every word.",
    what="The merges",
    atol=0,
    rtol=0,
    withhold=[
        "companion.bpe.train_bpe",
        "companion.bpe.train_bpe_naive",
        "companion.bpe.BPETokenizer.train",
    ],
)


# --- sliding windows of (input, target) pairs --------------------------------------------------------------------


def _pairs(starts, ids, length):
    inputs = torch.stack([ids[i : i + length] for i in starts])
    return inputs, torch.stack([ids[i + 1 : i + length + 1] for i in starts])


# the right windows, cut here so that a mistake never calls the withheld answer
def _cut(ids, length, stride):
    w = ids.unfold(0, length + 1, stride)
    return w[:, :-1], w[:, 1:]


def _unshifted(ids, length, stride):
    inputs, _ = _cut(ids, length, stride)
    return inputs, inputs.clone()


def _swapped(ids, length, stride):
    inputs, targets = _cut(ids, length, stride)
    return targets, inputs


# a window of n ids, not n + 1: inputs and targets of n - 1
def _window_of_n(ids, length, stride):
    w = ids.unfold(0, length, stride)
    return w[:, :-1], w[:, 1:]


def _stride_one(ids, length, stride):
    return _cut(ids, length, 1)


def _stride_length(ids, length, stride):
    return _cut(ids, length, length)


def _last_dropped(ids, length, stride):
    return _pairs(range(0, len(ids) - length - 1, stride), ids, length)


def _first_dropped(ids, length, stride):
    return _pairs(range(stride, len(ids) - length, stride), ids, length)


def _whole_windows(ids, length, stride):
    w = ids.unfold(0, length + 1, stride)
    return w, w


def _window_cases():
    # distinct ids: a window read from the wrong place cannot match by chance
    stream = torch.randperm(60)
    return [
        case(
            torch.arange(10, 24),
            4,
            3,
            why="14 ids, n = 4, stride 3: the last window ends on the last id",
        ),
        case(
            torch.arange(10, 23),
            4,
            4,
            why="13 ids, n = 4, stride 4: one id is left over",
        ),
        case(stream[:20], 5, 1, why="stride 1: every window"),
        case(stream[:33], 8, 8, why="stride n: windows that share no prediction"),
        case(stream[:7], 6, 2, why="exactly one window of n + 1 ids"),
        case(
            stream[:40],
            3,
            5,
            why="a stride longer than the window: some ids are never read",
        ),
    ]


check_sliding_windows = compare(
    "sliding_windows",
    windows.sliding_windows,
    _window_cases,
    mistakes=[
        (
            _unshifted,
            "The target is the input shifted by one: ids[i + 1 : i + n + 1], not ids[i : i + n].",
        ),
        (
            _swapped,
            "Input first, then target: (ids[i : i + n], ids[i + 1 : i + n + 1]).",
        ),
        (
            _window_of_n,
            "A window holds n + 1 ids, so that both the input and the target have n.",
        ),
        (_stride_one, "Start the windows `stride` positions apart, not one."),
        (_stride_length, "Start the windows `stride` positions apart, not n."),
        (
            _last_dropped,
            "The last window may end on the last id: start i while i + n + 1 <= N.",
        ),
        (_first_dropped, "The first window starts at position 0."),
        (
            _whole_windows,
            "Return the inputs ids[i : i + n] and the targets ids[i + 1 : i + n + 1], each (K, n).",
        ),
    ],
    hint="For i in range(0, N - n, stride): input ids[i : i + n], target ids[i + 1 : i + n + 1]; stack each "
    "into (K, n).",
    what="The windows",
    atol=0,
    rtol=0,
    ids=True,
)


# --- the shifted next-token loss ---------------------------------------------------------------------------------


def _tiny_gpt(
    seed: int, vocab_size: int = 13, n_layers: int = 1, cls: type = ref.GPT
) -> ref.GPT:
    torch.manual_seed(seed)
    config = ref.GPTConfig(
        vocab_size=vocab_size,
        context_length=12,
        n_layers=n_layers,
        n_heads=2,
        d_model=8,
    )
    model = cls(config).eval().requires_grad_(False)
    # larger weights than GPT-2's initial ones, and random norms and biases, so that
    with torch.no_grad():
        # each typical mistake changes the numbers visibly
        for name, p in model.named_parameters():
            p.add_(0.3 * torch.randn_like(p)) if "norm" in name or name.endswith(
                "bias"
            ) else p.mul_(20)
    return model


def _no_shift(model, ids):
    logits = model(ids)
    return F.cross_entropy(logits.flatten(0, 1), ids.flatten())


def _backwards(model, ids):
    logits = model(ids[:, 1:])
    return F.cross_entropy(logits.flatten(0, 1), ids[:, :-1].flatten())


def _summed(model, ids):
    return ref.next_token_loss(model, ids) * (ids.shape[0] * (ids.shape[1] - 1))


def _probabilities(model, ids):
    probs = torch.softmax(model(ids[:, :-1]), -1)
    return F.cross_entropy(probs.flatten(0, 1), ids[:, 1:].flatten())


def _loss_cases():
    # a loss to train with: its gradients are checked too
    model = _tiny_gpt(0).requires_grad_(True)
    return [
        case(model, torch.randint(0, 13, (2, 9)), why="2 sequences of 9 tokens"),
        case(
            model,
            torch.randint(0, 13, (1, 2)),
            why="one sequence of 2 tokens: a single prediction",
        ),
        case(
            _tiny_gpt(1, n_layers=2).requires_grad_(True),
            torch.randint(0, 13, (3, 12)),
            why="2 layers, 3 × 12",
        ),
    ]


check_next_token_loss = compare(
    "next_token_loss",
    ref.next_token_loss,
    _loss_cases,
    mistakes=[
        (
            _no_shift,
            "Shift: position t predicts token t + 1, so compare model(ids[:, :-1]) with ids[:, 1:].",
        ),
        (
            _backwards,
            "The shift goes the other way: the inputs are ids[:, :-1] and the targets ids[:, 1:].",
        ),
        (
            _summed,
            "Average over all B·n predictions (n + 1 tokens a window; F.cross_entropy's default), do not sum.",
        ),
        (
            _probabilities,
            "F.cross_entropy takes the logits (it applies log-softmax itself), not probabilities.",
        ),
    ],
    hint="loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten()) with logits = model(ids[:, :-1]), "
    "targets = ids[:, 1:].",
    what="The loss",
    differentiable=True,
)


# --- the GPT forward pass ----------------------------------------------------------------------------------------


class _PartsOnlyGPT(ref.GPT):
    """A GPT whose own forward cannot be called: the exercise assembles it from the parts."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        raise RuntimeError(
            "gpt_forward must assemble the forward pass from the model's parts, not call model(ids)"
        )


def _assembled(
    model: ref.GPT, ids: torch.Tensor, *, positions=True, blocks="chained", norm=True
) -> torch.Tensor:
    x = model.pos(model.embed(ids)) if positions else model.embed(ids)
    x0 = x
    for block in model.blocks if blocks else ():
        x = block(x if blocks == "chained" else x0)
    return (model.norm(x) if norm else x) @ model.embed.weight.T


def _forward_reference(model: ref.GPT, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return _assembled(model, ids)


def _forward_cases() -> list:
    return [
        case(
            _tiny_gpt(0, cls=_PartsOnlyGPT),
            torch.randint(0, 13, (2, 6)),
            why="a 1-layer GPT, V = 13, d = 8",
        ),
        case(
            _tiny_gpt(1, n_layers=3, cls=_PartsOnlyGPT),
            torch.randint(0, 13, (1, 12)),
            why="a 3-layer GPT",
        ),
        case(
            _tiny_gpt(2, n_layers=2, cls=_PartsOnlyGPT),
            torch.randint(0, 13, (3, 1)),
            why="2 layers, one token",
        ),
    ]


def _forward_mistake(**how):
    def wrong(model: ref.GPT, ids: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return _assembled(model, ids, **how)

    return wrong


check_gpt_forward = compare(
    "gpt_forward",
    _forward_reference,
    _forward_cases,
    mistakes=[
        (
            _forward_mistake(norm=False),
            "Apply the final layer norm, model.norm, before the output layer.",
        ),
        (
            _forward_mistake(positions=False),
            "Add the positions: model.pos(model.embed(ids)).",
        ),
        (_forward_mistake(blocks=None), "Run x through every block of model.blocks."),
        (
            _forward_mistake(blocks="parallel"),
            "Chain the blocks: each block takes the previous block's output.",
        ),
    ],
    hint="x = model.pos(model.embed(ids)); x = block(x) for each block; logits = model.norm(x) @ E.T.",
    what="The logits",
    withhold=["companion.gpt.GPT.forward"],
)
