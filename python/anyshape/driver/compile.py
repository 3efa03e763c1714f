"""``anyshape.compile``: a PyTorch module to a running IREE artifact, in named stages.

Stages, in order: ``import`` (torch dialect as imported), one stage per
anyshape pass (named by its argument), ``iree-input`` (exactly what IREE
receives: ``iree_input.py``), ``iree-compile``. The IR after each is kept
as bytecode in a working directory and written as text under ``dump_ir_dir``
when one is given (``stage_files.py``). A failing stage raises
:class:`CompileError` with a reproducer saved beside the command that
replays it; where IREE 3.13 fails in a way a second build avoids, that build
is made (``fallbacks.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

from anyshape.dialects import new_context
from anyshape.driver import compile_cache
from anyshape.driver.compilation import Compilation
from anyshape.driver.arguments import (check_model_and_inputs, in_dtype, pass_names_from,
                                       target_from)
from anyshape.driver.fallbacks import Build, without_data_tiling, without_dim_facts, without_peeling
from anyshape.driver import iree_input as iree_input_stage
from anyshape.driver.pipeline import (data_tiling_applies, dynamic, opt_command_flag, run_pipeline,
                                      split_pass_element, with_data_tiling_forms,
                                      with_padding_elimination)
from anyshape.driver.stage_files import StageFiles, space_named, stage_text
from anyshape.errors import CompileError, DataTilingFallback, PackedWeightsFallback
from anyshape.iree.cpu import resolve as resolve_cpu
from anyshape.iree.dim_facts import has_dim_facts
from anyshape.iree.flags import Target, iree_flags, with_constants_for
from anyshape.iree.invocation import EncoderFailed, compile_with_iree, stop_phase
from anyshape.iree.kernels.linear_rows import kernel_for, start_building
from anyshape.iree.parameters import ARCHIVE
from anyshape.mlir import MLIRError, diagnostics_of, ir, parse_module, versions
from anyshape.options import UNSET, BackendOptions, resolve_backend
from anyshape.passes.eliminate_padding.pass_ import dense_twin
from anyshape.runtime.compiled_module import PARAMETER_SCOPE, CompiledModule, cpu_device
from anyshape.runtime.parameter_encoding import ENCODER
from anyshape.runtime.signature import ModuleSignature
from anyshape.stages import (IMPORT_STAGE, IREE_COMPILE_STAGE, IREE_INPUT_STAGE, Workaround,
                             finish_progress, keep_reproducer, progress_printer)


def compile(model, args=None, kwargs: dict | None = None, *, dynamic_shapes: Any = None,
            target: str = "cpu", dtype=None, padding: str | None = None,
            backend: BackendOptions | None = None,
            passes: Sequence[str] | None = None, dump_ir_dir: str | Path | None = None,
            progress: bool | Callable[[str], None] = False, cache: bool = True,
            entries: dict | None = None, strict_dims: bool = False,
            cuda_arch=UNSET, opt_level=UNSET, data_tiling=UNSET,
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
    pass arguments. ``progress=True`` shows each stage as it runs (a line per
    stage whose clock runs on a terminal, else printed lines; "bars" or
    "lines" choose, a function of a message gets the messages:
    ``stages.py``). ``threads``:
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
    same (``anyshape/driver/compile_cache.py``; ``ANYSHAPE_CACHE_DIR`` says where). A
    module from the cache runs the same; its ``stages`` and ``ir()`` compile
    it again when first asked for. ``dump_ir_dir`` always compiles.
    ``entries`` (name -> ``torch.export.ExportedProgram``): more functions in
    the same module, each exported from the same model (a specialization of
    it: static sizes where the entry function has dims), sharing its weights,
    which the module stores once; ``module.invoke(arrays, entry=name)`` runs
    one. The passes run on every function.
    ``strict_dims`` (default False): where torch.export's only objection to
    ``dynamic_shapes`` is a max that the model's config implies (its
    position count: BERT's ``seq <= 512``), the dim gets that max, with a
    ``DimBoundedByConfig`` warning naming it; True: refused, as torch does.
    """
    from anyshape.frontend.prequantized import is_quantized

    if is_quantized(model) and (backend is None or backend.weights_from is None):
        from anyshape.frontend.prequantized import float_images

        with float_images(model, dtype) as checkpoint:
            return compile(model, args, kwargs, dynamic_shapes=dynamic_shapes, target=target,
                           dtype=dtype, padding=padding, backend=checkpoint.backend(backend),
                           passes=passes, dump_ir_dir=dump_ir_dir, progress=progress,
                           cache=cache, entries=entries, strict_dims=strict_dims,
                           cuda_arch=cuda_arch, opt_level=opt_level, data_tiling=data_tiling,
                           threads=threads, params=params, target_cpu=target_cpu)
    entries = check_model_and_inputs(model, args, kwargs, dtype, entries)
    if not isinstance(strict_dims, bool):
        raise TypeError(f"strict_dims: expected True or False, got {strict_dims!r}")
    backend = resolve_backend(backend, {
        "cuda_arch": cuda_arch, "opt_level": opt_level, "data_tiling": data_tiling,
        "threads": threads, "params": params, "target_cpu": target_cpu}, stacklevel=2)
    compile_target = target_from(target, backend, padding)
    start_building(compile_target)  # while the model exports
    if dtype is not None:
        model, args, kwargs = in_dtype(dtype, model, args, kwargs)
    pass_names = pass_names_from(passes, padding)
    report = progress_printer(progress)

    started = time.monotonic()
    program, entries = _exported(model, args, kwargs, dynamic_shapes, entries, report,
                                 strict_dims)
    compile_target = with_constants_for(compile_target, _tensor_dtypes(program, *entries.values()))
    exported = time.monotonic()
    report("importing into the torch dialect")
    signature, written = _signatures(program, entries, dynamic_shapes)
    if padding == "eliminate":
        pass_names = with_padding_elimination(pass_names, signature)

    def build() -> tuple[CompiledModule, list[warnings.WarningMessage]]:
        return _built(program, entries, signature, compile_target, pass_names, backend.params,
                      dump_ir_dir, report, written, backend.threads)

    key = None
    if cache and stop_phase() is None:  # a census's build is no artifact
        compile_cache.size_bound()  # a bad ANYSHAPE_CACHE_SIZE before the compile, not after
        key = _cache_key(program, entries, signature, compile_target, pass_names,
                         backend.params, padding)
    filling = compile_cache.filling(key, report) if key is not None and dump_ir_dir is None \
        else contextlib.nullcontext()
    with filling:
        hit = compile_cache.lookup(key, threads=backend.threads) \
            if key is not None and dump_ir_dir is None else None
        if hit is not None:
            return _from_cache(hit, build, report, started, exported)
        module, caught = build()
        module.stage_seconds = {"export": exported - started, **module.stage_seconds}
        module.threads = backend.threads
        if key is not None:
            compile_cache.store(key, module, [str(w.message) for w in caught
                                              if issubclass(w.category, DataTilingFallback)])
    for warning in caught:  # raised again, at the caller's line
        warnings.warn(warning.message, warning.category, stacklevel=2)
    finish_progress(report, f"done in {time.monotonic() - started:.0f}s")
    return module


