"""Running a compiled artifact: argument checks, the IREE runtime, save and load.

Only torch, numpy and iree-base-runtime are needed here: a saved artifact runs
on a machine without torch-mlir or the IREE compiler.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from anyshape.runtime import index_bounds, size_conditions
from anyshape.runtime.archive_pages import check_progress, mapped_archive, mapping_progress
from anyshape.runtime.host_arrays import host_tensor
from anyshape.errors import RunError
from anyshape.runtime.host_cpu import check_runs_here
from anyshape.runtime.parameter_encoding import (ENCODED_SCOPE, ENCODER, check_archive,
                                                 create_archive_file, encode_parameters)
from anyshape.runtime.target import Target
from anyshape.runtime.signature import (SCHEMA_VERSION, ModuleSignature, TensorSpec, decode_tree,
                                        flatten_argument)
from anyshape.stages import Workaround

MANIFEST = "manifest.json"
VMFB = "module.vmfb"
PARAMETERS = "params.irpa"   # params="external": the weights (iree/parameters.py)
PARAMETER_SCOPE = "model"
ARTIFACT_FORMAT = "anyshape-artifact"


class CompiledModule:
    """A compiled model: call it like the original module with torch tensors or numpy arrays.

    Returns torch tensors in the model's output structure. ``stages`` and
    ``ir(stage)`` show the IR after each compile stage (compile-time only).
    """

    def __init__(self, vmfb_path: str | os.PathLike, signature: ModuleSignature, target: Target,
                 *, iree_flags: Sequence[str] = (), versions: dict | None = None,
                 stage_files: Mapping[str, Path] | None = None,
                 stage_text: Callable[[Path, str], str] | None = None, workdir: Any = None,
                 entry: str = "main", threads: int | None = None,
                 parameters_path: str | os.PathLike | None = None,
                 stage_seconds: dict[str, float] | None = None,
                 parameter_specs: dict[str, dict] | None = None, cpu: dict | None = None,
                 encoder_path: str | os.PathLike | None = None,
                 parameter_layout: str | None = None,
                 parameters_by_name: Sequence[str] = ()):
        self.threads = check_threads(threads)
        self.signature = signature
        self.target = target
        self.iree_flags = list(iree_flags)
        self.versions = dict(versions or {})
        # target="cpu": the CPU the code is for and its features (iree/cpu.py's
        # CpuTarget as a dict); None for CUDA and for artifacts saved before this
        self.cpu = dict(cpu) if cpu else None
        self._vmfb_path = Path(vmfb_path)
        # The IREE parameter archive the weights live in (params="external"), or None.
        self.parameters_path = Path(parameters_path) if parameters_path is not None else None
        # The module that writes them packed (runtime/parameter_encoding.py):
        # the archive then holds them as that encoder wrote them, in the
        # compile's parameter_layout, not by name; None: by name, as the model
        # holds them.
        self.encoder_path = Path(encoder_path) if encoder_path is not None else None
        self.parameter_layout = parameter_layout
        # The weights the packed module still reads as they are, by name, from
        # the same archive: those IREE's encoder left packed at load
        # (iree/parameter_reads.py).
        self.parameters_by_name = list(parameters_by_name)
        # name -> {"shape", "dtype"} of each parameter the module reads (None: not
        # recorded; an artifact saved before they were)
        self.parameter_specs = dict(parameter_specs) if parameter_specs is not None else None
        # compile time per stage (export, import, each pass, iree-input, iree-compile);
        # empty for a loaded module
        self.stage_seconds = dict(stage_seconds or {})
        self._entry = entry
        # stage -> its file (a compile's pass stages are made again when looked up)
        self._stage_files = stage_files if stage_files is not None else {}
        # (stage file, stage) -> its MLIR text: the compiler's reader, given by
        # the driver that wrote them (the runtime has no MLIR bindings)
        self._stage_text = stage_text
        self._workdir = workdir  # keeps a TemporaryDirectory alive with the module
        # What the load shows as it maps the weights: load's ``progress``; a
        # compile's module shows nothing (the compile's progress is its own)
        self.load_progress = False
        self._functions = {}  # entry name -> IREE function, from _context
        self._context = None  # the IREE SystemContext that owns _functions
        self.cuda_ordinal: int | None = None  # load(device="cuda:N"); None: the first device
        # A module from the compile cache: compiles it again, for its stages, when
        # they are first asked for (compiler.compile)
        self.stage_source: Callable[[], "CompiledModule"] | None = None

    # -- introspection -------------------------------------------------------
    @property
    def stages(self) -> list[str]:
        self._compile_stages_again()
        return list(self._stage_files)

    def _compile_stages_again(self) -> None:
        if self._stage_files or self.stage_source is None:
            return
        fresh = self.stage_source()
        self._stage_files, self._workdir = fresh._stage_files, fresh._workdir
        self._stage_text = fresh._stage_text
        self.stage_source = None

    def stage_file(self, stage: str) -> Path:
        """The bytecode file of ``stage`` (as ``ir(stage)`` reads it)."""
        self._compile_stages_again()
        if not self._stage_files:
            raise ValueError("this module was loaded from disk: its compile stages were not saved")
        if stage not in self._stage_files:
            raise ValueError(f"stage: expected one of {', '.join(self.stages)}, got '{stage}'")
        return self._stage_files[stage]

    def ir(self, stage: str) -> str:
        """MLIR text after ``stage`` (weights by name only before ``iree-input``)."""
        path = self.stage_file(stage)
        return self._stage_text(path, stage)

    @property
    def vmfb_path(self) -> Path:
        return self._vmfb_path

    @property
    def vmfb(self) -> bytes:
        return self._vmfb_path.read_bytes()

    # -- running -------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        given = bind_arguments(self.signature, args, kwargs)
        arrays = check_arguments(self.signature, given)
        entry = self._entry
        if len(arrays) == len(self.signature.inputs) and self.signature.padding_dense_entry:
            entry = self.signature.padding_dense_entry  # no padding to eliminate
        writes = self.signature.input_writes
        if writes and self.target.in_place_writes:
            # The module writes these inputs into the buffers it is given
            # (BackendOptions.in_place_writes): device copies, read back below.
            order = [spec.name for spec in self.signature.inputs]
            positions = [order.index(name) for name in writes]
            arrays = list(arrays)
            for position, array in zip(positions, self.device_arrays([arrays[p] for p in positions])):
                arrays[position] = array
            results = [arrays[p] for p in positions] + self._invoke(entry, arrays)
        else:
            results = self._invoke(entry, arrays)
        inputs = {spec.name: spec for spec in self.signature.inputs}
        dtypes = [inputs[name].dtype for name in writes] + \
            [spec.dtype for spec in self.signature.outputs if spec.python != "constant"]
        tensors = [host_tensor(np.array(r.to_host() if hasattr(r, "to_host") else r), dtype)
                   for r, dtype in zip(results, dtypes)]
        for name, value in zip(writes, tensors):
            _write_back(given[name], value)
        # Outputs where the inputs were: on the (first) device of the torch tensors
        # passed, on the host for host tensors and numpy arrays.
        device = next((v.device for v in (*args, *kwargs.values())
                       if isinstance(v, torch.Tensor) and v.device.type != "cpu"), None)
        computed = iter(tensors[len(writes):])
        leaves = []
        for spec in self.signature.outputs:
            if spec.python == "constant":
                leaves.append(spec.value)
            elif spec.python:
                leaves.append(next(computed).item())  # int, float or bool, as eager returns
            else:
                tensor = next(computed)
                leaves.append(tensor.to(device) if device is not None else tensor)
        return decode_tree(self.signature.output_tree, leaves)

    def invoke(self, arrays: Sequence, entry: str | None = None) -> list:
        """The entry function (or the function ``entry``, one that ``compile``'s
        ``entries`` added) on ``arrays`` (host arrays in the signature's input
        order, or IREE device arrays an earlier call returned), with no argument
        checks; returns IREE's results as they are (device arrays: ``to_host()``
        copies one to the host). For a caller that keeps results on the device
        between calls and checks its own inputs (``anyshape.generation``).
        With ``in_place_writes``, the inputs the module updates must be device
        arrays (``device_arrays``): the update is written into them, and is not
        among the results."""
        if self.target.in_place_writes and self.signature.input_writes:
            import iree.runtime as rt

            order = [spec.name for spec in self.signature.inputs]
            for name in self.signature.input_writes:
                position = order.index(name)
                if position < len(arrays) and not isinstance(arrays[position], rt.DeviceArray):
                    raise TypeError(f"{name}: this module writes it in place, so it must be a "
                                    f"device array (CompiledModule.device_arrays), got "
                                    f"{type(arrays[position]).__name__}, whose update would "
                                    f"be lost")
        return self._invoke(entry or self._entry, arrays)

    def device_arrays(self, arrays: Sequence) -> list:
        """Host arrays copied to the module's device (IREE device arrays), for
        ``invoke``: a module compiled with ``in_place_writes`` writes the inputs
        it updates into the device arrays it is given."""
        import iree.runtime as rt

        self._load_function()
        device = self._context.config.device
        return [rt.asdevicearray(device, np.ascontiguousarray(array)) for array in arrays]

    def move_rows(self, arrays: Sequence, moves: Sequence[tuple[int, int]],
                  scratch: Sequence) -> None:
        """For each ``(i, j)`` in ``moves``, row ``i`` (along dim 0) of each of
        the device ``arrays`` becomes the row ``j`` it held before: copies by
        the device itself (the HAL's buffer copies; nothing reaches the host),
        through ``scratch`` (device arrays of the same shapes), done when this
        returns. A beam search's reordering of its cache."""
        gather, scatter = [], []
        for array, spare in zip(arrays, scratch, strict=True):
            source, temporary = _buffer(array), _buffer(spare)
            row = _byte_length(array) // array.shape[0]
            for i, j in moves:
                gather.append((source, temporary, j * row, i * row, row))
                scatter.append((temporary, source, i * row, i * row, row))
        # The scatter starts when the gather is done: a row may be read by
        # one move and written by another.
        self._copy_on_device([gather, scatter])

    def copy_rows(self, arrays: Sequence, targets: Sequence,
                  pairs: Sequence[tuple[int, int]]) -> None:
        """For each ``(i, j)`` in ``pairs``, row ``i`` (along dim 0) of each of
        the device ``arrays`` into row ``j`` of the matching device array of
        ``targets``, whose rows are of the same shape: copies by the device
        itself. A prompt's cache, computed once, into each of its beams' rows."""
        copies = []
        for array, target in zip(arrays, targets, strict=True):
            if tuple(array.shape[1:]) != tuple(target.shape[1:]):
                raise ValueError(f"copy_rows: rows of {tuple(array.shape)} do not fit "
                                 f"{tuple(target.shape)}")
            row = _byte_length(array) // array.shape[0]
            source, destination = _buffer(array), _buffer(target)
            copies += [(source, destination, i * row, j * row, row) for i, j in pairs]
        self._copy_on_device([copies])

    def copy_slots(self, arrays: Sequence, larger: Sequence, slots: int) -> None:
        """The first ``slots`` slots (dim 2) of each of the device ``arrays``
        ([rows, heads, slots, width]) into ``larger``, device arrays of the same
        shapes but more slots, by the device's own copies: a cache that grows."""
        copies = []
        for array, target in zip(arrays, larger, strict=True):
            rows, heads, capacity, width = array.shape
            if tuple(target.shape[:2]) != (rows, heads) or target.shape[3] != width \
                    or target.shape[2] < slots or capacity < slots:
                raise ValueError(f"copy_slots: {slots} slots of {tuple(array.shape)} do not "
                                 f"fit {tuple(target.shape)}")
            item = _byte_length(array) // (rows * heads * capacity * width)
            source, destination = _buffer(array), _buffer(target)
            for block in range(rows * heads):
                copies.append((source, destination, block * capacity * width * item,
                               block * target.shape[2] * width * item, slots * width * item))
        self._copy_on_device([copies])

    def copy_slot_runs(self, arrays: Sequence, targets: Sequence,
                       runs: Sequence[tuple[int, int, int, int, int]]) -> None:
        """For each ``(row, slot, target_row, target_slot, count)`` in ``runs``,
        slots ``slot`` to ``slot + count`` (dim 2) of ``row`` of each of the
        device ``arrays`` ([rows, heads, slots, width]) into ``target_slot``
        onward of ``target_row`` of the matching array of ``targets`` (same
        heads and width; an array may be its own target where the runs do not
        overlap), every head's: copies by the device itself. A request's
        prompt, computed alone, into its row of a batch's cache."""
        copies = []
        for array, target in zip(arrays, targets, strict=True):
            rows, heads, capacity, width = array.shape
            target_rows, target_heads, target_capacity, target_width = target.shape
            if (heads, width) != (target_heads, target_width):
                raise ValueError(f"copy_slot_runs: slots of {tuple(array.shape)} do not fit "
                                 f"{tuple(target.shape)}")
            item = _byte_length(array) // (rows * heads * capacity * width)
            source, destination = _buffer(array), _buffer(target)
            for row, slot, target_row, target_slot, count in runs:
                if not (0 <= row < rows and 0 <= target_row < target_rows and count >= 0
                        and 0 <= slot and slot + count <= capacity
                        and 0 <= target_slot and target_slot + count <= target_capacity):
                    raise ValueError(f"copy_slot_runs: {count} slots from row {row} slot {slot} "
                                     f"of {tuple(array.shape)} to row {target_row} slot "
                                     f"{target_slot} of {tuple(target.shape)} fall outside them")
                for head in range(heads if count else 0):
                    copies.append((source, destination,
                                   ((row * heads + head) * capacity + slot) * width * item,
                                   ((target_row * heads + head) * target_capacity + target_slot)
                                   * width * item, count * width * item))
        if copies:
            self._copy_on_device([copies])

    def _copy_on_device(self, stages: Sequence[Sequence[tuple]]) -> None:
        """Each stage's ``(source, target, source_offset, target_offset,
        length)`` buffer copies, as one command buffer that starts when the
        stage before it is done; returns when the last is."""
        import iree.runtime as rt

        self._load_function()
        device = self._context.config.device
        done = device.create_semaphore(0)
        for number, copies in enumerate(stages):
            commands = rt.HalCommandBuffer(device, begin=True)
            for source, target, source_offset, target_offset, length in copies:
                commands.copy(source, target, source_offset, target_offset, length)
            commands.end()
            device.queue_execute(commands,
                                 wait_semaphores=rt.HalFence.create_at(done, number),
                                 signal_semaphores=rt.HalFence.create_at(done, number + 1))
        rt.HalFence.create_at(done, len(stages)).wait()

    def _invoke(self, entry: str, arrays: Sequence) -> list:
        function = self._load_function(entry)
        try:
            results = function(*arrays)
        except (RuntimeError, ValueError, IndexError, OSError) as error:
            raise _run_error(f"@{entry}", self.signature, arrays, error) from None
        if results is None:
            return []
        return list(results) if isinstance(results, (tuple, list)) else [results]

    def _load_function(self, entry: str | None = None):
        """The module's function ``entry`` (default: its entry), in one context
        loaded on first use."""
        if self._context is None:
            import iree.runtime as rt

            if self.target.driver == "cuda" and not cuda_available():
                raise RuntimeError("this module was compiled for CUDA, and no CUDA device is "
                                   "available here (IREE's cuda driver found none)")
            if self.target.driver == "local-task":
                check_runs_here(self.cpu, str(self._vmfb_path))
                use_cpu_threads(self.threads)
            if self.cuda_ordinal is not None:
                config = rt.Config(device=rt.get_device(f"cuda://{self.cuda_ordinal}"))
            else:
                config = rt.Config(self.target.driver)
            context = rt.SystemContext(config=config)
            if self.parameters_path is not None:
                context.add_vm_module(self._parameters_module(rt, config))
            # mmap: a roberta-base artifact is ~500 MB of weights; no copy into memory.
            vm_module = rt.VmModule.mmap(config.vm_instance, str(self._vmfb_path))
            context.add_vm_module(vm_module)
            self._context = context
            self._vm_module_name = vm_module.name
        entry = entry or self._entry
        if entry not in self._functions:
            self._functions[entry] = getattr(self._context.modules, self._vm_module_name)[entry]
        return self._functions[entry]

    def preload(self) -> bool:
        """Load the module into its IREE context now, where it can run here (a
        CPU module, or a CUDA one with a CUDA device; its parameter archive,
        if it has one, present), rather than in its first call: IREE runs the
        module's initializers as it joins the context (each weight read from
        the archive and packed for data tiling), which made a first call
        many times slower than the next. Returns whether it loaded."""
        if self.target.driver == "cuda" and not cuda_available():
            return False
        if self.parameters_path is not None and not self.parameters_path.is_file():
            return False  # the first call names the missing archive (write_parameters may add it)
        self._load_function()
        return True

    def _parameters_module(self, rt, config):
        if not self.parameters_path.is_file():
            raise FileNotFoundError(f"{self.parameters_path}: the parameter archive this "
                                    f"module's weights are in is missing")
        if self.encoder_path is not None:
            # Before the load maps and touches every page: refused at once,
            # however big. Its index unmapped again, so that mapped_archive
            # may drop the archive's small pages from the page cache.
            header = rt.ParameterIndex()
            header.load(str(self.parameters_path))
            check_archive(header, self.parameters_path, self.parameter_layout)
            del header
        index = rt.ParameterIndex()
        if self.target.driver == "local-task":
            # The CPU module reads its weights where they are mapped, every
            # page mapped now: its first call would otherwise fault them in
            # page by page.
            pages = mapped_archive(self.parameters_path, mapping_progress(
                self.load_progress, self.parameters_path, self.parameters_path.stat().st_size))
            index.load_from_file_handle(  # the handle keeps the mapping
                rt.FileHandle.wrap_memory(pages, readable=True, writable=False), "irpa")
        else:
            index.load(str(self.parameters_path))  # mapped, not read into memory
        if self.encoder_path is None:
            return rt.create_io_parameters_module(
                config.vm_instance, index.create_provider(scope=PARAMETER_SCOPE))
        return rt.create_io_parameters_module(
            config.vm_instance, index.create_provider(scope=ENCODED_SCOPE),
            *([index.create_provider(scope=PARAMETER_SCOPE)] if self.parameters_by_name else []))

    # -- persistence ---------------------------------------------------------
    def save(self, directory: str | os.PathLike) -> Path:
        """Write ``module.vmfb`` and ``manifest.json`` into ``directory`` (and
        ``params.irpa`` for a module compiled with ``params="external"``, and
        ``encoder.vmfb``, which writes it, where the weights are packed)."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        if (out / VMFB).resolve() != self._vmfb_path.resolve():
            shutil.copyfile(self._vmfb_path, out / VMFB)
        if self.parameters_path is not None and \
                (out / PARAMETERS).resolve() != self.parameters_path.resolve():
            shutil.copyfile(self.parameters_path, out / PARAMETERS)
        if self.encoder_path is not None and \
                (out / ENCODER).resolve() != self.encoder_path.resolve():
            shutil.copyfile(self.encoder_path, out / ENCODER)
        manifest = {
            "format": ARTIFACT_FORMAT,
            "schema": SCHEMA_VERSION,
            "vmfb": VMFB,
            "parameters": PARAMETERS if self.parameters_path is not None else None,
            "parameter_specs": self.parameter_specs,
            "parameter_encoder": ENCODER if self.encoder_path is not None else None,
            "parameter_layout": self.parameter_layout,
            "parameters_by_name": self.parameters_by_name,
            "entry": self._entry,
            "target": self.target.to_json(),
            "cpu": self.cpu,
            "iree_flags": self.iree_flags,
            "versions": self.versions,
            **self.signature.to_json(),
        }
        (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        return out


def load(directory: str | os.PathLike, *, threads: int | None = None,
         device: str | None = None, progress=None) -> CompiledModule:
    """Load an artifact written by ``CompiledModule.save`` (or ``Generator.save``:
    then a ``Generator`` comes back); ``threads``: as for
    ``anyshape.compile``. ``device``: where it runs, which must be what it was
    compiled for: "cpu", or "cuda" (the first CUDA device) or "cuda:N";
    None: the default device of its target. ``progress``: how the mapping of
    a CPU module's weights is shown (runtime/archive_pages.py): None, a bar
    on a terminal for an archive of 1 GiB or more; else as for
    ``anyshape.compile``."""
    check_progress(progress)
    path = Path(directory)
    module = read_artifact(path, threads=threads, device=device)
    module.load_progress = progress
    from anyshape.runtime.generator import GENERATOR_FILE, load_generator

    if (path / GENERATOR_FILE).is_file():
        # A generator is loaded now, not in its first generate (Generator.preload).
        # A plain module stays unloaded until its first call (its preload() loads
        # it): an artifact loads for its signature and checks without IREE.
        generator = load_generator(path, module)
        generator.preload()
        return generator
    return module


def read_artifact(path: Path, *, threads: int | None = None,
                  device: str | None = None) -> CompiledModule:
    """The compiled module of the artifact in ``path``, not loaded into IREE."""
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{path}: no {MANIFEST}; not an anyshape artifact directory")
    try:
        manifest = json.loads(manifest_path.read_text())
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{manifest_path}: expected the JSON of an anyshape manifest, got "
                         f"unreadable text ({error})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != ARTIFACT_FORMAT or \
            manifest.get("schema") != SCHEMA_VERSION:
        got = f"{manifest.get('format')} schema {manifest.get('schema')}" \
            if isinstance(manifest, dict) else f"a JSON {type(manifest).__name__}"
        raise ValueError(f"{manifest_path}: expected format {ARTIFACT_FORMAT} schema "
                         f"{SCHEMA_VERSION}, got {got}")
    try:
        target = Target.from_json(manifest["target"])
        signature = ModuleSignature.from_json(manifest)
        vmfb, entry = path / manifest["vmfb"], manifest["entry"]
    except (KeyError, TypeError) as error:
        raise ValueError(f"{manifest_path}: expected a complete anyshape manifest, got one whose "
                         f"fields do not fit ({type(error).__name__}: {error})") from None
    if not vmfb.is_file():
        raise FileNotFoundError(f"{vmfb}: the compiled module this artifact's manifest names "
                                f"is missing")
    cuda_ordinal = _check_device(device, target, path)
    check_runs_here(manifest.get("cpu"), str(path))
    module = CompiledModule(
        vmfb,
        signature,
        target,
        iree_flags=manifest.get("iree_flags", ()),
        versions=manifest.get("versions"),
        entry=entry,
        threads=threads,
        parameters_path=path / manifest["parameters"] if manifest.get("parameters") else None,
        parameter_specs=manifest.get("parameter_specs"),
        cpu=manifest.get("cpu"),
        encoder_path=path / manifest["parameter_encoder"]
        if manifest.get("parameter_encoder") else None,
        parameter_layout=manifest.get("parameter_layout"),
        parameters_by_name=manifest.get("parameters_by_name") or (),
    )
    module.cuda_ordinal = cuda_ordinal
    return module


def write_parameters(directory: str | os.PathLike, weights, *, threads: int | None = None) -> Path:
    """Write the weights of an artifact compiled with ``params="external"``: its
    ``params.irpa`` from ``weights``, a ``torch.nn.Module`` (its parameters and
    buffers by state name, as the compile named them; a tied tensor under each
    of its names) or a dict of name -> tensor or array. Every parameter the
    module reads must be there, with the shape and dtype it was compiled for;
    other entries are left out. Needs only the runtime's packages, so that an
    artifact can travel without its weights and get them where it runs (the
    CUDA benchmark's recipe), or take fine-tuned weights of the same shapes.
    A CPU module's weights are packed as they are written, by its encoder
    (``encoder.vmfb``), on ``threads`` CPU threads (as for ``load``)."""
    # Read, not loaded: the archive there may be missing, or another module's.
    module = read_artifact(Path(directory))
    if module.parameters_path is None:
        raise ValueError(f"directory: {directory} holds its weights inside its .vmfb "
                         f"(compiled with params='inline'); only an artifact compiled with "
                         f"params='external' reads them from {PARAMETERS}")
    if module.parameter_specs is None:
        raise ValueError(f"directory: {directory}'s manifest lists no parameter shapes "
                         f"(saved by an earlier anyshape); compile it again to rewrite them")
    if isinstance(weights, torch.nn.Module):
        weights = {**dict(weights.named_parameters(remove_duplicate=False)),
                   **dict(weights.named_buffers(remove_duplicate=False))}
    arrays = {}
    for name, spec in module.parameter_specs.items():
        if name not in weights:
            raise ValueError(f"weights: expected a tensor named '{name}' (shape "
                             f"{tuple(spec['shape'])}, {spec['dtype']}), got none by that name")
        value = weights[name]
        array = (value.detach().cpu().contiguous().numpy() if isinstance(value, torch.Tensor)
                 else np.asarray(value))
        if list(array.shape) != list(spec["shape"]) or str(array.dtype) != spec["dtype"]:
            raise ValueError(f"weights: '{name}' expected shape {tuple(spec['shape'])} "
                             f"{spec['dtype']}, got shape {tuple(array.shape)} {array.dtype}")
        arrays[name] = array
    if module.encoder_path is None:
        write_archive(module.parameters_path, arrays)
    elif not module.encoder_path.is_file():
        raise FileNotFoundError(f"{module.encoder_path}: the encoder that packs this module's "
                                f"weights is missing")
    else:
        encode_parameters(module.encoder_path, arrays, PARAMETER_SCOPE, module.parameters_path,
                          module.parameter_layout, cpu_device(check_threads(threads)),
                          by_name=module.parameters_by_name)
    return module.parameters_path


def write_archive(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """An IREE parameter archive (``.irpa``) holding ``arrays`` by name."""
    import iree.runtime as rt

    index = rt.ParameterIndex()
    for name, array in arrays.items():
        index.add_buffer(name, np.ascontiguousarray(array).view(np.uint8).reshape(-1))
    create_archive_file(index, path)


def _check_device(device: str | None, target: Target, path: Path) -> int | None:
    """The CUDA device ordinal ``device`` names (None: the default device)."""
    if device is None:
        return None
    kind, _, ordinal = str(device).partition(":")
    if kind not in ("cpu", "cuda") or (ordinal and (kind == "cpu" or not ordinal.isdigit())):
        raise ValueError(f"device: expected 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    if kind != target.name:
        raise ValueError(f"device: {path} was compiled for {target.name}, so it runs on "
                         f"{target.name}, not {device!r} (compile with target='{kind}' to run "
                         f"there)")
    return int(ordinal) if ordinal else None


# IREE's CPU driver starts its worker threads when it is first used and keeps
# them for the life of the process (the driver is cached), so the thread count
# is fixed by the first CPU module that runs.
_cpu_threads_in_use: int | None = None


def available_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def check_threads(threads: int | None) -> int | None:
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads: expected a positive int (or None: all {available_cores()} "
                         f"cores), got {threads!r}")
    return threads


def cpu_device(threads: int | None):
    """IREE's CPU device, its workers started with ``threads`` (``use_cpu_threads``)."""
    import iree.runtime as rt

    use_cpu_threads(threads)
    return rt.get_device("local-task")


def use_cpu_threads(threads: int | None) -> None:
    """Start IREE's CPU workers with ``threads`` (None: one per available core),
    or check that the running ones match."""
    global _cpu_threads_in_use
    wanted = threads or available_cores()
    if _cpu_threads_in_use is None:
        import iree.runtime as rt

        rt.flags.parse_flags(f"--task_topology_group_count={wanted}")
        _cpu_threads_in_use = wanted
    elif _cpu_threads_in_use != wanted:
        raise ValueError(f"threads: this process already runs CPU modules with "
                         f"{_cpu_threads_in_use} threads (IREE's CPU driver keeps the count it "
                         f"started with), got {wanted}; use one count per process")


def cuda_available() -> bool:
    """Whether IREE's cuda driver can see a device here (libcuda and a GPU)."""
    import iree.runtime as rt

    try:
        return bool(rt.get_driver("cuda").query_available_devices())
    except (RuntimeError, ValueError, OSError):
        return False


# -- argument checks ---------------------------------------------------------

def _run_error(function: str, signature: ModuleSignature, arrays: list[np.ndarray],
               error: Exception) -> RunError:
    """What failed, on what: IREE's message reads "Error invoking function:
    c/runtime/src/...c:47: OUT_OF_RANGE; ...; while calling import;" and a
    VM stack ("[ 0] bytecode module@1:64 -") that names nothing of the model."""
    iree = iree_message(str(error))
    shapes = ", ".join(f"{spec.name} {array.dtype} {tuple(array.shape)}"
                       for spec, array in zip(signature.inputs, arrays))
    hint = ""
    mismatch = re.search(r"actual shape `([\dx]+)`", iree)
    if mismatch:
        actual = tuple(int(d) for d in mismatch.group(1).split("x"))
        named = [spec.name for spec, array in zip(signature.inputs, arrays)
                 if tuple(array.shape) == actual]
        if named:
            hint = f" (the shape of argument '{named[0]}' against what the module was compiled for)"
    return RunError(f"{function} failed at run time with inputs {shapes or 'none'}: "
                    f"{iree}{hint}", iree)


def iree_message(text: str) -> str:
    """IREE's own words of a run-time failure: its status and message, less the
    source paths, the native-function trail and the VM stack."""
    text = text.split("\n[", 1)[0].strip()
    text = re.sub(r"^Error invoking function:\s*", "", text)
    text = re.sub(r"(^|;\s*)(c/[\w/.-]+\.c:\d+|<vm>:\d+):\s*", r"\1", text)
    text = re.sub(r";\s*while (invoking native function|calling import)[^;]*", "", text)
    return text.strip().rstrip(";").strip()


def bind_arguments(signature: ModuleSignature, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Call arguments by input name, all of them given once. An argument the
    model took as a list, tuple or dict of tensors (``signature.input_tree``) is
    passed as one, or as its tensors by their own names."""
    names = [s.name for s in signature.inputs]
    nested = signature.input_tree
    owner = {leaf: name for name, group in nested.items() for leaf in group["leaves"]}
    params = list(dict.fromkeys(owner.get(name, name) for name in names))
    if len(args) > len(params):
        raise ValueError(f"expected at most {len(params)} arguments ({', '.join(params)}), "
                         f"got {len(args)}")
    given: dict[str, Any] = dict(zip(params, args))
    for key, value in kwargs.items():
        if key not in params and key not in names:
            raise ValueError(f"unexpected argument '{key}': this module takes {', '.join(params)}")
        if key in given or owner.get(key) in given:
            raise ValueError(f"argument '{key}' given both by position and by name")
        given[key] = value
    for name, group in nested.items():
        if name in given:
            leaves = flatten_argument(name, group["tree"], given.pop(name))
            given.update(zip(group["leaves"], leaves))
    missing = [n for n in names if n not in given]
    if missing:
        raise ValueError(f"missing argument(s) {', '.join(missing)}: this module takes "
                         f"{', '.join(params)}")
    return given


def _write_back(target, value: torch.Tensor) -> None:
    """An input the model updates in place gets its new value, as in eager."""
    if isinstance(target, torch.Tensor):
        with torch.no_grad():
            target.copy_(value)
    else:
        np.copyto(target, value.numpy())


def check_arguments(signature: ModuleSignature, given: dict[str, Any]) -> list[np.ndarray]:
    """Check the arguments ``bind_arguments`` matched to the signature; return
    host arrays in order."""
    specs = signature.inputs
    arrays = [_to_array(spec, given[spec.name]) for spec in specs]
    _check_shapes(signature, specs, arrays)
    index_bounds.check_index_values(signature.index_bounds, [spec.name for spec in specs], arrays)
    if signature.padding_mask is not None:
        mask = arrays[[spec.name for spec in specs].index(signature.padding_mask)]
        indices = padding_indices(signature.padding_mask, mask)
        if signature.padding_dense_entry is None or not np.all(mask != 0):
            arrays += indices
    return arrays


def padding_indices(name: str, mask: np.ndarray) -> list[np.ndarray]:
    """What a module compiled with ``padding="eliminate"`` takes besides the
    inputs: ``tokens``, the flat positions of the real tokens (mask 1), in
    order, and ``slots``, each position's row among them (a padded position:
    the row before it, any row will do). A batch without a real token still
    computes one row (position 0), which no output reads."""
    if mask.ndim != 2:
        raise ValueError(f"argument '{name}': expected a [batch, length] mask, got shape "
                         f"{tuple(mask.shape)}")
    real = mask != 0
    stray = np.argwhere(real & (mask != 1))
    if stray.size:
        at = tuple(int(i) for i in stray[0])
        raise ValueError(f"argument '{name}': padding elimination expects 0 (padding) or 1 "
                         f"(token) in the attention mask, got {mask[at].item()!r} at {list(at)}")
    flat = real.reshape(-1)
    tokens = np.flatnonzero(flat).astype(np.int64)
    if tokens.size == 0:
        tokens = np.zeros(1, dtype=np.int64)
    slots = np.maximum(np.cumsum(flat, dtype=np.int64) - 1, 0)
    return [tokens, slots]


def _to_array(spec: TensorSpec, value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        received = str(value.dtype).removeprefix("torch.")
        array = _host_array(value) if received == spec.dtype else None
    elif isinstance(value, np.ndarray):
        received = value.dtype.name
        array = np.ascontiguousarray(value) if received == spec.dtype else None
    else:
        raise TypeError(f"argument '{spec.name}': expected a torch.Tensor or numpy.ndarray, "
                        f"got {type(value).__name__}")
    if array is None:
        raise ValueError(f"argument '{spec.name}': expected dtype {spec.dtype}, got {received}")
    if array.ndim != len(spec.dims):
        raise ValueError(f"argument '{spec.name}': expected rank {len(spec.dims)} "
                         f"{spec.render_shape()}, got rank {array.ndim} {tuple(array.shape)}")
    return array


def _host_array(tensor: torch.Tensor) -> np.ndarray:
    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:  # numpy's bfloat16 is ml_dtypes', which IREE reads
        import ml_dtypes

        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


def _check_shapes(signature: ModuleSignature, specs: list[TensorSpec], arrays: list[np.ndarray]) -> None:
    bound: dict[str, tuple[int, str, int]] = {}  # symbol -> (value, argument, dim)
    derived = []
    for spec, array in zip(specs, arrays):
        for axis, (dim, size) in enumerate(zip(spec.dims, array.shape)):
            where = f"argument '{spec.name}' dim {axis}"
            if isinstance(dim, int):
                if size != dim:
                    raise ValueError(f"{where}: expected size {dim} (static), got {size}; "
                                     f"shape {tuple(array.shape)}, expected {spec.render_shape()}")
                continue
            symbol = signature.symbols.get(dim)
            if symbol is None:
                derived.append((where, dim, size))
                continue
            if symbol.min is not None and size < symbol.min or symbol.max is not None and size > symbol.max:
                hint = ("; torch.export gives Dim.AUTO and Dim.DYNAMIC dims a minimum of 2 "
                        "(it assumes sizes 0 and 1 away): export with a named Dim, "
                        "Dim('seq'), to accept 1") if symbol.label is None and \
                    symbol.min == 2 and size < 2 else ""
                raise ValueError(f"{where}: expected a size with {symbol.describe()}, got "
                                 f"{size}{hint}")
            if dim in bound and bound[dim][0] != size:
                value, other, other_axis = bound[dim]
                raise ValueError(f"{where}: must equal argument '{other}' dim {other_axis} "
                                 f"(both are {symbol.describe()}), expected {value}, got {size}")
            bound.setdefault(dim, (size, spec.name, axis))
    for where, expr, size in derived:
        expected = _evaluate(expr, {k: v[0] for k, v in bound.items()})
        if expected is not None and expected != size:
            raise ValueError(f"{where}: expected size {expr} = {expected}, got {size}")
    values = {k: v[0] for k, v in bound.items()}
    labels = {name: s.label for name, s in signature.symbols.items() if s.label}

    def sizes(condition: str) -> str:
        return ", ".join(f"argument '{bound[s][1]}' dim {bound[s][2]} = {bound[s][0]}"
                         for s in bound if re.search(rf"\b{s}\b", condition))

    for condition in signature.conditions:
        if size_conditions.holds(condition, values) is False:
            why = size_conditions.reason(condition) or (
                "a condition of the model: torch._check or a size relation torch.export "
                "recorded")
            raise ValueError(f"arguments: expected sizes with "
                             f"{size_conditions.readable(condition, labels)} ({why}), "
                             f"got {sizes(condition)}")
    index_bounds.check_index_sizes(signature.index_bounds, values, sizes, labels)


def _evaluate(expr: str, values: dict[str, int]) -> int | None:
    import sympy

    result = sympy.sympify(expr).subs(values)
    return int(result) if result.is_number else None


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='signless_results_viewed_as_dtype', stage='runtime',
        where='host_tensor',
        upstream="IREE's buffers are signless: a uint8 result reads back as int8; results are "
                 "viewed as the signature's dtype.",
        guard=('test/python/frontend/test_sorts.py::test_many_sorts_in_one_module_as_eager',
               'test/python/test_opinfo_floor.py::test_floor[byte-float32-4]'),
        remove_when="(inferred) when IREE's runtime returns unsigned element types"),
    Workaround(
        name='cpu_threads_fixed_per_process', stage='runtime',
        where='use_cpu_threads',
        upstream="IREE's CPU driver starts its worker threads when first used and keeps the count"
                 ' for the life of the process (the driver is cached); anyshape sets '
                 '--task_topology_group_count once and refuses a different count.',
        guard='test/python/runtime/test_threads.py::test_threads_sets_the_worker_count',
        remove_when="(inferred) when IREE's local-task driver takes a per-device worker count"),
)


# A DeviceArray's buffer view has no public accessor in iree.runtime.
def _buffer(array):
    return array._buffer_view.get_buffer()


def _byte_length(array) -> int:
    return array._buffer_view.byte_length
