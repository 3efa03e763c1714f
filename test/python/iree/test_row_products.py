"""A decode step's products with the cache, tiled for rows read whole (``iree/row_products.py``).

One query row against keys and values of any length: the scores and the
weighted values each run in a dispatch of their own under the configuration
the module sets, and match eager float64 at every length, 1 included. The
rewrite leaves alone what it does not describe: products with a constant,
sums over another dim, float16, rows longer than a head's.
"""

import re
import subprocess

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

import anyshape
from anyshape.iree.cpu import host_flags
from anyshape.iree.row_products import route_row_products
from anyshape.mlir import iree_tool

LENGTHS = (1, 7, 17, 333)


class OneQueryRow(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


class SharedHeads(torch.nn.Module):
    """Each key and value head read by 3 query heads, expanded as HF's ``repeat_kv`` does."""

    def forward(self, q, k, v):
        def repeat(x):
            batch, heads, length, dim = x.shape
            return x[:, :, None].expand(batch, heads, 3, length, dim).reshape(
                batch, heads * 3, length, dim)

        return F.scaled_dot_product_attention(q, repeat(k), repeat(v))


def _compiled(tmp_path_factory, model, query_heads: int, heads: int, dim: int):
    dump = tmp_path_factory.mktemp("row_products")
    q, k = torch.randn(1, query_heads, 1, dim), torch.randn(1, heads, 9, dim)
    keys = Dim("keys")
    compiled = anyshape.compile(model.eval(), (q, k, k.clone()), dynamic_shapes=(
        {}, {2: keys}, {2: keys}), dump_ir_dir=dump, cache=False)
    [iree_input] = dump.glob("*iree-input.mlir")
    return compiled, iree_input.read_text()


@pytest.fixture(scope="module")
def one_query_row(tmp_path_factory):
    return _compiled(tmp_path_factory, OneQueryRow(), 12, 12, 64)


@pytest.fixture(scope="module")
def shared_heads(tmp_path_factory):
    return _compiled(tmp_path_factory, SharedHeads(), 6, 2, 32)


def test_one_query_row_runs_both_products_under_the_configuration(one_query_row):
    _, text = one_query_row
    assert text.count("func.func private @anyshape_row_scores_") == 1
    assert text.count("func.func private @anyshape_row_values_") == 1
    assert text.count("flow.dispatch.region") == 2
    assert "vector_reduction = [0, 0, 0, 64]" in text  # a key's whole row per step
    assert "vector_common_parallel = [1, 1, 64, 0]" in text  # a value row's 64 outputs


def test_shared_heads_are_read_as_stored_not_expanded(shared_heads):
    """The expanded keys and values, as a dispatch's input, would be written
    out whole: G times the cache, every step."""
    _, text = shared_heads
    assert "call @anyshape_row_scores_0(" in text and "call @anyshape_row_values_1(" in text
    assert "tensor<1x2x?x32xf32>) -> tensor<1x6x1x?xf32>" in text  # keys [1, 2, S, 32]
    assert "tensor<1x2x?x32xf32>) -> tensor<1x6x1x32xf32>" in text  # values
    assert "output_shape [1, 2, 3, 32]" in text  # the query heads split [H_kv, G]


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("model", ["one_query_row", "shared_heads"])
def test_attention_of_one_query_row_matches_float64_at_every_length(request, model, length):
    compiled, _ = request.getfixturevalue(model)
    eager = {"one_query_row": (OneQueryRow(), 12, 12, 64),
             "shared_heads": (SharedHeads(), 6, 2, 32)}[model]
    module, query_heads, heads, dim = eager
    generator = torch.Generator().manual_seed(length)
    q = torch.randn(1, query_heads, 1, dim, generator=generator)
    k, v = (torch.randn(1, heads, length, dim, generator=generator) for _ in range(2))
    expected = module(q.double(), k.double(), v.double())
    got = torch.as_tensor(compiled(q, k, v)).double()
    assert (got - expected).abs().max().item() < 1e-5


_SCORES = """
func.func @f(%q: !torch.vtensor<[1,4,{d},1],{t}>, %k: !torch.vtensor<[1,4,{s},{d}],{t}>) -> {out} {{
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int3 = torch.constant.int 3
  %true = torch.constant.bool true
  %none = torch.constant.none
  %literal = torch.vtensor.literal(dense<1.0> : tensor<1x4x{s}x{d}x{t}>) : !torch.vtensor<[1,4,{s},{d}],{t}>
  %order = torch.prim.ListConstruct %int0, %int1, %int3, %int2 : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %kt = torch.aten.permute {keys}, %order : !torch.vtensor<[1,4,{s},{d}],{t}>, !torch.list<int> -> !torch.vtensor<[1,4,{d},{s}],{t}>
  %m = torch.aten.mul.Tensor %q, %kt : !torch.vtensor<[1,4,{d},1],{t}>, !torch.vtensor<[1,4,{d},{s}],{t}> -> !torch.vtensor<[1,4,{d},{s}],{t}>
  %dims = torch.prim.ListConstruct {dim} : (!torch.int) -> !torch.list<int>
  %sum = torch.aten.sum.dim_IntList %m, %dims, %true, %none : !torch.vtensor<[1,4,{d},{s}],{t}>, !torch.list<int>, !torch.bool, !torch.none -> {out}
  return %sum : {out}
}}
"""


def _scores(tmp_path, **changes):
    """``_SCORES`` with ``changes``, written to a file."""
    fields = {"d": 64, "t": "f32", "s": "?", "keys": "%k", "dim": "%int2", **changes}
    fields.setdefault("out", f"!torch.vtensor<[1,4,1,{fields['s']}],{fields['t']}>")
    text = _SCORES.format(**fields)
    if fields["keys"] != "%literal":  # a literal's shape is static
        text = "\n".join(line for line in text.splitlines() if "%literal =" not in line)
    source = tmp_path / "in.mlir"
    source.write_text(text)
    return source


def _routed(tmp_path, **changes) -> int:
    return route_row_products(_scores(tmp_path, **changes), tmp_path / "out.mlirbc")


def test_scores_as_data_tiling_forms_writes_them_are_routed(tmp_path):
    """The case the negative ones below each change in one place."""
    assert _routed(tmp_path) == 1
    assert _routed(tmp_path, s="5") == 1


def test_negative_a_sum_over_another_dim_is_left_to_iree(tmp_path):
    """Summed over the keys, it is not one row's scores."""
    assert _routed(tmp_path, s="5", dim="%int3", out="!torch.vtensor<[1,4,64,1],f32>") == 0


def test_negative_keys_of_the_model_constants_are_left_to_iree(tmp_path):
    """A product with a constant is a projection: IREE packs its weight once."""
    assert _routed(tmp_path, s="5", keys="%literal") == 0


def test_negative_float16_is_left_to_iree(tmp_path):
    """The configuration was measured in float32 only."""
    assert _routed(tmp_path, t="f16") == 0


def test_negative_a_row_longer_than_a_head_is_left_to_iree(tmp_path):
    """512 terms per output is a projection's K, not a head's row."""
    assert _routed(tmp_path, d=512) == 0


_CPU_FLAGS = ["--iree-input-type=torch", "--iree-hal-target-device=local",
              "--iree-hal-local-target-device-backends=llvm-cpu",
              "--iree-llvmcpu-target-cpu=host", "--iree-opt-level=O2"]


def _configurations(tmp_path, source) -> list[str]:
    """The lowering configurations IREE gives the dispatches of ``source``."""
    dump = tmp_path / "configurations"
    subprocess.run([iree_tool("iree-compile"), str(source), *_CPU_FLAGS,
                    f"--iree-hal-dump-executable-configurations-to={dump}", "-o",
                    str(tmp_path / "out.vmfb")], check=True, capture_output=True)
    return sorted(re.findall(r"lowering_config<([^>]*)>",
                             "".join(p.read_text() for p in dump.iterdir())))


def test_iree_still_tiles_a_query_row_against_its_keys_across_the_keys(tmp_path):
    """Guards workaround matvec_rows_read_as_columns: left to IREE, one row's
    scores against the keys are tiled more than one key per vector step."""
    source = _scores(tmp_path)
    [config] = [c for c in _configurations(tmp_path, source) if "vector_reduction" in c]
    parallel = re.search(r"vector_common_parallel = \[([^\]]*)\]", config).group(1)
    keys_per_step = int(parallel.split(",")[-2])
    assert keys_per_step > 1, config


def test_iree_still_drops_a_configuration_when_it_fuses(tmp_path):
    """Guards workaround compilation_info_kept_apart: a configured sum whose
    result an elementwise op reads, outside a dispatch region of its own,
    ends up with IREE's configuration, not the one given."""
    given = ("distribution = [1, 1, 128, 0], vector_common_parallel = [1, 1, 1, 0], "
             "vector_reduction = [0, 0, 0, 64]")
    text = f"""
#ci = #iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<{given}>,
  translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>>
func.func @f(%q: tensor<1x4x64xf32>, %k: tensor<1x4x?x64xf32>, %m: tensor<?xf32>) -> tensor<1x4x?xf32> {{
  %c2 = arith.constant 2 : index
  %n = tensor.dim %k, %c2 : tensor<1x4x?x64xf32>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty(%n) : tensor<1x4x?xf32>
  %filled = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x4x?xf32>) -> tensor<1x4x?xf32>
  %sums = linalg.generic {{indexing_maps = [affine_map<(a, b, c, d) -> (a, b, d)>,
      affine_map<(a, b, c, d) -> (a, b, c, d)>, affine_map<(a, b, c, d) -> (a, b, c)>],
      iterator_types = ["parallel", "parallel", "parallel", "reduction"], compilation_info = #ci}}
      ins(%q, %k : tensor<1x4x64xf32>, tensor<1x4x?x64xf32>) outs(%filled : tensor<1x4x?xf32>) {{
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %t = arith.mulf %x, %y : f32
    %s = arith.addf %t, %acc : f32
    linalg.yield %s : f32
  }} -> tensor<1x4x?xf32>
  %masked = linalg.generic {{indexing_maps = [affine_map<(a, b, c) -> (a, b, c)>,
      affine_map<(a, b, c) -> (c)>, affine_map<(a, b, c) -> (a, b, c)>],
      iterator_types = ["parallel", "parallel", "parallel"]}}
      ins(%sums, %m : tensor<1x4x?xf32>, tensor<?xf32>) outs(%empty : tensor<1x4x?xf32>) {{
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  }} -> tensor<1x4x?xf32>
  return %masked : tensor<1x4x?xf32>
}}
"""
    fused = tmp_path / "fused" / "in.mlir"
    apart = tmp_path / "apart" / "in.mlir"
    for path in (fused, apart):
        path.parent.mkdir()
    fused.write_text(text)
    # The same sum in a region of its own (as route_row_products writes it) keeps it.
    region = re.sub(r"(  %sums = )(linalg.generic.*?\} -> tensor<1x4x\?xf32>)",
                    lambda m: (m.group(1) + "flow.dispatch.region -> (tensor<1x4x?xf32>{%n}) {\n"
                               "  %inner = " + m.group(2) + "\n  flow.return %inner : "
                               "tensor<1x4x?xf32>\n  }"), text, flags=re.DOTALL)
    assert region != text
    apart.write_text(region)
    assert given in _configurations(apart.parent, apart)
    configurations = _configurations(fused.parent, fused)
    assert configurations and given not in configurations, configurations