def _exported(model, args, kwargs, dynamic_shapes, entries: dict, report, strict_dims: bool):
    """The program to compile, and the ``entries`` decomposed as it is."""
    import torch

    from anyshape.frontend.export import export_program, forget_last_trace, prepare_program

    try:
        if isinstance(model, torch.export.ExportedProgram):
            report("decomposing the exported program")
            program = prepare_program(model)
        else:
            report("exporting with torch.export")
            program = export_program(model, args, kwargs, dynamic_shapes, strict_dims,
                                     stacklevel=4)
        return program, {name: prepare_program(entry_program)
                         for name, entry_program in entries.items()}
    finally:
        forget_last_trace()  # a refused export too: the process goes on


def _signatures(program, entries: dict, dynamic_shapes) -> tuple[ModuleSignature, dict]:
    """The module's signature (as the manifest records it), and for each
    function the input positions its first results are the new values of."""
    from anyshape.frontend.program_signature import dim_labels_from
    from anyshape.frontend.program_signature import signature_from_program

    signature = signature_from_program(program, dim_labels_from(program, dynamic_shapes))
    written = {"main": input_positions(signature, signature.input_writes)}
    for name, entry_program in entries.items():
        entry_signature = signature_from_program(entry_program)
        written[name] = input_positions(entry_signature, entry_signature.input_writes)
    return signature, written


