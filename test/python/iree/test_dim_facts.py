"""Argument dim facts reach IREE with their real minimum (anyshape-lower + iree/dim_facts.py)."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.export import Dim

import anyshape
from anyshape.driver.ir_signature import signature_from_module
from anyshape.mlir import parse_module
from anyshape.dialects import new_context


class SumPair(torch.nn.Module):
    def forward(self, x, y):
        return x.sum(-1) + y[:, ::2].sum(-1)


class Erfinv(torch.nn.Module):
    def forward(self, x):
        return torch.special.erfinv(x)  # IREE 3.13 cannot lower aten.erfinv


def _dynamic():
    s = Dim("s", min=16, max=512)
    return {"x": {1: s}, "y": {1: 2 * s}}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    dump = tmp_path_factory.mktemp("ir")
    module = anyshape.compile(SumPair().eval(), (torch.randn(2, 20), torch.randn(2, 40)),
                              dynamic_shapes=_dynamic(), dump_ir_dir=dump)
    return module, dump


def _assumptions(text: str) -> list[str]:
    return re.findall(r"util\.assume\.int %[\w-]+<([^>]*)>", text)


def test_iree_input_states_real_minimum(compiled):
    module, dump = compiled
    lowered = module.ir("anyshape-lower")
    assert "torch.symbolic_int" not in lowered and "torch.bind_symbolic_shape" not in lowered
    iree_input = module.ir("iree-input")
    # IREE's own reading of the bindings would give umin = 1 and umin = 2.
    assert sorted(_assumptions(iree_input)) == ["umin = 16, umax = 512",
                                                "umin = 32, umax = 1024, udiv = 2"]
    assert "anyshape.dims" not in iree_input
    assert iree_input.count("flow.tensor.tie_shape") == 2
    # y's length is computed from x's: IREE knows it is exactly twice as long.
    assert re.search(r"arith\.muli %[\w-]+, %[\w-]+ : index\s*\n\s*%[\w-]+ = util\.assume\.int",
                     iree_input)
    assert iree_input.count("tensor.dim") == 1
    # The dumped stage is the same IR.
    dumped = next(dump.glob("*-iree-input.mlir")).read_text()
    assert sorted(_assumptions(dumped)) == sorted(_assumptions(iree_input))


@pytest.mark.parametrize("length", [16, 17, 100, 512])
def test_matches_eager(compiled, length):
    module, _ = compiled
    x, y = torch.randn(2, length), torch.randn(2, 2 * length)
    torch.testing.assert_close(module(x, y), SumPair()(x, y), atol=1e-4, rtol=1e-5)


def test_shared_symbol_is_one_assumed_value():
    """Two arguments bound to the same symbol tie their dims to one assumed value."""
    class Add(torch.nn.Module):
        def forward(self, a, b):
            return a + b

    s = Dim("s", min=4, max=64)
    module = anyshape.compile(Add().eval(), (torch.randn(8), torch.randn(8)),
                              dynamic_shapes={"a": {0: s}, "b": {0: s}})
    text = module.ir("iree-input")
    assert _assumptions(text) == ["umin = 4, umax = 64"]
    assumed = re.search(r"(%[\w-]+) = util\.assume\.int", text).group(1)
    ties = re.findall(r"flow\.tensor\.tie_shape %[\w-]+ : tensor<\?xf32>\{(%[\w-]+)\}", text)
    assert ties == [assumed, assumed]
    a = torch.randn(9)
    torch.testing.assert_close(module(a, a), a + a)


def test_lowered_ir_gives_the_signature(compiled):
    """anyshape-compile on IR after anyshape-lower still checks ranges and equal dims."""
    module, _ = compiled
    signature = signature_from_module(parse_module(module.ir("anyshape-lower"), new_context()))
    x, y = signature.inputs
    symbol = signature.symbols[x.dims[1]]
    assert (symbol.min, symbol.max) == (16, 512)
    assert y.dims[1] == f"2*{symbol.name}"


def _replay(command: str) -> subprocess.CompletedProcess:
    argv = shlex.split(command)
    argv[0] = str(Path(sys.executable).parent / argv[0])
    return subprocess.run(argv, capture_output=True, text=True)


def test_iree_failure_replays_the_iree_input(tmp_path):
    """The reproducer of an IREE failure is the IR with the facts, as IREE got it."""
    with pytest.raises(anyshape.CompileError) as info:
        anyshape.compile(Erfinv().eval(), (torch.rand(8),), dump_ir_dir=tmp_path,
                         dynamic_shapes={"x": {0: Dim("n", min=4, max=64)}})
    error = info.value
    assert error.stage == "iree-compile"
    iree_input = next(tmp_path.glob("*-iree-input.mlir")).read_text()
    assert _assumptions(iree_input) == ["umin = 4, umax = 64"]
    from anyshape.driver.stage_files import stage_text
    from anyshape.stages import IREE_INPUT_STAGE

    assert _assumptions(stage_text(Path(error.reproducer), IREE_INPUT_STAGE)) == \
        ["umin = 4, umax = 64"]
    replay = _replay(error.command)
    assert replay.returncode != 0 and "torch.aten.erfinv" in replay.stderr


def test_fact_that_does_not_fit_fails_the_iree_input_stage():
    """A fact naming a static dim: the stage fails, and its command replays that."""
    from anyshape.driver.compile import compile_module
    from anyshape.iree.flags import make_target

    module = parse_module(
        'func.func @main(%arg0: !torch.vtensor<[2,?],f32> {anyshape.dims = [{axis = 0 : i64, '
        'divisor = 1 : i64, expr = "s0", min = 1 : i64}]}) -> !torch.vtensor<[2,?],f32> {\n'
        '  return %arg0 : !torch.vtensor<[2,?],f32>\n}\n', new_context())
    with pytest.raises(anyshape.CompileError) as info:
        compile_module(module, signature_from_module(module), make_target("cpu", None, None), [])
    error = info.value
    message = ("@main argument 0 (!torch.vtensor<[2,?],f32>): anyshape.dims names dim 0, which "
               "is not a dynamic dim of the argument")
    assert error.stage == "iree-input" and message in error.diagnostic
    replay = _replay(error.command)
    assert replay.returncode == 1 and message in replay.stderr
