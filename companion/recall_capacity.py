"""What a state of r features can recall (chapter 8): the state-size bound, and weights built by hand that meet it.

Linear attention with a feature map φ: ℝ^{d_k} → ℝ^r stores a context of key-value pairs in a state
``S = Σ_j φ(k_j) v_jᵀ`` (r × d_v) and ``z = Σ_j φ(k_j)`` (r), and reads a query q as ``φ(q)ᵀS / φ(q)ᵀz``.
N queries read against one state give the N × d_v matrix ``D⁻¹ Φ_Q S`` (``D`` the diagonal of normalisers),
of rank ≤ r. By Eckart–Young, when the targets are N distinct one-hot values (the rows of an N × N identity)
every such read-out misses them by a squared error ≥ N − r in all, (N − r)/N per query.

Nothing here is trained. The functions build feature vectors φ(k_i) = φ(q_i) for N keys directly:

- :func:`shared_features`: one-hot features, key i on feature i mod r. N ≤ r keys are recalled exactly;
  for N > r, keys sharing a feature are averaged, and the squared error is exactly N − r: the bound is tight;
- :func:`quarter_circle_features`: keys spread over r/2 quarter circles (two features each). Every key's
  output has its largest entry at its own value, for any N, but by a margin (:func:`quarter_circle_margin`)
  that shrinks like (r/N)³;
- softmax attention with the matching score β above the others: the weight off the match,
  :func:`softmax_residual`, and the margin, :func:`softmax_margin`, for any N.

:func:`argmax_margin` measures the margin of a read-out: the entry of the right value minus the largest other.

Key-only queries (a query's features depend only on the key it asks for): over all contexts of two pairs,
:func:`key_only_leak` gives, for every two keys a ≠ b, the share x_ab that key b's value adds to query a's
read-out; exact recall of every such context needs x_ab = 0. With K keys and r features the normalised
K × K matrix I + X has rank ≤ r, so Σ x_ab² ≥ K − r (Eckart–Young again) and the largest abs(x_ab) is at least
:func:`key_only_least_leak` = √((K − r)/(K(K − 1))) once K > r. :func:`learn_key_only_features` fits
elu + 1 features of K keys by gradient descent to make the leaks small, the experiment that tests this.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .validation import (
    require_floats,
    require_int,
    require_number,
)

__all__ = [
    "shared_features",
    "quarter_circle_features",
    "argmax_margin",
    "quarter_circle_margin",
    "softmax_residual",
    "softmax_margin",
    "key_only_leak",
    "key_only_least_leak",
    "learn_key_only_features",
]


def _check_keys(n_keys: object, r: object, *, least: int = 1) -> tuple[int, int]:
    return require_int(n_keys, "n_keys", low=1), require_int(r, "r", low=least)


def shared_features(n_keys: int, r: int) -> Tensor:
    """φ(k_i) = e_{i mod r}: (n_keys, r) one-hot; keys i, i + r, i + 2r, … share one."""
    n_keys, r = _check_keys(n_keys, r)
    return F.one_hot(torch.arange(n_keys) % r, r).double()


def quarter_circle_features(n_keys: int, r: int) -> Tensor:
    """φ(k_i) = cos θ_i e_{2g} + sin θ_i e_{2g+1}, g = i mod ⌊r/2⌋: (n_keys, r) ≥ 0."""
    n_keys, r = _check_keys(n_keys, r, least=2)
    circles = r // 2
    i = torch.arange(n_keys)
    g, t = i % circles, i // circles  # key i's circle, and its place on it
    on_circle = torch.bincount(g, minlength=circles)  # n_g keys on circle g
    step = (math.pi / 2) / (on_circle[g] - 1).clamp(min=1).double()  # π/(2(n_g − 1))
    theta = t * step  # equally spaced from 0 to π/2 on each circle
    phi = torch.zeros(n_keys, r, dtype=torch.float64)
    phi[i, 2 * g], phi[i, 2 * g + 1] = theta.cos(), theta.sin()
    return phi


def argmax_margin(outputs: Tensor, answers: Tensor) -> Tensor:
    """m_i = o_i[a_i] − max_{c ≠ a_i} o_i[c]: outputs (N, d_v), answers (N,) → (N,); > 0 iff argmax is right."""
    outputs = require_floats(outputs, "outputs", "(N, d_v)", ndim=2)
    answers = answers.long()
    right = outputs.gather(1, answers[:, None]).squeeze(1)  # o_i[a_i]
    others = outputs.scatter(1, answers[:, None], -math.inf)  # the right entry removed
    return right - others.amax(dim=1)


def quarter_circle_margin(n: int) -> float:
    """min_i m_i = (1 − cos δ) sin(δ/2) / (sin(nδ/2) cos(min_i |θ_i − π/4|)), δ = π/(2(n − 1)): n keys, one circle."""
    n = require_int(n, "n", low=1)
    if n == 1:  # one key: its value, alone
        return 1.0
    delta = math.pi / (2 * (n - 1))
    # the key nearest θ = π/4 has the largest Σ_j cos(θ_i − θ_j)
    off_centre = 0.0 if n % 2 else delta / 2
    return (
        (1 - math.cos(delta))
        * math.sin(delta / 2)
        / (math.sin(n * delta / 2) * math.cos(off_centre))
    )


def softmax_residual(n: int, beta: float) -> float:
    """ε = (n − 1)e^{−β} / (1 + (n − 1)e^{−β}): softmax's weight off the match, scores β on it and 0 elsewhere."""
    n, beta = require_int(n, "n", low=2), require_number(beta, "beta", low=0)
    return (n - 1) * math.exp(-beta) / (1 + (n - 1) * math.exp(-beta))


