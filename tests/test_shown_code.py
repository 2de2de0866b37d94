"""The code the book shows reads like the mathematics (tools/shown_code.py measures it).

Across every ``literalinclude :pyobject:`` in the chapters, at least ``MIN_SHARE`` of the read lines are the computation
(not docstring, signature or validation), no listing is over 40 lines, none is wider than 88 columns and none
carries a tool pragma (the rules and why: CONTRIBUTING.md#shown-code). The classifier itself is checked on a
listing whose classes are counted by hand."""

import textwrap

import pytest

pytest.importorskip(
    "sphinx", reason="the listings are cut by Sphinx's own reader (the 'book' extra)"
)

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
        # one line for the class, four for the method (its blank line included)
        "docstring": 5,
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
    # the two listings are all computation but the signatures
    assert not any("of the shown lines, under" in p for p in issues)


def test_the_book_shows_the_mathematics():
    found = shown_code.listings()
    assert len(found) >= 50, "the book's listings were not found"
    issues = shown_code.problems(found)
    assert not issues, (
        "\n"
        + shown_code.table(found)
        + "\n\n"
        + "\n".join(issues)
        + "\n"
        + shown_code.GUIDE
    )


def test_chapter_4_shows_multi_head_attention_forward():
    shown = {(x.page, x.options["pyobject"]) for x in shown_code.listings()}
    assert ("04_attention.md", "MultiHeadAttention.forward") in shown


def test_every_shown_signature_is_annotated():
    # the whole object, also where a listing shows a slice of it (the prose gives the call form there)
    found = {}
    for x in shown_code.listings():
        whole = shown_code.Listing(
            x.page, x.line, x.path, {"pyobject": x.options["pyobject"]}
        )
        whole.lines = shown_code._read(whole)
        found[f"{x.page}:{x.name}"] = shown_code.unannotated(whole)
    missing = {k: v for k, v in found.items() if v}
    assert not missing, (
        f"shown functions with unannotated arguments or return: {missing} "
        "(CONTRIBUTING.md#signatures-and-line-width)"
    )


def test_unannotated_names_each_missing_annotation():
    code = "def f(x: int, y, *args, z=1, **kw: int):\n    return x\n"
    listing = shown_code.Listing("p.md", 1, shown_code.BOOK, {"pyobject": "f"})
    listing.lines = code.rstrip("\n").split("\n")
    assert shown_code.unannotated(listing) == ["f(y, z, args, return)"]
    listing.lines = ["def g(self, x: int) -> int:", "    return x"]
    assert shown_code.unannotated(listing) == []
