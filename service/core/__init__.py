"""The science: pure functions and frozen dataclasses. No Flask, SQLAlchemy, marshmallow or I/O here.

Public names carry units (`flops`, `params`, `tokens`, `seconds`, `price_per_hour`); formula symbols
(N, D, alpha, ...) appear only inside the function that implements the formula, defined in its docstring
with the paper it comes from. Every public function validates its arguments and raises `InvalidInput`
naming the argument.
"""
