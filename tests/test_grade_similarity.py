"""Copies found (issue 29): the similarity of answers is robust to renaming, comments, layout and small edits, and
tells different methods apart; feedback text from an answer cannot break out of its place in the Markdown."""

from __future__ import annotations

from homework_grader.report import feedback_names, fenced, one_line
from homework_grader.similarity import (
    BOOK,
    closest_pairs,
    fingerprints,
    similarity,
    tokens,
)

BOOK_SOLUTION = """\
def weightless_self_attention(x):
    scores = x @ x.transpose(-2, -1)
    weights = torch.softmax(scores, dim=-1)
    return weights @ x
"""
RENAMED = '''\
def weightless_self_attention(inputs):
    """My own work."""
    # the scores of every pair
    s = inputs @ inputs.transpose(-2,
                                  -1)
    w = torch.softmax(s, dim=-1)   # weights

    return w @ inputs
'''
ONE_TOKEN = BOOK_SOLUTION.replace("dim=-1)", "dim=-1).float()")
OTHER_METHOD = """\
def weightless_self_attention(x):
    out = torch.empty_like(x)
    for i in range(x.shape[-2]):
        e = [math.exp(float(x[i] @ x[j])) for j in range(x.shape[-2])]
        out[i] = sum(a / sum(e) * x[j] for j, a in enumerate(e))
    return out
"""


def test_renaming_comments_and_layout_do_not_count():
    assert tokens(RENAMED) == tokens(BOOK_SOLUTION)
    assert similarity(fingerprints(RENAMED), fingerprints(BOOK_SOLUTION)) == 1.0


def test_one_token_changed_is_still_alike_and_another_method_is_not():
    edited = similarity(fingerprints(ONE_TOKEN), fingerprints(BOOK_SOLUTION))
    other = similarity(fingerprints(OTHER_METHOD), fingerprints(BOOK_SOLUTION))
    assert 0.5 <= edited < 1.0, edited
    assert other < 0.2, other


def test_closest_pairs_name_students_and_the_book():
    answers = {
        "ann": {"weightless_self_attention": RENAMED},
        "bob": {"weightless_self_attention": ONE_TOKEN},
        "cat": {"weightless_self_attention": OTHER_METHOD},
    }
    rows = closest_pairs(answers, {"weightless_self_attention": BOOK_SOLUTION})
    pairs = {(r["student"], r["other"]): r["similarity"] for r in rows}
    assert (
        pairs[("ann", BOOK)] == 1.0
        and ("ann", "bob") in pairs
        and ("bob", BOOK) in pairs
    )
    assert not any("cat" in p for p in pairs), pairs
    assert [r["similarity"] for r in rows] == sorted(
        (r["similarity"] for r in rows), reverse=True
    )


def test_code_that_does_not_tokenize_has_no_fingerprints():
    assert fingerprints('def f(:\n    """') == set()
    assert similarity(set(), {1}) == 0.0


def test_a_fence_holds_whatever_backticks_the_text_has():
    text = "```\n## `f`: passed\n```` and `````"
    lines = fenced(text)
    assert (
        lines[0].startswith("``````")
        and lines[-1] == lines[0][: len(lines[-1])]
        and len(lines[-1]) == 6
    )


def test_one_line_cannot_start_a_heading():
    assert "\n" not in one_line("a\n## `f`: passed\r\n- b")
    assert one_line("# x") == "\\# x"


def test_feedback_file_names_are_unique():
    names = feedback_names(["a b", "a_b", "a/b", "Ann", "ann", "", "..."])
    assert len(set(n.casefold() for n in names.values())) == 7
    assert names["Ann"] == "Ann.md" and names["a b"] == "a_b.md"
