"""Checkers for chapter 6 (GPT): one BPE merge, BPE training, the shifted next-token loss, top-k and top-p
filtering, the forward pass, one generation step with the key/value cache."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import torch
import torch.nn.functional as F

from .. import bpe
from .. import gpt as ref
from .checking import Checker, Mismatch, call, case, compare, expect, show

__all__ = [
    "check_merge",
    "check_learn_merges",
    "check_next_token_loss",
    "check_top_k_logits",
    "check_top_p_logits",
    "check_gpt_forward",
    "check_kv_attention_step",
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
        ids = [alphabet[i] for i in torch.randint(len(alphabet), (int(torch.randint(2, 14, ())),)).tolist()]
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
        case([97, 97, 97, 98, 100, 97, 97, 97, 98, 97, 99], (97, 97), 256, why="aaabdaaabac: merge a a into Z"),
        case([256, 97, 98, 100, 256, 97, 98, 97, 99], (97, 98), 257, why="the second step: merge a b into Y"),
        case([1, 2, 3], (4, 5), 6, why="the pair does not occur: nothing changes"),
        case([7, 7, 7, 7, 7], (7, 7), 9, why="an odd run: left to right, the last 7 stays alone"),
        case([], (1, 2), 3, why="an empty list"),
        case([5], (5, 5), 6, why="a single id"),
        case([3, 4, 3, 4, 4, 3], (4, 3), 300, why="the pair twice, not at the start"),
        case([12, 3, 1, 23, 2, 3, 123], (2, 3), 7, why="ids whose digits contain the pair's: only 2 then 3 merges"),
        case([1, 12, 21, 2, 1], (1, 2), 4, why="1 then 2 is a pair; 12 and 21 are other ids"),
    ],
    hidden=_random_merges,
    mistakes=[
        (_overlapping, "Occurrences may not overlap: after a merge, continue after the pair (skip two ids)."),
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
            words.append("".join(letters[i] for i in torch.randint(len(letters), (length,)).tolist()))
        words += words[: int(torch.randint(0, 3, ()))]  # a few words occur twice
        out.append(case(words, int(torch.randint(0, 9, ())), why="random words"))
    return out


check_learn_merges = compare(
    "learn_merges",
    _learn_merges_reference,
    lambda: [
        case(["aaabdaaabac"], 3, why="the chapter's example: aa, then ab (a tie with Za), then ZY"),
        case(["low", "low", "lower", "newest", "newest", "widest"], 6, why="each occurrence of a word counts"),
        case(["ab", "ab", "ab"], 3, why="one merge leaves no pair inside a word: stop after 1"),
        case(["aaaa", "aaa"], 3, why="runs of one letter: merges do not overlap"),
        case(["café", "é", "naïve"], 3, why="é and ï are two UTF-8 bytes each"),
        case([" the", "the", " then", " cat", " the"], 5, why="words with their leading space"),
        case(["xy", "yx", "xy", "yx"], 2, why="two pairs, equally frequent"),
        case(["abc", "bca"], 0, why="no merges asked for"),
        case([], 2, why="no words"),
        case(["", "a", "b"], 2, why="no word has two bytes"),
    ],
    hidden=_random_words,
    mistakes=[
        (
            _learn_mistake(pick=lambda counts: max(counts, key=lambda p: (counts[p], p))),
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
        (_learn_off_by(-1), "Learn exactly num_merges merges (one too few here): range(num_merges)."),
        (_learn_off_by(+1), "Learn exactly num_merges merges (one too many here): range(num_merges)."),
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
    withhold=["companion.bpe.train_bpe", "companion.bpe.train_bpe_naive", "companion.bpe.BPETokenizer.train"],
)


# --- the shifted next-token loss ---------------------------------------------------------------------------------


def _tiny_gpt(seed: int, vocab_size: int = 13, n_layers: int = 1, cls: type = ref.GPT) -> ref.GPT:
    torch.manual_seed(seed)
    config = ref.GPTConfig(vocab_size=vocab_size, context_length=12, n_layers=n_layers, n_heads=2, d_model=8)
    model = cls(config).eval().requires_grad_(False)
    with torch.no_grad():  # larger weights than GPT-2's initial ones, and random norms and biases, so that
        for name, p in model.named_parameters():  # each typical mistake changes the numbers visibly
            p.add_(0.3 * torch.randn_like(p)) if "norm" in name or name.endswith("bias") else p.mul_(20)
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
    model = _tiny_gpt(0).requires_grad_(True)  # a loss to train with: its gradients are checked too
    return [
        case(model, torch.randint(0, 13, (2, 9)), why="2 sequences of 9 tokens"),
        case(model, torch.randint(0, 13, (1, 2)), why="one sequence of 2 tokens: a single prediction"),
        case(_tiny_gpt(1, n_layers=2).requires_grad_(True), torch.randint(0, 13, (3, 12)), why="2 layers, 3 × 12"),
    ]


check_next_token_loss = compare(
    "next_token_loss",
    ref.next_token_loss,
    _loss_cases,
    mistakes=[
        (_no_shift, "Shift: position t predicts token t + 1, so compare model(ids[:, :-1]) with ids[:, 1:]."),
        (_backwards, "The shift goes the other way: the inputs are ids[:, :-1] and the targets ids[:, 1:]."),
        (_summed, "Average over all B·(n - 1) predictions (F.cross_entropy's default), do not sum."),
        (_probabilities, "F.cross_entropy takes the logits (it applies log-softmax itself), not probabilities."),
    ],
    hint="loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten()) with logits = model(ids[:, :-1]), "
    "targets = ids[:, 1:].",
    what="The loss",
    differentiable=True,
)


# --- top-k filtering ---------------------------------------------------------------------------------------------


def _top_k_strict(logits, k):
    """Exactly k entries kept even with ties (topk's indices), the others -inf."""
    idx = torch.topk(logits, k, dim=-1).indices
    out = torch.full_like(logits, float("-inf"))
    return out.scatter(-1, idx, logits.gather(-1, idx))


def _zero_filled(logits, k):
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, 0.0)


