"""One input buffer (or ``--split-input-file`` chunk) through ``anyshape-opt``, as
mlir-opt processes one: a fresh context, parse, the pass pipeline, print; or,
under ``--verify-diagnostics``, the diagnostics checked against the buffer's
expectations."""

from __future__ import annotations

import io
import os
import re
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field

from anyshape.tools.diagnostic_text import render
from anyshape.tools.expected_diagnostics import Produced, Report, Verifier, produced_from
from anyshape.mlir import (MLIRError, dialect_names as _dialect_names, ir, load_reference_dialects,
                           parse_source, passmanager)
from anyshape.dialects import new_context
from anyshape.driver.pipeline import build_pass_manager, parse_pipeline

_SEVERITY_RANK = {"error": 0, "warning": 1, "remark": 2, "note": 0}
_DUMP_HEADER = re.compile(r"^// -----// IR Dump (Before|After) (.*) //----- //$")


class PipelineError(Exception):
    """The pipeline cannot be built: the same for every chunk, so the run stops."""


@dataclass
class Result:
    output: str | bytes = ""      # what the chunk prints ("" when it failed)
    messages: list[str] = field(default_factory=list)   # for stderr
    ok: bool = True


def dialect_names() -> list[str]:
    ctx = new_context()
    load_reference_dialects(ctx)
    return _dialect_names(ctx)


def process(source: str | bytes, opts, filename: str, verifier: Verifier | None = None,
            start: tuple[int, int] = (0, 0)) -> Result:
    """``start``: where the chunk starts in the file (see ``parse_source``). ``verifier``: under --verify-diagnostics, the file's expectations (one
    verifier for all chunks, as upstream reports unmet ones after the last)."""
    ctx = new_context()
    load_reference_dialects(ctx)
    ctx.allow_unregistered_dialects = opts.allow_unregistered
    if opts.disable_threading:
        ctx.enable_multithreading(False)
    verify = verifier is not None
    produced: list[Produced] = []

    def collect(diagnostic):
        produced.extend(produced_from(diagnostic, drop_op_notes=verify))
        return True

    # Every diagnostic through the handler, in the order emitted: by default the
    # bindings keep errors for an MLIRError, and drop those of a pass that
    # succeeds (a canonicalization pattern's error).
    ctx.emit_error_diagnostics = True
    ctx.attach_diagnostic_handler(collect)
    result = Result()
    text = source if isinstance(source, str) else ""
    try:
        top = parse_source(source, ctx, filename, implicit_module=opts.implicit_module,
                           start=start)
        if opts.verify_roundtrip:
            _verify_roundtrip(top, opts)
        pm = _pass_manager(ctx, opts, top.name)
        with _selected_ir_dumps(opts.print_ir_before, opts.print_ir_after):
            pm.run(top)
        if opts.statistics or opts.timing:
            del pm      # the report prints when the pass manager goes
        result.output = _print(top, opts)
    except (MLIRError, _Failed):
        result.ok = False
    produced = [_named(p, filename) for p in produced]

    if verify:
        for diagnostic in produced:
            verifier.process(diagnostic)
        result.messages = [render_report(r, verifier) for r in verifier.take_reports()]
        return result
    sources = {filename: text}
    for diagnostic in produced:
        if diagnostic.severity == "note" and not opts.diagnostic_notes:
            continue
        if _SEVERITY_RANK[diagnostic.severity] <= opts.verbosity:
            result.messages.append(render(diagnostic.severity, diagnostic.message,
                                          diagnostic.file, diagnostic.line, diagnostic.column,
                                          sources, diagnostic.show_source))
    return result


def render_report(report: Report, verifier: Verifier) -> str:
    return render("error", report.message, report.file if report.file else None, report.line,
                  report.column, verifier.sources, span=report.span)


def _named(produced: Produced, filename: str) -> Produced:
    """The bindings' implicit module names its buffer "-": that is the input."""
    if produced.file == "-":
        produced.file = filename
    return produced


def _pass_manager(ctx, opts, anchor: str) -> passmanager.PassManager:
    printing = {"print_before_all": False, "print_after_all": False, **opts.print_ir}
    printing["print_before_all"] |= bool(opts.print_ir_before)
    # As upstream, printing after a change or a failure prints after every pass
    # (that changed or failed).
    printing["print_after_all"] |= bool(opts.print_ir_after) or \
        printing.get("print_after_change", False) or printing.get("print_after_failure", False)
    if not (printing["print_before_all"] or printing["print_after_all"]):
        printing = None
    try:
        if opts.pipeline is not None and not _names_anyshape_pass(opts.pipeline):
            with ctx:
                pm = passmanager.PassManager.parse(opts.pipeline)
            elements = None
        else:
            elements = parse_pipeline(opts.pipeline) if opts.pipeline is not None else opts.elements
            pm = build_pass_manager(ctx, elements, anchor=anchor, nest=opts.pipeline is None)
    except (ValueError, KeyError) as error:
        raise PipelineError(_pipeline_message(error, opts)) from None
    if printing:
        pm.enable_ir_printing(**printing)
    if opts.timing:
        pm.enable_timing()
    if opts.statistics:
        pm.enable_statistics()
    if not opts.verify_each:
        pm.enable_verifier(False)
    if opts.dump_pipeline:
        print(f"Pass Manager with passes:\n{pm}\n", file=sys.stderr)
    return pm


