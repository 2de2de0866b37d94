"""BERT (chapter 7): a stack of post-norm encoder blocks, pretrained by masked-LM and next-sentence prediction.

- :class:`BertConfig`: the hyperparameters (:meth:`BertConfig.base`, :meth:`BertConfig.large` are the paper's);
- :class:`BertEmbeddings`: ``LayerNorm(E[token] + P[position] + T[token type])``;
- :class:`BertEncoder`: embeddings, ``n_layers`` post-norm :class:`~companion.transformer.EncoderBlock` s
  (exact GELU, LayerNorm eps 1e-12) and the pooler ``tanh(W h_[CLS] + b)`` (Hugging Face's ``BertModel``);
- :class:`MaskedLMHead` (dense, GELU, LayerNorm, then the decoder tied to the token embedding with its own
  bias) and :class:`BertForPreTraining` (encoder, masked-LM head, next-sentence head: ``BertForPreTraining``);
- :func:`pretraining_loss`, :func:`parameter_count` (the count by formula), :func:`mean_pool` and
  :func:`sentence_embeddings` (sentence-transformers' mean pooling);
- SQuAD's span head: :class:`SpanHead` (start and end logits from each token's vector), :func:`span_loss` (the
  mean of the two cross-entropies) and :func:`best_span` (the best start ≤ end within the context);
- :func:`bert_inputs` (a batch ``[CLS] a [SEP] b [SEP]`` with its segment ids, :func:`truncate_pair`) and
  :data:`IGNORE_INDEX`, the label the loss skips. The pretraining *data* (masking, sentence pairs) is machinery:
  :mod:`companion.data.bert_pretraining`.

Weights of Hugging Face's models (or of a ``model.safetensors`` file) are ported by :mod:`companion.interop.hf_bert`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .masks import Mask, padding_to_attention_mask
from .transformer import BlockConfig, EncoderBlock, LayerNorm
from .validation import (
    describe,
    require_context,
    require_entries,
    require_heads,
    require_ids,
    require_instance,
    require_int,
    require_number,
)

__all__ = [
    "BertConfig",
    "BertEmbeddings",
    "BertEncoder",
    "encoder_inputs",
    "MaskedLMHead",
    "BertForPreTraining",
    "pretraining_loss",
    "parameter_count",
    "mean_pool",
    "sentence_embeddings",
    "SpanHead",
    "span_loss",
    "best_span",
    "IGNORE_INDEX",
    "truncate_pair",
    "bert_inputs",
]

IGNORE_INDEX = -100
"""Label of the positions the loss ignores (``torch.nn.CrossEntropyLoss``'s default ``ignore_index``)."""


@dataclass
class BertConfig:
    """The hyperparameters of a BERT model; the defaults are BERT-base (uncased).

    ``vocab_size`` tokens, ``context_length`` learned positions, ``type_vocab_size`` token types (segment A and B),
    ``n_layers`` blocks of width ``d_model`` with ``n_heads`` heads and a feed-forward layer of width ``d_ff``;
    ``dropout`` after the embeddings, on the attention weights and on each sublayer's output; ``eps`` of every
    LayerNorm; ``init_std`` the standard deviation of the initial weights.
    """

    vocab_size: int = 30522
    d_model: int = 768
    n_layers: int = 12
    n_heads: int = 12
    d_ff: int = 3072
    context_length: int = 512  # T, the most positions the model reads
    type_vocab_size: int = 2
    dropout: float = 0.1
    eps: float = 1e-12
    init_std: float = 0.02

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "n_layers",
            "d_ff",
            "context_length",
            "type_vocab_size",
        ):
            require_int(getattr(self, name), name, low=1)
        require_heads(self.d_model, self.n_heads)
        require_number(self.dropout, "dropout", low=0, high=1, high_open=True)
        for name in ("eps", "init_std"):
            value = getattr(self, name)
            require_number(value, name, low=0, low_open=True)

    @classmethod
    def base(cls, **changes: object) -> BertConfig:
        """BERT-base: 12 layers, width 768, 12 heads (Devlin et al., 2019)."""
        return cls(**changes)

    @classmethod
    def large(cls, **changes: object) -> BertConfig:
        """BERT-large: 24 layers, width 1024, 16 heads, feed-forward 4096."""
        return cls(
            **{"d_model": 1024, "n_layers": 24, "n_heads": 16, "d_ff": 4096, **changes}
        )


