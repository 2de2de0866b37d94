"""Benchmark: the companion's random features and kernel ridge against scikit-learn, on the digits data.

Run from the repository root::

    python benchmarks/random_features_vs_sklearn.py                 # 2 threads, 30 seeds, R = 100 … 2000
    python benchmarks/random_features_vs_sklearn.py --threads 1 --seeds 10 --Rs 500

Data: ``sklearn.datasets.load_digits`` (1797 images of 8 × 8 pixels, d = 64), pixels divided by 16, float64.

1. **Random Fourier features against** ``RBFSampler`` at the same γ = 1/(2σ²) and R on the same data: the RMS
   entry error of Z Zᵀ against the exact kernel matrix (mean ± sd over the seeds, each library with its own
   seeds), Welch's two-sample t statistic (|t| < 3: equal within statistical noise), and the time to draw the
   frequencies and compute Z (best of repeated runs). Goal: companion time ≤ 1.5 × scikit-learn's.
2. **Kernel ridge classification** (one-hot targets, the largest prediction wins) as the training set grows:
   the exact kernel (the companion's Cholesky solve, O(N³), and scikit-learn's ``KernelRidge``), random
   Fourier features with R columns (companion, and ``RBFSampler`` + ``Ridge``) and ``Nystroem`` + ``Ridge``
   (O(N·R²)). Accuracy on a fixed held-out set and the time to fit and predict.
3. **Time as N grows past the data set** (digits drawn with replacement plus small noise, so that N can exceed
   1797): the companion's exact kernel ridge (O(N³)) against its random-feature ridge (O(N·R²)), fit only.

Both libraries get the same number of threads (``torch.set_num_threads`` and ``threadpoolctl`` for NumPy's
BLAS). On a shared machine, times vary from run to run: the load average is printed with the tables.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.stats
import sklearn
import torch
from sklearn.datasets import load_digits
from sklearn.kernel_approximation import Nystroem, RBFSampler
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import Ridge
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from companion.random_features import (  # noqa: E402
    RandomFourierFeatures,
    feature_ridge,
    gaussian_kernel,
    kernel_approximation_error,
    kernel_ridge,
    one_hot,
)


def best_time(fn: Callable[[], object], repeats: int) -> float:
    """The shortest wall time of ``repeats`` calls after one warm-up call (the least disturbed by other load)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def feature_map_table(
    x: np.ndarray, sigma: float, Rs: list[int], n_seeds: int, repeats: int
) -> list[str]:
    gamma = 1 / (2 * sigma**2)
    xt = torch.from_numpy(x)
    k = gaussian_kernel(xt, xt, sigma)
    rows = [
        "| R | companion RMS error | RBFSampler RMS error | Welch t | companion ms | RBFSampler ms | ratio |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for R in Rs:
        ours, theirs = [], []
        for s in range(n_seeds):
            z = RandomFourierFeatures(x.shape[1], R, sigma=sigma, seed=s)(xt)
            ours.append(kernel_approximation_error(k, z @ z.T))
            zs = torch.from_numpy(
                RBFSampler(gamma=gamma, n_components=R, random_state=s).fit_transform(x)
            )
            theirs.append(kernel_approximation_error(k, zs @ zs.T))
        t = scipy.stats.ttest_ind(ours, theirs, equal_var=False).statistic
        t_ours = best_time(
            lambda R=R: RandomFourierFeatures(x.shape[1], R, sigma=sigma, seed=0)(xt),
            repeats,
        )
        t_sk = best_time(
            lambda R=R: RBFSampler(
                gamma=gamma, n_components=R, random_state=0
            ).fit_transform(x),
            repeats,
        )
        rows.append(
            f"| {R} | {statistics.mean(ours):.5f} ± {statistics.stdev(ours):.5f} "
            f"| {statistics.mean(theirs):.5f} ± {statistics.stdev(theirs):.5f} | {t:+.2f} "
            f"| {1e3 * t_ours:.2f} | {1e3 * t_sk:.2f} | {t_ours / t_sk:.2f} |"
        )
    return rows


def ridge_methods(
    xn: np.ndarray,
    yn: torch.Tensor,
    x_test: np.ndarray,
    sigma: float,
    lam: float,
    R: int,
) -> list[Callable[[], object]]:
    """Five ways to fit ridge on (xn, one-hot yn) and score x_test; each returns the (n_test, 10) scores."""
    gamma, n = 1 / (2 * sigma**2), len(xn)
    xt_n, xt_test = torch.from_numpy(xn), torch.from_numpy(x_test)

    def exact_companion():
        alpha = kernel_ridge(gaussian_kernel(xt_n, xt_n, sigma), yn, lam)
        return gaussian_kernel(xt_test, xt_n, sigma) @ alpha

    def exact_sklearn():
        return (
            KernelRidge(alpha=lam, kernel="rbf", gamma=gamma)
            .fit(xn, yn.numpy())
            .predict(x_test)
        )

    def rff_companion():
        z = RandomFourierFeatures(xn.shape[1], R, sigma=sigma, seed=0)
        return z(xt_test) @ feature_ridge(z(xt_n), yn, lam)

    def rff_sklearn():
        f = RBFSampler(gamma=gamma, n_components=R, random_state=0).fit(xn)
        return (
            Ridge(alpha=lam, fit_intercept=False)
            .fit(f.transform(xn), yn.numpy())
            .predict(f.transform(x_test))
        )

    def nystroem():
        f = Nystroem(gamma=gamma, n_components=min(R, n), random_state=0).fit(xn)
        return (
            Ridge(alpha=lam, fit_intercept=False)
            .fit(f.transform(xn), yn.numpy())
            .predict(f.transform(x_test))
        )

    return [exact_companion, exact_sklearn, rff_companion, rff_sklearn, nystroem]


def ridge_table(
    x: np.ndarray,
    labels: np.ndarray,
    sigma: float,
    lam: float,
    R: int,
    train_sizes: list[int],
    n_test: int,
    repeats: int,
) -> list[str]:
    perm = np.random.default_rng(0).permutation(len(x))
    test, pool = perm[:n_test], perm[n_test:]
    x_test, y_test = x[test], labels[test]

    def accuracy(scores: np.ndarray | torch.Tensor) -> float:
        return float((np.asarray(scores).argmax(1) == y_test).mean())

    rows = [
        f"| N | exact (companion) | exact (KernelRidge) | RFF R={R} (companion) | RBFSampler R={R} + Ridge "
        f"| Nystroem R={R} + Ridge |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for n in train_sizes:
        tr = pool[:n]
        xn, yn = x[tr], one_hot(torch.from_numpy(labels[tr]), 10)
        methods = ridge_methods(xn, yn, x_test, sigma, lam, R)
        cells = []
        for fn in methods:
            acc = accuracy(fn())
            seconds = best_time(fn, repeats)
            cells.append(f"{acc:.3f} ({1e3 * seconds:.0f} ms)")
        rows.append(f"| {n} | " + " | ".join(cells) + " |")
    return rows


def scaling_table(
    x: np.ndarray, labels: np.ndarray, sigma: float, lam: float, R: int, ns: list[int]
) -> list[str]:
    rng = np.random.default_rng(1)
    rows = [
        f"| N | exact ridge fit (ms) | RFF R={R} ridge fit (ms) | exact / RFF |",
        "|---:|---:|---:|---:|",
    ]
    z = RandomFourierFeatures(x.shape[1], R, sigma=sigma, seed=0)
    for n in ns:
        idx = rng.integers(0, len(x), size=n)
        xn = torch.from_numpy(x[idx] + 0.05 * rng.normal(size=(n, x.shape[1])))
        yn = one_hot(torch.from_numpy(labels[idx]), 10)
        t_exact = best_time(
            lambda xn=xn, yn=yn: kernel_ridge(gaussian_kernel(xn, xn, sigma), yn, lam),
            2,
        )
        t_rff = best_time(lambda xn=xn, yn=yn: feature_ridge(z(xn), yn, lam), 2)
        rows.append(
            f"| {n} | {1e3 * t_exact:.0f} | {1e3 * t_rff:.0f} | {t_exact / t_rff:.1f} |"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--threads", type=int, default=2, help="threads for PyTorch and NumPy's BLAS"
    )
    parser.add_argument(
        "--sigma", type=float, default=2.5, help="Gaussian length scale σ (γ = 1/(2σ²))"
    )
    parser.add_argument("--lam", type=float, default=1e-2, help="ridge penalty λ")
    parser.add_argument(
        "--Rs",
        type=int,
        nargs="+",
        default=[100, 500, 2000],
        help="feature counts, part 1",
    )
    parser.add_argument(
        "--seeds", type=int, default=30, help="seeds per library, part 1"
    )
    parser.add_argument(
        "--repeats", type=int, default=7, help="timed repetitions (the best is kept)"
    )
    parser.add_argument(
        "--ridge-repeats", type=int, default=3, help="timed repetitions, part 2"
    )
    parser.add_argument("--R", type=int, default=1000, help="feature count, part 2")
    parser.add_argument(
        "--train-sizes", type=int, nargs="+", default=[200, 400, 800, 1400]
    )
    parser.add_argument("--n-test", type=int, default=397)
    parser.add_argument(
        "--scaling-ns", type=int, nargs="+", default=[1000, 2000, 4000], help="part 3"
    )
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    digits = load_digits()
    x, labels = digits.data / 16.0, digits.target
    start = time.perf_counter()
    with threadpool_limits(limits=args.threads):
        print(
            f"torch {torch.__version__}, scikit-learn {sklearn.__version__}, numpy {np.__version__}, "
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, {args.threads} threads "
            f"(torch and BLAS), load average {os.getloadavg()[0]:.1f} at start"
        )
        print(
            f"digits: N = {len(x)}, d = {x.shape[1]}, pixels / 16, float64; σ = {args.sigma} "
            f"(γ = {1 / (2 * args.sigma**2):.4g}), λ = {args.lam}\n"
        )
        print(
            "Kernel approximation: RMS entry error of Z Zᵀ against K on all digits (mean ± sd over "
            f"{args.seeds} seeds each), and the time to draw the frequencies and compute Z\n"
        )
        print(
            "\n".join(
                feature_map_table(x, args.sigma, args.Rs, args.seeds, args.repeats)
            )
        )
        print(
            f"\nKernel ridge: test accuracy on {args.n_test} held-out digits (fit + predict, best time)\n"
        )
        print(
            "\n".join(
                ridge_table(
                    x,
                    labels,
                    args.sigma,
                    args.lam,
                    args.R,
                    args.train_sizes,
                    args.n_test,
                    args.ridge_repeats,
                )
            )
        )
        print(
            f"\nTime as N grows (digits resampled with noise, fit only, best of 2 runs), R = {args.R}\n"
        )
        print(
            "\n".join(
                scaling_table(x, labels, args.sigma, args.lam, args.R, args.scaling_ns)
            )
        )
    print(
        f"\nload average {os.getloadavg()[0]:.1f} at the end; total {time.perf_counter() - start:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