def _names_anyshape_pass(pipeline: str) -> bool:
    return re.search(r"(?<![\w-])anyshape-", pipeline) is not None


def _pipeline_message(error: Exception, opts) -> str:
    """Upstream's words: an unknown flag is an unknown command line argument;
    any other pipeline error a location-less diagnostic."""
    raw = str(error.args[0] if error.args else error)
    message = raw.strip()
    unknown = re.search(r"'([\w.-]+)' does not refer to a registered pass", message)
    if unknown and opts.pipeline is None:
        flag = opts.spelling.get(unknown.group(1), f"--{unknown.group(1)}")
        return (f"anyshape-opt: Unknown command line argument '{flag}'.  "
                f"Try: 'anyshape-opt --help'")
    missing = re.search(r"unknown anyshape pass '([^']+)' \(known: ([^)]*)\)", message)
    if missing and opts.pipeline is None:
        flag = opts.spelling.get(missing.group(1), f"--{missing.group(1)}")
        return (f"anyshape-opt: Unknown command line argument '{flag}' "
                f"(anyshape passes: {missing.group(2)})")
    # Upstream's messages end in a newline, printed as a blank line.
    return f"<unknown>:0: error: {raw.lstrip()}".rstrip(" ")


class _Failed(Exception):
    """The chunk failed after its diagnostic went to the context's handler."""


def _print(top, opts) -> str | bytes:
    if opts.emit_bytecode:
        return _bytecode(top, opts.bytecode_version)
    if opts.bytecode_version is not None:
        ir.Location.unknown(top.context).emit_error(
            "bytecode version while not emitting bytecode")
        raise _Failed
    return top.get_asm(**opts.printing) + "\n"


def _bytecode(top, version: int | None) -> bytes:
    buffer = io.BytesIO()
    try:
        top.write_bytecode(buffer, desired_version=version)
    except ValueError:
        # The writer has reported the version it cannot honour to the handler.
        raise _Failed from None
    return buffer.getvalue()


def _verify_roundtrip(top, opts) -> None:
    """--verify-roundtrip, as mlir-opt checks that printers and parsers agree:
    print (as text, then as bytecode), parse into a fresh context, and compare the
    generic forms with locations."""
    generic = {"print_generic_op_form": True, "enable_debug_info": True}
    reference = top.get_asm(**generic)
    for kind in ("textual", "bytecode"):
        ctx = new_context()
        load_reference_dialects(ctx)
        ctx.allow_unregistered_dialects = opts.allow_unregistered
        printed = _bytecode(top, None) if kind == "bytecode" \
            else top.get_asm(enable_debug_info=True)
        try:
            with ctx:
                again = ir.Module.parse(printed).operation
        except MLIRError as error:
            top.location.emit_error(f"'{top.name}' op failed to parse {kind} content back, "
                                    f"cannot verify round-trip.\n{error}")
            raise _Failed from None
        roundtripped = again.get_asm(**generic)
        if roundtripped != reference:
            top.location.emit_error(
                f"'{top.name}' op {kind} roundTrip testing roundtripped module differs from "
                f"reference:\n<<<<<<Reference\n{reference}\n=====\n{roundtripped}"
                f"\n>>>>>roundtripped\n")
            raise _Failed


@contextmanager
def _selected_ir_dumps(before: list[str], after: list[str]):
    """Keep only the IR dumps of the passes named in --mlir-print-ir-before/after.

    The pass manager's printing instrumentation prints every pass's dump to the
    process's stderr; the bindings cannot select passes, so the dumps are
    caught there and filtered by the pass argument in their header.
    """
    if not before and not after:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            sys.stderr.write(_filter_dumps(caught.read().decode(errors="replace"),
                                           before, after))
            sys.stderr.flush()


def _filter_dumps(text: str, before: list[str], after: list[str]) -> str:
    kept, keep = [], True
    for line in text.splitlines(keepends=True):
        header = _DUMP_HEADER.match(line.rstrip("\n"))
        if header:
            wanted = before if header.group(1) == "Before" else after
            keep = any(re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", header.group(2))
                       for name in wanted)
        if keep:
            kept.append(line)
    return "".join(kept)

