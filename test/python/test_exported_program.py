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


def test_entries_are_more_functions_on_the_same_weights(program):
    # A specialization of the same model (batch a static 1) as a second function:
    # it answers as eager does, and the weight is stored once for both.
    model = Scaled().eval()
    one_row = torch.export.export(model, (torch.randn(1, 5, 6),),
                                  dynamic_shapes=({1: Dim("seq")},))
    compiled = anyshape.compile(program, entries={"one_row": one_row})
    x = torch.randn(1, 7, 6)
    got = compiled.invoke([x.numpy()], entry="one_row")[0].to_host()
    assert torch.allclose(torch.from_numpy(got), model(x), atol=1e-6)
    three = torch.randn(3, 9, 6)
    assert torch.allclose(compiled(three), model(three), atol=1e-6)  # the entry, as before
    assert compiled.vmfb.count(model.weight.detach().numpy().tobytes()) == 1


def test_entries_are_named_exported_programs(program):
    with pytest.raises(TypeError, match=r"entries\['one_row'\]: expected a "
                                        r"torch.export.ExportedProgram, got Scaled"):
        anyshape.compile(program, entries={"one_row": Scaled()})
    with pytest.raises(ValueError, match="entries: expected function names .* got 'main'"):
        anyshape.compile(program, entries={"main": program})
    with pytest.raises(TypeError, match="outer_dim_concat: expected True or False, got 'no'"):
        anyshape.compile(program, backend=anyshape.BackendOptions(outer_dim_concat="no"))
    with pytest.raises(TypeError, match="in_place_writes: expected True or False, got 1"):
        anyshape.compile(program, backend=anyshape.BackendOptions(in_place_writes=1))
    with pytest.raises(ValueError, match="in_place_writes: not supported together with "
                                         "padding='eliminate'"):
        anyshape.compile(program, padding="eliminate",
                         backend=anyshape.BackendOptions(in_place_writes=True))
