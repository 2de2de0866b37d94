"""Figures shared by the chapters: labelled points in the plane and labelled matrices.

Every function draws on the ``ax`` it is given (or a new one), sets a title and axis labels, and returns
the :class:`matplotlib.axes.Axes`, so a chapter can add to it.
"""

from .figures import heatmap, plot_vectors_2d

__all__ = ["plot_vectors_2d", "heatmap"]
