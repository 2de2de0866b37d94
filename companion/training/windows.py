"""Next-token training data from one token stream: windows of ``n + 1`` consecutive ids, cut into an input of
``n`` ids and a target of the same ``n`` ids shifted by one (chapter 6).

:class:`NextTokenWindows` is a :class:`torch.utils.data.Dataset`, so a :class:`~torch.utils.data.DataLoader`
batches it into ``(B, n)`` inputs and ``(B, n)`` targets. Pretraining (:mod:`~companion.training.gpt_pretraining`)
draws random windows of stride 1 and validates on the windows of stride ``n``, which do not overlap.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils.data import Dataset

from ..validation import require_ndim, require_positive_ints

__all__ = ["NextTokenWindows", "sliding_windows"]


def _stream(
    ids: torch.Tensor | Sequence[int], length: int, stride: int
) -> torch.Tensor:
    """``ids`` as a 1-D long tensor, checked to hold one window of ``length + 1`` ids at least."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    require_ndim(ids, "ids", 1, "(N,)")
    require_positive_ints(length=length, stride=stride)
    if len(ids) < length + 1:
        raise ValueError(
            f"ids has {len(ids)} tokens, fewer than a window of length + 1 = {length + 1}"
        )
    return ids


class NextTokenWindows(Dataset):
    """Windows of n + 1 ids at starts i = 0, s, 2s, …: item k is (input, target)."""

    def __init__(self, ids: torch.Tensor, length: int, stride: int = 1) -> None:
        self.ids, self.length = _stream(ids, length, stride), length
        self.starts = torch.arange(0, len(self.ids) - length, stride)  # i + n + 1 <= N

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        i, n = int(self.starts[k]), self.length
        return self.ids[i : i + n], self.ids[i + 1 : i + n + 1]  # input, target

    def windows(self, ks: torch.Tensor | Sequence[int]) -> torch.Tensor:
        starts = self.starts[torch.as_tensor(ks, dtype=torch.long)].tolist()
        return torch.stack([self.ids[i : i + self.length + 1] for i in starts])


def sliding_windows(
    ids: torch.Tensor | Sequence[int], length: int, stride: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """All the windows of :class:`NextTokenWindows` at once: inputs ``(K, n)`` and targets ``(K, n)``, with
    ``K = ⌊(N - n - 1) / stride⌋ + 1`` (``Tensor.unfold`` cuts the ``(K, n + 1)`` windows without a loop)."""
    windows = _stream(ids, length, stride).unfold(0, length + 1, stride)
    return windows[:, :-1], windows[:, 1:]
