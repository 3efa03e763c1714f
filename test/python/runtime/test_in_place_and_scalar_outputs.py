"""Models that update their inputs in place, and that return Python scalars:
compiled as eager runs them. The module returns the inputs' new values and the
runtime writes them back into the caller's tensors (or arrays); a scalar
output comes back as a Python int, float or bool, a constant one as it was."""

import numpy as np
import pytest
import torch
from torch.export import Dim

import anyshape


class AddInPlace(torch.nn.Module):
    def forward(self, x, y):
        x.add_(y)
        return x * 2


class SetRows(torch.nn.Module):
    def forward(self, x, rows):
        x[rows] = 0.5
        return x.sum(-1)


class CopyAndFill(torch.nn.Module):
    def forward(self, x, y):
        x.copy_(y * 3)
        y.fill_(2.0)
        return None


class IndexPut(torch.nn.Module):
    def forward(self, x, rows, values):
        x.index_put_((rows,), values, accumulate=True)
        return x.mean()


CASES = {
    "add_": (AddInPlace(), lambda b, n: (torch.randn(b, n), torch.randn(b, n)),
             {"x": {0: Dim("b"), 1: Dim("n")}, "y": {0: Dim("b"), 1: Dim("n")}}),
    "setitem": (SetRows(), lambda b, n: (torch.randn(b + 2, n), torch.tensor([0, b + 1])),
                {"x": {0: Dim("b"), 1: Dim("n")}, "rows": None}),
    "copy_-fill_": (CopyAndFill(), lambda b, n: (torch.randn(b, n), torch.randn(b, n)),
                    {"x": {0: Dim("b"), 1: Dim("n")}, "y": {0: Dim("b"), 1: Dim("n")}}),
    "index_put_": (IndexPut(), lambda b, n: (torch.randn(b + 2, n), torch.tensor([1, 1, 0]),
                                             torch.randn(3, n)),
                   {"x": {0: Dim("b"), 1: Dim("n")}, "rows": None, "values": {1: Dim("n")}}),
}


def _clones(values):
    return tuple(v.clone() for v in values)


@pytest.mark.parametrize("in_place_writes", [False, True])
@pytest.mark.parametrize("name", sorted(CASES))
def test_inputs_updated_in_place_as_eager(name, in_place_writes):
    # in_place_writes: the module writes into device copies of those inputs
    # (iree/in_place_writes.py), read back into the caller's tensors; the same
    # for the caller. copy_-fill_ returns nothing else, so its writes stay in
    # IREE's closing barrier.
    model, make, dynamic = CASES[name]
    model.eval()
    compiled = anyshape.compile(model, _clones(make(2, 4)), dynamic_shapes=dynamic,
                                backend=anyshape.BackendOptions(in_place_writes=in_place_writes))
    assert compiled.signature.input_writes
    assert compiled.target.in_place_writes is in_place_writes
    for b, n in [(1, 1), (3, 7), (2, 17)]:
        inputs = make(b, n)
        eager_inputs, compiled_inputs = _clones(inputs), _clones(inputs)
        expected, got = model(*eager_inputs), compiled(*compiled_inputs)
        if expected is None:
            assert got is None
        else:
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        for before, want, have in zip(inputs, eager_inputs, compiled_inputs):
            torch.testing.assert_close(have, want, atol=1e-5, rtol=1e-5)
        assert any(not torch.equal(before, want) for before, want in zip(inputs, eager_inputs))


def test_invoke_refuses_a_host_array_the_module_writes_in_place():
    # invoke passes arrays as they are: a host array would be copied to the
    # device, written there, and the update lost.
    model = AddInPlace().eval()
    compiled = anyshape.compile(model, (torch.randn(2, 3), torch.randn(2, 3)),
                                dynamic_shapes=CASES["add_"][2],
                                backend=anyshape.BackendOptions(in_place_writes=True))
    x, y = np.ones((2, 3), np.float32), np.full((2, 3), 2.0, np.float32)
    with pytest.raises(TypeError, match="x: this module writes it in place, so it must be a "
                                        "device array .* got ndarray, whose update would be lost"):
        compiled.invoke([x, y])
    device_x, = compiled.device_arrays([x])
    results = compiled.invoke([device_x, y])
    assert len(results) == 1  # x * 2 only: x's new value is in its buffer
    np.testing.assert_allclose(np.asarray(device_x.to_host()), x + y)
    np.testing.assert_allclose(np.asarray(results[0].to_host()), 2 * (x + y))


def test_numpy_inputs_are_updated_in_place_too(tmp_path):
    model = AddInPlace().eval()
    compiled = anyshape.compile(model, (torch.randn(2, 3), torch.randn(2, 3)),
                                dynamic_shapes=CASES["add_"][2])
    compiled.save(tmp_path)
    loaded = anyshape.load(tmp_path)  # the manifest keeps which inputs are written
    x, y = np.random.rand(5, 3).astype(np.float32), np.random.rand(5, 3).astype(np.float32)
    expected_x = x + y
    out = loaded(x, y)
    np.testing.assert_allclose(x, expected_x, rtol=1e-6)
    np.testing.assert_allclose(out.numpy(), 2 * expected_x, rtol=1e-6)


class Report(torch.nn.Module):
    def forward(self, x):
        return {
            "doubled": x * 2,
            "length": x.shape[1],
            "half": x.shape[1] / 2,
            "long": x.shape[0] > 2,
            "total": x.sum().item(),
            "positives": (x > 0).sum().item(),
            "fixed": 7,
            "name": "report",
            "nothing": None,
        }


def test_scalar_outputs_come_back_as_python_values(tmp_path):
    model = Report().eval()
    compiled = anyshape.compile(model, (torch.randn(3, 4),),
                                dynamic_shapes={"x": {0: Dim("b"), 1: Dim("n")}})
    compiled.save(tmp_path)
    for module in (compiled, anyshape.load(tmp_path)):
        for b, n in [(1, 1), (2, 7), (5, 33)]:
            x = torch.randn(b, n)
            expected, got = model(x), module(x)
            assert set(got) == set(expected)
            torch.testing.assert_close(got["doubled"], expected["doubled"])
            for key in ("length", "half", "long", "positives", "fixed", "name", "nothing"):
                assert got[key] == expected[key] and type(got[key]) is type(expected[key]), key
            assert type(got["total"]) is float
            assert got["total"] == pytest.approx(expected["total"], rel=1e-5, abs=1e-5)
