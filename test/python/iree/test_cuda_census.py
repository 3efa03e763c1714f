"""target="cuda": every product with more than one row tiled, and in 16 bits on tensor cores,
read from IREE's executable configurations without a GPU (``iree/dispatch_census.py``).

The builds are the user's defaults (``Dim("batch")`` and ``Dim("seq")`` with no
bounds, or the seq dim alone) of a roberta-base-sized classifier (2 layers: a
whole one and the one the classifier's first-token slice hoists) and a
GPT-2-sized LM (every position's logits), in float32 and float16, and the
prefill of ``compile_generator`` for GPT-2 (and Llama in float16). For each
product IREE configures:

- none whose rows are dynamic gets IREE's reduction strategy (one workgroup
  per output element, a matrix-vector strategy);
- every one whose operands are float16 and that has more than one row
  computes with an MMA intrinsic.

A product of one row (a decode step's, the first token's query against the
keys after slice hoisting) is a matrix-vector product; those keep IREE's
configuration (docs/iree-notes.md lists them).
"""

import dataclasses

import pytest
import torch
from torch.export import Dim

import anyshape
from anyshape.iree.dispatch_census import census_of_build, census_of_file
from anyshape.runtime.compiled_module import cuda_available

ARCH = "sm_89"  # what an H100/H200 builds for (IREE 3.13 knows no sm_90)
BUILDS = [(model, dims, dtype) for model in ("roberta", "gpt2") for dims in ("batch-seq", "seq")
          for dtype in ("float32", "float16")]


def _model(name: str):
    from transformers import GPT2Config, GPT2LMHeadModel, RobertaConfig, \
        RobertaForSequenceClassification

    torch.manual_seed(0)
    if name == "roberta":  # roberta-base's widths; the vocabulary is only a gather
        return RobertaForSequenceClassification(RobertaConfig(
            num_hidden_layers=2, vocab_size=1000, max_position_embeddings=514)).eval()
    return GPT2LMHeadModel(GPT2Config(n_layer=1, use_cache=False)).eval()


def _dims(dims: str) -> dict:
    seq = Dim("seq")
    if dims == "seq":
        return {"input_ids": {1: seq}, "attention_mask": {1: seq}}
    batch = Dim("batch")
    return {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}


def _compile(name: str, dims: str, dtype: str):
    return _compile_model(_model(name), dims, dtype)


