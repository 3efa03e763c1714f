"""The command line of an iree-input rewrite (``python -m anyshape.iree.dim_facts``,
``python -m anyshape.iree.tiled_products``): a file in, the rewrite's bytecode out
(``-o``) or its text on stdout, which the lit tests in test/iree check."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Callable


def rewrite_main(module: str, description: str, input_help: str,
                 rewrite: Callable[[Path, Path, Path | None], int],
                 done: Callable[[int, str], str], argv: list[str] | None = None) -> int:
    """``rewrite(in_file, out_file, text_file)`` (which returns a count) as a
    command; ``done(count, where)`` is the closing line."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument("input", help=input_help)
    parser.add_argument("-o", "--output",
                        help="bytecode to write (default: the rewritten IR as text on stdout)")
    args = parser.parse_args(argv)
    try:
        if args.output is not None:
            count = rewrite(Path(args.input), Path(args.output), None)
        else:
            with tempfile.TemporaryDirectory(prefix="anyshape-rewrite-") as scratch:
                text = Path(scratch) / "out.mlir"
                count = rewrite(Path(args.input), Path(scratch) / "out.mlirbc", text)
                sys.stdout.write(text.read_text().rstrip("\n") + "\n")
    except (OSError, ValueError) as error:
        print(f"{module}: {error}", file=sys.stderr)
        return 1
    print(done(count, args.output or "the text above"),
          file=sys.stdout if args.output is not None else sys.stderr)
    return 0
