"""Import of unmodified modules: shape reads, buffers, tied weights, output structures."""

import dataclasses
import re
import subprocess
import sys

import pytest
import torch
from models import shape_queries_case
from torch.export import Dim

import anyshape


def test_shape_queries_module_at_many_sizes(shape_queries):
    model, compiled = shape_queries
    for batch in (1, 3):
        for length in (1, 2, 7, 33, 64):
            x = torch.randn(batch, length, 8)
            torch.testing.assert_close(compiled(x), model(x).detach(), atol=1e-5, rtol=0)


class NonPersistentBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        # Lives in the exported program's `constants`, not its state_dict.
        self.register_buffer("offsets", torch.arange(32, dtype=torch.float32), persistent=False)

    def forward(self, x):
        return x + self.offsets[: x.shape[1]]


def test_non_persistent_buffer():
    model = NonPersistentBuffer().eval()
    compiled = anyshape.compile(model, (torch.randn(2, 5),),
                                dynamic_shapes={"x": {1: Dim("n", min=1, max=32)}})
    x = torch.randn(2, 17)
    torch.testing.assert_close(compiled(x), model(x), atol=0, rtol=0)


class TiedWeights(torch.nn.Module):
    def __init__(self, vocab=512, hidden=64):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.head = torch.nn.Linear(hidden, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.embed(ids)))


def test_tied_weights_stored_once():
    model = TiedWeights().eval()
    ids = torch.randint(0, 512, (1, 6))
    dynamic = {"ids": {1: Dim("seq", min=1, max=64)}}
    module = anyshape.import_torch(model, (ids,), dynamic_shapes=dynamic)
    text = str(module)
    literals = re.findall(r"torch\.vtensor\.literal\(dense_resource<([\w.$]+)> : tensor<512x64xf32>\)",
                          text)
    # One blob, named for the tensor's first name in the model's state.
    assert len(literals) >= 1 and set(literals) == {"embed.weight"}, literals
    assert text.count(f"{literals[0]}: \"0x") == 1  # one blob in dialect_resources
    compiled = anyshape.compile(model, (ids,), dynamic_shapes=dynamic)
    ids = torch.randint(0, 512, (1, 40))
    torch.testing.assert_close(compiled(ids), model(ids).detach(), atol=1e-5, rtol=0)


@dataclasses.dataclass
class Pair:
    first: torch.Tensor
    second: torch.Tensor


class Structured(torch.nn.Module):
    def forward(self, x):
        return {"sum": x.sum(-1), "parts": (x * 2, [x - 1])}


def test_nested_dict_tuple_list_outputs():
    model = Structured()
    compiled = anyshape.compile(model, (torch.randn(2, 3),),
                                dynamic_shapes={"x": {0: Dim("rows", max=8)}})
    x = torch.randn(5, 3)
    got, expected = compiled(x), model(x)
    assert set(got) == {"sum", "parts"}
    assert isinstance(got["parts"], tuple) and isinstance(got["parts"][1], list)
    torch.testing.assert_close(got, expected)


def test_dataclass_output():
    torch.utils._pytree.register_dataclass(Pair)

    class ReturnsPair(torch.nn.Module):
        def forward(self, x):
            return Pair(x + 1, x.flip(0))

    compiled = anyshape.compile(ReturnsPair(), (torch.randn(3, 2),),
                                dynamic_shapes={"x": {0: Dim("rows", max=8)}})
    x = torch.randn(6, 2)
    got = compiled(x)
    assert isinstance(got, Pair)
    torch.testing.assert_close(got.first, x + 1)
    torch.testing.assert_close(got.second, x.flip(0))


def test_import_torch_text_reads_back_in_anyshape_opt(tmp_path):
    model, args, dynamic = shape_queries_case()
    module = anyshape.import_torch(model, args, dynamic_shapes=dynamic)
    text = str(module)
    assert "dialect_resources" in text  # the weights are in the text
    path = tmp_path / "model.mlir"
    path.write_text(text)
    result = subprocess.run([sys.executable, "-m", "anyshape.tools.opt", str(path)],
                            capture_output=True, text=True, check=True)
    assert result.stdout.count("torch.aten.") == text.count("torch.aten.")
    assert "torch.symbolic_int" in result.stdout


