"""A HuggingFace checkpoint directory as a model whose weights are the checkpoint's bytes.

``compile_generator("path/to/hf_dir")`` and ``anyshape-compile --hf-dir DIR``
read a directory written by ``save_pretrained`` (``config.json``, the
``model.safetensors`` file or the shards of ``model.safetensors.index.json``,
``generation_config.json`` where there is one) without loading it:

- The model is built from its config with its parameters on the meta device
  (accelerate's ``init_empty_weights``; buffers are computed as usual: RoPE's
  inverse frequencies are no checkpoint's).
- Each parameter then becomes a view of its bytes in the shard, memory-mapped
  copy-on-write: nothing is read until something reads it, and what is read
  is the kernel's page cache, which it can drop, not the process's memory.
  The export sees the shapes only; the import hands the views over without
  a copy (``importer.py``), and so do the IREE input and the parameter
  archive, which read them tensor by tensor.
- A tensor stored in another dtype than the one compiled (bfloat16 shards
  compiled in float32) is cast one tensor at a time into a scratch file,
  which is mapped the same way and deleted when the last view goes: the
  process holds one tensor's cast at a time, the disk one copy of the
  weights in the compiled dtype.
- Where the compile quantizes the weights (``quantized=True``) and the
  checkpoint is float16 or bfloat16 compiled in float32, the weights of the
  linear layers stay the checkpoint's bytes, and each layer computes with
  its weight cast (a ``torch.nn.utils.parametrize`` of it): the compile
  reads the stored values through that cast as it quantizes each weight
  (``iree/constant_values.py``), so that the linear layers' float32 copy
  (30 of the 32 GB of Llama-3-8B's bfloat16 cast to float32) is never
  written. The other tensors are cast into scratch files as above.

Tied weights (an LM head that is the embedding) are tied as the model ties
them. A parameter the checkpoint lacks, or holds in another shape, is an
error that names it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import mmap
import os
import tempfile
from pathlib import Path

import torch

# safetensors' dtype names (its format's spec: the header's "dtype")
SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
SINGLE_FILE = "model.safetensors"
SHARD_INDEX = "model.safetensors.index.json"
# A cast tensor starts at a multiple of this in the scratch file: every dtype's
# alignment, and a cache line.
_ALIGNMENT = 64


@dataclasses.dataclass(frozen=True)
class StoredTensor:
    """Where a tensor's bytes are: ``file``, from ``start`` (absolute) on."""

    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def checkpoint_files(directory: Path) -> list[Path]:
    """The safetensors files of the checkpoint in ``directory``: its shards (as
    its index names them), or its one file."""
    index = directory / SHARD_INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"checkpoint: {index} is not a safetensors index (a JSON object "
                             f"with a 'weight_map' of tensor names to shard files)") from None
        files = [directory / name for name in sorted(set(weight_map.values()))]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(f"checkpoint: {index} names shards that are not there: "
                                    f"{', '.join(missing)}")
        return files
    if (directory / SINGLE_FILE).is_file():
        return [directory / SINGLE_FILE]
    found = sorted(p.name for p in directory.glob("*.bin")) + \
        sorted(p.name for p in directory.glob("*.safetensors"))
    raise FileNotFoundError(
        f"checkpoint: expected {SINGLE_FILE} or {SHARD_INDEX} in {directory}, found "
        f"{', '.join(found) or 'neither'} (anyshape reads safetensors checkpoints; load another "
        f"with from_pretrained and pass the model)")


