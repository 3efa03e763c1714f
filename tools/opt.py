"""anyshape-opt: mlir-opt for anyshape's passes and every pass torch-mlir-opt has.

    anyshape-opt [FILE|-] [-o OUT] [--<pass>[=OPTIONS] ...] [--pass-pipeline=PIPELINE]
                 [--split-input-file[=MARKER]] [--verify-diagnostics[=all|only-expected]]
                 [--allow-unregistered-dialect] [--mlir-print-ir-after-all]
                 [--mlir-print-ir-before=PASS] [--mlir-print-debuginfo] [--mlir-print-local-scope]
                 [--mlir-disable-threading] [--show-dialects] [--list-passes]
                 [--load-passes=FILE.py]

Options follow LLVM's command line, as torch-mlir-opt's: one dash or two,
``--name=value`` or (for options taking a value) ``--name value``. Every other
flag names a pass, anyshape's (Python) or upstream's (C++, as registered in
torch-mlir's bindings), run in the order given, ``--pass=opt1=v opt2=v``
giving its options; a pass that runs only on some op (``func.func``) is nested
on that op, as mlir-opt nests it. ``--pass-pipeline`` takes a textual
pipeline instead (anyshape passes directly inside ``builtin.module(...)``).
``--verify-diagnostics`` checks the diagnostics against the file's
``// expected-error {{...}}`` comments with mlir-opt's rules
(``anyshape.tools.expected_diagnostics``). ``--load-passes`` runs a Python file that
registers more passes (as mlir-opt's ``--load-pass-plugin`` loads a library).
docs/api.md ("Tools") lists what differs from torch-mlir-opt.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

USAGE = __doc__.split("\n\n")[1]

# Driver options that take no value (or an optional one after '=').
_FLAGS = {
    "allow-unregistered-dialect", "dump-pass-pipeline", "emit-bytecode", "list-passes",
    "mlir-disable-diagnostic-notes", "mlir-disable-threading", "mlir-pass-statistics",
    "mlir-pretty-debuginfo", "mlir-print-debuginfo", "mlir-print-ir-after-all",
    "mlir-print-ir-after-change", "mlir-print-ir-after-failure", "mlir-print-ir-before-all",
    "mlir-print-ir-module-scope", "mlir-print-local-scope", "mlir-print-op-generic",
    "mlir-print-skip-regions", "mlir-timing", "mlir-use-nameloc-as-prefix",
    "no-implicit-module", "show-dialects", "split-input-file", "verify-diagnostics",
    "verify-each", "verify-roundtrip",
}
# Driver options that need a value.
_VALUES = {
    "o", "pass-pipeline", "load-passes", "mlir-print-ir-before", "mlir-print-ir-after",
    "output-split-marker", "mlir-elide-elementsattrs-if-larger",
    "mlir-elide-resource-strings-if-larger", "mlir-print-ir-tree-dir",
    "mlir-diagnostic-verbosity-level", "emit-bytecode-version",
}
# torch-mlir-opt's options that anyshape-opt refuses rather than ignores, and why.
_UNSUPPORTED = {
    "load-pass-plugin": "C++ plugins load into a C++ driver; use --load-passes=FILE.py",
    "load-dialect-plugin": "C++ plugins load into a C++ driver",
    "irdl-file": "not exposed by MLIR's Python bindings",
    "mlir-print-value-users": "the Python bindings' printer has no such flag",
    "mlir-print-unique-ssa-ids": "the Python bindings' printer has no such flag",
    "mlir-print-elementsattrs-with-hex-if-larger": "the Python bindings' printer has no such flag",
    "mlir-print-op-on-diagnostic": "not settable through MLIR's Python bindings",
    "mlir-print-stacktrace-on-diagnostic": "not settable through MLIR's Python bindings",
    "mlir-pass-pipeline-crash-reproducer": "not exposed by MLIR's Python bindings",
    "mlir-pass-pipeline-local-reproducer": "not exposed by MLIR's Python bindings",
    "mlir-generate-reproducer": "not exposed by MLIR's Python bindings",
    "run-reproducer": "not exposed by MLIR's Python bindings",
    "mlir-debug-counter": "not exposed by MLIR's Python bindings",
    "mlir-print-debug-counter": "not exposed by MLIR's Python bindings",
    "log-actions-to": "not exposed by MLIR's Python bindings",
    "log-mlir-actions-filter": "not exposed by MLIR's Python bindings",
    "profile-actions-to": "not exposed by MLIR's Python bindings",
    "mlir-enable-debugger-hook": "not exposed by MLIR's Python bindings",
    "mlir-very-unsafe-disable-verifier-on-parsing": "not exposed by MLIR's Python bindings",
    "mlir-timing-display": "not exposed by MLIR's Python bindings",
    "mlir-output-format": "not exposed by MLIR's Python bindings",
    "mlir-pass-statistics-display": "not exposed by MLIR's Python bindings",
    "emit-bytecode-producer": "not exposed by MLIR's Python bindings",
    "elide-resource-data-from-bytecode": "not exposed by MLIR's Python bindings",
}
_VERIFY_LEVELS = {"": "all", "all": "all", "only-expected": "only-expected"}
_VERBOSITY = {"errors": 0, "warnings": 1, "remarks": 2}


@dataclass
class Options:
    input: str = "-"
    output: str = "-"
    elements: list[str] = field(default_factory=list)
    spelling: dict[str, str] = field(default_factory=dict)   # pass name -> flag as typed
    pipeline: str | None = None
    split_marker: str | None = None       # None: no --split-input-file
    output_split_marker: str = "// -----"
    verify: str | None = None             # "all" / "only-expected" under --verify-diagnostics
    allow_unregistered: bool = False
    print_ir: dict = field(default_factory=dict)    # PassManager.enable_ir_printing arguments
    print_ir_before: list[str] = field(default_factory=list)
    print_ir_after: list[str] = field(default_factory=list)
    printing: dict = field(default_factory=dict)    # Operation.print arguments
    disable_threading: bool = False
    timing: bool = False
    statistics: bool = False
    verify_each: bool = True
    implicit_module: bool = True
    emit_bytecode: bool = False
    bytecode_version: int | None = None
    verify_roundtrip: bool = False
    dump_pipeline: bool = False
    diagnostic_notes: bool = True
    verbosity: int = 2
    list_passes: bool = False
    show_dialects: bool = False
    plugins: list[str] = field(default_factory=list)


class UsageError(Exception):
    pass


def parse_args(argv: list[str]) -> Options:
    opts = Options()
    inputs = []
    args = iter(argv)
    for arg in args:
        if arg in ("-h", "-help", "--help"):
            print(__doc__)
            sys.exit(0)
        if arg == "--":
            inputs += list(args)
            break
        if arg == "-" or not arg.startswith("-"):
            inputs.append(arg)
            continue
        name, eq, value = arg.lstrip("-").partition("=")
        if name in _UNSUPPORTED:
            _usage(f"option '{arg}' of torch-mlir-opt is not supported: {_UNSUPPORTED[name]}")
        if name in _VALUES:
            if not eq:
                value = next(args, None)
                if value is None:
                    _usage(f"option '{arg}' needs a value")
            _set_value(opts, name, value, arg)
        elif name in _FLAGS:
            _set_flag(opts, name, value if eq else None, arg)
        else:
            opts.elements.append(f"{name}{{{value}}}" if eq else name)
            opts.spelling.setdefault(name, arg.partition("=")[0])
    if len(inputs) > 1:
        _usage(f"too many positional arguments: {' '.join(inputs)} (expected one input file)")
    if inputs:
        opts.input = inputs[0]
    if opts.pipeline is not None and opts.elements:
        _usage("'--pass-pipeline' option can't be used with individual pass options")
    return opts


def _set_value(opts: Options, name: str, value: str, arg: str) -> None:
    if name == "o":
        opts.output = value
    elif name == "pass-pipeline":
        opts.pipeline = value
    elif name == "load-passes":
        opts.plugins.append(value)
    elif name == "mlir-print-ir-before":
        opts.print_ir_before += [v for v in value.split(",") if v]
    elif name == "mlir-print-ir-after":
        opts.print_ir_after += [v for v in value.split(",") if v]
    elif name == "output-split-marker":
        opts.output_split_marker = value
    elif name == "mlir-print-ir-tree-dir":
        opts.print_ir["tree_printing_dir_path"] = value
    elif name == "mlir-diagnostic-verbosity-level":
        if value not in _VERBOSITY:
            _usage(f"'{arg}': expected one of {', '.join(_VERBOSITY)}")
        opts.verbosity = _VERBOSITY[value]
    elif name == "emit-bytecode-version":
        if not value.isdigit():
            _usage(f"for the --emit-bytecode-version option: Invalid argument '{value}', "
                   f"only integer is supported.")
        opts.bytecode_version = int(value)
    else:   # the two eliding limits
        if not value.isdigit():
            _usage(f"'{arg}': expected a number of elements or characters, got '{value}'")
        key = "large_elements_limit" if "elementsattrs" in name else "large_resource_limit"
        opts.printing[key] = int(value)


def _set_flag(opts: Options, name: str, value: str | None, arg: str) -> None:
    if name == "split-input-file":
        opts.split_marker = value or "// -----"
        return
    if name == "verify-diagnostics":
        if (value or "") not in _VERIFY_LEVELS:
            _usage(f"'{arg}': expected --verify-diagnostics, =all or =only-expected")
        opts.verify = _VERIFY_LEVELS[value or ""]
        return
    if value not in (None, "true", "false", "1", "0"):
        _usage(f"'{arg}': a flag takes no value other than true or false")
    on = value in (None, "true", "1")
    simple = {
        "allow-unregistered-dialect": "allow_unregistered", "dump-pass-pipeline": "dump_pipeline",
        "emit-bytecode": "emit_bytecode", "list-passes": "list_passes",
        "mlir-disable-threading": "disable_threading", "mlir-pass-statistics": "statistics",
        "mlir-timing": "timing", "show-dialects": "show_dialects", "verify-each": "verify_each",
        "verify-roundtrip": "verify_roundtrip",
    }
    if name in simple:
        setattr(opts, simple[name], on)
    elif name == "no-implicit-module":
        opts.implicit_module = not on
    elif name == "mlir-disable-diagnostic-notes":
        opts.diagnostic_notes = not on
    elif name.startswith("mlir-print-ir-"):
        key = {"after-all": "print_after_all", "before-all": "print_before_all",
               "after-change": "print_after_change", "after-failure": "print_after_failure",
               "module-scope": "print_module_scope"}[name[len("mlir-print-ir-"):]]
        opts.print_ir[key] = on
    else:
        key = {"mlir-print-debuginfo": "enable_debug_info",
               "mlir-pretty-debuginfo": "pretty_debug_info",
               "mlir-print-local-scope": "use_local_scope",
               "mlir-print-op-generic": "print_generic_op_form",
               "mlir-print-skip-regions": "skip_regions",
               "mlir-use-nameloc-as-prefix": "use_name_loc_as_prefix"}[name]
        opts.printing[key] = on


def _usage(message: str):
    raise UsageError(message)


def list_passes() -> str:
    from anyshape.passes import registered_passes
    from anyshape.passes.pass_api import option_type_name

    lines = ["anyshape passes:"]
    passes = registered_passes()
    if not passes:
        lines.append("  (none registered)")
    for argument, cls in passes.items():
        lines.append(f"  --{argument}: {cls.description}")
        for option in cls.options():
            lines.append(f"      {option.name.replace('_', '-')}={option_type_name(option)} "
                         f"(default {option.default!r})")
    lines.append("Upstream passes: every pass registered in torch-mlir's bindings (those "
                 "torch-mlir-opt --help lists, and MLIR's own: --canonicalize, --cse, "
                 "--convert-torch-to-linalg, ...), by flag or in --pass-pipeline.")
    return "\n".join(lines)


def read_input(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    with open(path, "rb") as f:
        return f.read()


def split_chunks(text: str, marker: str) -> list[tuple[int, str]]:
    """(first line number - 1, text) per chunk between lines that are ``marker``."""
    chunks, current, start = [], [], 0
    for number, line in enumerate(text.splitlines(keepends=True)):
        if line.strip() == marker:
            chunks.append((start, "".join(current)))
            current, start = [], number + 1
        else:
            current.append(line)
    chunks.append((start, "".join(current)))
    return chunks


def main(argv: list[str] | None = None) -> int:
    try:
        opts = parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError as error:
        print(f"anyshape-opt: {error}\n{USAGE}", file=sys.stderr)
        return 2
    from anyshape.passes import load_pass_file

    for plugin in opts.plugins:
        try:
            load_pass_file(plugin)
        except OSError as error:
            print(f"anyshape-opt: cannot load passes from '{plugin}': {error.strerror}",
                  file=sys.stderr)
            return 1
        except ValueError as error:  # a pass the registry refuses
            print(f"anyshape-opt: cannot load passes from '{plugin}': {error}", file=sys.stderr)
            return 1
    if opts.list_passes:
        print(list_passes())
        return 0
    from anyshape.tools import opt_session

    if opts.show_dialects:
        print("Available Dialects: " + ",".join(opt_session.dialect_names()))
        return 0

    filename = "<stdin>" if opts.input == "-" else opts.input
    try:
        data = read_input(opts.input)
    except OSError as error:
        print(f"anyshape-opt: cannot read '{filename}': {error.strerror}", file=sys.stderr)
        return 1

    if data.startswith(b"ML\xefR"):  # MLIR bytecode
        if opts.split_marker is not None:
            print("anyshape-opt: --split-input-file needs text input", file=sys.stderr)
            return 1
        sources = [(0, data)]
    else:
        text = data.decode()
        sources = split_chunks(text, opts.split_marker) if opts.split_marker is not None \
            else [(0, text)]

    verifier = None
    if opts.verify is not None:
        from anyshape.tools.expected_diagnostics import Verifier

        verifier = Verifier(filename, data.decode(errors="replace") if isinstance(data, bytes)
                            and not data.startswith(b"ML\xefR") else "",
                            only_expected=opts.verify == "only-expected")
    outputs, failed = [], False
    for first_line, chunk in sources:
        # Leading newlines keep diagnostics' line numbers those of the whole file.
        source = chunk if isinstance(chunk, bytes) else "\n" * first_line + chunk
        try:
            start = (first_line, len(opts.split_marker) + 1) if first_line else (0, 0)
            result = opt_session.process(source, opts, filename, verifier, start)
        except opt_session.PipelineError as error:
            print(error, file=sys.stderr)
            return 1
        for line in result.messages:
            print(line, file=sys.stderr)
        failed |= not result.ok
        outputs.append(result.output)
    if verifier is not None:
        for report in verifier.finish():
            print(opt_session.render_report(report, verifier), file=sys.stderr)
        failed = verifier.failed

    return _write_output(opts, outputs) or (1 if failed else 0)


def _write_output(opts: Options, outputs: list[str | bytes]) -> int:
    if opts.emit_bytecode:
        data = b"".join(o for o in outputs if o)
    else:
        data = f"{opts.output_split_marker}\n".join(o for o in outputs).encode()
    try:
        if opts.output == "-":
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        else:
            with open(opts.output, "wb") as f:
                f.write(data)
    except OSError as error:
        print(f"anyshape-opt: cannot write '{opts.output}': {error.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
