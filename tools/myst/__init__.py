"""MyST, as the book's own parser reads it, turned into the Markdown that Jupyter and Colab render.

- :mod:`tools.myst.parse`: a page's blocks (directives, plain code fences, runs of prose) from the token stream
  of myst-parser's markdown-it parser, configured with the book's extensions;
- :mod:`tools.myst.render`: :class:`~tools.myst.render.Renderer`, each directive and role as plain Markdown;
- :mod:`tools.myst.targets`: the labels of the book's pages and the link text the book gives them;
- :mod:`tools.myst.citations`: "(Author, year)" citations and the reference list.
"""
