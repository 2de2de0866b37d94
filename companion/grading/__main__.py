"""``python -m companion.grading SUBMISSIONS --out RESULTS``: grade a folder of homework notebooks (the
``companion-grade`` console script). See :mod:`companion.grading` for what it does and the threat model."""

from companion.grading import main

if __name__ == "__main__":
    raise SystemExit(main())
