"""Pass pipelines: parsing pipeline text, building pass managers, and the
pipeline a compile runs (the default passes, with padding elimination and
data tiling's forms where they apply).

anyshape passes are Python passes added to an upstream ``PassManager``, so they
run among C++ passes with the pass manager's verification, IR printing and
timing. Textual pipelines cannot name Python passes upstream; this module
splits ``builtin.module(...)`` into elements and adds anyshape passes itself.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Sequence

from anyshape.iree.flags import Target
from anyshape.mlir import ir, passmanager
from anyshape.passes import lookup

if TYPE_CHECKING:  # the signature module imports torch, which anyshape-opt does without
    from anyshape.runtime.signature import ModuleSignature


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


# --- the pipeline a compile runs -------------------------------------------

DATA_TILING_FORMS = "anyshape-data-tiling-forms"
ELIMINATE_PADDING = "anyshape-eliminate-padding"
PADDING_MASK_INPUT = "attention_mask"


def with_padding_elimination(pass_names: list[str], signature: ModuleSignature) -> list[str]:
    """``anyshape-eliminate-padding`` on the input ``attention_mask``, after slice
    hoisting (whose rows it then leaves alone) or else shape canonicalization,
    keeping the function as it was for batches without padding; ``signature``
    learns to compute its index arguments."""
    inputs = [spec.name for spec in signature.inputs]
    if PADDING_MASK_INPUT not in inputs:
        raise ValueError(f"padding='eliminate': expected an input named "
                         f"'{PADDING_MASK_INPUT}' ([batch, length], 0 at padding), got inputs "
                         f"{', '.join(inputs)}")
    names = [split_pass_element(p)[0] for p in pass_names]
    anchor = next((n for n in ("anyshape-hoist-slices", "anyshape-canonicalize-shapes")
                   if n in names), None)
    if anchor is None:
        raise ValueError("padding='eliminate' runs after anyshape-canonicalize-shapes (or "
                         "anyshape-hoist-slices): add it to passes")
    at = names.index(anchor) + 1
    signature.padding_mask = PADDING_MASK_INPUT
    element = f"{ELIMINATE_PADDING}{{mask={inputs.index(PADDING_MASK_INPUT)} dense=true}}"
    return [*pass_names[:at], element, *pass_names[at:]]


def with_data_tiling_forms(pass_names: list[str], kernel_products: bool = False) -> list[str]:
    """``anyshape-data-tiling-forms`` right after ``anyshape-hoist-slices``
    (whose one-row work it rewrites), else right before ``anyshape-lower``
    (it reads the shape bindings lowering removes); unless already there, or
    neither is. ``kernel_products``: anyshape's kernel computes the products
    with a constant weight (iree/kernels/linear_rows.py), so the pass leaves those of
    a few rows as products."""
    names = [split_pass_element(p)[0] for p in pass_names]
    if DATA_TILING_FORMS in names:
        return list(pass_names)
    if ELIMINATE_PADDING in names:  # it reads the linears as written, before their forms
        at = names.index(ELIMINATE_PADDING) + 1
    elif "anyshape-hoist-slices" in names:
        at = names.index("anyshape-hoist-slices") + 1
    elif "anyshape-lower" in names:
        at = names.index("anyshape-lower")
    else:
        return list(pass_names)
    forms = f"{DATA_TILING_FORMS}{{kernel-products=true}}" if kernel_products else DATA_TILING_FORMS
    return [*pass_names[:at], forms, *pass_names[at:]]


def data_tiling_applies(target: Target, signature: ModuleSignature,
                        pass_names: Sequence[str]) -> bool:
    """Whether automatic data tiling turns it on: CPU targets only (it is where
    the CPU matmul speed is; IREE's GPU backends tile matmuls their own way),
    and with dynamic dims only when ``anyshape-lower`` states their ranges."""
    names = [split_pass_element(p)[0] for p in pass_names]
    return target.name == "cpu" and (not dynamic(signature) or "anyshape-lower" in names)


def dynamic(signature: ModuleSignature) -> bool:
    return any(isinstance(dim, str) for spec in signature.inputs for dim in spec.dims)
