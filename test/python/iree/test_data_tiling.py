"""``data_tiling=True``: IREE's data tiling on slice-hoisted models (RoBERTa
and GPT-2), exact against eager at dynamic sizes (``anyshape-data-tiling-forms``
runs first)."""

import re

import pytest
import torch
from conftest import MAX_LEN
from models import roberta_inputs, small_gpt2_last_token
from torch.export import Dim

import anyshape
from anyshape.iree.kernels import build, linear_rows

# What anyshape puts between a product and an operand IREE 3.13 must pack on
# its own (iree/workarounds.py).
BARRIER = "iree_tensor_ext.compute_barrier.start"


@pytest.fixture(scope="module")
def tiled(roberta, roberta_dynamic_shapes):
    ids, mask = roberta_inputs(2, 8)
    return anyshape.compile(roberta, (ids,), {"attention_mask": mask},
                            dynamic_shapes=roberta_dynamic_shapes,
                            backend=anyshape.BackendOptions(data_tiling=True))


@pytest.mark.builds_after_export
def test_forms_pass_runs_after_hoisting(tiled):
    stages = tiled.stages
    assert stages.index("anyshape-data-tiling-forms") == stages.index("anyshape-hoist-slices") + 1
    assert "--iree-global-opt-data-tiling" in tiled.iree_flags
    forms = tiled.ir("anyshape-data-tiling-forms")
    # The last layer's one-row attention products are no batch matmuls any more.
    assert "!torch.vtensor<[?,1,?],f32>" in tiled.ir("anyshape-hoist-slices")
    assert not re.search(r"torch.aten.bmm .* -> !torch.vtensor<\[\?,1,\?\],f32>", forms)
    # The padding mask is one more contraction step of the scores (head size 32 + 1).
    assert "torch.aten.bmm" in forms and "-> !torch.vtensor<[?,33,?],f32>" in forms
    # Q, K and V of each layer are one linear on concatenated weights (in the
    # slice-hoisted last layer only K and V share their input), and every
    # linear runs on rows flattened into one dim.
    fused = re.findall(r"torch.aten.linear %\S+, %\S+, %\S+ : !torch.vtensor<\[\?,128\],f32>, "
                       r"!torch.vtensor<\[(\d+),128\],f32>", forms)
    assert fused.count("384") == 1, fused  # layer 1: Q, K, V (layer 2: K, V, 256 wide, as the FFN)
    assert not re.search(r"torch.aten.linear %\S+, %\S+, %\S+ : !torch.vtensor<\[\?,\?,", forms)
    # The projections of the one row per sequence the classifier reads (the
    # last layer's query, its FFN, the head) are multiplies and sums, or, where
    # anyshape's kernel computes products with a constant weight (the
    # default, kernel-products=true), products it takes.
    few_rows = re.search(r"torch.aten.mul.Tensor %\S+, %\S+ : !torch.vtensor<\[\?,1,128\],f32>, "
                         r"!torch.vtensor<\[128,128\],f32> -> !torch.vtensor<\[\?,128,128\],f32>",
                         forms)
    if build.kernel_object(linear_rows.SOURCE)[0] is None:
        assert few_rows
    else:
        assert not few_rows
        passes_output = tiled.ir(stages[stages.index("iree-input") - 1])
        kernel_input = tiled.ir("iree-input")
        routed = re.findall(r"call @anyshape_linear_rows_(?:d|\d+)x\d+x\d+_", kernel_input)
        assert not re.search(r"torch.aten.(linear|mm|addmm) ", kernel_input)
        # Every product is the kernel's; the fused ones, read only through
        # column slices, part by part: Q, K, V (384 columns) as 3, the last
        # layer's K, V (256) as 2.
        products = re.findall(r"torch.aten.(linear|mm|addmm) ", passes_output)
        assert len(routed) == len(products) + 2 + 1


