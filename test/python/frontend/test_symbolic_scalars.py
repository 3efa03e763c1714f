"""Scalars computed from sizes (``x * x.shape[-1] ** 0.5``, ``L % 8``, ``torch.sym_max``),
compiled with unbounded dims and run exactly at every size; and the error that
names the line where torch.export itself fixed a dim (``math.sqrt(L)``)."""

import math

import pytest
import torch
from torch.export import Dim
from torch._dynamo.exc import UserError, UserErrorType

import anyshape
from anyshape.errors import CompileError
from anyshape.frontend import export_diagnostics


class Scaled(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * self.scale(x)


def n(x):
    return x.shape[-1]


def b(x):
    return x.shape[0]


# Each is multiplied into x, so a wrong scalar shows as a wrong tensor.
SCALES = {
    # The BERT pattern that made encoders unexportable at variable length.
    "pow-half": lambda x: n(x) ** 0.5,
    "pow-minus-half": lambda x: n(x) ** -0.5,
    "pow-int": lambda x: n(x) ** 2,
    "pow-float": lambda x: (n(x) / 3) ** 1.5,
    "sym-sqrt": lambda x: torch.sym_sqrt(n(x)),
    "sym-sqrt-of-float": lambda x: torch.sym_sqrt(n(x) / 2),
    "sym-float": lambda x: 1 / torch.sym_float(n(x)),
    "truediv": lambda x: n(x) / 4,
    "floordiv": lambda x: n(x) // 3,
    # Python's % rounds toward -inf; torch-mlir's remainder.int truncates.
    "mod": lambda x: n(x) % 3,
    "mod-of-negative": lambda x: (-n(x)) % 4,
    "sym-max-int": lambda x: torch.sym_max(n(x), 4),
    "sym-min-int": lambda x: torch.sym_min(n(x), b(x)),
    "sym-max-float": lambda x: torch.sym_max(n(x) / 2, 1.5),
    "floor": lambda x: math.floor(n(x) / 3),
    "ceil": lambda x: math.ceil(n(x) / 3),
    "trunc": lambda x: torch.sym_int(n(x) / 3),
    "round": lambda x: round(n(x) / 4),
    "abs": lambda x: abs(b(x) - n(x)),
    "sym-sum": lambda x: torch.sym_sum([b(x), n(x), 3]),
    "less-than-float": lambda x: torch.sym_ite(n(x) / 2 < 3, 1.0, -1.0),
    "not-equal-float": lambda x: torch.sym_ite(n(x) / 2 != 2.5, 2, -1),
    "sym-not": lambda x: torch.sym_ite(torch.sym_not(n(x) > 3), 2.0, 3.0),
}

# Odd sizes and 1 on both dims, including sizes the comparisons flip at.
SIZES = [(1, 1), (2, 5), (3, 6), (1, 7), (4, 17), (2, 33), (1, 65)]


class AllScaled(torch.nn.Module):
    """Every scale of SCALES in one module: one build for all of them."""

    def forward(self, x):
        return tuple(x * SCALES[name](x) for name in sorted(SCALES))


DIMS = {"x": {0: Dim("batch"), 1: Dim("n")}}


@pytest.fixture(scope="module")
def all_scaled():
    """The bundle's build, or None when it fails: each case then builds alone,
    and the failure names it."""
    try:
        return anyshape.compile(AllScaled().eval(), (torch.randn(3, 5),), dynamic_shapes=DIMS)
    except CompileError:
        return None


@pytest.mark.parametrize("name", sorted(SCALES))
def test_scalar_from_sizes_is_exact_at_every_size(name, all_scaled):
    model = Scaled(SCALES[name]).eval()
    if all_scaled is not None:
        position = sorted(SCALES).index(name)
        compiled = lambda x: all_scaled(x)[position]  # noqa: E731
    else:
        compiled = anyshape.compile(model, (torch.randn(3, 5),), dynamic_shapes=DIMS)
    for size in SIZES:
        x = torch.randn(*size)
        torch.testing.assert_close(compiled(x), model(x), atol=1e-6, rtol=1e-6,
                                   msg=lambda m: f"{name} at {size}: {m}")


class ScaledEncoderInput(torch.nn.Module):
    """Embeddings scaled by sqrt(hidden) and positions by an arange of the length:
    a size read into a float and into a tensor in one model."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 8)

    def forward(self, ids):
        h = self.embed(ids) * h_scale(self.embed.weight.shape[-1])
        positions = torch.arange(ids.shape[1]) / ids.shape[1] ** 0.5
        return h + positions[None, :, None]


def h_scale(hidden):
    return hidden ** 0.5


def test_length_scaled_positions_at_odd_lengths():
    model = ScaledEncoderInput().eval()
    compiled = anyshape.compile(model, (torch.randint(0, 50, (2, 9)),),
                                dynamic_shapes={"ids": {0: Dim("batch"), 1: Dim("seq")}})
    for batch, length in [(1, 1), (1, 17), (3, 33), (2, 333)]:
        ids = torch.randint(0, 50, (batch, length))
        torch.testing.assert_close(compiled(ids), model(ids), atol=1e-6, rtol=1e-6)


def test_import_leaves_no_python_scalar_call_to_torch_mlir():
    """Every rewritten scalar is a torch op IREE lowers, not an opaque operator."""
    model = Scaled(lambda x: torch.sym_max(n(x) % 3, 1) * n(x) ** 0.5).eval()
    text = str(anyshape.import_torch(model, (torch.randn(2, 5),),
                                     dynamic_shapes={"x": {1: Dim("n")}}))
    assert "torch.operator" not in text
    assert "torch.aten.sqrt.int" in text and "torch.prim.max.int" in text
    assert "torch.aten.floordiv.int" in text  # Python's %, built from floor division


class MathSqrt(torch.nn.Module):
    def forward(self, x):
        return x * math.sqrt(x.shape[-1])


def test_dim_fixed_by_math_sqrt_names_line_dim_and_fix():
    with pytest.raises(CompileError) as caught:
        anyshape.compile(MathSqrt().eval(), (torch.randn(2, 5),),
                         dynamic_shapes={"x": {1: Dim("n")}})
    message = str(caught.value)
    assert caught.value.stage == "export"
    assert "torch.export fixed dim 'n' (x.size()[1]) to its example value 5" in message
    assert f"{__file__}:" in message and "return x * math.sqrt(x.shape[-1])" in message
    assert "size ** 0.5 or torch.sym_sqrt(size) for math.sqrt(size)" in message


class TokenLoopWithMask(torch.nn.Module):
    """Mamba's slow path: a Python loop over the tokens, with a mask of the same
    Dim (whose equality guard with the ids' length torch logs first)."""

    def forward(self, x, mask):
        state, outputs = torch.zeros_like(x[:, 0]), []
        for index in range(x.shape[1]):
            state = 0.5 * state + x[:, index]
            outputs.append(state)
        return torch.stack(outputs, dim=1) * mask


def test_dim_fixed_by_a_token_loop_names_the_loop_with_a_mask_of_the_same_dim():
    x = torch.randn(2, 5)
    with pytest.raises(CompileError) as caught:
        anyshape.compile(TokenLoopWithMask().eval(), (x, torch.ones_like(x)),
                         dynamic_shapes={"x": {1: Dim("seq")}, "mask": {1: Dim("seq")}})
    message = str(caught.value)
    assert "Constraints violated" not in message
    assert "torch.export fixed dim 'seq' (x.size()[1]) to its example value 5" in message
    assert "for index in range(x.shape[1]):" in message
    assert "a Python loop over range(size)" in message


def test_a_fixed_dim_torch_recorded_no_guard_for_is_still_named():
    """torch's own line for a dim it fixed, where the shape log has no guard."""
    text = ("Constraints violated (seq)! For more information, run with TORCH_LOGS=\"+dynamic\".\n"
            "  - You marked seq as dynamic but your code specialized it to be a constant (16). "
            "If you're using mark_dynamic, either remove it or use maybe_mark_dynamic.\n")
    message = str(export_diagnostics.export_error(
        UserError(UserErrorType.CONSTRAINT_VIOLATION, text), export_diagnostics.ShapeLog(),
        {"ids": {1: Dim("seq")}, "mask": {1: Dim("seq")}}, ["ids", "mask"]))
    assert "torch.export fixed dim 'seq' (ids.size()[1], mask.size()[1]) to its example " \
           "value 16 (where, torch did not record)" in message


class BranchOnLength(torch.nn.Module):
    def forward(self, x):
        return x * 2 if x.shape[-1] < 10 else x


def test_dim_restricted_by_a_branch_names_the_condition_and_torchs_fix():
    with pytest.raises(CompileError) as caught:
        anyshape.compile(BranchOnLength().eval(), (torch.randn(2, 5),),
                         dynamic_shapes={"x": {1: Dim("n")}})
    message = str(caught.value)
    assert "could not keep dim 'n' (x.size()[1]) dynamic: the condition " \
           "L['x'].size()[1] < 10 holds only for some sizes" in message
    assert "return x * 2 if x.shape[-1] < 10 else x" in message
    assert "n = Dim('n', max=9)" in message


class NestedCache(torch.nn.Module):
    """A hand-written decode step's shape: keys and values passed as a list."""

    def forward(self, ids, past):
        new = ids[:, None, :, None].float().expand(-1, 2, -1, 4)
        keys, values = torch.cat([past[0], new], dim=2), torch.cat([past[1], new], dim=2)
        return keys * 2 + values if keys.shape[2] > 8 else keys - values


def test_dims_of_a_nested_input_are_named_and_what_they_declare_is_not_blamed():
    """past[0] and past[1] share ids' Dim("batch") and one Dim("past"): torch's
    guards relating them hold by that declaration. Only the branch is reported,
    with the user's dims (it named L['past'][1].size()[0] and blamed those)."""
    batch, past, new = Dim("batch"), Dim("past"), Dim("new")
    with pytest.raises(CompileError) as caught:
        anyshape.compile(NestedCache().eval(),
                         (torch.ones(2, 3, dtype=torch.long), [torch.randn(2, 2, 5, 4)] * 2),
                         dynamic_shapes={"ids": {0: batch, 1: new},
                                         "past": [{0: batch, 2: past}, {0: batch, 2: past}]})
    message = str(caught.value)
    assert "could not keep dims 'new' (ids.size()[1]) and 'past' (past[0].size()[2])" in message
    assert "if keys.shape[2] > 8" in message
    assert "could not keep dim L[" not in message and "Eq(" not in message, message


class MaskedAndShifted(torch.nn.Module):
    def forward(self, h, mask):
        return h * mask[:, -h.shape[1]:][:, :, None], mask[:, 1:]


@pytest.mark.parametrize("seq_max", [None, 100])
def test_a_mask_shifted_by_one_compiles_at_every_length(seq_max):
    """torch.export refused ``mask[:, 1:]`` at an unbounded length: its layout
    probe of the slice recorded L - 1 != 1, false at L = 2 (layout_probes.py)."""
    batch, length = Dim("batch"), Dim("seq", max=seq_max) if seq_max else Dim("seq")
    model = MaskedAndShifted().eval()
    compiled = anyshape.compile(model, (torch.randn(2, 16, 8), torch.ones(2, 16)),
                                dynamic_shapes=({0: batch, 1: length}, {0: batch, 1: length}))
    for rows, columns in ((1, 2), (3, 7), (2, 1)):
        h, mask = torch.randn(rows, columns, 8), torch.randint(0, 2, (rows, columns)).float()
        for got, expected in zip(compiled(h, mask), model(h, mask)):
            torch.testing.assert_close(got, expected)


def test_other_export_failures_are_compile_errors_of_stage_export():
    class Unexportable(torch.nn.Module):
        def forward(self, x):
            return x + 1, torch.float32  # a dtype is no output torch.export can return

    with pytest.raises(CompileError, match=r"stage 'export' failed: torch.export could not "
                                           r"export the model \(.*\): Found <class "
                                           r"'torch.dtype'> in output"):
        anyshape.compile(Unexportable().eval(), (torch.randn(3),))


class ReflectPad(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.pad(x, (2, 3), mode="reflect")


class ScalarAtTensorOperand(torch.nn.Module):
    """Sizes where the op's schema takes a Tensor: an int (reflection padding's
    decomposition has ``aten.sub.Tensor(L - 1, index)``) and a float against an
    integer tensor, whose result eager computes in float32."""

    def forward(self, x, ids):
        left = torch.ops.aten.sub.Tensor(x.shape[1] - 1, ids)
        right = torch.ops.aten.mul.Tensor(x.shape[1] / 2, ids)
        return left, right


def test_reflection_padding_at_odd_sizes():
    model = ReflectPad().eval()
    compiled = anyshape.compile(model, (torch.randn(3, 10),),
                                dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.AUTO}})
    for size in [(2, 4), (3, 10), (2, 17), (5, 65)]:
        x = torch.randn(*size)
        torch.testing.assert_close(compiled(x), model(x), atol=0, rtol=0)


def test_size_at_a_tensor_operand_keeps_eagers_dtype():
    model = ScalarAtTensorOperand().eval()
    compiled = anyshape.compile(model, (torch.randn(2, 9), torch.arange(6).reshape(2, 3)),
                                dynamic_shapes={"x": {0: Dim("b"), 1: Dim("n")},
                                                "ids": {0: Dim("b"), 1: Dim("m")}})
    for n_, m in [(5, 1), (7, 4), (33, 17)]:
        x, ids = torch.randn(3, n_), torch.randint(-50, 50, (3, m))
        for got, expected in zip(compiled(x, ids), model(x, ids)):
            assert got.dtype == expected.dtype
            torch.testing.assert_close(got, expected, atol=0, rtol=0)


class NearestByFraction(torch.nn.Module):
    """The output length is floor(L * 1.7): a float size rounded to an int, on the host."""

    def forward(self, x):
        return torch.nn.functional.interpolate(x, scale_factor=1.7, mode="nearest")


def test_interpolation_by_a_fractional_scale_at_odd_lengths():
    model = NearestByFraction().eval()
    compiled = anyshape.compile(model, (torch.randn(2, 3, 4),),
                                dynamic_shapes={"x": {0: Dim("batch"), 2: Dim("length")}})
    for batch, length in [(1, 1), (2, 7), (3, 10), (1, 33), (2, 333)]:
        x = torch.randn(batch, 3, length)
        torch.testing.assert_close(compiled(x), model(x), atol=0, rtol=0)
