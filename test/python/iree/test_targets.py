"""The IREE options ``iree/flags.py`` sets, and the behaviour they must keep."""

import pytest
import torch
from torch.export import Dim

import anyshape
from anyshape.iree.flags import MICROKERNELS_FLAG
from anyshape.iree.flags import PEELING_FLAG as PEEL
from anyshape.iree.flags import (INLINE_CONSTANTS_OFF_FLAG, iree_flags, make_target,
                                 with_constants_for)


def test_cpu_peels_partial_vectors_and_cuda_does_not():
    """Peeling (instead of IREE's masked vectors) is a CPU codegen option."""
    assert PEEL in iree_flags(make_target("cpu", data_tiling=True))
    assert PEEL in iree_flags(make_target("cpu", data_tiling=False))
    assert not [f for f in iree_flags(make_target("cuda", data_tiling=False)) if "llvmcpu" in f]


def test_only_models_with_bfloat16_tensors_keep_constants_out_of_dispatches():
    """Workaround bf16_constants_not_inlined: float32 and float16 builds keep
    IREE's inlining of small constants."""
    target = make_target("cpu", data_tiling=True)
    for dtypes, inlined in (({torch.float32, torch.int64}, True), ({torch.float16}, True),
                            ({torch.bfloat16, torch.float32}, False)):
        flags = iree_flags(with_constants_for(target, dtypes))
        assert (INLINE_CONSTANTS_OFF_FLAG not in flags) == inlined, dtypes


class _ShiftedExponentials(torch.nn.Module):
    def forward(self, x):
        shifted = torch.exp(x - x.amax(-1, keepdim=True))
        return shifted, shifted.sum(-1)


@pytest.fixture(scope="module")
def shifted_exponentials():
    row, column = Dim("rows", min=1, max=128), Dim("columns", min=1, max=256)
    return anyshape.compile(_ShiftedExponentials().eval(), (torch.randn(4, 12),),
                            dynamic_shapes={"x": {0: row, 1: column}})


@pytest.mark.parametrize("rows,columns", [(1, 1), (3, 7), (5, 9), (2, 8), (17, 33), (64, 129)])
def test_peeled_remainders_are_exact(shifted_exponentials, rows, columns):
    """With both dims dynamic every size leaves a remainder the peeled loops
    must cover: sizes below, at and above multiples of the vector width."""
    module = shifted_exponentials
    assert PEEL in module.iree_flags
    x = torch.randn(rows, columns)
    got, want = module(x), _ShiftedExponentials()(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-5)


def test_module_that_peeling_cannot_compile_is_compiled_without_it(tmp_path, monkeypatch):
    """Program 2000 of the slice-hoisting property test (a one-row softmax over a
    dynamic axis after slice hoisting, without anyshape's softmax rewrites):
    peeled, IREE 3.13 needs an unbounded stack allocation and refuses it; the
    module is compiled again without peeling, and is exact. The first
    attempt's reproducer, which nothing reports, does not stay behind in the
    temporary directory."""
    import tempfile

    from random_programs import (Bundle, assert_module_matches, dynamic_shapes, generate,
                                 inputs)

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    program = Bundle([generate(2000, 8)]).eval()
    reports = []
    module = anyshape.compile(program, inputs(2, 8, 8, seed=0), dynamic_shapes=dynamic_shapes(),
                              passes=["anyshape-canonicalize-shapes", "anyshape-hoist-slices",
                                      "anyshape-lower"], progress=reports.append)
    assert any("compiling again without peeling" in line and "unbounded stack allocations" in line
               for line in reports)
    assert PEEL not in module.iree_flags
    assert not list(tmp_path.glob("anyshape-repro-*"))
    assert_module_matches(module, program, ((1, 4), (3, 11), (2, 32)))


class _FeedForward(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(24, 40), torch.nn.Linear(40, 24)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


@pytest.fixture(scope="module")
def feed_forward():
    torch.manual_seed(0)
    model = _FeedForward().eval()
    batch, seq = Dim("batch", min=1, max=8), Dim("seq", min=1, max=64)
    module = anyshape.compile(model, (torch.randn(2, 9, 24),),
                              dynamic_shapes={"x": {0: batch, 1: seq}})
    return model, module


@pytest.mark.parametrize("batch,seq", [(1, 1), (1, 7), (1, 9), (3, 17), (2, 33), (8, 64)])
def test_partial_tiles_are_packed_exactly(feed_forward, batch, seq):
    """The data-tiled products' operands are packed into 8-row tiles by IREE's
    pack microkernel (``--iree-llvmcpu-enable-ukernels=all``): row counts below,
    at and above a multiple of the tile leave a partial tile, whose padding
    must not reach the result."""
    model, module = feed_forward
    assert MICROKERNELS_FLAG in module.iree_flags
    assert "--iree-global-opt-data-tiling" in module.iree_flags
    x = torch.randn(batch, seq, 24)
    with torch.no_grad():
        torch.testing.assert_close(module(x), model(x), atol=1e-5, rtol=1e-5)