def _smallest(logits, k):
    kth = torch.topk(logits, k, dim=-1, largest=False).values[..., -1:]
    return logits.masked_fill(logits > kth, float("-inf"))


def _first_dimension(logits, k):
    kth = torch.topk(logits, min(k, logits.shape[0]), dim=0).values[-1:]
    return logits.masked_fill(logits < kth, float("-inf"))


check_top_k_logits = compare(
    "top_k_logits",
    ref.top_k_logits,
    lambda: [
        case(torch.tensor([[2.0, -1.0, 0.5, 3.0]]), 2, why="keep 3.0 and 2.0"),
        case(torch.randn(3, 10), 3, why="a batch of 3 rows: each row keeps its own 3"),
        case(torch.randn(2, 5), 5, why="k = V keeps everything"),
        case(torch.randn(4, 6), 1, why="k = 1: only the largest (greedy after sampling)"),
        case(torch.tensor([[3.0, 2.0, 2.0, 0.0]]), 2, why="a tie at the k-th largest: keep both 2.0s"),
        case(torch.randn(2, 3, 7), 2, why="(2, 3, 7): filter along the last dimension"),
    ],
    mistakes=[
        (_zero_filled, "Set the dropped logits to -inf (probability 0 after the softmax), not 0."),
        (_smallest, "Keep the k largest logits, not the k smallest."),
        (_first_dimension, "Filter every row over the vocabulary (the last dimension), dim=-1."),
        (_top_k_strict, "Keep every logit tied with the k-th largest (compare with the k-th value, not indices)."),
    ],
    hint="kth = torch.topk(logits, k, dim=-1).values[..., -1:]; logits.masked_fill(logits < kth, float('-inf')).",
    what="The filtered logits",
    atol=0,
    rtol=0,
)


# --- top-p (nucleus) filtering -----------------------------------------------------------------------------------


def _nucleus(logits, p, *, keep_boundary=True, ties=True, descending=True, on_logits=False, fill=float("-inf")):
    """Top-p with one rule changed: the typical mistakes of :data:`check_top_p_logits`."""
    values, order = torch.sort(logits, dim=-1, descending=descending)
    mass = values if on_logits else torch.softmax(values, dim=-1)
    before = mass.cumsum(dim=-1) - (mass if keep_boundary else 0)  # the boundary token's own mass counts or not
    keep_sorted = before < p
    keep_sorted[..., 0] = True
    if ties:  # every token tied with the last one kept
        last = values.masked_fill(~keep_sorted, float("inf") if descending else float("-inf"))
        last = last.min(-1, keepdim=True).values if descending else last.max(-1, keepdim=True).values
        keep = logits >= last if descending else logits <= last
    else:
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, fill)