def _compile_model(model, dims: str, dtype: str):
    ids = torch.randint(3, 1000, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    return anyshape.compile(model, (ids,), {"attention_mask": mask},
                            dynamic_shapes=_dims(dims), target="cuda",
                            dtype=getattr(torch, dtype), cache=False,
                            backend=anyshape.BackendOptions(cuda_arch=ARCH))


def _census(name: str, dims: str, dtype: str):
    return census_of_build(lambda: _compile(name, dims, dtype))


def _untiled(products) -> list[str]:
    """What the rule refuses: dynamic rows on the reduction strategy, and
    16-bit products of more than one row without an MMA intrinsic."""
    return [p.describe() for p in products
            if (p.dynamic_rows and p.reduction_strategy)
            or (p.half and not p.one_row and p.mma is None)]


@pytest.mark.builds_after_export
@pytest.mark.parametrize("name, dims, dtype", BUILDS, ids=["-".join(b) for b in BUILDS])
def test_census(name, dims, dtype):
    """/// Every product with dynamic rows tiled; in float16 every product of more
    /// than one row on tensor cores, the attention's two included."""
    products = _census(name, dims, dtype)
    dynamic = [p for p in products if p.dynamic_rows]
    # the projections, the feed-forward in and out, both attention products
    assert len(dynamic) >= 5, [p.describe() for p in products]
    assert _untiled(products) == []
    if dtype == "float16":
        on_mma = [p for p in products if p.mma is not None]
        assert {p.mma for p in on_mma} == {"NV_MMA_SYNC_F32_16x8x16_F16"}
        # both attention products (batched over heads) are among them
        assert sum(1 for p in on_mma if p.batch) == 2, [p.describe() for p in on_mma]


@pytest.mark.builds_after_export
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_generator_prefill_census(dtype):
    """/// compile_generator's step (prefill and the general step, "main") is tiled
    /// as an encoder is, and so is the verification of draft tokens
    /// ("verify_draft", the general step returning every token's logits, most
    /// of its dispatches main's); its decode functions of 1, 4 and 8 rows are
    /// read too: only the one-row products keep IREE's matrix-vector
    /// configuration."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1)).eval()
    products = census_of_build(lambda: anyshape.compile_generator(
        model, target="cuda", dtype=getattr(torch, dtype),
        backend=anyshape.BackendOptions(cuda_arch=ARCH)))
    prefill = [p for p in products if p.dispatch.startswith("main$")]
    assert len([p for p in prefill if p.dynamic_rows]) >= 6
    assert _untiled(products) == []
    assert all(p.one_row for p in prefill if p.reduction_strategy)
    functions = {p.dispatch.split("$")[0] for p in products}
    assert functions == {"main", "verify_draft", "decode_one", "decode_four", "decode_eight"} \
        or functions == {"main", "verify_draft", "decode_one", "decode_four"}  # 8 rows share 4's
    decode_rows = {p.rows for p in products
                   if not p.dispatch.startswith(("main$", "verify_draft$"))}
    assert all(None not in rows for rows in decode_rows)  # static rows: 1, 4 or 8 (16 in tiles)


@pytest.mark.builds_after_export
def test_llama_generator_prefill_census():
    """/// A Llama generator (grouped-query attention: HF's repeat_kv before the
    /// products, RoPE's float32 product) is tiled as GPT-2's is, in float16."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        num_hidden_layers=1, hidden_size=256, intermediate_size=688, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=1001)).eval()
    products = census_of_build(lambda: anyshape.compile_generator(
        model, target="cuda", dtype=torch.float16,
        backend=anyshape.BackendOptions(cuda_arch=ARCH)))
    prefill = [p for p in products if p.dispatch.startswith("main$")]
    assert sum(1 for p in prefill if p.dynamic_rows and p.mma) >= 5, \
        [p.describe() for p in prefill]
    assert _untiled(products) == []


@pytest.mark.builds_after_export
def test_iree_still_gives_dynamic_rows_the_reduction_strategy():
    """/// With IREE's own products (product_kernel="iree") a projection with
    /// dynamic rows gets the reduction strategy and float16 no MMA: what
    /// iree/tiled_products.py works around, and what the census must see."""
    model = torch.nn.Sequential(torch.nn.Linear(256, 384), torch.nn.GELU(),
                                torch.nn.Linear(384, 256)).eval()
    rows = Dim("rows")
    products = {kernel: census_of_build(lambda: anyshape.compile(
        model, (torch.randn(6, 256),), dynamic_shapes=({0: rows},), target="cuda",
        dtype=torch.float16, backend=anyshape.BackendOptions(cuda_arch=ARCH,
                                                             product_kernel=kernel)))
        for kernel in ("iree", "anyshape")}
    assert len(products["iree"]) == 2 and all(p.dynamic_rows for p in products["iree"])
    assert len(_untiled(products["iree"])) == 2
    assert all(p.reduction_strategy and p.mma is None for p in products["iree"])
    assert _untiled(products["anyshape"]) == [] and len(products["anyshape"]) == 2


_DYNAMIC_K = """
func.func @keys_reduced(%p: tensor<?x?x128x?xf16>, %v: tensor<?x?x64xf16>, %keys: index)
    -> tensor<?x?x128x64xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %heads = tensor.dim %p, %c0 : tensor<?x?x128x?xf16>
  %blocks = tensor.dim %p, %c1 : tensor<?x?x128x?xf16>
  %k = util.assume.int %keys<umin = 64, umax = 1048576, udiv = 64> : index
  %pk = flow.tensor.tie_shape %p : tensor<?x?x128x?xf16>{%heads, %blocks, %k}
  %vk = flow.tensor.tie_shape %v : tensor<?x?x64xf16>{%heads, %k}
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty(%heads, %blocks) : tensor<?x?x128x64xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x?x128x64xf32>) -> tensor<?x?x128x64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(h, b, m, n, k) -> (h, b, m, k)>,
                                        affine_map<(h, b, m, n, k) -> (h, k, n)>,
                                        affine_map<(h, b, m, n, k) -> (h, b, m, n)>],
                       iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%pk, %vk : tensor<?x?x128x?xf16>, tensor<?x?x64xf16>) outs(%init : tensor<?x?x128x64xf32>) {
  ^bb0(%x: f16, %y: f16, %acc: f32):
    %xw = arith.extf %x : f16 to f32
    %yw = arith.extf %y : f16 to f32
    %t = arith.mulf %xw, %yw : f32
    %s = arith.addf %acc, %t : f32
    linalg.yield %s : f32
  } -> tensor<?x?x128x64xf32>
  return %r : tensor<?x?x128x64xf32>
}
"""


def test_iree_still_gives_a_dynamic_reduced_dim_no_mma(tmp_path):
    """/// A float16 product whose reduced dim is dynamic, padded and stated a
    /// multiple of 64, still gets no MMA intrinsic from IREE: why P V's keys are
    /// cut into static chunks (iree/tiled_products.py, KEY_CHUNK)."""
    source = tmp_path / "keys_reduced.mlir"
    source.write_text(_DYNAMIC_K)
    [product] = census_of_file(source, ["--iree-input-type=none", "--iree-opt-level=O2",
                                        "--iree-hal-target-device=cuda",
                                        f"--iree-cuda-target={ARCH}"])
    assert product.dynamic_rows and product.reduced == (None,) and product.half
    assert product.mma is None, product.describe()


@pytest.mark.builds_after_export
def test_iree_still_fails_to_distribute_with_dim_facts(monkeypatch):
    """/// With the arguments' dim ranges stated, IREE 3.13's CUDA codegen fails
    /// on a reduction of the hoisted layer's attention: why CUDA builds state
    /// none (driver/iree_input.states_dim_facts, workaround cuda_without_dim_facts)."""
    from transformers import RobertaConfig, RobertaForSequenceClassification

    from anyshape.driver import iree_input
    from anyshape.driver.fallbacks import FALLBACKS

    monkeypatch.setattr(iree_input, "states_dim_facts", lambda target: True)
    monkeypatch.setitem(FALLBACKS, "dim_facts", dataclasses.replace(
        FALLBACKS["dim_facts"], applies=lambda error, build: False))
    torch.manual_seed(0)
    model = RobertaForSequenceClassification(RobertaConfig(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=256,
        vocab_size=1000, max_position_embeddings=514)).eval()
    with pytest.raises(anyshape.CompileError, match="failed to distribute"):
        _compile_model(model, "seq", "float32")


@pytest.mark.skipif(not cuda_available(), reason="no CUDA device for IREE's cuda driver")
@pytest.mark.parametrize("name, dims, dtype", BUILDS, ids=["-".join(b) for b in BUILDS])
def test_census_builds_match_eager_on_a_gpu(name, dims, dtype):
    """/// On a GPU the same builds match eager (float64 decides past the tolerance)."""
    module = _compile(name, dims, dtype)
    reference = _model(name).double()
    tolerance = {"float32": 1e-4, "float16": 1e-2}[dtype]
    shapes = [(2, 1), (2, 7), (2, 17), (2, 333)] if dims == "seq" else \
        [(1, 1), (1, 7), (3, 17), (2, 333), (1, 512)]
    for batch, length in shapes:
        ids = torch.randint(3, 1000, (batch, length))
        mask = torch.ones(batch, length, dtype=torch.long)
        mask[0, length - length // 4:] = 0
        with torch.no_grad():
            got = module(ids, attention_mask=mask).logits.double()
            exact = reference(ids, attention_mask=mask).logits
        keep = mask.bool() if name == "gpt2" else slice(None)
        assert (got[keep] - exact[keep]).abs().max() <= tolerance, (batch, length)
