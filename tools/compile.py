"""anyshape-compile: compile torch-dialect MLIR (from ``anyshape.import_torch`` or
``anyshape-opt``) through the anyshape pipeline and IREE into an artifact directory
that ``anyshape.load`` runs."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="anyshape-compile", description=__doc__)
    parser.add_argument("input", help="torch-dialect MLIR, text or bytecode ('-' for stdin)")
    parser.add_argument("-o", "--output", required=True, help="artifact directory to write")
    parser.add_argument("--target", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--cuda-arch", default=None, help="with --target=cuda (default sm_80)")
    parser.add_argument("--opt-level", default=None, help="IREE optimization level (O0-O3)")
    parser.add_argument("--data-tiling", choices=["auto", "on", "off"], nargs="?", const="on",
                        default="auto",
                        help="IREE data tiling (adds anyshape-data-tiling-forms): 'auto' "
                             "(default) on for cpu, compiled again without it if IREE fails "
                             "with it; 'on' (also a bare --data-tiling): a failure is an "
                             "error; 'off'")
    parser.add_argument("--passes", default=None,
                        help="comma-separated anyshape passes (default: the default pipeline; "
                             "'' for none)")
    parser.add_argument("--function", default="main", help="entry function (default: main)")
    parser.add_argument("--dump-ir-dir", default=None, help="write the IR after every stage here")
    parser.add_argument("--load-passes", action="append", default=[], metavar="FILE.py",
                        help="a Python file that registers more passes")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from anyshape.compiler import compile_module
    from anyshape.errors import CompileError
    from anyshape.ir_signature import signature_from_module
    from anyshape.mlir import MLIRError, new_context, parse_module
    from anyshape.passes import DEFAULT_PIPELINE, load_pass_file
    from anyshape.pipeline import diagnostics_of, split_top_level
    from anyshape.targets import make_target

    for plugin in args.load_passes:
        try:
            load_pass_file(plugin)
        except OSError as error:
            print(f"anyshape-compile: cannot load passes from '{plugin}': {error.strerror}",
                  file=sys.stderr)
            return 1
    name = "<stdin>" if args.input == "-" else args.input
    try:
        data = sys.stdin.buffer.read() if args.input == "-" else open(args.input, "rb").read()
    except OSError as error:
        print(f"anyshape-compile: cannot read '{name}': {error.strerror}", file=sys.stderr)
        return 1
    try:
        data_tiling = {"auto": None, "on": True, "off": False}[args.data_tiling]
        target = make_target(args.target, args.cuda_arch, args.opt_level, data_tiling)
        module = parse_module(data, new_context())
        signature = signature_from_module(module, args.function)
        passes = DEFAULT_PIPELINE if args.passes is None else split_top_level(args.passes)
        compiled = compile_module(module, signature, target, passes, dump_ir_dir=args.dump_ir_dir,
                                  report=lambda msg: print(f"[anyshape-compile] {msg}",
                                                           file=sys.stderr, flush=True),
                                  entry=args.function)
    except MLIRError as error:
        for diag in diagnostics_of(error, name):
            print(diag.render(), file=sys.stderr)
        return 1
    except (ValueError, KeyError) as error:
        print(f"anyshape-compile: {error.args[0] if error.args else error}", file=sys.stderr)
        return 1
    except CompileError as error:
        print(f"anyshape-compile: {error}", file=sys.stderr)
        return 1
    out = compiled.save(args.output)
    print(f"wrote {out}/module.vmfb and {out}/manifest.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