class BertEmbeddings(nn.Module):
    """x = LayerNorm(E[ids] + P[:n] + E_type[types]): (B, n) → (B, n, d)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        c = config
        self.token = nn.Embedding(c.vocab_size, c.d_model)  # E
        self.position = nn.Embedding(c.context_length, c.d_model)  # P, learned
        self.token_type = nn.Embedding(c.type_vocab_size, c.d_model)  # E_type: A or B
        self.norm = LayerNorm(c.d_model, c.eps)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, ids: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        n = ids.shape[1]
        x = self.token(ids) + self.position.weight[:n] + self.token_type(types)
        return self.dropout(self.norm(x))


def encoder_inputs(
    config: BertConfig,
    ids: object,
    types: object = None,
    mask: object = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Check a :class:`BertEncoder`'s inputs; return the token types (zeros by default) and the attention
    mask (B, 1, 1, n) (None: no padding). ``types`` (B, n) are Hugging Face's ``token_type_ids``; ``mask``
    (B, n), Hugging Face's ``attention_mask``, is True (or 1) at tokens, False (0) at padding."""
    ids = require_ids(ids, "ids", config.vocab_size)
    require_context(ids, "ids", config.context_length)
    if types is None:
        types = torch.zeros_like(ids)
    else:
        require_ids(types, "types", config.type_vocab_size)
        if types.shape != ids.shape:
            raise ValueError(
                f"types must have the shape of ids {tuple(ids.shape)}, got {tuple(types.shape)}"
            )
    if mask is None:
        return types, None
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"mask must be a tensor (B, n) of bool or 0/1, got {describe(mask)}"
        )
    if mask.shape != ids.shape:
        raise ValueError(
            f"mask must have the shape of ids {tuple(ids.shape)}, got {tuple(mask.shape)}"
        )
    if mask.dtype != torch.bool:
        rule = "bool or hold only 0 and 1: 1 = token, 0 = padding"
        if mask.is_floating_point() or mask.is_complex():
            raise ValueError(f"mask must be {rule}, got dtype {mask.dtype}")
        require_entries(mask, "mask", low=0, high=1, why=rule)
        mask = mask == 1
    return types, padding_to_attention_mask(mask, heads=True)


