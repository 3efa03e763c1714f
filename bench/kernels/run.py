"""Build and run the product kernel's harness (``products.c``, ``make bench-kernels``).

The kernel is the object a module links: ``kernels/build.py`` builds it with
the module's flags, its instruction set capped at ``--isa`` (as a module for a
CPU without AVX-512, or without AVX2, links it), and the harness is linked
against it. Not a test: it prints milliseconds per round of roberta-base's
products, for the figures ``linear_rows.c`` and docs/iree-notes.md cite;
``--formats f32 q8 q4 q4i8 q8i16`` adds the quantized entry points' (int8, int4,
int4 with the rows of a decode step rounded to int8 and multiplied in integers,
int8 with them rounded to int16). ``--streams BYTES...`` instead times how
fast the weights read in the tiles' two orders (streams.c).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from anyshape.iree.kernels import build, linear_rows

ISAS = {"portable": build.ISA_PORTABLE, "avx2": build.ISA_AVX2, "avx512": build.ISA_AVX512,
        "avx512vnni": build.ISA_AVX512_VNNI}
HERE = Path(__file__).parent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    parser.add_argument("--rows", type=int, nargs="+",
                        default=[1, 4, 12, 15, 16, 17, 24, 32, 33, 48, 49, 64, 96, 97, 128, 192])
    parser.add_argument("--isa", choices=list(ISAS), default="avx512vnni",
                        help="the widest instruction set (the host's, where it has less)")
    parser.add_argument("--layers", type=int, default=12, help="roberta-base has 12")
    parser.add_argument("--rounds", type=int, default=9, help="timed rounds (the median is shown)")
    parser.add_argument("--formats", nargs="+", choices=("f32", "q8", "q4", "q4i8", "q8i16"),
                        default=["f32"],
                        help="the weights' format: float32, or int8 / int4 (groups of 32) "
                             "through the quantized entry points; q4i8 / q8i16: int4 / int8 "
                             "with up to 4 rows in integers")
    parser.add_argument("--shapes", nargs="+", metavar="K:N",
                        help="a layer's products (k, n) in place of roberta-base's; "
                             "1xK:N: once after the layers (an LM head). Qwen2-0.5B: "
                             "896:896 896:128 896:128 896:896 896:4864 896:4864 4864:896 "
                             "1x896:151936 with --layers 24")
    parser.add_argument("--streams", type=int, nargs="+", metavar="BYTES",
                        help="instead: how fast the weights read as one stream and as two "
                             "panels of BYTES side by side (streams.c; int4 at k = 896: 7168)")
    args = parser.parse_args(argv)
    if args.streams:
        return streams(args.threads, args.streams)
    built, why = build.kernel_object(linear_rows.SOURCE, ISAS[args.isa])
    if built is None:
        print(f"the kernel cannot be built: {why}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="anyshape-bench-kernels-") as tmp:
        harness = Path(tmp) / "products"
        subprocess.run([build.compiler(), "-O2", "-std=c11", "-pthread", str(HERE / "products.c"),
                        str(built), "-o", str(harness)], check=True)
        host = {isa: name for name, isa in ISAS.items()}[build.isa_for_cpu()]
        runs = min(args.isa, host, key=ISAS.get)
        print(f"{linear_rows.SOURCE.name} ({built.name}), --isa {args.isa}: the {runs} code "
              f"runs, {args.layers} layers of "
              f"{'products ' + ' '.join(args.shapes) if args.shapes else 'roberta-base products'}",
              flush=True)
        for threads in args.threads:
            for fmt in args.formats:
                subprocess.run([str(harness), fmt, str(threads), str(args.layers),
                                str(args.rounds), *map(str, args.rows),
                                *(["--", *args.shapes] if args.shapes else [])], check=True)
    return 0


def streams(threads: list[int], panel_bytes: list[int]) -> int:
    with tempfile.TemporaryDirectory(prefix="anyshape-bench-streams-") as tmp:
        program = Path(tmp) / "streams"
        subprocess.run([build.compiler(), "-O2", "-std=c11", "-pthread", str(HERE / "streams.c"),
                        "-o", str(program)], check=True)
        for count in threads:
            subprocess.run([str(program), str(count), *map(str, panel_bytes)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
