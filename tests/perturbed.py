"""The second floating-point path, on which every chapter's hidden asserts must hold as on the book build's.

``ATEN_CPU_CAPABILITY=default`` makes PyTorch run its scalar kernels instead of the AVX2/AVX-512 ones, and
``MKL_CBWR=COMPATIBLE`` puts MKL in its conditional-numerical-reproducibility mode, another summation order in
matrix products: the last bits of every gradient, layer norm and product differ from the book build's, as they do
on a reader's other processor. A claim pinned to one machine's last bits then fails in CI, not in a reader's
notebook. Two kinds of notebook kernel run on it (both read once, when PyTorch starts, so the variables must be
in the kernel's environment before it starts):

- nbval's kernels for the homework notebooks (tests/conftest.py), which hold every chapter's code cells and
  hidden asserts, with the exercises' stubs in place of their solutions;
- the Colab simulation's kernels (tests/test_colab.py).
"""

PERTURBED = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}
