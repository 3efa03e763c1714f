"""What a module is compiled for, as its manifest records it: the target
("cpu" or "cuda"), the runtime driver, and the build's choices. The runtime
reads it to pick the device and to know how the module takes its inputs;
``iree/flags.py`` makes one from the user's options and turns it into
iree-compile's flags."""

from __future__ import annotations

import dataclasses

DEFAULT_OPT_LEVEL = "O2"


@dataclasses.dataclass(frozen=True)
class Target:
    name: str                # "cpu" or "cuda"
    driver: str              # IREE runtime driver
    cuda_arch: str | None = None
    opt_level: str = DEFAULT_OPT_LEVEL
    data_tiling: bool | None = None  # None: decided at compile time (compile_module)
    cpu: str | None = None   # target="cpu": what --iree-llvmcpu-target-cpu gets (iree/cpu.py)
    # target="cuda": the architecture the user named, where IREE builds for an
    # older one (cuda_arch) whose PTX the driver compiles for it; else None
    requested_cuda_arch: str | None = None
    outer_dim_concat: bool = True  # False: --iree-opt-outer-dim-concat=false (BackendOptions)
    # True: inputs updated in place are written into the caller's buffers, not
    # returned (BackendOptions; iree/in_place_writes.py)
    in_place_writes: bool = False
    # "medium": the inputs of matrix products in bfloat16, accumulated in float32
    # (BackendOptions.matmul_precision; with_matmul_precision)
    matmul_precision: str = "highest"
    # "anyshape": products with a constant weight run anyshape's row-exact
    # kernel where it applies (iree/kernels/linear_rows.py); "iree": IREE's own
    # (BackendOptions.product_kernel)
    product_kernel: str = "anyshape"
    # target="cpu": the worker threads the module is built for (compile's
    # ``threads``, or the cores available): anyshape's product kernel splits
    # its rows into as many runs as it takes to give each of them work, and no
    # more (iree/kernels/linear_rows.py)
    workers: int | None = None
    # False: no constant is inlined into a dispatch (INLINE_CONSTANTS_OFF_FLAG;
    # set for models with bfloat16 weights, workaround bf16_constants_not_inlined)
    inline_constants: bool = True
    # Products with a dynamic row count padded to whole tiles
    # (iree/tiled_products.py); None: on for CUDA targets whose products are
    # anyshape's (product_kernel "anyshape"), off elsewhere (tiles_products)
    tiled_products: bool | None = None
    # "int8" or "int4": the weights of products with a weight of the model
    # quantized at compile time (BackendOptions.weights; iree/quantized_weights.py),
    # int4 in groups of group_size inputs
    weights: str = "float32"
    group_size: int | None = None
    # "gptq" or "bitsandbytes": the weights are a pre-quantized checkpoint's codes
    # (frontend/prequantized.py), and the products whose weights are no codes in
    # ``weights`` (those the checkpoint kept in float) stay float32
    weights_from: str | None = None
    # "int8": int4 products of a decode step's rows (up to 4) round the rows to
    # int8 and multiply in integers (BackendOptions.activations)
    activations: str = "float32"

    def tiles_products(self) -> bool:
        if self.tiled_products is not None:
            return self.tiled_products
        return self.name == "cuda" and self.product_kernel == "anyshape"

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Target":
        return cls(**data)