def test_training_mode_warns():
    with pytest.warns(UserWarning, match="training mode"):
        anyshape.import_torch(torch.nn.Dropout(0.1), (torch.randn(2, 3),))


class Squeezes(torch.nn.Module):
    def forward(self, x):
        return x.squeeze(-1) * 2, x.squeeze((0, 2)) + 1, x.squeeze() - 1


def test_squeezes_compile_and_match_eager():
    """torch decomposes squeeze.dim and squeeze() to squeeze.dims, which torch-mlir
    imports as an opaque op IREE cannot lower; the importer keeps squeeze.dim and
    squeezes one dim at a time, and leaves alone a dynamic dim whose range excludes 1."""
    model = Squeezes().eval()
    dynamic = {"x": {1: Dim("seq", min=2, max=16)}}
    text = str(anyshape.import_torch(model, (torch.randn(1, 5, 1),), dynamic_shapes=dynamic))
    assert "torch.operator" not in text and "torch.aten.squeeze.dim" in text
    compiled = anyshape.compile(model, (torch.randn(1, 5, 1),), dynamic_shapes=dynamic)
    for length in (2, 9):
        x = torch.randn(1, length, 1)
        got = compiled(x)
        assert [tuple(g.shape) for g in got] == [(1, length), (length,), (length,)]
        for value, expected in zip(got, model(x)):
            torch.testing.assert_close(value, expected, atol=1e-6, rtol=0)


class EveryOtherToken(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x[:, ::2]) + 1, x[:, 1::2] * 2


def test_strided_slice_of_dynamic_length():
    """``x[:, ::2]`` has length ``(L + 1) // 2`` and ``x[:, 1::2]`` ``L // 2``:
    torch-mlir's importer has no translation of a floor division into its shape
    bindings, and failed."""
    model = EveryOtherToken().eval()
    dynamic = {"x": {1: Dim("seq", min=4, max=40)}}
    text = str(anyshape.import_torch(model, (torch.randn(2, 7, 4),), dynamic_shapes=dynamic))
    assert len(re.findall(r"floordiv 2", text)) >= 2
    compiled = anyshape.compile(model, (torch.randn(2, 7, 4),), dynamic_shapes=dynamic)
    for length in (4, 5, 40):
        x = torch.randn(2, length, 4)
        for value, expected in zip(compiled(x), model(x)):
            assert value.shape == expected.shape
            torch.testing.assert_close(value, expected, atol=1e-6, rtol=0)


