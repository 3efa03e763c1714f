"""Translation validation: ``anyshape-check IN.mlir --passes P1,P2`` (also
``python -m anyshape.check``).

Compiles a torch-dialect module twice through IREE for the CPU, as it is (the
reference) and after the given anyshape passes, runs both on the same seeded
random inputs at random sizes of its dynamic dims (within their ranges), and
reports the max absolute and relative error of every output. Exits 1 when an
output differs by more than ``--atol + --rtol * |reference|`` anywhere, or
when either build fails; 0 otherwise. With ``anyshape-eliminate-padding``
the mask argument is 0/1 (random, then all 1, then a row of 0s, in turn), and
outputs are compared where the pass promises them exact (its
``anyshape.padding`` attribute); per-token outputs must be 0 at padding.

Sizes are drawn from the dims' ranges (``torch.symbolic_int`` with its
bindings, as imported, or ``anyshape.dims`` facts), capped at ``--max-size``
(a minimum above it wins); a dynamic dim with neither is a size of its own,
from 0 to ``--max-size``. Float inputs are standard normal, integer inputs
uniform in ``[0, --int-high)``, booleans fair coins. Both builds run without
data tiling, so that what is compared is what the passes did;
``anyshape-lower`` ends the passes (unless they include it) and lowers
anyshape ops in the unchanged module. The reference build is kept for the
process (the last few modules), so that checking several passes on one
module compiles it once.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from anyshape.runtime.signature import ModuleSignature

LOWER = "anyshape-lower"
# Reference builds by (module text's SHA-256, function, pipeline): no pass but
# anyshape's own lowering runs on them, so the text decides the build.
_REFERENCES: collections.OrderedDict = collections.OrderedDict()
_KEPT_REFERENCES = 4


@dataclass
class OutputError:
    output: str
    max_abs: float
    max_rel: float
    ok: bool


@dataclass
class Trial:
    sizes: dict[str, int]
    errors: list[OutputError]

    @property
    def ok(self) -> bool:
        return all(e.ok for e in self.errors)


def check(text: str | bytes, passes: list[str], *, trials: int = 3, seed: int = 0,
          atol: float = 1e-5, rtol: float = 1e-4, max_size: int = 64, int_high: int = 2,
          function: str = "main", conditions: list[str] | None = None) -> list[Trial]:
    """Compare the module before and after ``passes`` (see the module docstring).
    ``conditions``: relations between the sizes the program requires (Python
    expressions over its symbols, ``ModuleSignature.conditions``), which the
    IR does not state; drawn sizes that break one are drawn again (a step
    whose cache has fewer slots than its mask reads and writes out of bounds)."""
    from anyshape.driver.compile import compile_module
    from anyshape.driver.ir_signature import signature_from_module
    from anyshape.mlir import parse_module
    from anyshape.dialects import new_context
    from anyshape.driver.pipeline import parse_options, split_pass_element
    from anyshape.iree.flags import make_target

    target = make_target("cpu", data_tiling=False)
    if conditions:  # sizes that meet them exist, before two builds are made
        _draw_sizes(signature_from_module(parse_module(text, new_context()), function),
                    np.random.default_rng(seed), max_size, conditions)
    builds = []
    digest = hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()
    for is_reference, pipeline in ((True, []), (False, list(passes))):
        module = parse_module(text, new_context())
        signature = signature_from_module(module, function)
        for element in pipeline:
            name, options = split_pass_element(element)
            if name == "anyshape-eliminate-padding":
                position = int(parse_options(options).get("mask", -1))
                if 0 <= position < len(signature.inputs):
                    signature.padding_mask = signature.inputs[position].name
        # anyshape ops (in the input, or made by the passes) reach IREE lowered.
        names = [split_pass_element(p)[0] for p in pipeline]
        if LOWER not in names and (pipeline or _has_anyshape_ops(module)):
            pipeline = [*pipeline, LOWER]
        key = (digest, function, tuple(pipeline))
        if is_reference and key in _REFERENCES:
            _REFERENCES.move_to_end(key)
            builds.append(_REFERENCES[key])
            continue
        builds.append(compile_module(module, signature, target, pipeline, entry=function))
        if is_reference:
            _REFERENCES[key] = builds[-1]
            while len(_REFERENCES) > _KEPT_REFERENCES:
                _REFERENCES.popitem(last=False)
    reference, candidate = builds
    padding = padding_contract(candidate)
    rng = np.random.default_rng(seed)
    out = []
    for trial in range(trials):
        sizes = _draw_sizes(reference.signature, rng, max_size, conditions or [])
        inputs = _draw_inputs(reference.signature, sizes, rng, int_high)
        if padding is not None:
            inputs[padding.mask] = _draw_mask(inputs[padding.mask], trial, rng)
        expected = _flat(reference(*inputs))
        got = _flat(candidate(*inputs))
        errors = []
        for number, (want, have) in enumerate(zip(expected, got)):
            name = reference.signature.outputs[number].name
            want, have = want.numpy(), have.numpy()
            if padding is not None:
                want, have, pad_error = padding.real_entries(number, inputs, want, have)
                if pad_error is not None:
                    errors.append(pad_error)
            errors.append(_compare(name, want, have, atol, rtol))
        if len(expected) != len(got):
            errors.append(OutputError(f"{len(got)} outputs, expected {len(expected)}",
                                      float("inf"), float("inf"), False))
        out.append(Trial(sizes, errors))
    return out


@dataclass
class PaddingContract:
    """What ``anyshape-eliminate-padding`` promises (its ``anyshape.padding``
    attribute): results exact at real tokens and 0 at padding (``per_token``),
    or exact for the sequences (along an axis) whose position ``c`` is a real
    token (``per_row``)."""

    mask: int
    per_token: list[int]
    per_row: dict[int, list[tuple[int, int]]]  # result -> (sequence axis, position)

    def real_entries(self, result: int, inputs, want, have):
        real = inputs[self.mask] != 0
        if result in self.per_token:
            lead = real.reshape(want.shape[:1]) if want.shape[:1] == (real.size,) else real
            padded = have[~lead]
            stray = float(np.abs(padded).max()) if padded.size else 0.0
            error = None if stray == 0 else OutputError(
                f"result {result} at padded positions (expected 0)", stray, float("inf"), False)
            return want[lead], have[lead], error
        if result in self.per_row:
            rows = np.ones(real.shape[0], dtype=bool)
            axis = 0
            for axis, column in self.per_row[result]:
                rows &= real[:, column]
            return np.compress(rows, want, axis), np.compress(rows, have, axis), None
        return want, have, None


def padding_contract(module) -> PaddingContract | None:
    import re

    from anyshape.passes.eliminate_padding.pass_ import PADDING_ATTR

    stage = next((s for s in module.stages if s.startswith("anyshape-eliminate-padding")), None)
    if stage is None:
        return None
    text = module.ir(stage)
    found = re.search(re.escape(PADDING_ATTR) + r' = \{(?:dense = @\S+, )?mask = (\d+) : i64, '
                      r'per_row = \[(.*?)\], '
                      r'per_token = \[(.*?)\]\}', text)
    per_row: dict[int, list[tuple[int, int]]] = {}
    for result, axis, column in re.findall(r'"(\d+):(\d+):(-?\d+)"', found.group(2)):
        per_row.setdefault(int(result), []).append((int(axis), int(column)))
    per_token = [int(n) for n in found.group(3).split(",") if n.strip()]
    return PaddingContract(int(found.group(1)), per_token, per_row)


def _draw_mask(like: np.ndarray, trial: int, rng) -> np.ndarray:
    """0/1 masks: random, then every token real, then a row of padding only."""
    mask = rng.integers(0, 2, like.shape)
    if trial % 3 == 1:
        mask[...] = 1
    elif trial % 3 == 2 and mask.shape[0]:
        mask[0] = 0
    return mask.astype(like.dtype)


def _has_anyshape_ops(module) -> bool:
    from anyshape.mlir import ir

    found = []

    def visit(op):
        if op.name.startswith("anyshape."):
            found.append(op)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return bool(found)


def _draw_sizes(signature: ModuleSignature, rng, max_size: int,
                conditions: list[str]) -> dict[str, int]:
    """A size for each symbol, drawn again until ``conditions`` hold; a symbol
    named by an expression over others (torch-mlir names a derived dim
    ``s54 + s70``) is computed, not drawn."""
    from anyshape.runtime.size_conditions import holds

    for _ in range(1000):
        sizes = _draw_sizes_once(signature, rng, max_size)
        if all(holds(condition, sizes) is not False for condition in conditions):
            return sizes
    raise ValueError(f"conditions: no sizes up to max_size={max_size} met them in 1000 draws: "
                     f"{conditions}")


def _draw_sizes_once(signature: ModuleSignature, rng, max_size: int) -> dict[str, int]:
    import sympy

    sizes = {}
    derived = {}
    for name in signature.symbols:
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            expr = sympy.sympify(name)
            if {str(s) for s in expr.free_symbols} <= set(signature.symbols):
                derived[name] = expr
    for name, symbol in signature.symbols.items():
        if name in derived:
            continue
        low = symbol.min if symbol.min is not None else 1
        high = max(low, min(symbol.max if symbol.max is not None else max_size, max_size))
        sizes[name] = int(rng.integers(low, high + 1))
    for name, expr in derived.items():
        sizes[name] = int(expr.subs({sympy.Symbol(k): v for k, v in sizes.items()
                                     if re.fullmatch(r"[A-Za-z_]\w*", k)}))
    return sizes


def _draw_inputs(signature: ModuleSignature, sizes: dict[str, int], rng,
                 int_high: int) -> list[np.ndarray]:
    import sympy

    arrays = []
    for spec in signature.inputs:
        shape = tuple(d if isinstance(d, int) else int(sympy.sympify(d).subs(sizes))
                      for d in spec.dims)
        if spec.dtype == "bool":
            arrays.append(rng.integers(0, 2, shape).astype(np.bool_))
        elif spec.dtype.startswith(("int", "uint")):
            arrays.append(rng.integers(0, int_high, shape).astype(spec.dtype))
        else:
            arrays.append(rng.standard_normal(shape).astype(spec.dtype))
    return arrays


def _flat(result) -> list:
    from torch.utils._pytree import tree_leaves

    return tree_leaves(result)


def _compare(name: str, want: np.ndarray, have: np.ndarray, atol: float,
             rtol: float) -> OutputError:
    if want.shape != have.shape:
        return OutputError(f"{name} (shape {have.shape}, expected {want.shape})",
                           float("inf"), float("inf"), False)
    want64, have64 = want.astype(np.float64), have.astype(np.float64)
    same_nan = np.isnan(want64) == np.isnan(have64)
    diff = np.where(np.isnan(want64) & np.isnan(have64), 0.0, np.abs(want64 - have64))
    diff = np.where(np.isinf(want64) & (want64 == have64), 0.0, diff)
    max_abs = float(diff.max()) if diff.size else 0.0
    rel = diff / np.maximum(np.abs(want64), np.finfo(np.float64).tiny)
    max_rel = float(rel.max()) if rel.size else 0.0
    ok = bool(same_nan.all() and (diff <= atol + rtol * np.abs(want64)).all())
    return OutputError(name, max_abs, max_rel, ok)


def main(argv: list[str] | None = None) -> int:
    from anyshape.errors import CompileError
    from anyshape.mlir import MLIRError
    from anyshape.driver.pipeline import split_top_level
    from anyshape.mlir import diagnostics_of

    parser = argparse.ArgumentParser(prog="anyshape-check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", help="torch-dialect MLIR, text or bytecode")
    parser.add_argument("--passes", required=True,
                        help="comma-separated anyshape passes to validate (as anyshape-compile)")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--atol", type=float, default=1e-5)
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--max-size", type=int, default=64,
                        help="largest size drawn for any dim (a dim's minimum above it wins; "
                             "default 64)")
    parser.add_argument("--int-high", type=int, default=2,
                        help="integer inputs are drawn from [0, INT_HIGH) (default 2)")
    parser.add_argument("--function", default="main")
    args = parser.parse_args(argv)
    try:
        text = Path(args.input).read_bytes()
    except OSError as error:
        print(f"anyshape-check: cannot read '{args.input}': {error.strerror}", file=sys.stderr)
        return 1
    try:
        trials = check(text, split_top_level(args.passes), trials=args.trials, seed=args.seed,
                       atol=args.atol, rtol=args.rtol, max_size=args.max_size,
                       int_high=args.int_high, function=args.function)
    except MLIRError as error:
        for diag in diagnostics_of(error, args.input):
            print(diag.render(), file=sys.stderr)
        return 1
    except (CompileError, ValueError) as error:
        print(f"anyshape-check: {error}", file=sys.stderr)
        return 1
    for number, trial in enumerate(trials):
        sizes = ", ".join(f"{k}={v}" for k, v in trial.sizes.items()) or "static"
        for e in trial.errors:
            verdict = "ok" if e.ok else "MISMATCH"
            print(f"trial {number} ({sizes}): {e.output}: max abs {e.max_abs:.3g}, "
                  f"max rel {e.max_rel:.3g}: {verdict}")
    bad = sum(not t.ok for t in trials)
    print(f"{len(trials) - bad} of {len(trials)} trials within atol {args.atol:g} + rtol "
          f"{args.rtol:g}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
