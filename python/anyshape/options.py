"""The backend options of ``anyshape.compile``, in one object, and where the
caches live (``ANYSHAPE_CACHE_DIR``: compiled artifacts, built kernels).

``target``, ``dynamic_shapes``, ``dtype`` and ``padding`` stay plain keywords
(what users type most); how IREE builds and runs the module is a
``BackendOptions``, as torch-mlir groups its ``FxImportOptions``. The old
keywords (``compile(cuda_arch=...)``) keep working, with a
``DeprecationWarning`` that says what to write instead.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from pathlib import Path

CACHE_ENV = "ANYSHAPE_CACHE_DIR"


def cache_root() -> Path:
    """``ANYSHAPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/anyshape``, else
    ``~/.cache/anyshape``."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "anyshape"


@dataclasses.dataclass(frozen=True)
class BackendOptions:
    """How IREE builds and runs a compiled module.

    ``cuda_arch`` (``target="cuda"``): the GPU's architecture ("sm_80", the
    default; one IREE has no target for gets the newest older one it knows).
    ``opt_level``: IREE's, "O0" to "O3" (default "O2"). ``data_tiling``:
    IREE's packed matmul operands; None (default) on for CPU targets, with a
    fallback without it where IREE fails. ``threads``: CPU worker threads
    (None: one per core this process may use). ``params``: "inline" (the
    weights in the ``.vmfb``) or "external" (a ``params.irpa`` beside it).
    ``target_cpu`` (``target="cpu"``): the CPU the code is for ("host", a CPU
    LLVM knows, or a level like "x86-64-v3"). ``outer_dim_concat``: IREE's
    rewrite (on at O2) of every concatenation into one along the outermost
    dim, between transposes; False keeps each along its own dim
    (``compile_generator`` does: the key/value cache is then appended to in
    place of being transposed out and back every step). ``in_place_writes``:
    inputs the model updates in place (``x.narrow(...).copy_(y)``) are
    written into the caller's device buffers instead of returned as new
    values, so a call writes only what changed (``compile_generator`` does:
    each step writes its new keys and values into the cache; docs/api.md).
    ``matmul_precision``: "highest" (default: float32 products) or "medium",
    as ``torch.set_float32_matmul_precision("medium")``: the inputs of every
    matrix product are rounded to bfloat16 and accumulated in float32, on CPUs
    with AVX-512 BF16 only (its speed and its error against eager:
    docs/api.md). ``product_kernel``: "anyshape" (default) computes float32
    products with a weight of the model (linear layers, the LM head) with
    anyshape's kernel on x86-64 CPUs, which computes only the rows there are
    (IREE's computes whole tiles of 16 rows), and on CUDA pads the rows of
    every product whose row count is dynamic to whole tiles, so that IREE
    tiles it (tensor cores in float16) instead of computing each output on
    its own (docs/iree-notes.md); "iree" keeps IREE's. Where no C compiler
    can build the CPU kernel, IREE's runs, with a warning. ``weights``:
    "float32" (default: as the model has them), "int8" or "int4": the
    weights of products with a weight of the model (linear layers, the LM
    head) quantized at compile time and stored so in the artifact, computed
    by anyshape's CPU kernel, which dequantizes them as it reads them: int8
    with one scale per output channel, int4 with one per ``group_size``
    (32, the default; 64 or 128) inputs of each output channel. CPU targets
    only; their accuracy and speed: docs/quantized-weights.md.
    ``activations``: "float32" (default), "int8" with int4 weights, or
    "int16" with int8 weights: every product (a prefill's and each decode
    step's) rounds each row so per block of 32 inputs (int8: llama.cpp's
    Q8_0) and multiplies in integers (AVX2 byte or 16-bit products, AVX-512
    VNNI dot products), which is faster and adds the rows' rounding to the
    error; CPUs without AVX2 compute in float32 (docs/quantized-weights.md).
    ``weights_from``: "gptq" or "bitsandbytes" for a pre-quantized checkpoint,
    set by ``compile`` and ``compile_generator`` from the model's
    ``quantization_config``: its own codes are stored, and the weights it kept
    in float stay float32 (frontend/prequantized.py); "calibrated" for a copy
    ``anyshape.calibrated`` rounded (frontend/calibration.py).
    """

    cuda_arch: str | None = None
    opt_level: str | None = None
    data_tiling: bool | None = None
    threads: int | None = None
    params: str = "inline"
    target_cpu: str | None = None
    outer_dim_concat: bool = True
    in_place_writes: bool = False
    matmul_precision: str = "highest"
    product_kernel: str = "anyshape"
    weights: str = "float32"
    group_size: int | None = None
    weights_from: str | None = None
    activations: str = "float32"


class _Unset:
    """The default of a deprecated keyword: tells "not given" from None."""

    def __repr__(self) -> str:
        return "<not given>"


UNSET = _Unset()


def resolve_backend(backend: BackendOptions | None, keywords: dict, *,
                    stacklevel: int) -> BackendOptions:
    """``backend``, or one made from the deprecated keywords given (with a
    warning); both at once is an error."""
    if backend is not None and not isinstance(backend, BackendOptions):
        raise TypeError(f"backend: expected an anyshape.BackendOptions, got "
                        f"{type(backend).__name__}")
    given = {name: value for name, value in keywords.items() if value is not UNSET}
    if not given:
        return backend if backend is not None else BackendOptions()
    spelled = ", ".join(f"{name}={value!r}" for name, value in given.items())
    if backend is not None:
        raise TypeError(f"backend: given together with {spelled}; put "
                        f"{', '.join(given)} in the BackendOptions")
    warnings.warn(f"compile({spelled}) is deprecated: write "
                  f"compile(..., backend=anyshape.BackendOptions({spelled}))",
                  DeprecationWarning, stacklevel=stacklevel + 1)
    return BackendOptions(**given)