def _built(program, entries: dict, signature: ModuleSignature, target: Target,
           pass_names: list[str], params: str, dump_ir_dir, report,
           written: dict, threads: int | None
           ) -> tuple[CompiledModule, list[warnings.WarningMessage]]:
    """Import, passes and IREE: the module, and the warnings its build gave."""
    from anyshape.frontend.importer import import_programs

    # The weights stay out of the IR until the iree-input stage
    # (iree/detached_weights.py): every blob name -> its array.
    detached: dict = {}
    weights = detached if params == "external" else None
    # Quantizing reads every weight's array (the same dict).
    arrays = detached if weights is not None or target.weights != "float32" else None
    began = time.monotonic()
    imported = import_programs({"main": program, **entries}, weights=detached, detach=True)
    import_seconds = time.monotonic() - began
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built = compile_module(imported, signature, target, pass_names,
                               dump_ir_dir=dump_ir_dir, report=report, weights=weights,
                               arrays=arrays, written=written,
                               # as imported: quantizing adds its own blobs to arrays
                               detached=dict(detached), threads=threads)
    built.stage_seconds = {IMPORT_STAGE: import_seconds,
                           **{k: v for k, v in built.stage_seconds.items() if k != IMPORT_STAGE}}
    return built, caught


def _cache_key(program, entries: dict, signature: ModuleSignature, target: Target,
               pass_names: list[str], params: str, padding: str | None) -> str:
    options = {"target": target.to_json(), "passes": pass_names, "params": params,
               "padding": padding, "signature": signature.to_json(),
               "cpu": (dataclasses.asdict(resolve_cpu(target.cpu))
                       if target.name == "cpu" else None),
               "entries": {name: compile_cache.program_digest(entry_program)
                           for name, entry_program in entries.items()}}
    return compile_cache.cache_key(program, options)


def _from_cache(hit, build, report, started: float, exported: float) -> CompiledModule:
    module, fallbacks = hit
    module.stage_seconds = {"export": exported - started, "cache": time.monotonic() - exported}
    module.stage_source = lambda: build()[0]
    for text in fallbacks:
        warnings.warn(text, DataTilingFallback, stacklevel=3)
    finish_progress(report, f"from the compile cache ({module.vmfb_path.parent}) in "
                   f"{time.monotonic() - started:.1f}s")
    return module


def _tensor_dtypes(*programs) -> set:
    """The dtypes of the weights, buffers and constants of exported programs."""
    return {tensor.dtype for program in programs
            for tensor in (*program.state_dict.values(), *program.constants.values())
            if hasattr(tensor, "dtype")}