class BertEncoder(nn.Module):
    """h = blocks(embeddings(ids, types)), padding masked: (B, n) → (B, n, d_model)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = c = require_instance(config, BertConfig, "config")
        self.embeddings = BertEmbeddings(c)
        post = dict(norm_first=False, activation="gelu", eps=c.eps)  # LN(x + f(x))
        block = BlockConfig(c.d_model, c.n_heads, c.d_ff, c.dropout, **post)
        self.blocks = nn.ModuleList(EncoderBlock(block) for _ in range(c.n_layers))
        for b in self.blocks:
            b.ff.dropout = nn.Identity()  # none between the two feed-forward layers
        self.pooler = nn.Linear(c.d_model, c.d_model)

    def forward(
        self, ids: Tensor, types: Tensor | None = None, mask: Mask = None
    ) -> Tensor:
        types, mask = encoder_inputs(self.config, ids, types, mask)
        x = self.embeddings(ids, types)  # (B, n, d_model)
        for block in self.blocks:
            x = block(x, mask)  # mask (B, 1, 1, n): the keys that are not padding
        return x

    def pool(self, h: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.pooler(h[:, 0]))  # (B, d_model): NSP's input


class MaskedLMHead(nn.Module):
    """LayerNorm(GELU(W h + b)) Eᵀ + b_out, E the token table: (..., d) → (..., V)."""

    def __init__(self, config: BertConfig, token_embedding: nn.Embedding) -> None:
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model)
        self.norm = LayerNorm(config.d_model, config.eps)
        self.decoder = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.decoder.weight = token_embedding.weight  # tied: one table, in and out
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))  # b_out

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(F.gelu(self.dense(h)))) + self.bias


class BertForPreTraining(nn.Module):
    """MaskedLMHead(h), W pool(h) + b: ids (B, n) → logits (B, n, V) and (B, 2)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = BertEncoder(config)
        self.mlm = MaskedLMHead(config, self.bert.embeddings.token)
        self.nsp = nn.Linear(config.d_model, 2)  # 0: B follows A, 1: B is random
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        """BERT's init: weights N(0, init_std²), biases 0, LayerNorm γ = 1, β = 0."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.config.init_std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(
        self, ids: Tensor, types: Tensor | None = None, mask: Mask = None
    ) -> tuple[Tensor, Tensor]:
        h = self.bert(ids, types, mask)  # (B, n, d_model)
        return self.mlm(h), self.nsp(self.bert.pool(h))

    def num_parameters(self) -> int:
        """The number of distinct parameters (the tied decoder weight counts once)."""
        return sum(p.numel() for p in self.parameters())


def pretraining_loss(
    model: BertForPreTraining, batch: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss ``L = L_MLM + L_NSP`` (mean cross-entropies, nats) and the two losses and accuracies.

    ``batch`` holds ``input_ids``, ``token_type_ids``, ``attention_mask`` (from
    :func:`bert_inputs`), ``mlm_labels`` (-100 where not chosen, from
    :func:`~companion.data.bert_pretraining.mask_tokens`) and ``nsp_labels`` (B,). The masked-LM head is applied
    at the chosen positions only (the same loss, without computing the others' logits).
    """
    missing = {
        "input_ids",
        "token_type_ids",
        "attention_mask",
        "mlm_labels",
        "nsp_labels",
    } - set(batch)
    if missing:
        raise ValueError(f"batch is missing {sorted(missing)}")
    h = model.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    chosen = batch["mlm_labels"] != IGNORE_INDEX
    mlm_logits = model.mlm(h[chosen])  # (number chosen, V)
    targets = batch["mlm_labels"][chosen]
    nsp_logits = model.nsp(model.bert.pool(h))
    mlm = F.cross_entropy(mlm_logits, targets) if len(targets) else h.sum() * 0.0
    nsp = F.cross_entropy(nsp_logits, batch["nsp_labels"])
    stats = {
        "mlm_loss": float(mlm.detach()),
        "nsp_loss": float(nsp.detach()),
        "mlm_accuracy": float((mlm_logits.argmax(-1) == targets).float().mean())
        if len(targets)
        else float("nan"),
        "nsp_accuracy": float(
            (nsp_logits.argmax(-1) == batch["nsp_labels"]).float().mean()
        ),
    }
    return mlm + nsp, stats


def parameter_count(
    config: BertConfig, *, pooler: bool = True, heads: bool = False
) -> int:
    """The number of parameters by formula, for width d, feed-forward width f, vocabulary V, positions P, types T:

    embeddings (V + P + T)·d + 2d; each layer 4(d² + d) + 2·d·f + f + d + 4d (attention, feed-forward, two
    LayerNorms); the pooler d² + d; with ``heads`` also the masked-LM head d² + d + 2d + V (its decoder weight is
    the embedding) and the next-sentence head 2d + 2.
    """
    if not isinstance(config, BertConfig):
        raise TypeError(f"config must be a BertConfig, got {describe(config)}")
    d, f, V = config.d_model, config.d_ff, config.vocab_size
    embeddings = (V + config.context_length + config.type_vocab_size) * d + 2 * d
    layer = 4 * (d * d + d) + 2 * d * f + f + d + 4 * d
    total = embeddings + config.n_layers * layer
    if pooler or heads:
        total += d * d + d
    if heads:
        total += (d * d + d + 2 * d + V) + (2 * d + 2)
    return total


def _check_mean_pool(h: object, attention_mask: object) -> None:
    if not isinstance(h, torch.Tensor) or h.ndim != 3:
        raise ValueError(f"h must be a tensor (B, n, d), got {describe(h)}")
    if (
        not isinstance(attention_mask, torch.Tensor)
        or attention_mask.shape != h.shape[:2]
    ):
        raise ValueError(
            f"attention_mask must be a tensor of shape {tuple(h.shape[:2])}, got {describe(attention_mask)}"
        )