@pytest.mark.parametrize("batch,length", [(1, 1), (1, 17), (3, 60), (2, MAX_LEN)])
@pytest.mark.builds_after_export
def test_data_tiled_matches_eager(roberta, tiled, batch, length):
    ids, mask = roberta_inputs(batch, length, pad_from=length // 2 if batch > 1 else None)
    with torch.no_grad():
        expected = roberta(ids, attention_mask=mask).logits
    torch.testing.assert_close(tiled(ids, attention_mask=mask).logits, expected, atol=1e-4, rtol=1e-4)


def test_data_tiling_must_be_a_bool_or_none(roberta):
    ids, mask = roberta_inputs(1, 4)
    with pytest.raises(ValueError, match=r"data_tiling: expected True, False or None \(automatic\), "
                                         r"got 'yes'"):
        anyshape.compile(roberta, (ids,), {"attention_mask": mask},
                         backend=anyshape.BackendOptions(data_tiling="yes"))


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_data_tiling_automatic_by_default(target):
    from anyshape.driver.pipeline import data_tiling_applies
    from anyshape.runtime.signature import ModuleSignature
    from anyshape.iree.flags import iree_flags, make_target

    automatic = make_target(target)
    assert automatic.data_tiling is None
    with pytest.raises(ValueError, match="must be decided"):
        iree_flags(automatic)
    assert "--iree-global-opt-data-tiling" not in iree_flags(
        make_target(target, data_tiling=False))
    assert "--iree-global-opt-data-tiling" in iree_flags(make_target(target, data_tiling=True))
    static = ModuleSignature(inputs=[], outputs=[], symbols={}, output_tree={})
    assert data_tiling_applies(automatic, static, []) is (target == "cpu")


@pytest.fixture(scope="module")
def gpt2():
    torch.manual_seed(0)
    return small_gpt2_last_token().eval()


@pytest.fixture(scope="module")
def gpt2_tiled(gpt2):
    ids, mask = roberta_inputs(2, 8, vocab=500)
    batch, seq = Dim("batch", min=1, max=4), Dim("seq", min=1, max=64)
    return anyshape.compile(gpt2, (ids, mask), dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}),
                            backend=anyshape.BackendOptions(data_tiling=True))


@pytest.mark.builds_after_export
def test_gpt2_qkv_weight_read_whole(gpt2_tiled):
    """Slice hoisting splits GPT-2's fused QKV projection into column slices
    of its constant weight; with data tiling each reads the whole weight (IREE
    packs it once, at load time) and the last token's query rows come from the
    product over every row."""
    weight_columns = r"torch.aten.slice.Tensor %\S+, %int1, %int\d+, %int\d+, %int1 : !torch.vtensor<\[64,192\],f32>"
    assert re.search(weight_columns, gpt2_tiled.ir("anyshape-hoist-slices"))
    forms = gpt2_tiled.ir("anyshape-data-tiling-forms")
    assert not re.search(weight_columns, forms)
    # Every QKV product of a layer reads that layer's whole input (the same
    # value): none is a one-row product any more.
    qkv = re.findall(r"torch.aten.addmm %\S+, (%\S+), %\S+, %int1, %int1 : !torch.vtensor<\[192\],f32>, "
                     r"!torch.vtensor<\[\?,64\],f32>, !torch.vtensor<\[64,192\],f32>", forms)
    assert len(qkv) >= 6 and len(set(qkv)) == 2, qkv