def stored_tensors(directory: Path) -> dict[str, StoredTensor]:
    """Every tensor of the checkpoint in ``directory`` by name, read off the
    safetensors headers (an 8-byte little-endian length, then a JSON object of
    each tensor's dtype, shape and byte range after the header)."""
    tensors: dict[str, StoredTensor] = {}
    for file in checkpoint_files(directory):
        size = file.stat().st_size
        with open(file, "rb") as f:
            head = f.read(8)
            length = int.from_bytes(head, "little") if len(head) == 8 else -1
            if not 0 < length <= size - 8:
                raise ValueError(f"checkpoint: {file} is not a safetensors file (its header "
                                 f"length reads {length}, in a file of {size} bytes)")
            try:
                header = json.loads(f.read(length))
            except ValueError:
                raise ValueError(f"checkpoint: {file}'s safetensors header is not JSON") from None
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            dtype = SAFETENSORS_DTYPES.get(entry.get("dtype"))
            if dtype is None:
                raise ValueError(f"checkpoint: {file}, tensor '{name}': dtype "
                                 f"{entry.get('dtype')!r} (anyshape reads "
                                 f"{', '.join(SAFETENSORS_DTYPES)})")
            begin, end = entry["data_offsets"]
            stored = StoredTensor(file, dtype, tuple(entry["shape"]), 8 + length + begin)
            if end - begin != stored.nbytes or 8 + length + end > size:
                raise ValueError(f"checkpoint: {file}, tensor '{name}': {end - begin} bytes at "
                                 f"{begin} for a {entry['dtype']} tensor of shape "
                                 f"{list(stored.shape)} ({stored.nbytes} bytes), in a file of "
                                 f"{size} bytes")
            tensors[name] = stored
    return tensors


class _Mappings:
    """Each file mapped once, copy-on-write: a write to a view (nothing here
    writes one) would change the process's copy of the page, never the file."""

    def __init__(self):
        self._maps: dict[Path, mmap.mmap] = {}

    def view(self, file: Path, start: int, dtype: torch.dtype, shape: tuple[int, ...]):
        if file not in self._maps:
            with open(file, "rb") as f:
                self._maps[file] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        count = math.prod(shape)
        if count == 0:
            return torch.empty(shape, dtype=dtype)
        if start % dtype.itemsize:  # safetensors does not promise alignment: copy that one
            raw = torch.frombuffer(self._maps[file], dtype=torch.uint8,
                                   count=count * dtype.itemsize, offset=start)
            return raw.clone().view(dtype).reshape(shape)
        return torch.frombuffer(self._maps[file], dtype=dtype, count=count,
                                offset=start).reshape(shape)


def _cast_into_scratch(casts: dict[str, tuple[StoredTensor, torch.dtype]],
                       mappings: _Mappings, directory: Path) -> dict[str, torch.Tensor]:
    """``casts`` (name -> the stored tensor and the dtype it is compiled in),
    each cast in turn and written to scratch files in ``directory``, each
    deleted once mapped (its pages live as long as the views). Returns the
    views. A file holds at most ``SCRATCH_FILE_BYTES`` (or one tensor larger
    than that): Linux refuses a copy-on-write mapping larger than the
    machine's memory and swap (the heuristic overcommit's check of one
    request), and Llama-3-8B's weights cast to float32 are 32 GB."""
    needed = sum(_aligned(math.prod(stored.shape) * dtype.itemsize)
                 for stored, dtype in casts.values())
    views: dict[str, torch.Tensor] = {}
    batch: dict[str, tuple[StoredTensor, torch.dtype]] = {}
    size = 0
    for name, (stored, dtype) in casts.items():
        nbytes = _aligned(math.prod(stored.shape) * dtype.itemsize)
        if batch and size + nbytes > SCRATCH_FILE_BYTES:
            views.update(_cast_into_file(batch, mappings, directory, size, needed))
            batch, size = {}, 0
        batch[name] = (stored, dtype)
        size += nbytes
    if batch:
        views.update(_cast_into_file(batch, mappings, directory, size, needed))
    return views


# The most one scratch file of casts holds (``_cast_into_scratch``).
SCRATCH_FILE_BYTES = 2 << 30


