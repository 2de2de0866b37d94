"""Checker for chapter 8's hand-built associative memory.

=========================================  =============================================================
checker                                    what the student writes
=========================================  =============================================================
``check_memory_keys``                      ``memory_keys(x) -> (r, d)``: a key projection W_K with which
                                           linear attention (ReLU features, keys = queries = x W_Kᵀ)
                                           reads back each of the r values exactly
=========================================  =============================================================

The checker judges what the weights do, not the weights themselves: any W_K whose r key features are
non-negative, orthogonal and of a size well above ε recalls every value, whatever the values are.
"""

from __future__ import annotations

import os

import torch

from .. import linear_attention as la
from .checking import Checker, Mismatch, call, case, show

__all__ = ["check_memory_keys"]

_HINT = (
    "Make the features of the keys one-hot: W_K x_i = e_i for i = 1…r, that is W_K Xᵀ = I_r, so W_K is the "
    "transpose of a right inverse of Xᵀ (torch.linalg.pinv(x).T, or solve the system). Then S = Σ_j e_j v_jᵀ holds "
    "v_j in row j, z = 1, and query i reads row i."
)


def _tokens(r: int, d: int, g: torch.Generator) -> torch.Tensor:
    """r linearly independent token vectors in d dimensions (a Gaussian matrix, conditioned well enough)."""
    while True:
        x = torch.randn(r, d, generator=g, dtype=torch.float64)
        s = torch.linalg.svdvals(x)
        if s[-1] > 0.2 * s[0]:
            return x


def _cases(seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    sizes = [(2, 2), (3, 5), (4, 4), (4, 9), (6, 8)]
    shown = [
        case(_tokens(r, d, g), why=f"r = {r} tokens in d = {d} dimensions")
        for r, d in sizes
    ]
    return shown


def _read_back(x: torch.Tensor, w_k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    keys = x @ w_k.T  # (r, r): keys = queries
    return la.LinearAttention(feature_map=la.relu_feature_map)(keys, keys, v)


def _check(student) -> tuple[int, int]:  # noqa: ANN001
    # hidden cases new on every run
    seed = int.from_bytes(os.urandom(4), "little") % 2**31
    trials = [(c, False) for c in _cases(0)] + [(c, True) for c in _cases(seed)]
    for c, hidden in trials:
        (x,) = c.args
        r, d = x.shape
        label = f"x of shape ({r}, {d}): {c.why}" + (
            f"  [a hidden random case, seed {seed}]" if hidden else ""
        )
        w_k = call(student, x.clone(), input=label)
        if (
            not isinstance(w_k, torch.Tensor)
            or w_k.shape != (r, d)
            or not w_k.is_floating_point()
        ):
            transposed = (
                isinstance(w_k, torch.Tensor) and w_k.shape == (d, r) and d != r
            )
            raise Mismatch(
                "W_K has the wrong shape or type.",
                input=label,
                expected=f"a floating-point tensor of shape (r, d) = ({r}, {d}): keys are x @ W_K.T",
                got=show(w_k, 200),
                hint="Transpose it: W_K maps a token x (d) to its key W_K x (r)."
                if transposed
                else _HINT,
            )
        w_k = w_k.detach().to(torch.float64)
        if not bool(torch.isfinite(w_k).all()):
            raise Mismatch(
                "W_K contains NaN or infinity.",
                input=label,
                got=show(w_k, 300),
                hint=_HINT,
            )
        g = torch.Generator().manual_seed(seed + r * 100 + d)
        v = torch.randn(r, 3, generator=g, dtype=torch.float64)  # the values to store
        got = _read_back(x, w_k, v)
        if not torch.allclose(got, v, atol=1e-5, rtol=1e-4):
            features = la.relu_feature_map(x @ w_k.T)
            mixed = (features - torch.diag(torch.diagonal(features))).abs().max() > 1e-6
            raise Mismatch(
                "Reading the memory back does not return the values stored in it.",
                input=f"{label}; values v of shape ({r}, 3), read with queries = keys = x @ W_K.T and ReLU features",
                expected=show(v, 400),
                got=show(got, 400)
                + f"\nthe keys' features φ(x W_Kᵀ), one row per token:\n{show(features, 600)}",
                hint="Key j's features overlap those of key i, so query i reads a mixture of their values: the "
                "features of different keys must be orthogonal (one-hot does it). "
                + _HINT
                if bool(mixed)
                else "The features are orthogonal but too small: ε = 1e-6 in the normaliser then outweighs them. "
                + _HINT,
            )
    return len(trials), len(trials) // 2


check_memory_keys = Checker(
    "memory_keys",
    _check,
    kind="function",
    withhold=["companion.recall_capacity.shared_features"],
)
