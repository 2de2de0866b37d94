"""The book's bibliography in a notebook: citations as "(Author, year)" and the list of the works cited."""

from __future__ import annotations

import functools
import re
from pathlib import Path


class Citations:
    """The book's bibliography (``references.bib``, read by pybtex): citations as "(Author, year)", and the
    list of the works cited, formatted by pybtex's ``unsrt`` style as on the book's bibliography page."""

    def __init__(self, bib: Path | None) -> None:
        from pybtex.database import parse_file

        self.entries = (
            parse_file(str(bib)).entries if bib is not None and bib.exists() else {}
        )
        self.used: list[str] = []

    def label(self, key: str) -> tuple[str, str]:
        """The authors' last names as the book cites them ("Vaswani et al.", "Rahimi and Recht") and the year."""
        entry = self.entries.get(key)
        if entry is None:
            return key, "n.d."
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        last = [
            " ".join(
                part.render(_plugin("pybtex.backends", "text"))
                for part in p.rich_last_names
            )
            for p in people
        ]
        if len(last) == 1 or (len(last) == 2 and last[1] != "others"):
            names = " and ".join(last)
        else:
            names = f"{last[0]} et al." if last else key
        return names, entry.fields.get("year", "n.d.")

    def cite(self, keys: str, *, textual: bool = False) -> str:
        parts = []
        for key in (k.strip() for k in keys.split(",") if k.strip()):
            if key not in self.used:
                self.used.append(key)
            names, year = self.label(key)
            parts.append(f"{names} ({year})" if textual else f"{names}, {year}")
        return "; ".join(parts) if textual else f"({'; '.join(parts)})"

    def reference_list(self) -> str:
        """A Markdown list of the works cited so far, by author and year."""
        style = _plugin("pybtex.style.formatting", "unsrt")
        known = [self.entries[k] for k in self.used if k in self.entries]
        for entry in known:  # pybtex does not read \url{...} in a note
            for field, value in entry.fields.items():
                entry.fields[field] = re.sub(r"\\url\{([^}]*)\}", r"\1", value)
        formatted = {
            e.key: _plain_html(e.text.render(_plugin("pybtex.backends", "html")))
            for e in style.format_entries(known)
        }
        lines = []
        for key in sorted(
            self.used, key=lambda k: (self.label(k)[0].lower(), self.label(k)[1], k)
        ):
            lines.append(
                f"- {formatted[key]}"
                if key in formatted
                else f"- {key} (not in the bibliography)"
            )
        return "\n".join(lines)


@functools.cache
def _plugin(group: str, name: str):
    """An instance of pybtex's plugin ``name`` of ``group``, made once: pybtex looks a plugin up among the
    installed packages' entry points at each ``render_as``, which read every package's metadata each time (a
    check of the notebooks did so 7,000 times, for most of its 40 s)."""
    from pybtex.plugin import find_plugin

    return find_plugin(group, name)()


def _plain_html(html: str) -> str:
    """pybtex's HTML on one line, without its (nested) ``bibtex-protected`` spans, which only mark case."""
    while True:
        plain = re.sub(r'<span class="bibtex-protected">([^<]*)</span>', r"\1", html)
        if plain == html:
            return " ".join(plain.split())
        html = plain
