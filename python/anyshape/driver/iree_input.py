"""The ``iree-input`` stage: the last pass stage rewritten into what IREE
receives. Each rewrite of the IREE layer (``anyshape.iree``) that the target
asks for runs in turn, each reading the last one's file: the argument dim
facts, anyshape's CPU kernels, the one-row products, data tiling's packing
barrier, CUDA's whole tiles, external parameters and in-place writes."""

from __future__ import annotations

import shlex
from pathlib import Path

from anyshape.driver.compilation import Compilation
from anyshape.driver.stage_files import StageFiles
from anyshape.errors import CompileError
from anyshape.iree.kernels import attention
from anyshape.iree.detached_weights import attach_weights
from anyshape.iree.dim_facts import has_dim_facts, inject_dim_facts
from anyshape.iree.flags import Target, iree_flags, routes_products
from anyshape.iree.in_place_writes import write_inputs_in_place_file
from anyshape.iree.kernels.linear_rows import kernel_for, route_linears, warn_unavailable
from anyshape.iree.parameters import externalize_weights
from anyshape.iree.quantized_weights import QuantizationError, weight_format
from anyshape.iree.row_products import route_row_products
from anyshape.iree.tiled_products import tile_products
from anyshape.iree.workarounds import (has_accumulating_scatters,
                                       separate_accumulated_scatter_operands,
                                       separate_dynamic_operand_packing)
from anyshape.mlir import ir
from anyshape.stages import IREE_INPUT_STAGE, Workaround, keep_reproducer


def states_dim_facts(target: Target) -> bool:
    """Whether the IREE input states the arguments' dim ranges (``iree/dim_facts.py``):
    for CPU targets. IREE 3.13's GPU reductions fail to compile with them
    (workaround cuda_without_dim_facts), and CUDA's products get their tiles
    from ``iree/tiled_products.py`` instead."""
    return target.name != "cuda"


