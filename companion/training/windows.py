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

from .._validate import require_ndim, require_positive_ints

__all__ = ["NextTokenWindows"]


class NextTokenWindows(Dataset):
    """Every window of ``length + 1`` ids of ``ids`` starting at ``0, stride, 2·stride, …``.

    Item ``k`` starts at ``i = k · stride`` and is the pair ``(ids[i : i + n], ids[i + 1 : i + n + 1])`` with
    ``n = length``: the input and, one position later, the token each input position must predict.
    """

    def __init__(self, ids: torch.Tensor, length: int, stride: int = 1) -> None:
        ids = torch.as_tensor(ids, dtype=torch.long)
        require_ndim(ids, "ids", 1, "(N,)")
        require_positive_ints(length=length, stride=stride)
        if len(ids) < length + 1:
            raise ValueError(f"ids has {len(ids)} tokens, fewer than a window of length + 1 = {length + 1}")
        self.ids, self.length, self.stride = ids, length, stride
        self.starts = torch.arange(0, len(ids) - length, stride)  # the last window ends at ids[-1] or before

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        i, n = int(self.starts[k]), self.length
        return self.ids[i : i + n], self.ids[i + 1 : i + n + 1]  # input, target: shifted by one

    def windows(self, ks: torch.Tensor | Sequence[int]) -> torch.Tensor:
        """Windows ``ks`` whole, input and target in one row: ``(len(ks), length + 1)``, as
        :func:`~companion.gpt.next_token_loss` reads them."""
        starts = self.starts[torch.as_tensor(ks, dtype=torch.long)]
        return torch.stack([self.ids[i : i + self.length + 1] for i in starts.tolist()])
