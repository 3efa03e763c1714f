"""torch.export's failures, explained: above all a dynamic dim it fixed to its example value.

``x * math.sqrt(x.shape[-1])`` exports with the size read once, as a plain
number: torch.export then refuses the dim the user marked dynamic with a bare
"Constraints violated (n)!". Which line did it is in torch's shape-environment
log ("guard added" records carry the user's frame); this module listens to
that log during the export and names the line, the dim and what to write
instead.
"""

from __future__ import annotations

import contextlib
import linecache
import logging
import os
import re
import traceback
from dataclasses import dataclass, field

from anyshape.errors import CompileError
from anyshape.frontend.program_signature import declared_dims

_SHAPE_LOG = "torch.fx.experimental.symbolic_shapes"
_SYMBOL = re.compile(r"\b[su]\d+\b")
# "L['x'].size()[1]" -> ("x", "1"); a keyword argument is "L['kwargs']['mask']".
# A size's source as torch writes it: L['x'].size()[1], L['kwargs']['x'].size()[1],
# and for an input nested in a list or tuple L['past'][0].size()[2] (named past[0]).
_SIZE_SOURCE = re.compile(r"L(?:\['\w+'\])*\['(\w+)'\]((?:\[\d+\])*)\.size\(\)\[(\d+)\]")


def _input_and_axis(source: str) -> tuple[str, int] | None:
    """(input, axis) of a size's source (``past[0]`` for a nested input), or None."""
    match = _SIZE_SOURCE.fullmatch(source)
    return (match.group(1) + match.group(2), int(match.group(3))) if match else None

ADVICE = ("Python code there used the size as a plain number (math.sqrt and the other "
          "math functions, float(), int(), a branch on its value, or a Python loop over "
          "range(size), which torch.export unrolls), so torch.export "
          "read it once. Keep it symbolic: size ** 0.5 or torch.sym_sqrt(size) for "
          "math.sqrt(size), torch.sym_float(size) for float(size), size // k or "
          "torch.sym_int(value) for int(value), torch.sym_max / torch.sym_min for "
          "max / min; or leave that dim static (no Dim) if it never changes.")


@dataclass
class Guard:
    expr: str                             # the condition torch.export recorded (sympy)
    frame: traceback.FrameSummary | None  # where in the user's code


@dataclass
class ShapeLog:
    """What the shape environment said during one export."""
    sources: dict[str, tuple[str, int]] = field(default_factory=dict)  # symbol -> (source, hint)
    guards: list[Guard] = field(default_factory=list)


class _Listener(logging.Handler):
    def __init__(self, log: ShapeLog):
        super().__init__(logging.INFO)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        if str(record.msg).startswith("create_symbol") and len(args) >= 3:
            try:
                self.log.sources[str(args[0])] = (str(args[2]), int(args[1]))
            except (TypeError, ValueError):
                pass
        elif "[guard added]" in str(record.msg) and len(args) >= 3:
            frame = getattr(args[2], "framework_loc", None)
            if not isinstance(frame, traceback.FrameSummary) or _inside_torch(frame):
                frame = _user_frame()  # a guard an op's implementation added
            self.log.guards.append(Guard(str(args[1]), frame))


def _inside_torch(frame: traceback.FrameSummary) -> bool:
    import torch

    return frame.filename.startswith(os.path.dirname(torch.__file__))


def _user_frame(frames: list[traceback.FrameSummary] | None = None
                ) -> traceback.FrameSummary | None:
    """The innermost of ``frames`` (default: the running stack) in the user's
    code: not in torch, anyshape or Python's own library."""
    import sysconfig

    import torch

    skip = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)),
            sysconfig.get_paths()["stdlib"])
    for frame in reversed(traceback.extract_stack() if frames is None else frames):
        if not frame.filename.startswith(skip) and not frame.filename.startswith("<"):
            return frame
    return None


