"""``anyshape.compile``: a PyTorch module to a running IREE artifact, in named stages.

Stages, in order: ``import`` (torch dialect as imported), one stage per
anyshape pass (named by its argument), ``iree-input`` (exactly what IREE
receives: the last stage, its ``anyshape.dims`` argument facts stated as
IREE range assumptions by ``iree/dim_facts.py``). The IR after each is kept
as bytecode in a working directory and written as text under ``dump_ir_dir``
when one is given. A failing stage raises :class:`CompileError` with a
reproducer saved beside the command that replays it.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

from anyshape import compile_cache
from anyshape.errors import CompileError, DataTilingFallback
from anyshape.fallbacks import FALLBACKS, Build
from anyshape.iree.cpu import resolve as resolve_cpu
from anyshape.iree.dim_facts import has_dim_facts, inject_dim_facts
from anyshape.iree.flags import (PEELING_FLAG, Target, make_target, with_constants_for,
                                 routes_products, with_matmul_precision, with_product_kernel)
from anyshape.iree.in_place_writes import write_inputs_in_place_file
from anyshape.iree.invocation import compile_with_iree, stop_phase
from anyshape.iree.kernels import attention
from anyshape.iree.kernels.linear_rows import kernel_for, route_linears, warn_unavailable
from anyshape.iree.row_products import route_row_products
from anyshape.iree.tiled_products import tile_products
from anyshape.iree.parameters import ARCHIVE, externalize_weights
from anyshape.iree.workarounds import separate_dynamic_operand_packing
from anyshape.mlir import MLIRError, ir, module_to_bytecode, new_context, parse_module, versions
from anyshape.options import UNSET, BackendOptions, resolve_backend
from anyshape.passes import DEFAULT_PIPELINE
from anyshape.passes.eliminate_padding.pass_ import dense_twin
from anyshape.pipeline import (diagnostics_of, make_anyshape_pass, opt_command_flag, run_pipeline,
                               split_pass_element)
from anyshape.runtime.compiled_module import CompiledModule, available_cores, check_threads
from anyshape.runtime.signature import ModuleSignature
from anyshape.stages import (IMPORT_STAGE, IREE_COMPILE_STAGE, IREE_INPUT_STAGE,
                             discard_reproducer, keep_reproducer)
from anyshape.workarounds_index import Workaround


def compile(model, args=None, kwargs: dict | None = None, *, dynamic_shapes: Any = None,
            target: str = "cpu", dtype=None, padding: str | None = None,
            backend: BackendOptions | None = None,
            passes: Sequence[str] | None = None, dump_ir_dir: str | Path | None = None,
            progress: bool | Callable[[str], None] = False, cache: bool = True,
            entries: dict | None = None, cuda_arch=UNSET, opt_level=UNSET, data_tiling=UNSET,
            threads=UNSET, params=UNSET, target_cpu=UNSET) -> CompiledModule:
    """Export ``model`` with ``torch.export`` (``dynamic_shapes`` as there), run the
    anyshape passes and compile with IREE for ``target`` ("cpu" or "cuda").

    ``backend`` (an ``anyshape.BackendOptions``) holds how IREE builds and runs
    the module: ``cuda_arch``, ``opt_level``, ``data_tiling``, ``threads``,
    ``params``, ``target_cpu``, each described below. Passed to ``compile``
    directly, as before, they still work, with a ``DeprecationWarning``.

    ``model`` may also be a ``torch.export.ExportedProgram`` (export once,
    compile several variants): its dims are the program's, ``args`` and
    ``kwargs`` are not given, and ``dynamic_shapes``, if given, only names
    the dims (as the manifest and error messages call them).

    ``passes=None`` runs the default anyshape pipeline, ``[]`` none, or a list of
    pass arguments. ``progress=True`` prints each stage as it runs. ``threads``:
    CPU worker threads the module runs on (None: one per core this process may
    use); IREE fixes the count for the whole process when the first CPU module
    runs, so modules of one process must agree on it. ``data_tiling``: IREE's
    data tiling (packed matmul operands, about 3x faster CPU matmuls), with
    ``anyshape-data-tiling-forms``. None (default): on for CPU targets, and
    when IREE fails to compile a module with it, compiled again without it
    and a ``DataTilingFallback`` warning; True: on, and such a failure is a
    ``CompileError``; False: off. ``params``: "inline" (default) stores the
    weights in the ``.vmfb``; "external" in an IREE parameter archive
    (``params.irpa``, each weight once, under its name in the model's state)
    that ``save`` writes beside it and ``load`` opens (``iree/parameters.py``).
    ``dtype`` (``torch.float16``, ``torch.float32``):
    compile a copy of the model with its floating-point weights and the
    example inputs' floating-point tensors in that dtype (the caller's model
    is left as it is); the module then takes and returns that dtype.
    ``padding="eliminate"``: the token-wise ops (projections, feed-forward
    layers, norms) run on the real tokens of the batch only, as the input
    ``attention_mask`` (0 or 1) marks them (``anyshape-eliminate-padding``);
    per-token outputs are 0 at padded positions. A model it cannot prove
    that safe for fails to compile, naming the op.
    ``target_cpu`` (``target="cpu"``): the CPU the code is for: "host"
    (default: this machine's, every instruction it has), a CPU LLVM knows
    (``"znver3"``, ``"skylake-avx512"``) or a level (``"x86-64-v3"``). The
    manifest records it with its features, and a host that lacks one refuses
    to run the artifact, naming it (``anyshape/iree/cpu.py``).
    ``cache`` (default True): keep the artifact in the compile cache and take it
    from there when the exported program, the options and the versions are the
    same (``anyshape/compile_cache.py``; ``ANYSHAPE_CACHE_DIR`` says where). A
    module from the cache runs the same; its ``stages`` and ``ir()`` compile
    it again when first asked for. ``dump_ir_dir`` always compiles.
    ``entries`` (name -> ``torch.export.ExportedProgram``): more functions in
    the same module, each exported from the same model (a specialization of
    it: static sizes where the entry function has dims), sharing its weights,
    which the module stores once; ``module.invoke(arrays, entry=name)`` runs
    one. The passes run on every function.
    """
    import torch

    from anyshape.frontend.export import export_program, prepare_program
    from anyshape.frontend.importer import import_programs
    from anyshape.runtime.signature import dim_labels_from, signature_from_program

    exported_already = isinstance(model, torch.export.ExportedProgram)
    if exported_already and (args is not None or kwargs):
        raise TypeError("args: expected none with an ExportedProgram (it was exported with its "
                        f"example inputs), got {type(args).__name__}")
    if exported_already and dtype is not None:
        raise ValueError(f"dtype: expected None with an ExportedProgram (it is compiled in the "
                         f"dtypes it was exported in), got {dtype}")
    if not exported_already and args is None:
        raise TypeError("args: expected the example inputs (a tuple of tensors), got None")
    entries = dict(entries or {})
    for name, entry_program in entries.items():
        if not isinstance(entry_program, torch.export.ExportedProgram):
            raise TypeError(f"entries['{name}']: expected a torch.export.ExportedProgram, "
                            f"got {type(entry_program).__name__}")
        if name == "main" or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(name)):
            raise ValueError(f"entries: expected function names (identifiers other than "
                             f"'main'), got {name!r}")

    backend = resolve_backend(backend, {
        "cuda_arch": cuda_arch, "opt_level": opt_level, "data_tiling": data_tiling,
        "threads": threads, "params": params, "target_cpu": target_cpu}, stacklevel=2)
    threads, params = backend.threads, backend.params
    compile_target = make_target(target, backend.cuda_arch, backend.opt_level,
                                 backend.data_tiling, backend.target_cpu)
    if not isinstance(backend.outer_dim_concat, bool):
        raise TypeError(f"outer_dim_concat: expected True or False, got "
                        f"{backend.outer_dim_concat!r}")
    if not backend.outer_dim_concat:
        compile_target = dataclasses.replace(compile_target, outer_dim_concat=False)
    compile_target = with_matmul_precision(compile_target, backend.matmul_precision)
    compile_target = with_product_kernel(compile_target, backend.product_kernel)
    if not isinstance(backend.in_place_writes, bool):
        raise TypeError(f"in_place_writes: expected True or False, got "
                        f"{backend.in_place_writes!r}")
    if backend.in_place_writes:
        if padding is not None:
            # The dense twin eliminate-padding adds is a function the rewrite
            # of the updated inputs (iree/in_place_writes.py) is not told of.
            raise ValueError(f"in_place_writes: not supported together with "
                             f"padding={padding!r}; use one or the other")
        compile_target = dataclasses.replace(compile_target, in_place_writes=True)
    check_threads(threads)
    if compile_target.name == "cpu":
        compile_target = dataclasses.replace(compile_target,
                                             workers=threads or available_cores())
    if params not in ("inline", "external"):
        raise ValueError(f"params: expected 'inline' or 'external', got {params!r}")
    if dtype is not None:
        model, args, kwargs = _in_dtype(dtype, model, args, kwargs)
    if isinstance(passes, str):
        raise TypeError(f"passes: expected a list of pass names (or None: the default "
                        f"pipeline), got the string {passes!r}; write [{passes!r}]")
    pass_names = list(DEFAULT_PIPELINE if passes is None else passes)
    if padding not in (None, "eliminate"):
        raise ValueError(f"padding: expected None or 'eliminate', got {padding!r}")
    for name in pass_names:
        make_anyshape_pass(name)  # unknown names and bad options fail before the (slow) export
    report = _progress_printer(progress)

    started = time.monotonic()
    if exported_already:
        report("decomposing the exported program")
        program = prepare_program(model)
    else:
        report("exporting with torch.export")
        program = export_program(model, args, kwargs, dynamic_shapes)
    entries = {name: prepare_program(entry_program) for name, entry_program in entries.items()}
    compile_target = with_constants_for(compile_target, _tensor_dtypes(program, *entries.values()))
    exported = time.monotonic()
    report("importing into the torch dialect")
    signature = signature_from_program(program, dim_labels_from(program, dynamic_shapes))
    written = {"main": input_positions(signature, signature.input_writes)}
    for name, entry_program in entries.items():
        entry_signature = signature_from_program(entry_program)
        written[name] = input_positions(entry_signature, entry_signature.input_writes)
    if padding == "eliminate":
        pass_names = with_padding_elimination(pass_names, signature)

    def build() -> tuple[CompiledModule, list[warnings.WarningMessage]]:
        weights: dict | None = {} if params == "external" else None
        began = time.monotonic()
        imported = import_programs({"main": program, **entries}, weights=weights)
        import_seconds = time.monotonic() - began
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            built = compile_module(imported, signature, compile_target, pass_names,
                                   dump_ir_dir=dump_ir_dir, report=report, weights=weights,
                                   written=written)
        built.stage_seconds = {IMPORT_STAGE: import_seconds,
                               **{k: v for k, v in built.stage_seconds.items()
                                  if k != IMPORT_STAGE}}
        return built, caught

    key = None
    if cache and stop_phase() is None:  # a census's build is no artifact
        options = {"target": compile_target.to_json(), "passes": pass_names, "params": params,
                   "padding": padding, "signature": signature.to_json(),
                   "cpu": (dataclasses.asdict(resolve_cpu(compile_target.cpu))
                           if compile_target.name == "cpu" else None),
                   "entries": {name: compile_cache.program_digest(entry_program)
                               for name, entry_program in entries.items()}}
        key = compile_cache.cache_key(program, options)
        hit = compile_cache.lookup(key, threads=threads) if dump_ir_dir is None else None
        if hit is not None:
            module, fallbacks = hit
            module.stage_seconds = {"export": exported - started,
                                    "cache": time.monotonic() - exported}
            module.stage_source = lambda: build()[0]
            for text in fallbacks:
                warnings.warn(text, DataTilingFallback, stacklevel=2)
            report(f"from the compile cache ({module.vmfb_path.parent}) in "
                   f"{time.monotonic() - started:.1f}s")
            return module
    module, caught = build()
    for warning in caught:  # raised again, at the caller's line
        warnings.warn(warning.message, warning.category, stacklevel=2)
    module.stage_seconds = {"export": exported - started, **module.stage_seconds}
    module.threads = threads
    if key is not None:
        compile_cache.store(key, module, [str(w.message) for w in caught
                                          if issubclass(w.category, DataTilingFallback)])
    report(f"done in {time.monotonic() - started:.0f}s")
    return module


def _tensor_dtypes(*programs) -> set:
    """The dtypes of the weights, buffers and constants of exported programs."""
    return {tensor.dtype for program in programs
            for tensor in (*program.state_dict.values(), *program.constants.values())
            if hasattr(tensor, "dtype")}


# bfloat16 is not offered: numpy has no bfloat16, and the runtime passes arrays
# through numpy.
_FLOAT_DTYPES = ("float32", "float16")


def _in_dtype(dtype, model, args, kwargs):
    import copy

    import torch
    from torch.utils._pytree import tree_map

    if not isinstance(dtype, torch.dtype) or str(dtype).removeprefix("torch.") not in _FLOAT_DTYPES:
        raise ValueError(f"dtype: expected one of torch.{', torch.'.join(_FLOAT_DTYPES)} (or "
                         f"None: as the model is), got {dtype!r}")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")

    def cast(value):
        return value.to(dtype) if isinstance(value, torch.Tensor) and value.is_floating_point() \
            else value

    return copy.deepcopy(model).to(dtype), tree_map(cast, args), tree_map(cast, kwargs)


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
    with a constant weight (iree/linear_rows.py), so the pass leaves those of
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


def compile_module(module: ir.Module, signature: ModuleSignature, target: Target,
                   pass_names: Sequence[str], *, dump_ir_dir: str | Path | None = None,
                   report: Callable[[str], None] = lambda msg: None,
                   entry: str = "main", weights: dict | None = None,
                   written: dict[str, list[int]] | None = None) -> CompiledModule:
    """Run the pass stages on an imported module, then IREE. ``module`` is consumed.
    With data tiling, ``anyshape-data-tiling-forms`` joins the stages
    (``with_data_tiling_forms``). ``target.data_tiling`` None (auto): on where
    it applies (``data_tiling_applies``); when IREE then fails to compile, the
    module is compiled again without it, with a warning if that works.
    ``weights`` (resource blob name -> array, from ``import_program``): those
    weights become parameters in a ``params.irpa`` beside the ``.vmfb``; None
    keeps every weight inline. ``written`` (function name -> the input
    positions its first results are the new values of; default: ``main``'s,
    from ``signature``): with ``target.in_place_writes``, written in place."""
    workdir = tempfile.TemporaryDirectory(prefix="anyshape-")
    stages = _StageWriter(Path(workdir.name), Path(dump_ir_dir) if dump_ir_dir else None)
    stages.write(IMPORT_STAGE, module)
    if written is None:
        written = {entry: input_positions(signature, signature.input_writes)}
    in_place = {name: positions for name, positions in written.items() if positions} \
        if target.in_place_writes else None
    compilation = _Compilation(workdir, signature, target, pass_names, dump_ir_dir, report,
                               entry, weights, in_place or None)
    if target.data_tiling is not None:
        return _compile_stages(module, stages, compilation)
    tiled = data_tiling_applies(target, signature, pass_names)
    fallback = FALLBACKS["data_tiling"]
    try:
        return _compile_stages(module, stages, compilation.with_data_tiling(tiled))
    except CompileError as error:
        if not fallback.applies(error, Build((), tiled, True, False)):
            raise
        failure = error
    report(f"compiling again {fallback.change}: " + failure.diagnostic.splitlines()[0])
    stages.remove_dumps_after_import()  # the failure's reproducer stays
    (Path(workdir.name) / "untiled").mkdir()
    retry = _StageWriter(Path(workdir.name) / "untiled", stages.dump_dir)
    retry.files[IMPORT_STAGE] = stages.files[IMPORT_STAGE]
    module = parse_module(stages.files[IMPORT_STAGE].read_bytes(), new_context())
    # A failure without data tiling too was not data tiling's: it is raised as
    # it is, with no fallback warning.
    try:
        compiled = _compile_stages(module, retry, compilation.with_data_tiling(False))
    except CompileError:
        if fallback.raise_when_both_fail == "second":
            raise
        raise failure from None
    warnings.warn(f"IREE could not compile this module with data tiling, so it was compiled "
                  f"without it (slower matmuls; data_tiling=False skips the first attempt): "
                  f"{failure.diagnostic}\nreproducer: {failure.reproducer}",
                  fallback.warning, stacklevel=3)
    return compiled


def states_dim_facts(target: Target) -> bool:
    """Whether the IREE input states the arguments' dim ranges (``iree/dim_facts.py``):
    for CPU targets. IREE 3.13's GPU reductions fail to compile with them
    (workaround cuda_without_dim_facts), and CUDA's products get their tiles
    from ``iree/tiled_products.py`` instead."""
    return target.name != "cuda"


def data_tiling_applies(target: Target, signature: ModuleSignature,
                        pass_names: Sequence[str]) -> bool:
    """Whether automatic data tiling turns it on: CPU targets only (it is where
    the CPU matmul speed is; IREE's GPU backends tile matmuls their own way),
    and with dynamic dims only when ``anyshape-lower`` states their ranges."""
    names = [split_pass_element(p)[0] for p in pass_names]
    return target.name == "cpu" and (not _dynamic(signature) or "anyshape-lower" in names)


@dataclasses.dataclass(frozen=True)
class _Compilation:
    """What ``compile_module`` compiles with, the same for each attempt but for
    ``target``'s data tiling. The module and its stage files are not here: each
    attempt has its own, and the module is released before IREE runs."""
    workdir: tempfile.TemporaryDirectory  # holds every attempt's files; kept alive by the result
    signature: ModuleSignature
    target: Target
    pass_names: Sequence[str]
    dump_ir_dir: str | Path | None
    report: Callable[[str], None]
    entry: str
    weights: dict | None  # params="external": resource blob name -> array; None: inline
    # in_place_writes: function name -> the inputs its first results are the new values of
    in_place: dict[str, list[int]] | None = None

    def with_data_tiling(self, data_tiling: bool) -> "_Compilation":
        return dataclasses.replace(self, target=dataclasses.replace(self.target,
                                                                    data_tiling=data_tiling))


def _compile_stages(module: ir.Module, stages: "_StageWriter",
                    compilation: _Compilation) -> CompiledModule:
    signature, target = compilation.signature, compilation.target
    dump_ir_dir, report = compilation.dump_ir_dir, compilation.report
    pass_names = compilation.pass_names
    if target.data_tiling:
        kernel_products = kernel_for(target)[0] is not None
        pass_names = with_data_tiling_forms(list(pass_names), kernel_products)
    for element in pass_names:
        name = split_pass_element(element)[0]
        report(f"running {element}")
        before = stages.last_file
        try:
            run_pipeline(module, [element])
        except MLIRError as error:
            diag = diagnostics_of(error)[0]
            repro = keep_reproducer(before, dump_ir_dir, f"{name}-input")
            raise CompileError(name, diag.render(), str(repro),
                               f"anyshape-opt {shlex.quote(str(repro))} {opt_command_flag(element)}"
                               ) from None
        stages.write(name, module)
    if signature.padding_mask is not None:
        signature.padding_dense_entry = dense_twin(module.operation, compilation.entry)

    if target.data_tiling and _dynamic(signature) and not has_dim_facts(module):
        # IREE 3.13's data tiling computes wrong results with dynamic dims whose
        # ranges it is not told (roberta-base with passes=[]: max error 0.36
        # at L = 128); anyshape-lower states them as anyshape.dims.
        raise ValueError("data_tiling=True: with dynamic dims IREE's data tiling needs the dim "
                         "ranges anyshape-lower states (wrong results without them); add "
                         "anyshape-lower to passes or use data_tiling=False")
    archive = stages.workdir / ARCHIVE if compilation.weights is not None else None
    passes_output = stages.last_file
    facts = states_dim_facts(target) and has_dim_facts(module)
    iree_input = _write_iree_input(compilation, stages, module, archive, source=passes_output)
    del module
    report(f"compiling with IREE for {target.name} ({target.opt_level}"
           f"{', data tiling' if target.data_tiling else ''})")
    flags = target.iree_flags()
    started = time.monotonic()
    cpu = target.name == "cpu"

    def made(with_facts: bool) -> Build:
        return Build(tuple(flags), bool(target.data_tiling), False, with_facts)

    def build(iree_input: Path, with_facts: bool) -> Path:
        nonlocal flags
        peeling = FALLBACKS["peeling"]
        try:
            return compile_with_iree(iree_input, flags, dump_ir_dir, report, cpu)
        except CompileError as error:
            if not peeling.applies(error, made(with_facts)):
                raise
            # What peeling can need, IREE may refuse (iree/flags.py); without it the
            # module compiles as IREE does by default, whose failure is the one raised.
            report(f"compiling again {peeling.change}: " + error.diagnostic.splitlines()[0])
            discard_reproducer(error.reproducer, dump_ir_dir)
            flags = [flag for flag in flags if flag != PEELING_FLAG]
            return compile_with_iree(iree_input, flags, dump_ir_dir, report, cpu)

    dim_facts = FALLBACKS["dim_facts"]
    try:
        vmfb_path = build(iree_input, facts)
    except CompileError as error:
        if not dim_facts.applies(error, made(facts)):
            raise
        # The dim facts are for speed without data tiling, and IREE 3.13 fails
        # on some modules with them that it compiles without (fallbacks.py).
        report(f"compiling again {dim_facts.change}: " + error.diagnostic.splitlines()[0])
        first = Path(error.reproducer)
        kept = first.rename(first.with_name(first.name + ".first"))  # the retry's may take its name
        module = parse_module(passes_output.read_bytes(), new_context())
        # (target.data_tiling is off here: with it, the failure was raised above)
        retry = _write_iree_input(compilation, stages, module, archive, source=passes_output,
                                  dim_facts=False)
        del module
        try:
            vmfb_path = build(retry, False)
        except CompileError as second:
            if dim_facts.raise_when_both_fail == "second":
                raise
            discard_reproducer(second.reproducer, dump_ir_dir)
            stages.forget_last()
            kept.replace(first)
            raise error from None
        kept.replace(first)
        discard_reproducer(error.reproducer, dump_ir_dir)
        stages.files[IREE_INPUT_STAGE] = stages.files.pop(stages.last_stage)
    seconds = {**stages.seconds, IREE_COMPILE_STAGE: time.monotonic() - started}
    return CompiledModule(vmfb_path, signature, target, iree_flags=flags, versions=versions(),
                          cpu=dataclasses.asdict(resolve_cpu(target.cpu)) if cpu else None,
                          stage_files=stages.files, workdir=compilation.workdir,
                          entry=compilation.entry,
                          parameters_path=archive, stage_seconds=seconds,
                          parameter_specs=stages.parameter_specs)


def input_positions(signature: ModuleSignature, names: Sequence[str]) -> list[int]:
    """Where the inputs ``names`` are among the function's arguments."""
    order = [spec.name for spec in signature.inputs]
    return [order.index(name) for name in names]


def _dynamic(signature: ModuleSignature) -> bool:
    return any(isinstance(dim, str) for spec in signature.inputs for dim in spec.dims)


def _write_iree_input(compilation: _Compilation, stages: "_StageWriter", module: ir.Module,
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
    if unavailable:
        warn_unavailable(unavailable)
    row_products = routes_products(compilation.target)
    tiled = compilation.target.tiles_products()
    if not facts and weights is None and not data_tiling and not in_place and kernel is None \
            and not row_products and not tiled:
        return stages.write(IREE_INPUT_STAGE, module, same_as=source)

    def produce(bytecode: Path, text: Path | None) -> None:
        current = source
        # Each rewrite reads the last one's file; the last writes the text.
        last = "in_place" if in_place else "weights" if weights is not None else \
            "tiled" if tiled else "data_tiling" if data_tiling else \
            "row_products" if row_products else "kernel" if kernel is not None else "facts"
        if facts:
            report("stating argument dim ranges for IREE")
            inject_dim_facts(current, bytecode, text if last == "facts" else None)
            current = bytecode
        if kernel is not None:
            attention_kernel = attention.kernel()
            count = route_linears(current, bytecode, kernel, compilation.target.iree_flags(),
                                  text if last == "kernel" and attention_kernel is None else None,
                                  workers=compilation.target.workers or 1)
            report(f"  {count} products with a weight run anyshape's row-exact kernel "
                   f"(iree/linear_rows.py)")
            current = bytecode
            if attention_kernel is not None:
                count = attention.route_attention(current, bytecode, attention_kernel,
                                                  compilation.target.iree_flags(),
                                                  text if last == "kernel" else None)
                report(f"  {count} attentions run anyshape's attention kernel (iree/attention.py)")
        if row_products:
            count = route_row_products(current, bytecode, text if last == "row_products" else None)
            report(f"  {count} products of a query row with the cache tiled for its rows (iree/row_products.py)")
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
        if weights is not None:
            names = externalize_weights(current, bytecode, weights, archive,
                                        text if last == "weights" else None)
            stages.parameter_specs = {name: {"shape": list(weights[name].shape),
                                             "dtype": str(weights[name].dtype)}
                                      for name in names}
            report(f"moved {len(names)} weights to {archive.name} "
                   f"({archive.stat().st_size / 1e6:.1f} MB)")
            current = bytecode
        if in_place:
            count = write_inputs_in_place_file(current, bytecode, in_place, text)
            report(f"  {count} inputs updated in place are written into the caller's buffers")

    try:
        return stages.record(IREE_INPUT_STAGE, produce)
    except ValueError as error:
        repro = keep_reproducer(source, dump_ir_dir, f"{IREE_INPUT_STAGE}-input")
        command = " ".join(shlex.quote(a) for a in [
            "python", "-m", "anyshape.iree.dim_facts", str(repro), "-o",
            str(repro.with_name(f"{IREE_INPUT_STAGE}.mlirbc"))])
        raise CompileError(IREE_INPUT_STAGE, str(error), str(repro), command) from None


class _StageWriter:
    def __init__(self, workdir: Path, dump_dir: Path | None):
        self.workdir = workdir
        self.dump_dir = dump_dir
        self.files: dict[str, Path] = {}
        self.dumped: list[Path] = []
        self.seconds: dict[str, float] = {}  # stage -> seconds since the stage before it
        self.parameter_specs: dict[str, dict] | None = None  # params="external": name -> spec
        self._since = time.monotonic()
        if dump_dir:
            dump_dir.mkdir(parents=True, exist_ok=True)

    def remove_dumps_after_import(self) -> None:
        """Delete the stage texts dumped after the import (an abandoned attempt's)."""
        for path in self.dumped[1:]:
            path.unlink(missing_ok=True)
        del self.dumped[1:]

    @property
    def last_file(self) -> Path:
        return list(self.files.values())[-1]

    @property
    def last_stage(self) -> str:
        return list(self.files)[-1]

    def forget_last(self) -> None:
        """Drop the last stage, and its dumped text (an abandoned attempt's)."""
        self.files.pop(self.last_stage)
        if self.dump_dir and self.dumped:
            self.dumped.pop().unlink(missing_ok=True)

    def write(self, stage: str, module: ir.Module, same_as: Path | None = None) -> Path:
        """Record ``module`` as ``stage``; ``same_as``: the stage file it is the same
        module as, whose bytecode (500 MB for roberta-base) is reused, not rewritten."""
        stage, stem = self._name(stage)
        if same_as is not None:
            path = same_as
        else:
            path = self.workdir / f"{stem}.mlirbc"
            path.write_bytes(module_to_bytecode(module))
        self.files[stage] = path
        if self.dump_dir:
            with open(self.dump_dir / f"{stem}.mlir", "w") as f:
                module.operation.print(file=f)
            self.dumped.append(self.dump_dir / f"{stem}.mlir")
        self._clock(stage)
        return path

    def _clock(self, stage: str) -> None:
        now = time.monotonic()
        self.seconds[stage] = now - self._since
        self._since = now

    def record(self, stage: str, produce: Callable[[Path, Path | None], object]) -> Path:
        """Record ``stage`` as the bytecode that ``produce(bytecode_path, text_path)``
        writes, with its text when dumping (text_path None otherwise): for IR held
        in IREE's bindings, which ``write`` cannot serialize."""
        stage, stem = self._name(stage)
        path = self.workdir / f"{stem}.mlirbc"
        produce(path, self.dump_dir / f"{stem}.mlir" if self.dump_dir else None)
        if self.dump_dir:
            self.dumped.append(self.dump_dir / f"{stem}.mlir")
        self.files[stage] = path
        self._clock(stage)
        return path

    def _name(self, stage: str) -> tuple[str, str]:
        if stage in self.files:  # a pass that runs twice gets a numbered stage
            stage = f"{stage}#{sum(s.split('#')[0] == stage for s in self.files) + 1}"
        return stage, f"{len(self.files):02d}-{stage.replace('#', '-')}"


def _progress_printer(progress) -> Callable[[str], None]:
    if callable(progress):
        return progress
    if not progress:
        return lambda msg: None
    start = time.monotonic()

    def report(msg: str) -> None:
        print(f"[anyshape {time.monotonic() - start:6.1f}s] {msg}", file=sys.stderr, flush=True)

    return report


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/workarounds_index.py).
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
    Workaround(
        name='data_tiling_needs_dim_ranges', stage='iree-flags',
        where='_compile_stages (ValueError), data_tiling_applies',
        upstream="IREE 3.13's data tiling computes wrong results with dynamic dims whose ranges "
                 'it is not told (roberta-base with passes=[]: max error 0.36 at L = 128); '
                 'data_tiling=True without anyshape-lower is refused, and automatic data tiling '
                 'stays off.',
        guard='test/python/iree/test_data_tiling.py::test_data_tiling_needs_the_dim_ranges',
        remove_when="(inferred) when IREE's data tiling is exact without range assumptions"),
)