def _aligned(nbytes: int) -> int:
    return -(-nbytes // _ALIGNMENT) * _ALIGNMENT


def _cast_into_file(casts: dict[str, tuple[StoredTensor, torch.dtype]], mappings: _Mappings,
                    directory: Path, total: int, needed: int) -> dict[str, torch.Tensor]:
    places, at = {}, 0
    for name, (stored, dtype) in casts.items():
        places[name] = at
        at += _aligned(math.prod(stored.shape) * dtype.itemsize)
    handle, path = tempfile.mkstemp(prefix="anyshape-cast-", suffix=".bin", dir=directory)
    path = Path(path)
    try:
        with os.fdopen(handle, "wb") as out:
            for name, (stored, dtype) in casts.items():
                source = mappings.view(stored.file, stored.start, stored.dtype, stored.shape)
                cast = source.to(dtype).contiguous()
                out.seek(places[name])
                out.write(memoryview(cast.reshape(-1).view(torch.uint8).numpy()))
                del cast
            out.truncate(max(total, 1))
        return {name: mappings.view(path, places[name], dtype, stored.shape)
                for name, (stored, dtype) in casts.items()}
    except OSError as error:
        raise OSError(error.errno, (
            f"cannot write the {needed / 1e9:.1f} GB of weights cast to the compiled dtype to "
            f"{directory}: {error.strerror} (set TMPDIR to a directory with room, or compile "
            f"in the checkpoint's own dtype)"), str(directory)) from error
    finally:
        path.unlink(missing_ok=True)


def checkpoint_dtype(config, stored: dict[str, StoredTensor]) -> torch.dtype:
    """The dtype the checkpoint was saved in: its config's, or else that of most
    of its floating-point bytes."""
    named = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(named, str) and isinstance(getattr(torch, named, None), torch.dtype):
        named = getattr(torch, named)
    if isinstance(named, torch.dtype) and named.is_floating_point:
        return named
    sizes: dict[torch.dtype, int] = {}
    for tensor in stored.values():
        if tensor.dtype.is_floating_point:
            sizes[tensor.dtype] = sizes.get(tensor.dtype, 0) + tensor.nbytes
    return max(sorted(sizes.items(), key=str), key=lambda item: item[1])[0] \
        if sizes else torch.float32


def load_checkpoint(directory, dtype: torch.dtype | None = None,
                    scratch: Path | None = None, quantized: bool = False) -> torch.nn.Module:
    """The model of the HF checkpoint ``directory`` (a causal LM, or an
    encoder-decoder for text), in eval mode, its parameters views of the
    checkpoint's bytes as the module docstring says. ``dtype``: the dtype of
    its floating-point parameters (None: the checkpoint's). ``scratch``: where
    a cast copy goes (None: the temporary directory). ``quantized``: the
    compile quantizes the weights of its linear layers, which then keep the
    checkpoint's dtype where that is float16 or bfloat16 and ``dtype`` is
    float32, each cast where its layer reads it (``_kept_as_stored``)."""
    import accelerate
    import transformers

    path = Path(directory)
    if not path.is_dir():
        raise FileNotFoundError(f"checkpoint: expected a directory written by save_pretrained, "
                                f"got '{directory}' ({'a file' if path.exists() else 'not found'})")
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"checkpoint: {path} has no config.json")
    config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    if getattr(config, "quantization_config", None):
        method = config.quantization_config
        method = method.get("quant_method") if isinstance(method, dict) else \
            getattr(method, "quant_method", method)
        raise NotImplementedError(
            f"checkpoint: {path} is quantized ({method}); load it with from_pretrained and pass "
            f"the model to compile_generator")
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise TypeError(f"dtype: expected a floating torch.dtype, got {dtype!r}")
    stored = stored_tensors(path)
    dtype = dtype or checkpoint_dtype(config, stored)
    auto = transformers.AutoModelForSeq2SeqLM if getattr(config, "is_encoder_decoder", False) \
        else transformers.AutoModelForCausalLM
    with accelerate.init_empty_weights(include_buffers=False):
        model = auto.from_config(config, dtype=dtype)
    model.eval()

    wanted = dict(model.named_parameters(remove_duplicate=False))
    # Persistent buffers come from the checkpoint; the others (RoPE's
    # frequencies, a causal mask an old checkpoint still holds) are the
    # model's own, as from_pretrained keeps them.
    persistent = set(model.state_dict())
    wanted.update((name, buffer) for name, buffer in model.named_buffers(remove_duplicate=False)
                  if name in stored and name in persistent)
    mappings, views, casts = _Mappings(), {}, {}
    kept = _kept_as_stored(model, stored, dtype) if quantized else set()
    for name, placeholder in wanted.items():
        if name not in stored:
            continue
        tensor = stored[name]
        if tensor.shape != tuple(placeholder.shape):
            raise ValueError(f"checkpoint: {path}: tensor '{name}' has shape {list(tensor.shape)}"
                             f" in {tensor.file.name}; {type(model).__name__} built from its "
                             f"config.json expects {list(placeholder.shape)}")
        if tensor.dtype == placeholder.dtype or name in kept:
            views[name] = mappings.view(tensor.file, tensor.start, tensor.dtype, tensor.shape)
        elif tensor.dtype.is_floating_point and placeholder.dtype.is_floating_point:
            casts[name] = (tensor, placeholder.dtype)
        else:
            raise ValueError(f"checkpoint: {path}: tensor '{name}' is stored as {tensor.dtype}; "
                             f"{type(model).__name__} expects {placeholder.dtype}")
    if casts:
        views.update(_cast_into_scratch(casts, mappings, Path(scratch or tempfile.gettempdir())))
    for name, view in views.items():
        owner, _, leaf = name.rpartition(".")
        module = model.get_submodule(owner)
        if leaf in module._parameters:
            module._parameters[leaf] = torch.nn.Parameter(view, requires_grad=False)
        else:
            module._buffers[leaf] = view
    model.tie_weights()
    missing = [name for name, p in model.named_parameters(remove_duplicate=False) if p.is_meta]
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8
                                          else "")
        raise ValueError(f"checkpoint: {path} holds no tensor for {shown} "
                         f"({type(model).__name__}, as its config.json builds it)")
    _cast_where_read(model, kept, dtype)
    if (path / "generation_config.json").is_file():
        model.generation_config = transformers.GenerationConfig.from_pretrained(
            path, local_files_only=True)
    return model