def _raised_at(error: BaseException) -> traceback.FrameSummary | None:
    """The user's frame where ``error`` (or the error it was raised from) was
    raised: the innermost one of the deepest error in the chain that has one."""
    found, seen = None, set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        frame = _user_frame(traceback.extract_tb(error.__traceback__))
        found = frame or found
        error = error.__cause__ or error.__context__
    return found


DATA_DEPENDENT_ADVICE = (
    "The model's Python code there decides something from a value computed from the "
    "inputs' data (a branch on .item() or .any(), a size that counts selected elements, "
    "a size computed by a tensor op such as torch.div where // would keep it a size), and "
    "one compiled program serves every input. Compute both sides and choose with "
    "torch.where, write the branch with torch.cond, compute sizes with Python's "
    "arithmetic, or decide outside the model and pass the result in as an input.")


@contextlib.contextmanager
def listening():
    """Record the shape log of the export inside, without printing it (torch
    attaches its own stderr handler to that logger: set aside meanwhile)."""
    logger = logging.getLogger(_SHAPE_LOG)
    log = ShapeLog()
    saved = (logger.level, list(logger.handlers))
    for handler in saved[1]:
        logger.removeHandler(handler)
    listener = _Listener(log)
    logger.addHandler(listener)
    logger.setLevel(logging.INFO)
    try:
        yield log
    finally:
        logger.removeHandler(listener)
        logger.setLevel(saved[0])
        for handler in saved[1]:
            logger.addHandler(handler)


def export_error(error: Exception, log: ShapeLog, dynamic_shapes=None,
                 input_names: list[str] | None = None) -> CompileError:
    """A ``CompileError`` of stage 'export' for torch.export's ``error``;
    ``input_names``: forward's parameters, for a ``dynamic_shapes`` tuple."""
    text = str(error)
    if "Constraints violated" in text:
        explained = _explain_specializations(text, log,
                                             declared_dims(dynamic_shapes, input_names or []))
        if explained:
            return CompileError("export", explained, None, None)
    first = next((line for line in text.splitlines() if line.strip()), type(error).__name__)
    if "Could not guard on data-dependent expression" in first:
        frame = _raised_at(error)
        where = "" if frame is None else \
            f" at {frame.filename}:{frame.lineno}" + (
                f":\n    {(frame.line or linecache.getline(frame.filename, frame.lineno)).strip()}"
                if frame.line or linecache.getline(frame.filename, frame.lineno) else "")
        return CompileError("export", f"torch.export could not export the model "
                                      f"({type(error).__name__}): {first.strip()}{where}\n"
                                      f"{DATA_DEPENDENT_ADVICE}", None, None)
    advice = QUANTIZED_TENSOR_ADVICE if type(error).__name__ == "UnsupportedOperatorException" \
        and _QUANTIZED_TENSOR_OP.search(first) else ""
    return CompileError("export", f"torch.export could not export the model "
                                  f"({type(error).__name__}): {first}{advice}", None, None)


# Ops of quantized tensor types (torch.qint8, ...), which torch.export's fake
# tensors do not support.
_QUANTIZED_TENSOR_OP = re.compile(r"\baten\.(_make_per_(tensor|channel)_quantized_tensor|"
                                  r"quantize_per_(tensor|channel)\w*|int_repr|dequantize|"
                                  r"q_(scale|zero_point|per_channel_\w+))\.")
QUANTIZED_TENSOR_ADVICE = (
    "\nThat op makes or reads a quantized tensor type (torch.qint8, torch.quint8), which "
    "torch.export cannot trace. Keep the integers in plain int8 tensors and quantize and "
    "dequantize with torch.ops.quantized_decomposed (quantize_per_tensor, "
    "dequantize_per_tensor, ..._per_channel, ..._per_token), as PT2E quantization does: "
    "anyshape compiles those.")


