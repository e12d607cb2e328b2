"""Approximate state reconstruction by bounded rebuild (the rebuild labs): pure Python, exact arithmetic.

toy.py   the two-layer window toy (full prefill vs suffix rebuild, then one decode step)
span.py  R = W + (D-1)(W-1) and the exhaustive 0/1 check
cost.py  the query-range and SWA pair-count formulas against a pair-enumerating reference

It imports nothing of the lab: exact arithmetic on its own.
"""
