"""Shared set-up for every test: headless plotting, one intra-op thread, derandomised hypothesis, a seeded global
random state, the repository root.

Matplotlib's Agg backend is chosen here, in the test process only. It is not put in the environment
(``MPLBACKEND``): the notebook kernels that nbval and the Colab simulation start would inherit it and draw
nothing (the book build once lost every figure that way).
"""

import os
import random
import sys
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch
from hypothesis import settings

matplotlib.use("Agg")

# The tests' models are small: on two shared cores a second intra-op thread makes them slower, not faster
# (measured on tests/test_transformer.py + tests/test_word2vec.py; COMPANION_TEST_THREADS=2 repeats it).
torch.set_num_threads(int(os.environ.get("COMPANION_TEST_THREADS", "1")))

# The book promises determinism: hypothesis draws the same examples on every run (no example database, no
# deadline, which a loaded CI machine would trip at random).
settings.register_profile("book", derandomize=True, deadline=None, database=None)
settings.load_profile("book")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture
def three_threads():
    """Three intra-op threads for one test, then one again: a setting no training function picks by itself, so a
    function that forgets to restore the caller's thread count is caught (with the suite's 1 it could not be)."""
    torch.set_num_threads(3)
    yield 3
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same global random state (tests that draw without their own generator repeat)."""
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


# Scheduling for `make test`'s two workers (pytest-xdist, `--dist loadscope --no-loadscope-reorder`). Each test
# module, and each homework notebook (nbval's cells share one kernel), is one unit of work that stays on one
# worker (xdist's loadscope), and xdist hands the units out in the order this hook leaves them in: longest
# first (the longest-processing-time rule). First the Colab simulation (a fresh virtual environment, then
# chapters), then the homework notebooks, the last chapter first (the later chapters train more), then every
# unit holding a slow-marked test, then the rest, each group ordered by its number of tests. A unit handed out
# last is then a short one, not a ten-minute one.
COLAB_MODULE = "tests/test_colab.py"
# Test modules that read one class graded once per session (tests/grading_support.py's once_per_session) are one
# unit of work, so that one worker grades it while the other goes on with other units, instead of waiting for it.
SHARED_UNITS = {"tests/test_grade_attacks.py": "tests/test_grade_walls.py"}


def unit_of(nodeid: str) -> str:
    """The unit of work of a test: its module, or the module it shares a graded class with."""
    module = nodeid.partition("::")[0]
    return SHARED_UNITS.get(module, module)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN001, ANN201
    """``--dist loadscope``, with the modules of :data:`SHARED_UNITS` in one unit."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return unit_of(nodeid) if scope == nodeid.partition("::")[0] else scope

    return SharedScopes(config, log)


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(unit_of(item.nodeid), []).append(item)

    def rank(unit: str) -> tuple[int, int]:
        tests = units[unit]
        if unit == COLAB_MODULE:
            return (0, 0)
        if unit.endswith(".ipynb"):
            return (1, -int(Path(unit).name[:2]))
        slow = any(item.get_closest_marker("slow") for item in tests)
        return (2 if slow else 3, -len(tests))

    items[:] = [item for unit in sorted(units, key=rank) for item in units[unit]]
