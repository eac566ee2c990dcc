"""Helpers the tests and benches share that users of eddyline do not need.

``tests/`` is on ``sys.path`` in a pytest run (its ``conftest.py`` puts it
there), so ``from support.loops import collatz_body`` works in every test;
a bench adds it itself.
"""
