"""Safe arithmetic for the ``calculator`` tool: an expression's syntax tree is walked, and
only numbers, ``+ - * / // % **``, unary signs, parentheses, a few constants and a few
`math` functions are evaluated. Names, attributes, subscripts, strings, comprehensions,
lambdas -- anything else -- are refused before anything runs, and powers are capped so
that no expression can make a number too large to hold.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

__all__ = ["CalculatorError", "evaluate", "MAX_EXPRESSION_CHARS", "MAX_RESULT_BITS"]

MAX_EXPRESSION_CHARS = 256
"""Longest expression accepted."""
MAX_RESULT_BITS = 4096
"""Largest integer (in bits) any step may produce (~1233 decimal digits)."""

Number = int | float

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.USub: operator.neg, ast.UAdd: operator.pos,
}
_FUNCTIONS: dict[str, Callable[..., Number]] = {
    "sqrt": math.sqrt, "abs": abs, "round": round, "floor": math.floor, "ceil": math.ceil,
    "exp": math.exp, "log": math.log, "log10": math.log10, "log2": math.log2,
    "sin": math.sin, "cos": math.cos, "tan": math.tan, "asin": math.asin,
    "acos": math.acos, "atan": math.atan, "degrees": math.degrees, "radians": math.radians,
    "min": min, "max": max, "hypot": math.hypot,
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


class CalculatorError(ValueError):
    """An expression that is refused or cannot be evaluated; the message says why."""


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression: an int when it is whole, a float rounded to
    12 significant digits otherwise.

    >>> evaluate("2 * (3 + 4) ** 2")
    98
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression too long (at most {MAX_EXPRESSION_CHARS} characters)")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise CalculatorError(f"not an arithmetic expression: {expression!r}") from None
    try:
        value = _eval(tree.body)
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("the result is too large") from None
    except (ValueError, TypeError) as exc:
        if isinstance(exc, CalculatorError):
            raise
        raise CalculatorError(f"math error: {exc}") from None
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise CalculatorError("the result is not a finite number")
        value = float(f"{value:.12g}")  # 0.1 + 0.2 is said as 0.3
        if value.is_integer() and abs(value) < 1e15:
            return int(value)
    return value


def _eval(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise CalculatorError(f"only numbers are allowed, not {node.value!r}")
        return _checked(node.value)
    if isinstance(node, ast.BinOp):
        op = _BINARY.get(type(node.op))
        if op is None:
            hint = " (use ** for powers)" if isinstance(node.op, ast.BitXor) else ""
            raise CalculatorError(f"operator {_symbol(node.op)} is not allowed{hint}")
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        return _checked(op(left, right))
    if isinstance(node, ast.UnaryOp):
        unary = _UNARY.get(type(node.op))
        if unary is None:
            raise CalculatorError(f"operator {_symbol(node.op)} is not allowed")
        return _checked(unary(_eval(node.operand)))
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise CalculatorError(f"unknown name {node.id!r} (constants: "
                              f"{', '.join(_CONSTANTS)})")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            raise CalculatorError(f"only these functions are allowed: {', '.join(_FUNCTIONS)}")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise CalculatorError("functions take plain positional arguments")
        args = [_eval(a) for a in node.args]
        return _checked(_FUNCTIONS[node.func.id](*args))
    raise CalculatorError(f"{type(node).__name__} is not allowed in an arithmetic expression")


def _check_power(base: Number, exponent: Number) -> None:
    """Refuse a power whose result would pass `MAX_RESULT_BITS` (estimated from
    log2(|base|) * exponent before computing it)."""
    if abs(base) <= 1 or exponent <= 0:
        if isinstance(exponent, int) and abs(exponent) > 100_000:
            raise CalculatorError("the exponent is too large")
        return
    if exponent * math.log2(abs(base)) > MAX_RESULT_BITS:
        raise CalculatorError(f"the result is too large (over {MAX_RESULT_BITS} bits)")


def _checked(value: Any) -> Number:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CalculatorError(f"the result is not a real number ({type(value).__name__})")
    if isinstance(value, int) and value.bit_length() > MAX_RESULT_BITS:
        raise CalculatorError(f"the result is too large (over {MAX_RESULT_BITS} bits)")
    return value


def _symbol(op: ast.AST) -> str:
    names = {ast.BitXor: "^", ast.BitAnd: "&", ast.BitOr: "|", ast.LShift: "<<",
             ast.RShift: ">>", ast.MatMult: "@", ast.Invert: "~", ast.Not: "not"}
    return names.get(type(op), type(op).__name__)
