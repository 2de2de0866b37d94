"""The code the book shows reads like the mathematics (tools/shown_code.py measures it).

Across every ``literalinclude :pyobject:`` in the chapters, at least 60 % of the read lines are the computation
(not docstring, signature or validation), no listing is over 40 lines, none wider than 88 columns (but the
exceptions listed below), none carries a tool pragma. The classifier itself is checked on a listing whose classes
are counted by hand."""

import textwrap

import pytest

pytest.importorskip("sphinx", reason="the listings are cut by Sphinx's own reader (the 'book' extra)")

from tools import shown_code  # noqa: E402

SAMPLE = textwrap.dedent(
    '''\
    class Layer(nn.Module):
        """y = x W (the equation)."""

        def forward(
            self, x: Tensor
        ) -> Tensor:
            """Apply the layer.

            More words.
            """
            require_tensor(x, "x")
            if x.ndim != 2:
                raise ValueError(
                    "x must be 2-D"
                )
            # (n, d) @ (d, e) -> (n, e)
            y = x @ self.w
            return y
    '''
)


def test_classifier_counts_a_listing_as_counted_by_hand():
    kinds = shown_code.classify(SAMPLE.rstrip("\n"))
    counts = {k: kinds.count(k) for k in shown_code.CLASSES}
    assert counts == {
        "docstring": 5,  # one line for the class, four for the method (its blank line included)
        "signature": 4,  # the class line and the three lines of the def
        "validation": 5,  # the require_ call and the if-raise block
        "comment": 1,
        "blank": 1,
        "computation": 2,
    }
    assert kinds[-2:] == ["computation", "computation"]


def test_problems_name_each_broken_rule(tmp_path):
    page = tmp_path / "book"
    page.mkdir()
    body = "\n".join(f"    y{i} = x + {i}" for i in range(45))
    (tmp_path / "m.py").write_text(
        f"def long(x):\n{body}\n    return y0  # type: ignore\n\n\ndef wide(x):\n    return x + {'1 + ' * 30}1\n"
    )
    (page / "01_a.md").write_text(
        "```{literalinclude} ../m.py\n:pyobject: long\n```\n\n```{literalinclude} ../m.py\n:pyobject: wide\n```\n"
    )
    found = shown_code.listings(page)
    assert [x.name for x in found] == ["m.py:long", "m.py:wide"]
    issues = shown_code.problems(found)
    assert any("shows 47 lines, over 40" in p for p in issues)
    assert any("tool pragma" in p for p in issues)
    assert any("m.py:wide line 2 is" in p and "over 88" in p for p in issues)
    assert not any("under 60%" in p for p in issues)  # the two listings are all computation but the signatures


def test_the_book_shows_the_mathematics():
    found = shown_code.listings()
    assert len(found) >= 50, "the book's listings were not found"
    issues = shown_code.problems(found, widths=False)
    assert not issues, "\n" + shown_code.table(found) + "\n\n" + "\n".join(issues)


# Shown lines still wider than 88 columns, each for a reason; the test below fails when one of them fits.
# - four hugged signatures: ruff (120 columns) puts the parameters on one line, which is 92 to 105 columns;
#   no annotation or default makes that line fit 88 while the whole signature stays over 120 columns, and one
#   parameter per line (ruff's only other layout) would add 34 signature lines, taking the share under 60 %.
WIDE_SIGNATURES = {
    "linear_attention.py:linear_attention",
    "linear_attention.py:causal_linear_attention_chunked",
    "banded_attention.py:band_mask",
    "banded_attention.py:banded_attention",
}


def _wide_lines(found):
    return [(x, n, line) for x in found for n, line in enumerate(x.lines, 1) if len(line) > shown_code.MAX_COLUMNS]


def test_the_book_shows_code_within_88_columns_but_the_listed_exceptions():
    found = shown_code.listings()
    wide = _wide_lines(found)
    unexplained = [
        f"{x.page}:{x.line} {x.name} line {n} is {len(line)} columns wide: {line.strip()}"
        for x, n, line in wide
        if not (x.name in WIDE_SIGNATURES and n == 2)
    ]
    assert not unexplained, "\n".join(unexplained)
    still_wide = {x.name for x, n, _ in wide if x.name in WIDE_SIGNATURES and n == 2}
    assert still_wide == WIDE_SIGNATURES, f"{sorted(WIDE_SIGNATURES - still_wide)} fit now: drop them from the list"


@pytest.mark.xfail(strict=True, reason="the exceptions above (WIDE_SIGNATURES)")
def test_the_book_shows_code_within_88_columns():
    found = shown_code.listings()
    wide = [p for p in shown_code.problems(found) if "columns wide" in p]
    assert not wide, "\n".join(wide)


def test_chapter_4_shows_multi_head_attention_forward():
    shown = {(x.page, x.options["pyobject"]) for x in shown_code.listings()}
    assert ("04_attention.md", "MultiHeadAttention.forward") in shown