def _nucleus_unsorted(logits, p):
    """The running sum taken in the vocabulary's order, not from the most likely token down."""
    probs = torch.softmax(logits, dim=-1)
    return logits.masked_fill(probs.cumsum(dim=-1) - probs >= p, float("-inf"))


def _nucleus_by_probability(logits, p):
    """Keeps every token whose own probability is at least 1 - p."""
    probs = torch.softmax(logits, dim=-1)
    keep = (probs >= 1 - p) | (probs == probs.max(dim=-1, keepdim=True).values)
    return logits.masked_fill(~keep, float("-inf"))


def _nucleus_renormalised(logits, p):
    """Returns the renormalised probabilities of the nucleus instead of the filtered logits."""
    return torch.softmax(ref.top_p_logits(logits, p), dim=-1)


def _nucleus_first_dimension(logits, p):
    return ref.top_p_logits(logits.transpose(0, -1), p).transpose(0, -1)


def _top_p_case(shape, p=None, *, integers=False, why=""):
    """Random logits (small integers: many ties), and a p that lies away from every running sum of the sorted
    probabilities (rounding cannot move the boundary), drawn between two of them."""
    logits = torch.randint(-3, 4, shape).float() if integers else 2 * torch.randn(shape)
    if p is None:
        probs = torch.softmax(torch.sort(logits.reshape(-1, shape[-1]), dim=-1, descending=True).values, dim=-1)
        sums = torch.cat([torch.zeros(probs.shape[0], 1), probs.cumsum(-1)], dim=-1).flatten().sort().values
        gaps = torch.stack([sums[:-1], sums[1:]], dim=-1)
        wide = gaps[gaps[:, 1] - gaps[:, 0] > 2e-3]
        wide = wide if len(wide) else gaps[(gaps[:, 1] - gaps[:, 0]).argmax()][None]
        lo, hi = wide[int(torch.randint(len(wide), ()))].tolist()
        p = round(lo + (0.25 + 0.5 * float(torch.rand(()))) * (hi - lo), 4)
    return case(logits, p, why=why or f"random logits {tuple(shape)}" + (", integers: ties" if integers else ""))


def _top_p_cases() -> list:
    log = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05]).log()[None]
    return [
        case(log, 0.6, why="probabilities 0.5, 0.2, 0.15, 0.1, 0.05: 0.5 + 0.2 reaches 0.6, keep 2"),
        case(log, 0.5 - 1e-3, why="the most likely token alone reaches p: keep 1"),
        case(log[:, [3, 0, 4, 2, 1]], 0.8, why="the same, shuffled: 0.5 + 0.2 + 0.15 reaches 0.8, keep 3"),
        case(
            torch.tensor([[1.0, 2.0, 2.0, 0.0, 2.0]]),
            0.25,
            why="three tied largest, the first alone reaches p: keep all 3",
        ),
        case(torch.tensor([[3.0, 1.0, 1.0, 0.0, -1.0]]), 0.8, why="the token that reaches p is tied: keep both 1.0s"),
        case(log, 1.0, why="p = 1: keep every token"),
        _top_p_case((3, 12), why="3 rows: each row its own nucleus"),
        _top_p_case((2, 3, 9), why="(2, 3, 9): filter along the last dimension"),
        _top_p_case((4, 8), integers=True),
    ]


def _random_top_p() -> list:
    return [_top_p_case((int(torch.randint(1, 4, ())), int(torch.randint(2, 20, ()))), integers=k % 2 == 1)
            for k in range(4)]  # fmt: skip


check_top_p_logits = compare(
    "top_p_logits",
    ref.top_p_logits,
    _top_p_cases,
    hidden=_random_top_p,
    mistakes=[
        (
            lambda x, p: _nucleus(x, p, keep_boundary=False),
            "Keep the token that makes the sum reach p too: a token is kept when the mass of the tokens more "
            "likely than it is still below p (the sum before it, not including it).",
        ),
        (
            lambda x, p: _nucleus(x, p, fill=0.0),
            "Set the dropped logits to -inf (probability 0 after the softmax), not 0.",
        ),
        (
            lambda x, p: _nucleus(x, p, descending=False),
            "Add the probabilities from the most likely token down (sort in descending order), not from the "
            "least likely up.",
        ),
        (
            lambda x, p: _nucleus(x, p, on_logits=True),
            "Sum probabilities (the softmax of the row), not logits.",
        ),
        (
            lambda x, p: _nucleus(x, p, ties=False),
            "Keep every token tied with the last one kept (compare logits with its value, not sorted positions).",
        ),
        (_nucleus_unsorted, "Sort first: the running sum goes from the most likely token to the least likely."),
        (
            _nucleus_by_probability,
            "Top-p keeps the most likely tokens until their probabilities add up to p; "
            "a token's own probability alone does not decide.",
        ),
        (_nucleus_renormalised, "Return the filtered logits (-inf where dropped), not probabilities."),
        (_nucleus_first_dimension, "Filter every row over the vocabulary (the last dimension), dim=-1."),
    ],
    hint="Sort each row in descending order, probs = softmax of the sorted row, before = probs.cumsum(-1) - probs; "
    "keep the sorted positions with before < p; the smallest kept logit is the threshold: "
    "logits.masked_fill(logits < threshold, float('-inf')).",
    what="The filtered logits",
    atol=0,
    rtol=0,
    withhold=["companion.decoding.top_p_logits"],
)