def mean_pool(h: Tensor, attention_mask: Tensor) -> Tensor:
    """Σ_t m_t h_t / Σ_t m_t over real tokens: h (B, n, d), m = mask (B, n) → (B, d)."""
    _check_mean_pool(h, attention_mask)
    m = attention_mask.to(h.dtype).unsqueeze(-1)  # (B, n, 1)
    return (h * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)


@torch.no_grad()
def sentence_embeddings(
    model: BertEncoder,
    tokenizer: object,
    sentences: Sequence[str],
    *,
    batch_size: int = 64,
    max_len: int = 256,
    normalize: bool = True,
) -> torch.Tensor:
    """Mean-pooled (over real tokens), L2-normalised BERT outputs, as sentence-transformers computes them:
    ``len(sentences)`` strings → (len(sentences), d_model). ``tokenizer`` is a
    :class:`~companion.wordpiece.WordPieceTokenizer`; inputs longer than ``max_len`` tokens are truncated."""
    if not isinstance(model, BertEncoder):
        raise TypeError(f"model must be a BertEncoder, got {describe(model)}")
    if (
        isinstance(sentences, str)
        or not isinstance(sentences, Sequence)
        or not all(isinstance(s, str) for s in sentences)
    ):
        raise TypeError(f"sentences must be a list of str, got {describe(sentences)}")
    require_int(batch_size, "batch_size", low=1)
    was_training = model.training
    model.eval()
    encoded = [tokenizer.encode(s) for s in sentences]
    # batches of similar lengths: less padding
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    out = torch.zeros(len(encoded), model.config.d_model)
    try:
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            batch = bert_inputs([(encoded[i], None) for i in rows], tokenizer.cls_id, tokenizer.sep_id,
                                tokenizer.pad_id, max_len)  # fmt: skip
            h = model(
                batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
            )
            s = mean_pool(h, batch["attention_mask"])
            out[rows] = F.normalize(s, dim=-1) if normalize else s
    finally:
        model.train(was_training)
    return out