def _kept_as_stored(model, stored: dict[str, StoredTensor], dtype: torch.dtype) -> set[str]:
    """The names of the weights of ``model``'s linear layers (``nn.Linear``,
    HF's ``Conv1D``) stored in float16 or bfloat16 and compiled in float32
    (the casts the compile widens as it quantizes), except the first
    floating parameter of the model and of each HF model within it (T5's
    stacks, a causal LM's base model): HF takes a model's dtype from that one
    (``model.dtype``), and the step and the models' own masks are built in it."""
    if dtype != torch.float32:
        return set()
    from transformers.modeling_utils import ModuleUtilsMixin

    firsts = [next((p for p in module.parameters() if p.is_floating_point()), None)
              for module in model.modules() if isinstance(module, ModuleUtilsMixin)]
    kept = set()
    for owner, module in model.named_modules():
        if not (isinstance(module, torch.nn.Linear) or type(module).__name__ == "Conv1D"):
            continue
        name = f"{owner}.weight" if owner else "weight"
        tensor = stored.get(name)
        if not any(module.weight is first for first in firsts) and tensor is not None \
                and tensor.dtype in (torch.float16, torch.bfloat16):
            kept.add(name)
    return kept


class _Cast(torch.nn.Module):
    """A weight as the layer reads it: the stored one in the compiled dtype."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight.to(self.dtype)


def _cast_where_read(model, kept: set[str], dtype: torch.dtype) -> None:
    """Each weight of ``kept`` still in its stored dtype (a tied one is its
    table's, already cast) read through a cast to ``dtype``."""
    from torch.nn.utils import parametrize

    for name in sorted(kept):
        owner, _, leaf = name.rpartition(".")
        module = model.get_submodule(owner)
        weight = module._parameters.get(leaf)
        if weight is not None and weight.dtype != dtype:
            # unsafe: the parametrization changes the dtype, which parametrize checks
            parametrize.register_parametrization(module, leaf, _Cast(dtype), unsafe=True)
