"""The census of CUDA builds: how IREE configures each product, read without a GPU.

For a roberta-base-sized classifier (2 layers: a whole one and the one slice
hoisting leaves the first token of), a GPT-2-sized LM (1 layer, every
position's logits) and GPT-2's ``compile_generator`` (1 layer), in float32 and
float16, with ``Dim("batch")`` and ``Dim("seq")`` (no bounds) and with the seq
dim alone (batch 2), each built twice: with anyshape's products
(``product_kernel="anyshape"``, the default: ``iree/tiled_products.py``) and
with IREE's own (``"iree"``), compiled to IREE's executable configurations
(``iree/dispatch_census.py``). Per build, the distinct product dispatches:
how many, how many have dynamic rows, how many of those get IREE's reduction
strategy (one workgroup per output element), how many 16-bit products of more
than one row there are and how many compute on tensor cores (an MMA
intrinsic), and the one-row products (matrix-vector: decode, a hoisted row)
that keep IREE's configuration.

    python bench/cuda_census.py [--arch sm_89] [--out bench/results/cuda-census]

Writes ``census.md`` (the table and every product's line) under ``--out``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _builds():
    for model in ("roberta", "gpt2"):
        for dims in ("batch-seq", "seq"):
            for dtype in ("float32", "float16"):
                yield model, dims, dtype
    for dtype in ("float32", "float16"):
        yield "gpt2-generator", "its own", dtype


def _build(model: str, dims: str, dtype: str, kernel: str, arch: str):
    import torch
    from torch.export import Dim
    from transformers import GPT2Config, GPT2LMHeadModel, RobertaConfig, \
        RobertaForSequenceClassification

    import anyshape

    backend = anyshape.BackendOptions(cuda_arch=arch, product_kernel=kernel)
    torch.manual_seed(0)
    if model == "gpt2-generator":
        return anyshape.compile_generator(GPT2LMHeadModel(GPT2Config(n_layer=1)).eval(),
                                          target="cuda", dtype=getattr(torch, dtype),
                                          backend=backend)
    if model == "roberta":
        module = RobertaForSequenceClassification(RobertaConfig(
            num_hidden_layers=2, vocab_size=1000, max_position_embeddings=514)).eval()
    else:
        module = GPT2LMHeadModel(GPT2Config(n_layer=1, use_cache=False)).eval()
    seq = Dim("seq")
    if dims == "seq":
        dynamic = {"input_ids": {1: seq}, "attention_mask": {1: seq}}
    else:
        batch = Dim("batch")
        dynamic = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    ids = torch.randint(3, 1000, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    return anyshape.compile(module, (ids,), {"attention_mask": mask}, dynamic_shapes=dynamic,
                            target="cuda", dtype=getattr(torch, dtype), backend=backend)


def _row(model, dims, dtype, kernel, products) -> str:
    dynamic = [p for p in products if p.dynamic_rows]
    reduction = [p for p in dynamic if p.reduction_strategy]
    half = [p for p in products if p.half and not p.one_row]
    mma = [p for p in half if p.mma]
    one_row = [p for p in products if p.one_row]
    functions = "" if model != "gpt2-generator" else " (all functions)"
    return (f"| {model}{functions} | {dims} | {dtype} | {kernel} | {len(products)} | "
            f"{len(dynamic)} | {len(reduction)} | {len(half)} | {len(mma)} | {len(one_row)} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_89",
                        help="the CUDA architecture (default sm_89: what an H100/H200 builds)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "cuda-census")
    args = parser.parse_args(argv)
    from anyshape.iree.dispatch_census import census_of_build

    warnings.simplefilter("ignore")
    rows, details = [], []
    started = time.monotonic()
    for model, dims, dtype in _builds():
        for kernel in ("iree", "anyshape"):
            products = census_of_build(lambda: _build(model, dims, dtype, kernel, args.arch))
            rows.append(_row(model, dims, dtype, kernel, products))
            details += [f"### {model}, {dims}, {dtype}, product_kernel={kernel!r}", ""]
            details += [f"- {p.describe()}" for p in products] + [""]
            print(rows[-1], flush=True)
    header = [
        f"# CUDA census ({args.arch}, IREE 3.13, executable configurations)", "",
        f"`python bench/cuda_census.py --arch {args.arch}` ({time.monotonic() - started:.0f} s "
        f"on this host). Each row: one build's distinct product dispatches. \"dynamic rows\": "
        f"products whose rows (M) are dynamic; \"reduction strategy\": those of them with "
        f"IREE's VectorDistribute partial_reduction configuration (one workgroup per output "
        f"element); \"16-bit, >1 row\": products of float16 operands with more than one row; "
        f"\"MMA\": those of them on tensor cores; \"one row\": matrix-vector products "
        f"(decode's, a hoisted first token's), which keep IREE's configuration. "
        f"product_kernel \"iree\" is IREE's own configuration (before issue 63), "
        f"\"anyshape\" the default.", "",
        "| build | dims | dtype | product_kernel | products | dynamic rows | reduction "
        "strategy | 16-bit, >1 row | MMA | one row |",
        "|---|---|---|---|---|---|---|---|---|---|"]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "census.md").write_text("\n".join(header + rows + ["", "## Every product", ""]
                                                  + details) + "\n")
    print("\n".join(header + rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