def compile_module(module: ir.Module, signature: ModuleSignature, target: Target,
                   pass_names: Sequence[str], *, dump_ir_dir: str | Path | None = None,
                   report: Callable[[str], None] = lambda msg: None,
                   entry: str = "main", weights: dict | None = None,
                   written: dict[str, list[int]] | None = None,
                   arrays: dict | None = None,
                   detached: dict | None = None, threads: int | None = None) -> CompiledModule:
    """Run the pass stages on an imported module, then IREE. ``module`` is consumed.
    With data tiling, ``anyshape-data-tiling-forms`` joins the stages
    (``with_data_tiling_forms``). ``target.data_tiling`` None (auto): on where
    it applies (``data_tiling_applies``); when IREE then fails to compile, the
    module is compiled again without it, with a warning if that works.
    ``weights`` (resource blob name -> array, from ``import_program``): those
    weights become parameters in a ``params.irpa`` beside the ``.vmfb``; None
    keeps every weight inline. ``written`` (function name -> the input
    positions its first results are the new values of; default: ``main``'s,
    from ``signature``): with ``target.in_place_writes``, written in place.
    ``arrays`` (resource blob name -> array, from ``import_program``; the
    same dict as ``weights`` where both are given): the weights that
    ``target.weights`` "int8" or "int4" quantizes. ``detached`` (resource
    blob name -> array, from ``import_program(..., detach=True)``): the
    weights whose blobs the module holds without data; the iree-input stage
    gives them their data, or makes them parameters (``weights``). ``threads``:
    the CPU threads the module runs on, and packs its weights with."""
    workdir = tempfile.TemporaryDirectory(prefix="anyshape-")
    weight_bytes = sum(array.nbytes for array in (detached or {}).values())
    with space_named(Path(workdir.name), weight_bytes * (1 if weights is not None else 2)):
        stages = StageFiles(Path(workdir.name), Path(dump_ir_dir) if dump_ir_dir else None)
        stages.write(IMPORT_STAGE, module)
        if written is None:
            written = {entry: input_positions(signature, signature.input_writes)}
        in_place = {name: positions for name, positions in written.items() if positions} \
            if target.in_place_writes else None
        compilation = Compilation(workdir, signature, target, pass_names, dump_ir_dir, report,
                                  entry, weights, in_place or None, arrays, detached or None,
                                  threads)
        if target.data_tiling is not None:
            return _compile_stages(module, stages, compilation)
        tiled = data_tiling_applies(target, signature, pass_names)

        def without() -> CompiledModule:
            stages.remove_dumps_after_import()  # the failure's reproducer stays
            stages.release_after_import()
            (Path(workdir.name) / "untiled").mkdir()
            retry = StageFiles(Path(workdir.name) / "untiled", stages.dump_dir)
            retry.files[IMPORT_STAGE] = stages.files[IMPORT_STAGE]
            imported = parse_module(stages.files[IMPORT_STAGE].read_bytes(), new_context())
            return _compile_stages(imported, retry, compilation.with_data_tiling(False))

        return without_data_tiling(
            lambda: _compile_stages(module, stages, compilation.with_data_tiling(tiled)),
            without, tiled, report)