def write_iree_input(compilation: Compilation, stages: StageFiles, module: ir.Module,
                     archive: Path | None, source: Path, dim_facts: bool = True) -> Path:
    """The last pass stage (``module``, stored as ``source``), with its
    ``anyshape.dims`` facts stated in IREE's own ops (unless ``dim_facts`` is
    False), with data tiling the product operands that IREE 3.13 must pack on
    their own behind a barrier (``iree/workarounds.py``) and, with
    ``compilation.weights``, those read from parameters written to ``archive``,
    and with ``compilation.in_place`` the inputs the model updates in place
    written into the caller's buffers (``iree/in_place_writes.py``)."""
    dump_ir_dir, report, weights = compilation.dump_ir_dir, compilation.report, compilation.weights
    data_tiling = bool(compilation.target.data_tiling)
    facts = dim_facts and states_dim_facts(compilation.target) and has_dim_facts(module)
    in_place = compilation.in_place
    kernel, unavailable = kernel_for(compilation.target)
    quantized = weight_format(compilation.target.weights, compilation.target.group_size,
                              compilation.target.weights_from,
                              compilation.target.activations)
    if quantized.quantized:
        if kernel is None:
            raise ValueError(f"weights: {quantized.name!r} weights are computed by anyshape's "
                             f"product kernel, which is unavailable: {unavailable}")
        if compilation.arrays is None:
            raise ValueError(f"weights: quantizing to {quantized.name!r} reads the model's "
                             f"weights, which an MLIR module does not hand over; compile the "
                             f"torch model (anyshape.compile, anyshape-compile --hf or --model)")
    elif unavailable:
        warn_unavailable(unavailable)
    row_products = routes_products(compilation.target)
    tiled = compilation.target.tiles_products()
    scatters = has_accumulating_scatters(module)
    # Parameters take the detached weights' place; else they get their data here.
    attached = compilation.detached if weights is None else None
    if not facts and weights is None and not attached and not data_tiling and not in_place \
            and kernel is None and not row_products and not tiled and not scatters:
        return stages.write(IREE_INPUT_STAGE, module, same_as=source)

    def produce(bytecode: Path, text: Path | None) -> None:
        current = source
        # Each rewrite reads the last one's file; the last writes the text.
        last = "weights" if weights is not None or attached else "in_place" if in_place else \
            "tiled" if tiled else "data_tiling" if data_tiling else "scatters" if scatters else \
            "row_products" if row_products else "kernel" if kernel is not None else "facts"
        if facts:
            report("stating argument dim ranges for IREE")
            inject_dim_facts(current, bytecode, text if last == "facts" else None)
            current = bytecode
        if kernel is not None:
            attention_kernel = attention.kernel(compilation.target.cpu)
            routed = route_linears(current, bytecode, kernel, iree_flags(compilation.target),
                                   text if last == "kernel" and attention_kernel is None else None,
                                   workers=compilation.target.workers or 1, weights=quantized,
                                   arrays=compilation.arrays)
            report(f"  {routed.products} products with a weight run anyshape's row-exact kernel "
                   f"(iree/kernels/linear_rows.py)")
            if routed.products_split:
                report(f"  {routed.products_split} of IREE's few-row products computed part by "
                       f"part, as the kernel computes them: their weights packed once")
            if quantized.quantized:
                report(f"  {routed.quantized} of them with {quantized.name} weights, and "
                       f"{routed.embeddings} embedding tables; "
                       f"{len(routed.kept_float32)} kept float32 weights"
                       + "".join(f"\n    {why}" for why in routed.kept_float32))
                if routed.quantized == 0:
                    raise QuantizationError(
                        f"weights: {quantized.name!r} asked for, but the model has no product "
                        f"with a weight of its own to quantize (a linear layer, an LM head)"
                        + (": " + "; ".join(routed.kept_float32) if routed.kept_float32 else ""))
            current = bytecode
            if attention_kernel is not None:
                count = attention.route_attention(current, bytecode, attention_kernel,
                                                  iree_flags(compilation.target),
                                                  text if last == "kernel" else None)
                report(f"  {count} attentions run anyshape's attention kernel (iree/kernels/attention.py)")
        if row_products:
            count = route_row_products(current, bytecode, text if last == "row_products" else None)
            report(f"  {count} products of a query row with the cache tiled for its rows (iree/row_products.py)")
            current = bytecode
        if scatters:
            count = separate_accumulated_scatter_operands(current, bytecode,
                                                          text if last == "scatters" else None)
            report(f"  kept {count} accumulating scatters' operands apart from their producers "
                   f"(iree/workarounds.py)")
            current = bytecode
        if data_tiling:
            count = separate_dynamic_operand_packing(current, bytecode,
                                                     text if last == "data_tiling" else None)
            report(f"  kept {count} products' operands apart from their packing (iree/workarounds.py)")
            current = bytecode
        if tiled:
            count = tile_products(current, bytecode, text if last == "tiled" else None)
            report(f"  {count} products padded to whole tiles "
                   f"(iree/tiled_products.py)")
            current = bytecode
        if in_place:
            count = write_inputs_in_place_file(current, bytecode, in_place,
                                               text if last == "in_place" else None)
            report(f"  {count} inputs updated in place are written into the caller's buffers")
            current = bytecode
        # Last: every rewrite before it reads and writes the IR without the
        # weights' bytes.
        if weights is not None:
            names = externalize_weights(current, bytecode, weights, archive,
                                        text if last == "weights" else None,
                                        write=stages.defer_archive)
            stages.parameter_specs = {name: {"shape": list(weights[name].shape),
                                             "dtype": str(weights[name].dtype)}
                                      for name in names}
            report(f"  {len(names)} weights are parameters in {archive.name} "
                   f"({sum(weights[name].nbytes for name in names) / 1e6:.1f} MB, written "
                   f"while iree-compile runs)")
            current = bytecode
        elif attached:
            count = attach_weights(current, bytecode, attached,
                                   text if last == "weights" else None)
            report(f"  {count} weights joined the module (iree/detached_weights.py)")
            current = bytecode

    try:
        return stages.record(IREE_INPUT_STAGE, produce)
    except QuantizationError:
        raise  # the weights= option's error, not the compiler's
    except ValueError as error:
        repro = keep_reproducer(source, dump_ir_dir, f"{IREE_INPUT_STAGE}-input")
        command = " ".join(shlex.quote(a) for a in [
            "python", "-m", "anyshape.iree.dim_facts", str(repro), "-o",
            str(repro.with_name(f"{IREE_INPUT_STAGE}.mlirbc"))])
        raise CompileError(IREE_INPUT_STAGE, str(error), str(repro), command) from None


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='cuda_without_dim_facts', stage='iree-input',
        where='states_dim_facts',
        upstream="With the arguments' dim ranges stated (util.assume.int with umax), IREE 3.13's "
                 "CUDA codegen gives a softmax's or layer norm's reduction a VectorDistribute "
                 "configuration of 1024 threads that it then fails to lower (\"'func.func' op "
                 "failed to distribute\": roberta-base and GPT-2 with Dim(\"seq\")): every "
                 "encoder compiled twice, the second time without them (FALLBACKS['dim_facts']). "
                 "CUDA builds state none.",
        guard='test/python/iree/test_cuda_census.py::test_iree_still_fails_to_distribute_with_dim_facts',
        remove_when='when IREE compiles those reductions with the ranges stated (the guard '
                    'then fails)'),
)