class SpanHead(nn.Module):
    """[start, end logits] = h W + b, W (d, 2): h (B, n, d) → two tensors (B, n)."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.linear = nn.Linear(require_int(d_model, "d_model", low=1), 2)

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        start_logits, end_logits = self.linear(h).unbind(dim=-1)
        return start_logits, end_logits


def span_loss(
    start_logits: Tensor, end_logits: Tensor, starts: Tensor, ends: Tensor
) -> Tensor:
    """(CE(start logits, starts) + CE(end logits, ends)) / 2: logits (B, n), (B,)."""
    _check_span_logits(start_logits, end_logits)
    loss_start = F.cross_entropy(start_logits, starts)  # mean over the batch
    loss_end = F.cross_entropy(end_logits, ends)
    return (loss_start + loss_end) / 2


def best_span(
    start_logits: Tensor, end_logits: Tensor, context_mask: Tensor, max_len: int = 30
) -> Tensor:
    """argmax over context i ≤ j < i + max_len of start[i] + end[j]: (B, n) → (B, 2)."""
    _check_span_inputs(start_logits, end_logits, context_mask, max_len)
    B, n = start_logits.shape
    scores = start_logits[:, :, None] + end_logits[:, None, :]  # (B, n, n): [b, i, j]
    ones = torch.ones(n, n, dtype=torch.bool, device=scores.device)
    in_context = context_mask[:, :, None] & context_mask[:, None, :]  # (B, n, n)
    allowed = in_context & torch.triu(ones) & ~torch.triu(ones, diagonal=max_len)
    # argmax takes the first maximum (row-major): ties go to the smallest i, then j
    best = scores.masked_fill(~allowed, float("-inf")).reshape(B, n * n).argmax(dim=1)
    return torch.stack([best // n, best % n], dim=1)


def _check_span_logits(start_logits: object, end_logits: object) -> None:
    for name, x in (("start_logits", start_logits), ("end_logits", end_logits)):
        if (
            not isinstance(x, torch.Tensor)
            or x.ndim != 2
            or not x.dtype.is_floating_point
        ):
            raise ValueError(
                f"{name} must be a floating-point tensor (B, n), got {describe(x)}"
            )
    if start_logits.shape != end_logits.shape:
        raise ValueError(
            f"start_logits and end_logits must have the same shape, got {tuple(start_logits.shape)} "
            f"and {tuple(end_logits.shape)}"
        )


def _check_span_inputs(
    start_logits: object, end_logits: object, context_mask: object, max_len: object
) -> None:
    _check_span_logits(start_logits, end_logits)
    shape = tuple(start_logits.shape)
    if (
        not isinstance(context_mask, torch.Tensor)
        or context_mask.dtype != torch.bool
        or context_mask.shape != shape
    ):
        raise ValueError(
            f"context_mask must be a boolean tensor of shape {shape}, got {describe(context_mask)}"
        )
    require_int(max_len, "max_len", low=1)
    empty = ~context_mask.any(dim=1)
    if empty.any():
        raise ValueError(
            f"every row needs at least one context token; row {int(empty.nonzero()[0])} has none"
        )


# ----------------------------------------------------------------------------------------------------
# BERT's input format: [CLS] a [SEP] b [SEP] with segment ids


def truncate_pair(
    a: Sequence[int], b: Sequence[int], max_tokens: int
) -> tuple[list[int], list[int]]:
    """Drop tokens from the end of the longer of ``a`` and ``b`` until both fit in ``max_tokens`` together.

    On a tie the one that was shorter at the start loses the token (``a`` if they started equal), which is
    Hugging Face's ``truncation="longest_first"``; BERT's original script always takes it from ``b``.
    """
    a, b = list(a), list(b)
    a_was_longer = len(a) > len(b)
    while len(a) + len(b) > max_tokens:
        if len(a) > len(b) or (len(a) == len(b) and not a_was_longer):
            a.pop()
        else:
            b.pop()
    return a, b


def bert_inputs(
    pairs: Sequence[tuple[Sequence[int], Sequence[int] | None]],
    cls_id: int,
    sep_id: int,
    pad_id: int,
    max_len: int,
) -> dict[str, torch.Tensor]:
    """Batch ``[CLS] a [SEP] b [SEP]`` (or ``[CLS] a [SEP]`` when b is None), truncated to ``max_len`` tokens.

    Returns ``input_ids``, ``token_type_ids`` (0 for the ``[CLS] a [SEP]`` part, 1 for ``b [SEP]``) and
    ``attention_mask`` (True on tokens, False on padding), each of shape (B, n), n the longest input, padded
    with ``pad_id``.
    """
    require_int(max_len, "max_len", low=3, why="[CLS] a [SEP] b [SEP] needs room")
    if (
        isinstance(pairs, (str, bytes))
        or not isinstance(pairs, Sequence)
        or len(pairs) == 0
    ):
        raise TypeError(
            f"pairs must be a non-empty list of (a, b) pairs of token-id lists, got {describe(pairs)}"
        )
    rows, types = [], []
    for k, pair in enumerate(pairs):
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise TypeError(
                f"pair {k} must be a tuple (a, b) of token-id lists (b may be None), got {describe(pair)}"
            )
        a, b = pair
        if b is None:
            a, _ = truncate_pair(a, [], max_len - 2)
            rows.append([cls_id, *a, sep_id])
            types.append([0] * (len(a) + 2))
        else:
            a, b = truncate_pair(a, b, max_len - 3)
            rows.append([cls_id, *a, sep_id, *b, sep_id])
            types.append([0] * (len(a) + 2) + [1] * (len(b) + 1))
    n = max(len(r) for r in rows)
    input_ids = torch.tensor(
        [r + [pad_id] * (n - len(r)) for r in rows], dtype=torch.long
    )
    token_type_ids = torch.tensor(
        [t + [0] * (n - len(t)) for t in types], dtype=torch.long
    )
    attention_mask = torch.tensor(
        [[True] * len(r) + [False] * (n - len(r)) for r in rows]
    )
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": attention_mask,
    }
