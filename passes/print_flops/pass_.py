"""``anyshape-print-flops``: report each function's FLOPs on stderr; the IR is left unchanged.

Per function with a body: the total as an expression over the dim symbols,
its matmul part, which argument dim each symbol is, a line per op kind
(``name xCOUNT: FLOPs``), the op kinds counted as free, and the ops not
counted with the reason (see ``flops.py`` for the conventions).
``at="s0=1,s1=128"`` also evaluates every count at those sizes; each symbol a
function's counts use must be given, and a name no function has is an error,
so a typo cannot pass for a count.

stderr, because ``anyshape-opt`` writes the IR to stdout: a lit test checks
the report with ``anyshape-opt %s --anyshape-print-flops -o /dev/null 2>&1 | FileCheck %s``.
"""

import dataclasses
import re
import sys

from anyshape.passes.print_flops import flops
from anyshape.passes import ModulePass, PassFailure, register

_BINDING = re.compile(r"\s*([A-Za-z_]\w*)\s*=\s*(\d+)\s*")


def parse_at(text: str) -> dict[str, int]:
    """``"s0=1,s1=128"`` -> ``{"s0": 1, "s1": 128}``."""
    values: dict[str, int] = {}
    if not text.strip():
        return values
    for item in text.split(","):
        match = _BINDING.fullmatch(item)
        if match is None:
            raise PassFailure(f"option at: expected name=size pairs separated by commas "
                              f"(at=s0=1,s1=128), got '{item.strip()}' in '{text}'")
        name, size = match.group(1), int(match.group(2))
        if name in values and values[name] != size:
            raise PassFailure(f"option at: {name} is given twice ({values[name]} and {size})")
        values[name] = size
    return values


@register
@dataclasses.dataclass
class PrintFlopsPass(ModulePass):
    argument = "anyshape-print-flops"
    description = ("Print each function's FLOP count (symbolic in the dynamic dims, per op "
                   "kind, ops not counted) to stderr; the IR is unchanged")
    at: str = ""

    def apply(self, module_op):
        values = parse_at(self.at)
        reports = flops.count_module_flops(module_op)
        if values:
            names = set().union(*(r.all_symbols() for r in reports.values()))
            extra = sorted(set(values) - names)
            if extra:
                raise PassFailure(f"option at: no function has a symbol {', '.join(extra)} "
                                  f"(symbols: {', '.join(sorted(names)) or 'none'})")
        # Every report is formatted before any is printed: a bad `at` fails the
        # pass without leaving half a report behind.
        texts = []
        for report in reports.values():
            mine = {k: v for k, v in values.items() if k in report.all_symbols()}
            try:
                texts.append(report.format(mine if values else None))
            except ValueError as error:
                raise PassFailure(f"option at: {error}") from None
        sys.stderr.write("".join(texts))
        sys.stderr.flush()