@pytest.mark.parametrize("batch,length", [(1, 1), (1, 2), (3, 17), (2, 64)])
@pytest.mark.builds_after_export
def test_gpt2_data_tiled_matches_eager(gpt2, gpt2_tiled, batch, length):
    ids, mask = roberta_inputs(batch, length, vocab=500, pad_from=length // 2 if batch > 1 else None)
    with torch.no_grad():
        expected = gpt2(ids, mask)
    torch.testing.assert_close(gpt2_tiled(ids, mask), expected, atol=1e-4, rtol=1e-4)


class _ExponentialProduct(torch.nn.Module):
    """Attention after anyshape's softmax rewrites: exp(S - max) @ V over a
    static batch of heads, normalized after the product."""

    def forward(self, scores, values):
        exponentials = torch.exp(scores - scores.amax(-1, keepdim=True))
        return (exponentials @ values) / exponentials.sum(-1, keepdim=True)


def _compile_exponential_product():
    length = Dim("L", min=1, max=256)
    return anyshape.compile(_ExponentialProduct().eval(), (torch.randn(4, 9, 9), torch.randn(4, 9, 8)),
                            dynamic_shapes={"scores": {1: length, 2: length}, "values": {1: length}},
                            backend=anyshape.BackendOptions(data_tiling=True))


def test_exponentials_of_a_static_batch_are_packed_apart():
    """With a static batch, IREE 3.13 packs the exponentials for the product in
    the dispatch of their row max, whose codegen fails (llvm/llvm-project#205288's
    form); anyshape puts a barrier between them and the product
    (``iree/workarounds.py``), so it compiles with data tiling and stays exact."""
    module = _compile_exponential_product()
    assert BARRIER in module.ir("iree-input")
    for length in (1, 8, 9, 100, 256):
        scores, values = torch.randn(4, length, length), torch.randn(4, length, 8)
        torch.testing.assert_close(module(scores, values), _ExponentialProduct()(scores, values),
                                   atol=1e-5, rtol=1e-5)


def test_packing_barrier_is_still_needed(without_packing_barriers):
    """The upstream failure the barrier avoids: without it IREE 3.13 fails to
    compile the same module. When this test fails, IREE compiles the form
    itself and ``separate_dynamic_operand_packing`` can go."""
    with pytest.raises(anyshape.CompileError, match="delinearize_index"):
        _compile_exponential_product()


class _FeedForward(torch.nn.Module):
    """Two products with an elementwise function between them: a GELU between
    linears, or (``addmm``, GPT-2's Conv1D form) a chain of several
    elementwise ops between ``addmm`` products on flattened rows."""

    def __init__(self, form: str):
        super().__init__()
        self.form = form
        self.up, self.down = torch.nn.Linear(16, 64), torch.nn.Linear(64, 16)

    def forward(self, x):
        if self.form == "linear-gelu":
            return self.down(torch.nn.functional.gelu(self.up(x)))
        rows = x.reshape(-1, 16)
        h = torch.addmm(self.up.bias, rows, self.up.weight.t())
        h = h * torch.sigmoid(1.702 * h)
        out = torch.addmm(self.down.bias, h, self.down.weight.t())
        return out.reshape(x.shape[0], x.shape[1], 16)


# (form, dynamic batch) where the elementwise ops see one dynamic dim: the
# length with the batch fixed, or rows flattened before the first product.
_ONE_DYNAMIC_DIM = [("linear-gelu", False), ("addmm-sigmoid-chain", False),
                    ("addmm-sigmoid-chain", True)]
# An IREE dispatch that unpacks a product's result, computes elementwise and
# packs for the next product (named by IREE for what it holds).
_FUSED_UNPACK_PACK = re.compile(rb"dispatch_\d+_unpack_elementwise_\w*_pack")


def _compile_feed_forward(form: str, dynamic_batch: bool):
    """With IREE's own products (``product_kernel="iree"``): anyshape's kernel
    takes products with a constant weight out of IREE's data tiling, and the
    barrier is for IREE's."""
    torch.manual_seed(0)
    model = _FeedForward(form).eval()
    seq = Dim("seq", min=1, max=64)
    dims = {0: Dim("batch", min=1, max=4), 1: seq} if dynamic_batch else {1: seq}
    module = anyshape.compile(model, (torch.randn(2 if dynamic_batch else 1, 5, 16),),
                              dynamic_shapes={"x": dims},
                              backend=anyshape.BackendOptions(data_tiling=True,
                                                              product_kernel="iree"))
    return model, module


@pytest.mark.parametrize("form,dynamic_batch", _ONE_DYNAMIC_DIM)
def test_feed_forward_of_one_dynamic_dim_packs_apart_from_its_elementwise_ops(form, dynamic_batch):
    """With one dynamic dim, IREE 3.13 would pack the second product's operand
    in the dispatch that unpacks the first's result and applies the
    elementwise ops, and its dynamic code for that dispatch is slow
    (``iree/workarounds.py``): a barrier between the last elementwise op and
    the second product keeps the packing in a dispatch of its own."""
    model, module = _compile_feed_forward(form, dynamic_batch)
    text = module.ir("iree-input")
    assert text.count(f"= {BARRIER} ") == 1, text
    barrier, builtin = re.search(rf"(%\S+) = {BARRIER} (%\S+) ", text).groups()
    held = re.search(rf"{re.escape(builtin)} = torch_c.to_builtin_tensor (%\S+) ", text).group(1)
    # what the barrier holds is the elementwise ops' result, flattened into rows
    flattened = re.search(rf"{re.escape(held)} = torch.aten.flatten.using_ints (%\S+),", text)
    source = flattened.group(1) if flattened else held
    assert re.search(rf"{re.escape(source)} = torch.aten.(gelu|mul.Tensor) ", text), text
    kept = re.search(rf"(%\S+) = torch_c.from_builtin_tensor {re.escape(barrier)} ", text).group(1)
    assert re.search(rf"torch.aten.(linear|addmm) (%\S+, )?{re.escape(kept)}, ", text), text
    assert not _FUSED_UNPACK_PACK.search(module.vmfb)
    for length in (1, 7, 8, 64):
        x = torch.randn(3 if dynamic_batch else 1, length, 16)
        with torch.no_grad():
            expected = model(x)
        torch.testing.assert_close(module(x), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("form,dynamic_batch", _ONE_DYNAMIC_DIM)
def test_feed_forward_barrier_is_still_needed(without_packing_barriers, form, dynamic_batch):
    """Without the barrier IREE 3.13 fuses the unpacking, the GELU and the
    packing into one dispatch. When this test fails, IREE no longer does, and
    the elementwise rule of ``iree/workarounds.py`` can go."""
    _, module = _compile_feed_forward(form, dynamic_batch)
    assert _FUSED_UNPACK_PACK.search(module.vmfb)


def test_feed_forward_of_two_dynamic_dims_has_no_barrier():
    """With the batch dynamic too and the GELU on ``[B, L, H]``, the reshape of
    the two dynamic dims between it and the linear's rows keeps IREE from
    fusing the packing: no barrier."""
    model, module = _compile_feed_forward("linear-gelu", dynamic_batch=True)
    assert not _FUSED_UNPACK_PACK.search(module.vmfb)
    assert BARRIER not in module.ir("iree-input")
    x = torch.randn(3, 9, 16)
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(module(x), expected, atol=1e-5, rtol=1e-5)


def test_static_batch_roberta_is_data_tiled(roberta):
    """A classifier with its batch fixed at 1 (``make demo``) used to fall back to
    no data tiling (2-3x slower than eager at roberta-base size)."""
    seq = Dim("seq", min=1, max=MAX_LEN)
    ids, mask = roberta_inputs(1, 8)
    module = anyshape.compile(roberta, (ids,), {"attention_mask": mask},
                              dynamic_shapes={"input_ids": {1: seq}, "attention_mask": {1: seq}},
                              backend=anyshape.BackendOptions(data_tiling=True))
    assert module.target.data_tiling is True
    for length in (1, 17, MAX_LEN):
        ids, mask = roberta_inputs(1, length, pad_from=length - length // 4 if length > 4 else None)
        with torch.no_grad():
            expected = roberta(ids, attention_mask=mask).logits
        torch.testing.assert_close(module(ids, attention_mask=mask).logits, expected,
                                   atol=1e-4, rtol=1e-4)


def _program_22():
    from random_programs import Bundle, dynamic_shapes, generate, inputs

    torch.manual_seed(0)
    return Bundle([generate(22, 8)]).eval(), inputs(2, 7, 8, seed=0), dynamic_shapes()


@pytest.fixture
def without_packing_barriers(monkeypatch, tmp_path_factory):
    """IREE 3.13 as anyshape found it: random program 22 of the slice-hoisting
    property test (one-head masked attention, flattened into an mm) fails its
    CPU codegen with data tiling unless anyshape keeps the attention
    probabilities' packing apart. With that step off, the program stands for
    any module IREE cannot data-tile."""
    import shutil

    import anyshape.driver.iree_input

    def copy_unchanged(in_file, out_file, text_file=None):
        if in_file != out_file:
            shutil.copyfile(in_file, out_file)
        return 0

    monkeypatch.setattr(anyshape.driver.iree_input, "separate_dynamic_operand_packing",
                        copy_unchanged)
    # The compile cache knows anyshape's source, not a patch: builds without the
    # barrier get a cache of their own.
    monkeypatch.setenv("ANYSHAPE_CACHE_DIR", str(tmp_path_factory.mktemp("cache-without-barriers")))


def test_program_22_is_data_tiled():
    """The scaled scores of one-head causal attention, read by an mm over two
    dynamic dims: with the packing barrier IREE data-tiles it, exactly."""
    from random_programs import assert_module_matches

    program, args, dynamic = _program_22()
    module = anyshape.compile(program, args, dynamic_shapes=dynamic,
                              backend=anyshape.BackendOptions(data_tiling=True))
    assert BARRIER in module.ir("iree-input")
    assert_module_matches(module, program, ((1, 4), (3, 19), (2, 32)))


def test_data_tiling_compile_failure_is_an_error(without_packing_barriers):
    """Asked for, data tiling does not fall back when IREE fails with it."""
    program, args, dynamic = _program_22()
    with pytest.raises(anyshape.CompileError, match="delinearize_index"):
        anyshape.compile(program, args, dynamic_shapes=dynamic,
                         backend=anyshape.BackendOptions(data_tiling=True))


def test_automatic_data_tiling_falls_back_with_a_warning(tmp_path, without_packing_barriers):
    """By default the same program compiles, without data tiling, and says so."""
    from random_programs import assert_module_matches

    program, args, dynamic = _program_22()
    with pytest.warns(anyshape.DataTilingFallback,
                      match=r"(?s)could not compile this module with data tiling, so it was compiled without it.*delinearize_index"):
        module = anyshape.compile(program, args, dynamic_shapes=dynamic, dump_ir_dir=tmp_path)
    assert module.target.data_tiling is False
    assert "--iree-global-opt-data-tiling" not in module.iree_flags
    assert "anyshape-data-tiling-forms" not in module.stages
    assert module.stages[0] == "import" and module.stages[-1] == "iree-input"
    # The dumped stages are the artifact's, beside the failed attempt's reproducer.
    dumped = sorted(p.name for p in tmp_path.glob("*.mlir"))
    assert dumped == [f"{i:02d}-{stage}.mlir" for i, stage in enumerate(module.stages)]
    assert list(tmp_path.glob("*.mlirbc"))
    assert_module_matches(module, program, ((1, 4), (3, 19)))


def test_data_tiling_needs_the_dim_ranges(roberta, roberta_dynamic_shapes):
    """Without anyshape-lower, IREE is not told the dynamic dims' ranges, and its
    data tiling then computes wrong results (roberta-base, passes=[]: max error
    0.36 at L = 128): refused when asked for, not used by default."""
    ids, mask = roberta_inputs(2, 8)
    with pytest.raises(ValueError, match=r"data_tiling=True: with dynamic dims .* anyshape-lower"):
        anyshape.compile(roberta, (ids,), {"attention_mask": mask},
                         dynamic_shapes=roberta_dynamic_shapes, passes=[],
                         backend=anyshape.BackendOptions(data_tiling=True))
    untiled = anyshape.compile(roberta, (ids,), {"attention_mask": mask},
                               dynamic_shapes=roberta_dynamic_shapes, passes=[])
    assert untiled.target.data_tiling is False


class _ProjectedScores(torch.nn.Module):
    """One-head attention scores: a projection of x against y transposed."""

    def __init__(self):
        super().__init__()
        self.query = torch.nn.Linear(16, 16)

    def forward(self, x, y):
        return self.query(x) @ y.transpose(1, 2)


def test_projection_times_transposed_input_is_exact():
    """IREE 3.13's dispatch-creation data tiling (``--iree-opt-data-tiling``)
    packs the projection's rows for the batch matmul inside the projection's
    dispatch and gets every batch after the first wrong when L is not a
    multiple of 16 (max error 6-16 at 2x9 and 3x17). anyshape uses the
    GlobalOptimization path (``--iree-global-opt-data-tiling``), which is exact."""
    torch.manual_seed(0)
    model = _ProjectedScores().eval()
    batch, seq = Dim("batch", min=1, max=4), Dim("seq", min=1, max=64)
    module = anyshape.compile(model, (torch.randn(2, 6, 16), torch.randn(2, 6, 16)),
                              dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}),
                              backend=anyshape.BackendOptions(data_tiling=True))
    for b, length in ((2, 9), (3, 17), (4, 64)):
        x, y = torch.randn(b, length, 16), torch.randn(b, length, 16)
        with torch.no_grad():
            expected = model(x, y)
        torch.testing.assert_close(module(x, y), expected, atol=1e-4, rtol=1e-4)


def test_forms_pass_placement():
    """After slice hoisting (it rewrites the one-row work hoisting leaves), else
    before lowering (it reads the shape bindings), else not at all."""
    from anyshape.driver.pipeline import with_data_tiling_forms

    canon, hoist, forms, lower = ("anyshape-canonicalize-shapes", "anyshape-hoist-slices",
                                  "anyshape-data-tiling-forms", "anyshape-lower")
    assert with_data_tiling_forms([canon, hoist, lower]) == [canon, hoist, forms, lower]
    assert with_data_tiling_forms([canon, lower]) == [canon, forms, lower]
    assert with_data_tiling_forms([forms, canon, lower]) == [forms, canon, lower]
    assert with_data_tiling_forms([canon]) == [canon]
    assert with_data_tiling_forms([]) == []
