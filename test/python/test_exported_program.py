"""anyshape.compile of a torch.export.ExportedProgram: export once, compile variants."""

import pytest
import torch
from torch.export import Dim

import anyshape


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.weight = torch.nn.Parameter(torch.randn(6, 6, generator=g))

    def forward(self, x):
        return torch.softmax(x @ self.weight, -1)[:, -1]


@pytest.fixture(scope="module")
def program():
    return torch.export.export(Scaled().eval(), (torch.randn(2, 5, 6),),
                               dynamic_shapes=({0: Dim("batch"), 1: Dim("seq")},))


def test_an_exported_program_compiles_as_its_module_does(program):
    model = Scaled().eval()
    from_program = anyshape.compile(program, dynamic_shapes=({0: Dim("batch"), 1: Dim("seq")},))
    from_module = anyshape.compile(model, (torch.randn(2, 5, 6),),
                                   dynamic_shapes=({0: Dim("batch"), 1: Dim("seq")},))
    assert from_program.signature.to_json() == from_module.signature.to_json()
    for batch, length in ((1, 1), (3, 17)):
        x = torch.randn(batch, length, 6)
        assert torch.allclose(from_program(x), model(x), atol=1e-6)
    # A variant of the same program: without anyshape's passes. (It once refused
    # 2 x 9 x 6 inputs: the constant folder compared a symbolic numel with 64,
    # which recorded the guard 6*batch*seq <= 64 as a condition of the model.)
    plain = anyshape.compile(program, passes=[])
    assert plain.signature.conditions == [], plain.signature.conditions
    x = torch.randn(2, 9, 6)
    assert torch.allclose(plain(x), model(x), atol=1e-6)


def test_an_exported_program_takes_no_inputs_or_dtype(program):
    with pytest.raises(TypeError, match="args: expected none with an ExportedProgram"):
        anyshape.compile(program, (torch.randn(2, 5, 6),))
    with pytest.raises(ValueError, match="dtype: expected None with an ExportedProgram"):
        anyshape.compile(program, dtype=torch.float16)
    with pytest.raises(TypeError, match="args: expected the example inputs"):
        anyshape.compile(Scaled())
