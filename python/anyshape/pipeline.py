"""Pass pipelines: parsing pipeline text, building pass managers, reporting diagnostics.

anyshape passes are Python passes added to an upstream ``PassManager``, so they
run among C++ passes with the pass manager's verification, IR printing and
timing. Textual pipelines cannot name Python passes upstream; this module
splits ``builtin.module(...)`` into elements and adds anyshape passes itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from anyshape.mlir import MLIRError, ir, iree_bindings, new_context, passmanager
from anyshape.passes import lookup


@dataclass
class Diagnostic:
    location: str   # file:line:col, or "" when the IR had none
    message: str
    notes: list[str]

    def render(self, severity: str = "error") -> str:
        head = f"{self.location}: {severity}: {self.message}" if self.location else \
            f"{severity}: {self.message}"
        return "\n".join([head] + [f"  note: {n}" for n in self.notes])


_FILE_LINE_COL = re.compile(r'"([^"]*)":(\d+):(\d+)')


def format_location(location, filename: str | None = None) -> str:
    """The first file:line:col inside an MLIR location (callsite and fused included)."""
    match = _FILE_LINE_COL.search(str(location))
    if not match:
        return ""
    file = match.group(1)
    if filename is not None and file in ("-", ""):
        file = filename
    return f"{file}:{match.group(2)}:{match.group(3)}"


def diagnostics_of(error: MLIRError, filename: str | None = None) -> list[Diagnostic]:
    out = [Diagnostic(format_location(d.location, filename), d.message,
                      [n.message for n in d.notes]) for d in error.error_diagnostics]
    if not out:
        out.append(Diagnostic("", str(error), []))
    return out


# --- pipeline text ---------------------------------------------------------

def split_top_level(text: str) -> list[str]:
    """Split on commas outside (), {}, [] and quotes."""
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ')' in pass pipeline: {text}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if depth != 0 or quote:
        raise ValueError(f"unbalanced brackets or quotes in pass pipeline: {text}")
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return [p for p in parts if p]


def parse_pipeline(text: str) -> list[str]:
    """``builtin.module(a, b{x=1}, func.func(c))`` -> ``['a', 'b{x=1}', 'func.func(c)']``."""
    text = text.strip()
    match = re.fullmatch(r"builtin\.module\s*\((.*)\)", text, re.S)
    if not match:
        raise ValueError(f"pass pipeline must be anchored on builtin.module(...), got: {text}")
    return split_top_level(match.group(1))


def parse_options(text: str) -> dict[str, str]:
    """``a=1 b=x`` (MLIR pass-option syntax) -> dict."""
    options = {}
    for item in re.findall(r"""[\w-]+=(?:"[^"]*"|'[^']*'|\{[^}]*\}|\S+)""", text):
        key, _, value = item.partition("=")
        options[key] = value.strip("\"'")
    leftover = re.sub(r"""[\w-]+=(?:"[^"]*"|'[^']*'|\{[^}]*\}|\S+)""", "", text).strip()
    if leftover:
        raise ValueError(f"cannot parse pass options '{text}': expected key=value pairs")
    return options


def is_anyshape_pass(element: str) -> bool:
    return re.match(r"\s*anyshape-", element) is not None


def split_pass_element(element: str) -> tuple[str, str]:
    """``name{opts}`` -> (name, opts)."""
    match = re.fullmatch(r"\s*([\w.-]+)\s*(?:\{(.*)\})?\s*", element, re.S)
    if not match:
        raise ValueError(f"cannot parse pipeline element '{element}': expected a pass name "
                         f"with optional {{key=value ...}} options")
    return match.group(1), match.group(2) or ""


def make_anyshape_pass(element: str):
    """The pass object for ``anyshape-name{opts}`` (raises KeyError/ValueError if unknown/bad)."""
    name, options = split_pass_element(element)
    return lookup(name).from_options(parse_options(options))


def opt_command_flag(element: str) -> str:
    """The anyshape-opt flag that runs ``element``."""
    name, options = split_pass_element(element)
    return f"--{name}" + (f"='{options}'" if options else "")


_RESTRICTED_TO = re.compile(r"restricted to '([\w.$-]+)' on a PassManager")


def add_element(pm: passmanager.PassManager, element: str, *, nest: bool = False) -> None:
    """Add one top-level pipeline element: an anyshape pass, or any upstream text.

    ``nest``: a pass that runs only on some op (``func.func``) goes into a
    pipeline nested on that op, as mlir-opt nests its pass flags; without it
    such a pass is refused as upstream's textual pipelines refuse it.
    """
    if is_anyshape_pass(element):
        make_anyshape_pass(element).add_to(pm)
        return
    if "anyshape-" in element:
        raise ValueError(f"'{element}': anyshape passes run on the whole module; put them "
                         f"directly inside builtin.module(...), not in a nested pipeline")
    try:
        pm.add(element)
    except ValueError as error:
        anchor = _RESTRICTED_TO.search(str(error))
        if not nest or anchor is None:
            raise
        pm.add(f"{anchor.group(1)}({element})")


def build_pass_manager(ctx: ir.Context, elements: list[str], *, anchor: str = "builtin.module",
                       nest: bool = False, print_ir_after_all: bool = False,
                       print_ir: dict | None = None, timing: bool = False,
                       verify_each: bool = True) -> passmanager.PassManager:
    """``print_ir``: keyword arguments of ``PassManager.enable_ir_printing``."""
    with ctx:
        pm = passmanager.PassManager(anchor)
        for element in elements:
            add_element(pm, element, nest=nest)
        if print_ir_after_all:
            pm.enable_ir_printing(print_after_all=True, print_before_all=False)
        if print_ir:
            pm.enable_ir_printing(**print_ir)
        if timing:
            pm.enable_timing()
        if not verify_each:
            pm.enable_verifier(False)
    return pm


def run_pipeline(module: ir.Module | ir.Operation, elements: list[str], **options) -> None:
    """Run ``elements`` on ``module`` in place; raises MLIRError with the diagnostics."""
    op = module.operation
    pm = build_pass_manager(op.context, elements, anchor=op.name, **options)
    pm.run(op)


def bytecode_file_to_text(path: Path, *, iree: bool = False) -> str:
    """The text of an MLIR file; ``iree``: read in IREE's bindings, for IR holding
    IREE's own ops (``util``, ``flow``), which torch-mlir's context cannot parse."""
    if iree:
        iree_ir = iree_bindings()
        with iree_ir.Context():
            return str(iree_ir.Module.parse(Path(path).read_bytes()))
    ctx = new_context()
    with ctx:
        module = ir.Module.parse(Path(path).read_bytes())
        return str(module)
