"""Relations between input sizes a model requires beyond their ranges.

``torch._check(x.shape[0] <= y.shape[0])`` and the guards torch.export
records while tracing (``(B*L) % 4 == 0`` for ``x.reshape(-1, 4)``) make
its program valid only where they hold; eager raises elsewhere, and a
compiled module would compute something. They are kept in the signature,
over its symbols in Python syntax, and checked on every call; one anyshape
adds itself says why after a ``#`` (``frontend/pooling_sizes.py``: a window
longer than its input). Needs neither torch nor the compilers: the runtime
uses it.
"""

from __future__ import annotations

import ast
import functools
import operator
import re

# An input's size in torch.export's guards: "L['x'].size()[1]", for a
# keyword argument "L['kwargs']['mask'].size()[0]", and for one inside a
# tuple or list argument "L['cache'][0].size()[2]" (the input torch.export
# names cache_0).
_SIZE_SOURCE = re.compile(r"L((?:\[(?:'\w+'|\d+)\])+)\.size\(\)\[(\d+)\]")
_PATH_KEY = re.compile(r"\[(?:'(\w+)'|(\d+))\]")


def _input_name(path: str) -> str:
    """The input a guard's path names: its keys joined by "_", as torch.export
    names a flattened input, without the leading "kwargs"."""
    keys = [name or number for name, number in _PATH_KEY.findall(path)]
    if keys and keys[0] == "kwargs":
        keys = keys[1:]
    return "_".join(keys)
# A bound of one symbol (``(s0) <= 512``, ``2 <= (s0)``): the ranges say it already.
_RANGE = re.compile(r"\(?\w+\)?\s*(<=|>=|<|>)\s*-?\d+|-?\d+\s*(<=|>=|<|>)\s*\(?\w+\)?")


def from_guards(guards: list[str], dims: dict[tuple[str, int], int | str],
                symbols: list[str]) -> list[str]:
    """torch.export's guards (``ExportedProgram._guards_code``) over the symbols:
    each input size (``dims``: (input, axis) -> its size, an int or a symbol or
    expression) written as its dim; those that are ranges, name no symbol, or
    read anything but input sizes are left out."""
    conditions = []
    for code in guards:
        unknown = []

        def size(match):
            dim = dims.get((_input_name(match.group(1)), int(match.group(2))))
            if dim is None:
                unknown.append(match.group(0))
                return "0"
            return str(dim) if isinstance(dim, int) else f"({dim})"

        text = _SIZE_SOURCE.sub(size, code)
        if unknown or "L[" in text or _RANGE.fullmatch(text.strip()) or \
                not any(re.search(rf"\b{s}\b", text) for s in symbols):
            continue
        conditions.append(text)
    return conditions


def readable(condition: str, labels: dict[str, str]) -> str:
    """The condition with each symbol written as its Dim's name where known
    (without its reason)."""
    return re.sub(r"\b[A-Za-z_]\w*\b", lambda m: labels.get(m.group(0), m.group(0)),
                  condition.partition("#")[0].strip())


def reason(condition: str) -> str | None:
    """Why the model requires it, where the condition says (after a ``#``)."""
    return condition.partition("#")[2].strip() or None


_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
              ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
              ast.Div: operator.truediv, ast.USub: operator.neg, ast.Not: operator.not_,
              ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
              ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}
_FUNCTIONS = {"max": max, "min": min, "abs": abs}


def holds(condition: str, values: dict[str, int]) -> bool | None:
    """The condition (Python syntax: arithmetic, comparisons, and/or/not,
    max/min/abs) at ``values``; None when it uses anything else, which is left
    unchecked. An evaluator of its own, not eval: a manifest is data."""
    def value(node):
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool)):
            return node.value
        if isinstance(node, ast.Name):
            return values[node.id]
        if isinstance(node, (ast.BinOp, ast.UnaryOp)) and type(node.op) in _OPERATORS:
            operands = [node.left, node.right] if isinstance(node, ast.BinOp) else [node.operand]
            return _OPERATORS[type(node.op)](*map(value, operands))
        if isinstance(node, ast.BoolOp):
            results = [value(v) for v in node.values]
            return all(results) if isinstance(node.op, ast.And) else any(results)
        if isinstance(node, ast.Compare) and all(type(op) in _OPERATORS for op in node.ops):
            operands = [value(node.left), *map(value, node.comparators)]
            return all(_OPERATORS[type(op)](a, b)
                       for op, a, b in zip(node.ops, operands, operands[1:]))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in _FUNCTIONS and not node.keywords:
            return _FUNCTIONS[node.func.id](*map(value, node.args))
        raise ValueError(node)

    try:
        return bool(value(_parsed(condition)))
    except (ValueError, KeyError, SyntaxError, ArithmeticError, TypeError):
        return None


@functools.lru_cache(maxsize=256)
def _parsed(condition: str) -> ast.Expression:
    """A module's conditions are checked on every call: parsed once (tens of
    microseconds each, against a call of a few milliseconds at batch 1)."""
    return ast.parse(condition, mode="eval")