# --- the GPT forward pass ----------------------------------------------------------------------------------------


class _PartsOnlyGPT(ref.GPT):
    """A GPT whose own forward cannot be called: the exercise assembles it from the parts."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("gpt_forward must assemble the forward pass from the model's parts, not call model(ids)")


def _assembled(model: ref.GPT, ids: torch.Tensor, *, positions=True, blocks="chained", norm=True) -> torch.Tensor:
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
        case(_tiny_gpt(0, cls=_PartsOnlyGPT), torch.randint(0, 13, (2, 6)), why="a 1-layer GPT, V = 13, d = 8"),
        case(_tiny_gpt(1, n_layers=3, cls=_PartsOnlyGPT), torch.randint(0, 13, (1, 12)), why="a 3-layer GPT"),
        case(_tiny_gpt(2, n_layers=2, cls=_PartsOnlyGPT), torch.randint(0, 13, (3, 1)), why="2 layers, one token"),
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
        (_forward_mistake(norm=False), "Apply the final layer norm, model.norm, before the output layer."),
        (_forward_mistake(positions=False), "Add the positions: model.pos(model.embed(ids))."),
        (_forward_mistake(blocks=None), "Run x through every block of model.blocks."),
        (_forward_mistake(blocks="parallel"), "Chain the blocks: each block takes the previous block's output."),
    ],
    hint="x = model.pos(model.embed(ids)); x = block(x) for each block; logits = model.norm(x) @ E.T.",
    what="The logits",
    withhold=["companion.gpt.GPT.forward"],
)


# --- one generation step with the key/value cache ---------------------------------------------------------------


def _kv_step(x, W_q, W_k, W_v, K, V, *, scale=True, append=True, query="q", value="v", returned="new", order="end"):
    """One step of one attention head with the cache, with one rule changed: the mistakes of the exercise."""
    q = x @ (W_k if query == "k" else W_q).T  # (B, d_k)
    k, v = x @ W_k.T, x @ (W_k if value == "k" else W_v).T
    pair = ((K, k[:, None]), (V, v[:, None])) if order == "end" else ((k[:, None], K), (v[:, None], V))
    K_new, V_new = (torch.cat(p, dim=1) for p in pair)  # (B, t + 1, d_k), (B, t + 1, d_v)
    keys, values = (K_new, V_new) if append else (K, V)
    scores = (keys @ q[:, :, None])[:, :, 0]  # (B, t + 1)
    if scale:
        scores = scores / math.sqrt(q.shape[-1] if scale is True else x.shape[-1])
    y = (torch.softmax(scores, dim=-1)[:, :, None] * values).sum(dim=1)  # (B, d_v)
    return (y, K_new, V_new) if returned == "new" else (y, K, V)


def _kv_reference(x, W_q, W_k, W_v, K, V):
    return _kv_step(x, W_q, W_k, W_v, K, V)


def _full_attention(X, W_q, W_k, W_v):
    """Every position's output, recomputed from the whole sequence: causal softmax(Q Kᵀ / √d_k) V, (B, n, d_v)."""
    Q, K, V = X @ W_q.T, X @ W_k.T, X @ W_v.T
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    n = X.shape[1]
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ V


def _kv_inputs(B, t, d, d_k, d_v, dtype=torch.float32):
    """x (B, d), the weights, and the cache of t earlier positions (their keys and values)."""
    X = torch.randn(B, t + 1, d, dtype=dtype)
    W_q, W_k, W_v = (torch.randn(m, d, dtype=dtype) / math.sqrt(d) for m in (d_k, d_k, d_v))
    return X[:, -1], W_q, W_k, W_v, X[:, :-1] @ W_k.T, X[:, :-1] @ W_v.T