def _explain_specializations(text: str, log: ShapeLog,
                             labels: dict[tuple[str, int], str]) -> str | None:
    pinned, conditions = [], {}  # conditions: (guard, its text) -> the dims it holds back
    explained = set()  # the sizes (x.size()[1]) a message above already names
    explained_labels = set()
    for symbol, (source, hint) in log.sources.items():
        guard = _restricting_guard(symbol, log, labels)
        if guard is None:
            continue
        where = _input_and_axis(source)
        where_dim = f"{where[0]}.size()[{where[1]}]" if where else source
        label = labels.get(where) if where else None
        named = f"'{label}' ({where_dim})" if label else where_dim
        if _pins(guard.expr, symbol):
            pinned.append(f"torch.export fixed dim {named} to its example value {hint} "
                          f"{_at(guard)}")
        elif any(conversion in guard.expr for conversion in _CONVERSIONS):
            pinned.append(f"torch.export could not keep dim {named} dynamic: a Python "
                          f"conversion of it made the condition {_with_sources(guard.expr, log)}"
                          f", true at the example size {hint} and not at others, {_at(guard)}")
        elif not _holds_by_declaration(guard.expr, log, labels):
            conditions.setdefault((id(guard), _with_sources(guard.expr, log)), (guard, []))[1] \
                .append(named)
        else:
            continue
        explained.add(where_dim)
        explained_labels.add(label)
    # The guards torch says are violated, where the probing above found none
    # for that dim: one false only at small sizes (L - 1 != 1), or one torch
    # cannot prove though it may hold (L * min(64, 64 * L) == 64 * L).
    unproven = {}  # (guard or None, condition) -> dims
    for label, source, condition in _VIOLATED.findall(text):
        named = f"'{label}' ({_dim_of(source)})"
        if _dim_of(source) in explained:
            continue
        failing = _small_sizes_failing(condition, source, log)
        if failing:
            condition += f" (false at {label} = {', '.join(map(str, failing))})"
        guard = _recorded(condition, source, log)
        unproven.setdefault((id(guard) if guard else condition, condition), (guard, []))[1] \
            .append(named)
    # A dim torch fixed where the log recorded no guard that pins it.
    for label, hint in dict(_SPECIALIZED.findall(text)).items():
        if label not in explained_labels:
            dims = [f"{input_name}.size()[{axis}]"
                    for (input_name, axis), named in sorted(labels.items()) if named == label]
            named = f"'{label}'" + (f" ({', '.join(dims)})" if dims else "")
            pinned.append(f"torch.export fixed dim {named} to its example value {hint} "
                          f"(where, torch did not record)\n")
    if not pinned and not conditions and not unproven:
        return None
    parts = list(pinned)
    for (_, condition), (guard, dims) in conditions.items():
        parts.append(f"torch.export could not keep dim{'s' if len(dims) > 1 else ''} "
                     f"{' and '.join(dims)} dynamic: the condition {condition} holds only "
                     f"for some sizes, added {_at(guard)}")
    for (_, condition), (guard, dims) in unproven.items():
        where = _at(guard) if guard else "(where, torch did not record)\n"
        parts.append(f"torch.export could not keep dim{'s' if len(dims) > 1 else ''} "
                     f"{' and '.join(dims)} dynamic: it could not show that the condition "
                     f"{condition} holds at every size it allows, added {where}")
    conditions.update(unproven)
    advice = ADVICE if pinned else ""
    if conditions:
        fixes = text[text.index("Suggested fixes:"):].split("\n\n")[0].strip() \
            if "Suggested fixes:" in text else ""
        advice += (("\n" if advice else "") +
                   "The model's code needs that condition (a branch on a size, torch._check, or "
                   "an op whose operands' sizes must match): declare the dims so that it always "
                   "holds (one Dim for dims that must be equal, a min or max, a multiple of a "
                   f"Dim){', as torch suggests:' if fixes else '.'}" + (f"\n{fixes}" if fixes else ""))
    return "".join(parts) + advice


_SPECIALIZED = re.compile(r"You marked (\w+) as dynamic but your code specialized it to be a "
                         r"constant \((-?\d+)\)")
# torch's own words for a guard that narrows a declared dim.
_VIOLATED = re.compile(r"Not all values of (\w+) = (\S+) in the specified range(?: .*?)? satisfy "
                       r"the generated guard (.+?)\.?$", re.MULTILINE)