def _compile_stages(module: ir.Module, stages: StageFiles,
                    compilation: Compilation) -> CompiledModule:
    signature, target = compilation.signature, compilation.target
    dump_ir_dir, report = compilation.dump_ir_dir, compilation.report
    pass_names = compilation.pass_names
    if target.data_tiling or target.weights != "float32":
        # Quantized weights are computed by the kernel only, which routes the
        # products in the forms this pass writes: it runs without data tiling too.
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

    if target.data_tiling and dynamic(signature) and not has_dim_facts(module):
        # IREE 3.13's data tiling computes wrong results with dynamic dims whose
        # ranges it is not told (roberta-base with passes=[]: max error 0.36
        # at L = 128); anyshape-lower states them as anyshape.dims.
        raise ValueError("data_tiling=True: with dynamic dims IREE's data tiling needs the dim "
                         "ranges anyshape-lower states (wrong results without them); add "
                         "anyshape-lower to passes or use data_tiling=False")
    archive = stages.workdir / ARCHIVE if compilation.weights is not None else None
    passes_output = stages.last_file
    facts = iree_input_stage.states_dim_facts(target) and has_dim_facts(module)
    iree_input = iree_input_stage.write_iree_input(compilation, stages, module, archive, source=passes_output)
    del module
    report(f"compiling with IREE for {target.name} ({target.opt_level}"
           f"{', data tiling' if target.data_tiling else ''})")
    started = time.monotonic()
    cpu = target.name == "cpu"

    def made(with_facts: bool) -> Callable[[list[str]], Build]:
        return lambda flags: Build(tuple(flags), bool(target.data_tiling), False, with_facts)

    flags = iree_flags(target)
    # A CPU module's weights are written packed, as its initializers would
    # pack them at each load (runtime/parameter_encoding.py); CUDA's encoder
    # would need a GPU to run at compile time.
    encoder = stages.workdir / ENCODER if archive is not None and cpu else None
    # Started here, not in the encoder's run, where a thread count the process
    # already runs with another would read as IREE failing to run the encoder.
    device = cpu_device(compilation.threads) if encoder is not None else None
    # The last build's packing, where its encoder packed the weights: its
    # layout, and the weights its module reads as they are
    packed: list[tuple[str, list[str]]] = []

    def encode(built_encoder: Path, build_layout: str, reads: list) -> None:
        report(f"  packing the weights into {archive.name} (runtime/parameter_encoding.py)")
        kept = [key for scope, key in reads if scope == PARAMETER_SCOPE]
        stages.encode_deferred_archive(built_encoder, build_layout, device, kept)
        packed.append((build_layout, kept))

    def build(iree_input: Path, flags: list[str]) -> Path:
        nonlocal encoder
        packed.clear()
        try:
            return compile_with_iree(iree_input, flags, dump_ir_dir, report, cpu,
                                     meanwhile=stages.write_deferred_archive, encoder=encoder,
                                     encode=encode)
        except EncoderFailed as failure:
            # The floor is the module without the encoder: it packs at load.
            warnings.warn(PackedWeightsFallback(
                f"the encoder that packs the weights could not be built or run "
                f"({failure.error}); the module packs them when it loads instead"))
            encoder = None
            return compile_with_iree(iree_input, flags, dump_ir_dir, report, cpu,
                                     meanwhile=stages.write_deferred_archive)

    def compile_iree(iree_input: Path, with_facts: bool) -> Path:
        nonlocal flags  # without peeling once, without it in the retry too
        vmfb, flags = without_peeling(lambda flags: build(iree_input, flags), flags,
                                      made(with_facts), report, dump_ir_dir)
        return vmfb

    def without_facts() -> Path:
        module = parse_module(passes_output.read_bytes(), new_context())
        # (target.data_tiling is off here: with it, the failure was raised above)
        retry = iree_input_stage.write_iree_input(compilation, stages, module, archive,
                                                  source=passes_output, dim_facts=False)
        del module
        return compile_iree(retry, False)

    def keep_retry() -> None:
        stages.files[IREE_INPUT_STAGE] = stages.files.pop(stages.last_stage)

    vmfb_path = without_dim_facts(
        lambda: compile_iree(iree_input, facts), without_facts, made(facts)(flags), report,
        dump_ir_dir, stages.forget_last, keep_retry)
    if not packed:
        stages.write_deferred_archive()  # where no iree-compile run wrote it
    seconds = {**stages.seconds, IREE_COMPILE_STAGE: time.monotonic() - started}
    return CompiledModule(vmfb_path, signature, target, iree_flags=flags, versions=versions(),
                          cpu=dataclasses.asdict(resolve_cpu(target.cpu)) if cpu else None,
                          stage_files=stages.files, stage_text=stage_text,
                          workdir=compilation.workdir, entry=compilation.entry,
                          parameters_path=archive, stage_seconds=seconds,
                          encoder_path=encoder if packed else None,
                          parameter_layout=packed[0][0] if packed else None,
                          parameters_by_name=packed[0][1] if packed else (),
                          parameter_specs=stages.parameter_specs)


def input_positions(signature: ModuleSignature, names: Sequence[str]) -> list[int]:
    """Where the inputs ``names`` are among the function's arguments."""
    order = [spec.name for spec in signature.inputs]
    return [order.index(name) for name in names]


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
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
