"""Adapter over the upstream Python pass and rewrite-pattern API.

The upstream API is new and still moving; its quirks stay in this file:
- a Python pass is a callable ``(op, external_pass)`` handed to
  ``PassManager.add``; failure is ``external_pass.signal_pass_failure()``;
- a pattern callback returns a *falsy* value when it matched and rewrote, and
  a truthy one for "no match";
- there is no global registry of Python passes, so textual pipelines cannot
  name them: the driver resolves anyshape pass names itself (see
  ``anyshape.driver.pipeline``).

A pass here is a small class (xDSL's ``ModulePass`` shape): options are
dataclass fields, ``argument`` is its command-line name, ``apply`` does the
work on the module operation and raises :class:`PassFailure` to fail.
"""

from __future__ import annotations

import dataclasses
import os
import traceback
from typing import Callable, ClassVar

from anyshape.mlir import ir, passmanager, rewrite
from anyshape.passes.torch_ir.mixed_comparisons import mend_mixed_comparisons
from anyshape.passes.torch_ir.values import forget_identities
from anyshape.stages import Workaround


class PassFailure(Exception):
    """Raised by a pass to fail; reported as an MLIR error at ``location``."""

    def __init__(self, message: str, location: ir.Location | None = None):
        super().__init__(message)
        self.location = location


@dataclasses.dataclass
class ModulePass:
    """Base class of anyshape's passes. Subclasses are dataclasses whose fields are options."""

    argument: ClassVar[str] = ""
    description: ClassVar[str] = ""

    def apply(self, module_op: ir.Operation) -> None:
        raise NotImplementedError

    @classmethod
    def options(cls) -> list[dataclasses.Field]:
        return list(dataclasses.fields(cls))

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "ModulePass":
        """Build from textual ``{key=value}`` options, converting by field type."""
        fields = {f.name.replace("_", "-"): f for f in cls.options()}
        kwargs = {}
        for key, text in options.items():
            field = fields.get(key)
            if field is None:
                known = ", ".join(sorted(fields)) or "none"
                raise ValueError(f"pass '{cls.argument}' has no option '{key}' (options: {known})")
            kwargs[field.name] = _convert_option(cls.argument, key, text, field)
        return cls(**kwargs)

    def add_to(self, pm: passmanager.PassManager) -> None:
        pm.add(self._run, name=type(self).__name__, argument=self.argument,
               description=self.description)

    def _run(self, op: ir.Operation, external_pass) -> None:
        try:
            with op.context, op.location:
                try:
                    self.apply(op)
                finally:
                    forget_identities(op)
        except PassFailure as failure:
            location = failure.location or op.location
            location.emit_error(f"{self.argument}: {failure}")
            external_pass.signal_pass_failure()
        except Exception as error:  # a bug in the pass: report it, do not crash the host
            if os.environ.get("ANYSHAPE_DEBUG"):
                traceback.print_exc()
            op.location.emit_error(f"{self.argument}: internal error: "
                                   f"{type(error).__name__}: {error} (set ANYSHAPE_DEBUG=1 "
                                   f"for the traceback)")
            external_pass.signal_pass_failure()


def option_type_name(field: dataclasses.Field) -> str:
    return field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")


def _convert_option(argument: str, key: str, text: str, field: dataclasses.Field):
    kind = option_type_name(field)
    try:
        if kind == "bool":
            if text.lower() in ("1", "true"):
                return True
            if text.lower() in ("0", "false"):
                return False
            raise ValueError(text)
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
    except ValueError:
        raise ValueError(f"pass '{argument}' option '{key}' expects {kind}, got '{text}'") from None
    return text


PatternFn = Callable[[ir.OpView, rewrite.PatternRewriter], bool]


def apply_patterns(op: ir.Operation, patterns: list[tuple[type | str, PatternFn]],
                   max_iterations: int | None = None) -> None:
    """Run ``patterns`` to a fixed point with the greedy driver (folding included).

    A pattern's root is a generated op class (``torch_ops.AtenExpandOp``) or,
    for the roots an op table lists, an op name. Patterns on one root are
    tried in the order given. Each pattern returns True when it rewrote, False
    when it did not match: the reverse of the upstream convention, which this
    wrapper translates. Ops a pattern creates are not announced to the driver,
    so it may stop before it visits them: the driver is run again until no
    pattern rewrites (at most ``max_iterations`` runs, default 64).
    """
    rewrote = False

    def wrapped(fn):
        def callback(o, rw):
            nonlocal rewrote
            if fn(o, rw):
                rewrote = True
                return False
            return True
        return callback

    pattern_set = rewrite.RewritePatternSet()
    for root, fn in patterns:
        pattern_set.add(root, wrapped(fn))
    frozen = pattern_set.freeze()
    # Each driver iteration may advance a chain of rewrites by one op only (see
    # above), so its own limit (10) would stop long chains as "not converged".
    config = rewrite.GreedyRewriteConfig()
    config.max_iterations = 1000
    for _ in range(max_iterations or 64):
        rewrote = False
        # The driver folds every op; torch-mlir folds these wrongly (see there).
        mend_mixed_comparisons(op)
        rewrite.apply_patterns_and_fold_greedily(op, frozen, config)
        if not rewrote:
            return


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='greedy_driver_rerun', stage='torch-ir',
        where='apply_patterns',
        upstream='Through the MLIR Python rewrite API ops a pattern creates are not announced to '
                 'the greedy driver, so it may stop before visiting them; the driver is rerun '
                 'until no pattern rewrites (and max_iterations raised from 10).',
        guard=(),
        unguarded='Binding quirk of the MLIR Python API bundled with torch-mlir; borderline as an'
                  " 'upstream bug'.",
        remove_when='(inferred) when the Python PatternRewriter notifies the driver of created '
                    'ops'),
)
