"""``python -m homework_grader SUBMISSIONS --out RESULTS``: grade a folder of homework notebooks (the
``companion-grade`` console script). See :mod:`homework_grader` for what it does and the threat model."""

from homework_grader import main

if __name__ == "__main__":
    raise SystemExit(main())
