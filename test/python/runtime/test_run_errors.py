"""What a compiled module says when a call cannot run, and what IREE used to get
silently wrong: a reshape by -1 of two dynamic dims, a relation between input
sizes the model checks, float64 values."""

import pytest
import torch
from torch.export import Dim

import anyshape
from anyshape.errors import RunError
from anyshape.runtime.compiled_module import iree_message


class ReshapeRows(torch.nn.Module):
    def forward(self, x):
        return x.reshape(-1, 4) * 2


@pytest.fixture(scope="module")
def reshape_rows():
    return anyshape.compile(ReshapeRows().eval(), (torch.randn(2, 6),),
                            dynamic_shapes={"x": {0: Dim("b"), 1: Dim("n")}})


def test_reshape_of_two_dynamic_dims_is_exact(reshape_rows):
    """torch-mlir paired the dims by position: a [3, 8] input came back [3, 8]."""
    for shape in [(2, 6), (3, 8), (5, 12), (1, 12), (9, 20)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(reshape_rows(x), ReshapeRows()(x), atol=0, rtol=0)


def test_reshape_that_cannot_hold_the_input_is_refused_by_name(reshape_rows):
    """torch.export records that the element count is a multiple of 4."""
    with pytest.raises(RuntimeError, match="is invalid for input of size 9"):
        ReshapeRows()(torch.randn(3, 3))  # what eager says
    with pytest.raises(ValueError, match=r"arguments: expected sizes with \(\(\(n\)\*\(b\)\) % 4\)"
                                         r" == 0 .*, got argument 'x' dim 0 = 3, argument 'x' "
                                         r"dim 1 = 3"):
        reshape_rows(torch.randn(3, 3))


def test_run_time_failure_names_call_inputs_and_iree_message():
    """From MLIR text there are no export guards to check first: the reshape's
    own check in the program fails at run time, and says so by name."""
    from anyshape.driver.compile import compile_module
    from anyshape.driver.ir_signature import signature_from_module
    from anyshape.passes import DEFAULT_PIPELINE
    from anyshape.iree.flags import make_target

    module = anyshape.import_torch(ReshapeRows().eval(), (torch.randn(2, 6),),
                                   dynamic_shapes={"x": {0: Dim("b"), 1: Dim("n")}})
    compiled = compile_module(module, signature_from_module(module), make_target("cpu"),
                              DEFAULT_PIPELINE)
    with pytest.raises(RunError) as caught:
        compiled(torch.randn(3, 3))
    message = str(caught.value)
    assert message.startswith("@main failed at run time with inputs arg0 float32 (3, 3): "
                              "FAILED_PRECONDITION; view/reshape to [-1, 4] at ")
    assert __file__ in message
    assert "bytecode module" not in message and "c/runtime/src" not in message
    assert caught.value.iree_message.startswith("FAILED_PRECONDITION; view/reshape")


class CheckedLengths(torch.nn.Module):
    def forward(self, x, y):
        torch._check(x.shape[0] <= y.shape[0])
        return x.sum() + y.sum()


def test_size_relation_the_model_checks_is_checked_by_name():
    compiled = anyshape.compile(CheckedLengths().eval(), (torch.randn(2), torch.randn(3)),
                                dynamic_shapes={"x": {0: Dim("a")}, "y": {0: Dim("b")}})
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(compiled(x, y), CheckedLengths()(x, y))
    with pytest.raises(ValueError, match=r"arguments: expected sizes with \(a\) <= \(b\) .*, got "
                                         r"argument 'x' dim 0 = 5, argument 'y' dim 0 = 3"):
        compiled(torch.randn(5), torch.randn(3))


def test_iree_message_keeps_status_and_words_only():
    raw = ("Error invoking function: c/runtime/src/iree/modules/hal/utils/buffer_diagnostics.c:225:"
           " INVALID_ARGUMENT; tensor shape dimension 1 mismatch; expected 4 but have 8; expected "
           "shape `3x4`, actual shape `3x8`; while invoking native function hal.buffer_view.assert;"
           " while calling import; \n[ 1] bytecode module.__init:134 -\n[ 0] bytecode module@1:64 -")
    assert iree_message(raw) == ("INVALID_ARGUMENT; tensor shape dimension 1 mismatch; expected 4 "
                                 "but have 8; expected shape `3x4`, actual shape `3x8`")
    assert iree_message("Error invoking function: <vm>:0: FAILED_PRECONDITION; what; \n"
                        "[ 0] bytecode module@1:64 -") == "FAILED_PRECONDITION; what"


class Float64(torch.nn.Module):
    def forward(self, x):
        return ((x.to(torch.float64) * 3).sqrt(),
                torch.ops.aten._safe_softmax(x, -1, dtype=torch.float64),
                x.shape[-1] ** 0.5)


def test_float64_is_computed_in_float64():
    """IREE's default demoted float64 to float32 and failed on every float64
    output ("buffer view byte length 120 exceeds backing buffer byte length 60")."""
    compiled = anyshape.compile(Float64().eval(), (torch.rand(2, 5),),
                                dynamic_shapes={"x": {0: Dim("b"), 1: Dim("n")}})
    for shape in [(1, 1), (3, 7), (2, 33)]:
        x = torch.rand(*shape)
        got, expected = compiled(x), Float64()(x)
        for have, want in zip(got[:2], expected[:2]):
            assert have.dtype == torch.float64
            torch.testing.assert_close(have, want, atol=1e-15, rtol=1e-14)
        assert got[2] == expected[2]  # a Python float, in double precision
