"""Homework checkers, one module per chapter.

Each checker is a :class:`companion.exercises.checking.Checker`: call it with your function or class to print a
verdict (passed / not attempted yet / wrong, with the failing input, what was expected and what came).
"""
