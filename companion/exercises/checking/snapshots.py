"""Keeping a homework notebook's variables safe: the chapter's variables are saved before an exercise and put
back after its checker, so that names reused while trying an answer out do not break the cells below."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_IPYTHON_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "open"}


def snapshot(namespace: dict[str, Any]) -> dict[str, Any]:
    """The notebook's public variables (name → object) before an exercise, for :func:`restore`."""
    return {
        k: v
        for k, v in namespace.items()
        if not k.startswith("_") and k not in _IPYTHON_NAMES
    }


def restore(
    namespace: dict[str, Any], saved: dict[str, Any], keep: Sequence[str] = ()
) -> list[str]:
    """Put back every variable of ``saved`` that the student's cells replaced or deleted, except ``keep``.

    The homework calls this after each checker, so that ``emb = Embedding(10, 4)`` or ``x = ...`` written while
    trying an answer out does not break the chapter's cells below. Names the student added stay. Returns the
    names put back (and says which, when there are any).
    """
    back = [
        k
        for k, v in saved.items()
        if k not in keep and (k not in namespace or namespace[k] is not v)
    ]
    for k in back:
        namespace[k] = saved[k]
    if back:
        names = ", ".join(f"`{k}`" for k in back)
        print(
            f"(The chapter's {names} {'is' if len(back) == 1 else 'are'} back as before your exercise cells, "
            "so that the cells below run as written; your own new names are kept.)"
        )
    return back