def _dim_of(source: str) -> str:
    where = _input_and_axis(source)
    return f"{where[0]}.size()[{where[1]}]" if where else source


def _holds_by_declaration(expr: str, log: ShapeLog, labels: dict[tuple[str, int], str]) -> bool:
    """A guard relating sizes the user declared with one ``Dim`` (``Eq(s0,
    s2)``, ``-s1 >= -s3``) that holds once they are one size: torch relates
    them that way, and the declaration already makes it hold."""
    import sympy

    parsed = _parse(expr)
    if parsed is None:
        return False
    by_label: dict[str, sympy.Symbol] = {}
    sizes = {}  # each symbol as a positive integer, one per declared Dim
    for symbol in sorted(getattr(parsed, "free_symbols", ()), key=str):
        where = _input_and_axis(log.sources.get(str(symbol), ("",))[0])
        label = labels.get(where) if where else None
        if label is None:
            sizes[symbol] = sympy.Symbol(f"size_{symbol}", integer=True, positive=True)
        elif label.isidentifier():
            sizes[symbol] = _size_named(label, by_label)
        else:  # a derived Dim ('past + 1', '2*seq'): its expression in its root's size
            try:
                sizes[symbol] = sympy.sympify(label, locals={
                    name: _size_named(name, by_label) for name in re.findall(r"[A-Za-z_]\w*", label)})
            except (sympy.SympifyError, TypeError, SyntaxError):
                sizes[symbol] = sympy.Symbol(f"size_{symbol}", integer=True, positive=True)
    roots = set().union(*(size.free_symbols for size in sizes.values()))
    if len(roots) == len(sizes) and all(size.is_Symbol for size in sizes.values()):
        return False  # no two sizes of one Dim, no size derived from another
    try:
        return bool(sympy.simplify(parsed.subs(sizes)) in (sympy.true, True))
    except (TypeError, ValueError):
        return False


def _size_named(label: str, by_label: dict):
    import sympy

    return by_label.setdefault(label, sympy.Symbol(f"size_{label}", integer=True, positive=True))


def _as_sympy(condition: str, log: ShapeLog):
    """torch's ``condition``, written with sources and Python's comparisons,
    as sympy over the log's symbols; None when it does not parse."""
    symbols = {src: name for name, (src, _) in log.sources.items()}
    text = condition
    for src, name in sorted(symbols.items(), key=lambda item: -len(item[0])):
        text = text.replace(src, name)
    for python, sympy_name in ((" != ", "Ne"), (" == ", "Eq")):
        if python in text:  # sympify reads these as Python's own comparisons
            left, right = text.split(python, 1)
            text = f"{sympy_name}({left}, {right})"
    return _parse(text)


def violated_expressions(text: str, log: ShapeLog) -> list[tuple[str, object]]:
    """The guards torch says narrow a declared dim, as (dim's name, the condition
    as sympy over the log's symbols, or None where it does not parse)."""
    return [(label, _as_sympy(condition, log)) for label, _source, condition
            in _VIOLATED.findall(text)]


def violated_conditions(text: str, log: ShapeLog) -> list[tuple[str, object]]:
    """``violated_expressions`` as (dim's name, a test of the condition at one
    size of that dim: True, False, or None where it cannot tell), for
    conditions over that one size only."""
    return [(label, _test_at_one_size(expr)) for label, expr in violated_expressions(text, log)]


def _test_at_one_size(expr):
    import sympy

    symbols = list(getattr(expr, "free_symbols", ())) if expr is not None else []
    if len(symbols) != 1:
        return lambda size: None

    def holds_at(size: int) -> bool | None:
        try:
            value = sympy.simplify(expr.subs(symbols[0], size))
        except (TypeError, ValueError, ArithmeticError):
            return None
        return True if value in (sympy.true, True) else \
            False if value in (sympy.false, False) else None
    return holds_at


