"""pytest's set-up for the homework notebooks that nbval runs (book/homework/*.ipynb; tests/conftest.py sets up
the tests): their kernels run on the second floating-point path (tests/perturbed.py), so that every chapter's
code cells and hidden asserts are checked on it. nbval starts a notebook's kernel while it sets up the
notebook's first cell, and the kernel inherits this process's environment then; a hook in tests/conftest.py
would not see these cells, which live outside tests/.
"""

import os

import pytest

from tests.perturbed import PERTURBED


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    if type(item).__name__ != "IPyNbCell":
        yield
        return
    saved = {name: os.environ.get(name) for name in PERTURBED}
    os.environ.update(PERTURBED)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
