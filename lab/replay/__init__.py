"""Approximate state reconstruction by bounded replay (seed 001, chapter 9): pure Python, exact arithmetic.

toy.py   the two-layer window toy of §9.1 (full prefill vs suffix replay, then one decode step)
span.py  R = W + (D-1)(W-1) and the exhaustive 0/1 check of §9.1.1
cost.py  the query-range and SWA pair-count formulas of §9.5 against a pair-enumerating reference
"""