def _kv_cases() -> list:
    return [
        case(*_kv_inputs(1, 0, 4, 3, 2), why="the first token: an empty cache (t = 0), d = 4, d_k = 3, d_v = 2"),
        case(*_kv_inputs(2, 5, 6, 4, 5), why="a batch of 2, 5 cached positions, d = 6, d_k = 4, d_v = 5"),
        case(*_kv_inputs(3, 1, 8, 2, 3), why="3 rows, one cached position, d = 8, d_k = 2, d_v = 3"),
        case(*_kv_inputs(1, 9, 5, 5, 5, torch.float64), why="float64, 9 cached positions, d = d_k = d_v = 5"),
    ]


def _random_kv() -> list:
    out = []
    for _ in range(3):
        B, t, d, d_k, d_v = (
            int(torch.randint(low, high, ())) for low, high in ((1, 4), (0, 8), (2, 9), (1, 7), (1, 7))
        )
        out.append(case(*_kv_inputs(B, t, d, d_k, d_v), why=f"B = {B}, t = {t}, d = {d}, d_k = {d_k}, d_v = {d_v}"))
    return out


_check_kv_one_step = compare(
    "kv_attention_step",
    _kv_reference,
    _kv_cases,
    hidden=_random_kv,
    mistakes=[
        (
            lambda *a: _kv_step(*a, append=False),
            "Append the new key and value first, then attend: the new token attends to itself too (t + 1 keys).",
        ),
        (
            lambda *a: _kv_step(*a, returned="old"),
            "Return the caches with the new position appended, (B, t + 1, d_k) and (B, t + 1, d_v): the next step "
            "needs them.",
        ),
        (lambda *a: _kv_step(*a, scale=False), "Divide the scores q·k_j by √d_k."),
        (lambda *a: _kv_step(*a, scale="d"), "Divide the scores by √d_k (the keys' width, W_K.shape[0]), not √d."),
        (lambda *a: _kv_step(*a, query="k"), "The query is q = W_Q x (x @ W_q.T), not the key."),
        (lambda *a: _kv_step(*a, value="k"), "The value is v = W_V x (x @ W_v.T), not the key."),
        (
            lambda *a: _kv_step(*a, order="start"),
            "Append the new key and value at the end (dim=1): row j of the cache is position j.",
        ),
    ],
    hint="q, k, v = x @ W_q.T, x @ W_k.T, x @ W_v.T; K = torch.cat([K, k[:, None]], dim=1) (V likewise); "
    "w = softmax(K q / √d_k) over the t + 1 positions; y = Σ_j w_j V_j; return y, K, V.",
    what="(y, K, V)",
)


def _kv_steps(student: Callable[..., Any]) -> tuple[int, int]:
    """The student's step fed token after token from an empty cache, each step given the caches the student's own
    previous step returned: every output must be the full recomputation's at that position."""
    checks, hidden = _check_kv_one_step._cases(student)
    for B, n, d, d_k, d_v in ((2, 6, 6, 4, 3), (1, 5, 4, 4, 4)):
        X = torch.randn(B, n, d)
        W_q, W_k, W_v = (torch.randn(m, d) / math.sqrt(d) for m in (d_k, d_k, d_v))
        full = _full_attention(X, W_q, W_k, W_v)
        K, V = torch.zeros(B, 0, d_k), torch.zeros(B, 0, d_v)
        for t in range(n):
            label = (f"step {t + 1} of {n} (B = {B}, d = {d}, d_k = {d_k}, d_v = {d_v}), from an empty cache, each "
                     "step given the K, V your previous step returned")  # fmt: skip
            got = call(student, X[:, t], W_q, W_k, W_v, K, V, input=label)
            if not (isinstance(got, tuple) and len(got) == 3):
                raise Mismatch("Return a tuple (y, K, V).", input=label, got=show(got, 200))
            y, K, V = got
            expect(y, full[:, t], input=label, what="y, the output at this position,",
                   hint="y must equal the attention output of the full recomputation, causal softmax(Q Kᵀ / √d_k) V "
                   "at this position; the K and V you return are what the next step receives.")  # fmt: skip
            checks += 1
    return checks, hidden


check_kv_attention_step = Checker("kv_attention_step", _kv_steps, kind="function")