class PadToMultipleOfFour(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.pad(x, (0, 0, 0, (-x.size(1)) % 4))


def test_modulo_in_symbolic_shape_imports():
    """The padded length ``L + (-L) % 4`` holds a Python modulo, which torch-mlir's
    importer could not translate either. (IREE then rejects the pad amount's
    ``torch.aten.fmod.int``: test_op_coverage.py's pad-to-multiple, an xfail.)"""
    dynamic = {"x": {1: Dim("seq", min=2, max=40)}}
    text = str(anyshape.import_torch(PadToMultipleOfFour().eval(), (torch.randn(2, 7, 4),),
                                     dynamic_shapes=dynamic))
    assert re.search(r"mod 4", text)


def test_literal_cache_keeps_what_it_is_keyed_by():
    """Weight literals are cached by ``id(tensor)``; torch-mlir hands a bool
    buffer over as a temporary ``.to(torch.uint8)``, so the cache must keep the
    tensor alive, or the next temporary at the same address (the next mask
    buffer) would import as this one's data (issue 36's hunt)."""
    import weakref

    from anyshape.frontend.importer import _WeightLiterals
    from anyshape.mlir import ir
    from anyshape.dialects import new_context

    with new_context(), ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            hooks = _WeightLiterals({})
            mask = torch.zeros(3, 5, dtype=torch.bool)
            mask[1, 2] = True
            temporary = mask.to(torch.uint8)
            handed_over = weakref.ref(temporary)
            literal = hooks.resolve_literal(None, temporary, None)
            del temporary
            assert handed_over() is not None, "the cached tensor was freed: its id can be reused"
            assert "dense<" in str(literal.owner) and "3x5xui8" in str(literal.owner.attributes["value"])


class ComplexRotary(torch.nn.Module):
    """Llama 4's and DeepSeek-V2's rotary embedding: complex frequencies moved with
    ``.to(device)``, which torch.export records as ``_assert_tensor_metadata``."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.register_buffer("freqs", torch.polar(torch.ones(64, 4), torch.randn(64, 4, generator=g)))

    def forward(self, x):
        pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(pairs * self.freqs[: x.shape[1]].to(x.device)).flatten(-2)


def test_complex_to_device_imports():
    """torch-mlir refused the assertion ("the dtype does not match") for complex64."""
    model = ComplexRotary()
    compiled = anyshape.compile(model, (torch.randn(2, 16, 8),),
                                dynamic_shapes=({0: Dim("batch"), 1: Dim("seq", max=64)},))
    for length in (1, 7, 33):
        x = torch.randn(3, length, 8)
        assert float((compiled(x) - model(x)).abs().max()) < 1e-6


class SparsityCutoff(torch.nn.Module):
    """Gemma 3n's activation sparsity: a quantile of the normal from a literal
    (an erfinv, which IREE cannot lower), scaled by another scalar of constants."""

    def forward(self, x):
        cutoff = torch.distributions.normal.Normal(0, 1).icdf(torch.tensor(0.9))
        return torch.relu(x - cutoff) * torch.tensor([0.5, 1.5]).sum().exp()


def test_ops_on_constants_are_computed_at_compile_time():
    """IREE reported the literal ("failed to legalize 'torch.vtensor.literal'" at
    <unknown>), not the erfinv that used it."""
    model = SparsityCutoff()
    compiled = anyshape.compile(model, (torch.randn(4, 5),),
                                dynamic_shapes=({0: Dim("rows")},))
    for rows in (1, 7):
        x = torch.randn(rows, 5)
        assert torch.equal(compiled(x), model(x))
    text = str(anyshape.import_torch(model, (torch.randn(4, 5),)))
    assert "erfinv" not in text and "torch.aten.exp" not in text and "torch.aten.sum" not in text


class NormThenPaddingMask(torch.nn.Module):
    """LFM2/3's padding mask, sliced to the hidden states' length
    (``apply_mask_to_padding_states``) after a reduction (RMSNorm): the slice
    keeps the whole mask, and IREE failed on it ("write affecting operations
    on global resources are restricted to workgroup distributed contexts")."""

    def forward(self, h, mask):
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return h * mask[:, -h.shape[1]:][:, :, None]


class FirstColumn(torch.nn.Module):
    def forward(self, mask):
        return mask[:, :1]


def test_slice_of_a_whole_dim_is_dropped():
    model = NormThenPaddingMask()
    dims = {0: Dim("batch"), 1: Dim("seq")}
    example = (torch.randn(2, 16, 8), torch.ones(2, 16, dtype=torch.int64))
    compiled = anyshape.compile(model, example, dynamic_shapes=(dims, dims))
    for batch, length in ((1, 7), (3, 17)):
        h, mask = torch.randn(batch, length, 8), torch.randint(0, 2, (batch, length))
        torch.testing.assert_close(compiled(h, mask), model(h, mask), atol=1e-6, rtol=1e-6)
    assert "torch.aten.slice.Tensor" not in str(
        anyshape.import_torch(model, example, dynamic_shapes=(dims, dims)))
    assert "torch.aten.slice.Tensor" in str(  # a slice that drops something stays
        anyshape.import_torch(FirstColumn(), example[1:], dynamic_shapes=(dims,)))


class AfterAnEmptyStart(torch.nn.Module):
    """transformers' DynamicLayer: a cache that starts as ``torch.tensor([])``."""

    def forward(self, x):
        start = torch.tensor([], dtype=x.dtype)
        return torch.cat([start, x.reshape(-1)]) * 2


def test_an_empty_constant_survives_mlir_text():
    # The imported IR printed as text (what anyshape-opt reads) compiles and runs.
    from anyshape.tools.check import check

    text = str(anyshape.import_torch(AfterAnEmptyStart().eval(), (torch.randn(2, 5),),
                                     dynamic_shapes=({0: Dim("rows")},)))
    assert "dense<> : tensor<0xf32>" in text
    trials = check(text, [], trials=2, max_size=6)
    assert all(t.ok for t in trials)