def _small_sizes_failing(condition: str, source: str, log: ShapeLog) -> list[int]:
    """The sizes 0 to 3 of ``source``'s dim at which ``condition`` is false
    (every size of the same Dim set alike): what a min would rule out."""
    import sympy

    expr = _as_sympy(condition, log)
    if expr is None:
        return []
    failing = []
    for size in range(4):
        point = {symbol: size for symbol in getattr(expr, "free_symbols", ())}
        try:
            if expr.subs(point) in (sympy.false, False):
                failing.append(size)
        except (TypeError, ValueError, ArithmeticError):
            return []
    return failing


def _recorded(condition: str, source: str, log: ShapeLog) -> Guard | None:
    """The logged guard torch's ``condition`` (written with sources) is. Only
    guards over the same symbols are parsed: a hybrid model logs thousands."""
    import sympy

    wanted = _as_sympy(condition, log)
    if wanted is None:
        return None
    names = {str(symbol) for symbol in getattr(wanted, "free_symbols", ())}
    for guard in log.guards:
        if set(_SYMBOL.findall(guard.expr)) != names:
            continue
        expr = _parse(guard.expr)
        if expr is None:
            continue
        if expr == wanted:
            return guard
        try:
            if type(expr) is type(wanted) and \
                    sympy.expand(expr.lhs - expr.rhs - wanted.lhs + wanted.rhs) == 0:
                return guard
        except (AttributeError, TypeError):
            continue
    return None


def _at(guard: Guard) -> str:
    frame = guard.frame
    if frame is None:
        return "(where, torch did not record)\n"
    line = (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
    return f"at {frame.filename}:{frame.lineno}" + (f":\n    {line}\n" if line else "\n")


def _restricting_guard(symbol: str, log: ShapeLog,
                       labels: dict[tuple[str, int], str]) -> Guard | None:
    """The first guard on ``symbol`` that some other size would fail: the one
    that took the dim's freedom away. Neither a guard every size passes (``L !=
    1`` for a broadcast) nor one that the declaration makes hold (``Eq(s27,
    s64)`` for the ids' and the mask's lengths, both ``Dim("seq")``) is it: a
    later guard, ``Eq(s27, 16)`` at a token loop, is."""
    import sympy

    values = {name: hint for name, (_, hint) in log.sources.items()}
    hint = values.get(symbol)
    if hint is None:
        return None
    for guard in log.guards:
        expr = _parse(guard.expr)
        free = {str(s): s for s in getattr(expr, "free_symbols", ())}
        if symbol not in free or (len(free) > 1 and _holds_by_declaration(guard.expr, log, labels)):
            continue
        for other in (hint + 1, hint + 2, 2 * hint + 7, 100003):
            point = {s: values.get(name, 0) for name, s in free.items()}
            point[free[symbol]] = other
            try:
                holds = expr.subs(point)
            except (TypeError, ValueError, ArithmeticError):
                continue
            if holds in (sympy.false, False):
                return guard
    return None


def _parse(text: str):
    """A guard's text as sympy, with torch's own functions (``TruncToInt``,
    ``PythonMod``, ...) evaluable; None when it does not parse."""
    import sympy
    from torch.utils._sympy import functions

    names = {name: getattr(functions, name) for name in dir(functions)
             if isinstance(getattr(functions, name), type)}
    try:
        return sympy.sympify(text, locals=names)
    except (sympy.SympifyError, SyntaxError, TypeError, ValueError):
        return None


# torch's names for Python's conversions of a size (float(), int(), math.floor,
# round, math.sqrt, ...) inside a guard: a plain-number use, not a condition.
_CONVERSIONS = ("ToFloat(", "TruncToInt(", "FloorToInt(", "CeilToInt(", "RoundToInt(",
                "OpaqueUnaryFn")


def _pins(expr, symbol: str) -> bool:
    """Whether ``expr`` is ``Eq(symbol, number)``."""
    return re.fullmatch(rf"Eq\({symbol}, -?\d+\)", str(expr)) is not None


def _with_sources(expr, log: ShapeLog) -> str:
    return _SYMBOL.sub(lambda m: log.sources.get(m.group(0), (m.group(0),))[0], str(expr))
