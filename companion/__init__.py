"""The companion package of the book *From one-hot vectors to Transformers*.

One module per concept, named as the book names it:

- :mod:`companion.text`: tokens, vocabularies and the unknown token.
- :mod:`companion.embeddings`: one-hot vectors, the embedding lookup table, similarities.
- :mod:`companion.plotting`: the figures the chapters draw.
- :mod:`companion.checking`: the machinery behind the homework checkers.
- :mod:`companion.exercises`: one checker per exercise, grouped by chapter.
"""

__version__ = "0.1.0"
