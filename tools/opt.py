"""anyshape-opt: an mlir-opt style driver for anyshape's passes and any pass in torch-mlir's bindings.

    anyshape-opt [FILE|-] [-o OUT] [--<pass>[=OPTIONS] ...] [--pass-pipeline=PIPELINE]
                 [--split-input-file] [--mlir-print-ir-after-all] [--mlir-timing]
                 [--verify-diagnostics] [--load-passes=FILE.py] [--list-passes]

Pass flags run in the order given; a flag that is not an anyshape pass is
taken as an upstream pass (``--canonicalize``, ``--cse``). Input is MLIR text
or bytecode. On a parse or pass failure the diagnostics go to stderr as
``file:line:col: error: ...`` and the exit status is 1. ``--load-passes``
runs a Python file that registers more passes (as mlir-opt's
``--load-pass-plugin`` loads a shared library). ``--verify-diagnostics``
checks the diagnostics against the file's ``// expected-error {{...}}``
comments instead of printing them (``anyshape.expected_diagnostics``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

SPLIT_MARKER = "// -----"

USAGE = __doc__.split("\n\n")[1]


@dataclass
class Options:
    input: str = "-"
    output: str = "-"
    elements: list[str] = field(default_factory=list)
    pipeline: str | None = None
    split_input_file: bool = False
    print_ir_after_all: bool = False
    timing: bool = False
    list_passes: bool = False
    verify_diagnostics: bool = False
    plugins: list[str] = field(default_factory=list)


class UsageError(Exception):
    pass


def parse_args(argv: list[str]) -> Options:
    opts = Options()
    inputs = []
    args = iter(argv)
    for arg in args:
        if arg in ("-h", "--help"):
            print(__doc__)
            sys.exit(0)
        if arg == "-o":
            opts.output = next(args, None) or _usage("-o needs a file name")
        elif arg.startswith("-o") and len(arg) > 2:
            opts.output = arg[2:]
        elif arg.startswith("--pass-pipeline"):
            opts.pipeline = _flag_value(arg, args)
        elif arg == "--split-input-file":
            opts.split_input_file = True
        elif arg == "--mlir-print-ir-after-all":
            opts.print_ir_after_all = True
        elif arg == "--mlir-timing":
            opts.timing = True
        elif arg.startswith("--load-passes"):
            opts.plugins.append(_flag_value(arg, args))
        elif arg == "--list-passes":
            opts.list_passes = True
        elif arg == "--verify-diagnostics":
            opts.verify_diagnostics = True
        elif arg.startswith("--") and len(arg) > 2:
            name, eq, value = arg[2:].partition("=")
            opts.elements.append(f"{name}{{{value}}}" if eq else name)
        elif arg == "-" or not arg.startswith("-"):
            inputs.append(arg)
        else:
            _usage(f"unknown option '{arg}'")
    if len(inputs) > 1:
        _usage(f"expected one input file, got {len(inputs)}: {' '.join(inputs)}")
    if inputs:
        opts.input = inputs[0]
    if opts.pipeline is not None and opts.elements:
        _usage("--pass-pipeline cannot be combined with pass flags")
    return opts


def _flag_value(arg: str, rest) -> str:
    if "=" in arg:
        return arg.split("=", 1)[1]
    value = next(rest, None)
    if value is None:
        _usage(f"{arg} needs a value")
    return value


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
    lines.append("Upstream passes: any pass registered in torch-mlir's bindings "
                 "(--canonicalize, --cse, --torch-..., ...), by flag or in --pass-pipeline.")
    return "\n".join(lines)


def read_input(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    with open(path, "rb") as f:
        return f.read()


def split_chunks(text: str) -> list[tuple[int, str]]:
    """(first line number - 1, text) per `// -----` separated chunk."""
    chunks, current, start = [], [], 0
    for number, line in enumerate(text.splitlines(keepends=True)):
        if line.strip() == SPLIT_MARKER:
            chunks.append((start, "".join(current)))
            current, start = [], number + 1
        else:
            current.append(line)
    chunks.append((start, "".join(current)))
    return chunks


def process(source: str | bytes, opts: Options, filename: str) -> tuple[str | None, list[str]]:
    """Parse and run the pipeline on one module; returns (output text, error lines).
    With --verify-diagnostics the error lines are the mismatches against the
    source's expectations."""
    from anyshape.expected_diagnostics import mismatches, parse_expected, produced_from
    from anyshape.mlir import MLIRError, new_context, parse_module
    from anyshape.pipeline import diagnostics_of, parse_pipeline, run_pipeline

    ctx = new_context()
    produced = []
    if opts.verify_diagnostics:
        # What a failing parse or pass raises comes with its MLIRError; warnings
        # and remarks of passes that succeed come only through a handler.
        ctx.attach_diagnostic_handler(lambda d: produced.extend(produced_from(d)) or True)

    def failed(error: MLIRError) -> tuple[None, list[str]]:
        if not opts.verify_diagnostics:
            return None, [d.render() for d in diagnostics_of(error, filename)]
        produced.extend(p for d in error.error_diagnostics for p in produced_from(d))
        return None, verified()

    def verified() -> list[str]:
        text = source if isinstance(source, str) else ""
        return mismatches(parse_expected(text), produced, filename)

    try:
        module = parse_module(source, ctx)
    except MLIRError as error:
        return failed(error)
    try:
        elements = parse_pipeline(opts.pipeline) if opts.pipeline is not None else opts.elements
        run_pipeline(module, elements, print_ir_after_all=opts.print_ir_after_all,
                     timing=opts.timing)
    except MLIRError as error:
        return failed(error)
    except (ValueError, KeyError) as error:
        return None, [f"error: {error.args[0] if error.args else error}"]
    if opts.verify_diagnostics:
        errors = verified()
        return (None if errors else str(module)), errors
    return str(module), []


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

    filename = "<stdin>" if opts.input == "-" else opts.input
    try:
        data = read_input(opts.input)
    except OSError as error:
        print(f"anyshape-opt: cannot read '{filename}': {error.strerror}", file=sys.stderr)
        return 1

    if data.startswith(b"ML\xefR"):  # MLIR bytecode
        if opts.split_input_file:
            print("anyshape-opt: --split-input-file needs text input", file=sys.stderr)
            return 1
        sources = [(0, data)]
    else:
        text = data.decode()
        sources = split_chunks(text) if opts.split_input_file else [(0, text)]

    outputs, failed = [], False
    for first_line, chunk in sources:
        # Leading newlines keep diagnostics' line numbers those of the whole file.
        source = chunk if isinstance(chunk, bytes) else "\n" * first_line + chunk
        output, errors = process(source, opts, filename)
        for line in errors:
            print(line, file=sys.stderr)
        if errors or output is None and not opts.verify_diagnostics:
            failed = True
        if output is not None:
            outputs.append(output)

    joined = f"\n{SPLIT_MARKER}\n".join(o.rstrip("\n") for o in outputs) + "\n" if outputs else ""
    if opts.output == "-":
        sys.stdout.write(joined)
    else:
        try:
            with open(opts.output, "w") as f:
                f.write(joined)
        except OSError as error:
            print(f"anyshape-opt: cannot write '{opts.output}': {error.strerror}",
                  file=sys.stderr)
            return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