def softmax_margin(n: int, beta: float) -> float:
    """m = (1 − e^{−β}) / (1 + (n − 1)e^{−β}): the right value's weight minus any other's, for n distinct values."""
    n, beta = require_int(n, "n", low=2), require_number(beta, "beta", low=0)
    return (1 - math.exp(-beta)) / (1 + (n - 1) * math.exp(-beta))


def key_only_leak(phi_q: Tensor, phi_k: Tensor) -> Tensor:
    """x_ab = φ(q_a)ᵀφ(k_b) / φ(q_a)ᵀφ(k_a) for a ≠ b, 0 on the diagonal: (K, r), (K, r) → (K, K).

    In the context of the two pairs (k_a, v_a), (k_b, v_b), query a reads (v_a + x_ab v_b) / (1 + x_ab).
    """
    phi_q = require_floats(phi_q, "phi_q", "(K, r)", ndim=2)
    phi_k = require_floats(phi_k, "phi_k", "(K, r)", ndim=2)
    if phi_q.shape != phi_k.shape:
        raise ValueError(
            f"phi_q and phi_k must have the same shape, got {tuple(phi_q.shape)}, {tuple(phi_k.shape)}"
        )
    scores = phi_q @ phi_k.T  # (K, K): query a against key b
    leak = scores / scores.diagonal()[:, None]
    return leak - torch.diag_embed(leak.diagonal())


def key_only_least_leak(n_keys: int, r: int) -> float:
    """√((K − r) / (K(K − 1))): no key-only features of K keys in r dimensions have a smaller max_{a ≠ b} abs(x_ab)."""
    n_keys, r = require_int(n_keys, "n_keys", low=2), require_int(r, "r", low=1)
    return math.sqrt(max(n_keys - r, 0) / (n_keys * (n_keys - 1)))


def learn_key_only_features(
    n_keys: int, r: int, *, steps: int = 1000, lr: float = 0.1, seed: int = 0
) -> Tensor:
    """elu + 1 features (2, K, r) of K keys' queries and keys, fitted by Adam to recall every two-pair context.

    The loss is the mean squared error of query a's read-out in the context of pairs a and b, over all a ≠ b,
    with distinct one-hot values: 2 w_ab², w_ab = x_ab / (1 + x_ab) the weight on the wrong value.
    """
    n_keys, r = _check_keys(n_keys, r)
    g = torch.Generator().manual_seed(seed)
    raw = torch.randn(2, n_keys, r, generator=g, dtype=torch.float64).requires_grad_()
    optimizer = torch.optim.Adam([raw], lr=lr)
    for _ in range(steps):
        phi = F.elu(raw) + 1
        leak = key_only_leak(phi[0], phi[1])
        loss = (2 * (leak / (1 + leak)) ** 2).sum() / max(n_keys * (n_keys - 1), 1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return (F.elu(raw) + 1).detach()
