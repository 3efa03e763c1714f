"""anyshape.passes.print_flops.flops: symbolic FLOP counts of torch-dialect IR, checked by hand and
against torch.utils.flop_counter.FlopCounterMode.

FlopCounterMode counts only the matmul family (mm/addmm/bmm/baddbmm, 2*M*N*K,
no bias adds) and the fused attention kernels, so it is compared with
``report.matmul``, the 2*M*N*K part of our count.
"""

import pytest
import sympy
import torch
from models import roberta_inputs, small_roberta
from torch.export import Dim
from torch.utils.flop_counter import FlopCounterMode

import anyshape
from anyshape.passes.print_flops.flops import count_flops
from anyshape.mlir import module_to_bytecode, parse_module
from anyshape.dialects import new_context


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.act = torch.nn.GELU()
        self.down = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.down(self.act(self.up(x)))


@pytest.fixture(scope="module")
def mlp():
    model = MLP().eval()
    batch, seq = Dim("batch", min=1, max=8), Dim("seq", min=1, max=64)
    compiled = anyshape.compile(model, (torch.randn(2, 5, 16),),
                                dynamic_shapes={"x": {0: batch, 1: seq}})
    return model, count_flops(compiled.ir("import"))


def _symbol_at(report, argument, axis):
    (symbol,) = [s for s, root in report.symbols.items() if root == (argument, axis)]
    return symbol


def test_mlp_counts_match_the_hand_formula(mlp):
    _, report = mlp
    b, l = _symbol_at(report, 0, 0), _symbol_at(report, 0, 1)
    # up: 2*16*32 per token + 32 bias adds; gelu: 32; down: 2*32*8 + 8.
    up, act, down = 2 * 16 * 32 + 32, 32, 2 * 32 * 8 + 8
    assert report.unknown == []
    assert sympy.expand(report.total - (up + act + down) * b * l) == 0
    assert sympy.expand(report.matmul - (2 * 16 * 32 + 2 * 32 * 8) * b * l) == 0
    assert sympy.expand(report.by_op["torch.aten.linear"] - (up + down) * b * l) == 0
    assert sympy.expand(report.by_op["torch.aten.gelu"] - act * b * l) == 0
    assert report.op_counts == {"torch.aten.linear": 2, "torch.aten.gelu": 1}
    assert report.at_shapes([(3, 7, 16)]) == (up + act + down) * 3 * 7
    assert report.evaluate(**{b.name: 3, l.name: 7}) == (up + act + down) * 21


@pytest.mark.parametrize("batch,length", [(1, 1), (3, 7), (8, 64)])
def test_mlp_matmul_part_matches_flop_counter_mode(mlp, batch, length):
    model, report = mlp
    x = torch.randn(batch, length, 16)
    with FlopCounterMode(display=False) as counter:
        model(x)
    expected = counter.get_total_flops()
    ours = report.evaluate_matmul(**report.bindings_at([x]))
    print(f"B={batch} L={length}: FlopCounterMode {expected}, report.matmul {ours}")
    assert expected > 0 and ours == expected


@pytest.fixture(scope="module")
def eager_roberta():
    # Eager attention: on CPU, FlopCounterMode counts the fused SDPA kernel
    # (_scaled_dot_product_flash_attention_for_cpu) as 0, while the import
    # decomposes attention into bmms that are counted.
    model = small_roberta(max_positions=130)
    model.set_attn_implementation("eager")
    ids, mask = roberta_inputs(2, 8)
    batch, seq = Dim("batch", min=1, max=4), Dim("seq", min=1, max=128)
    module = anyshape.import_torch(model, (ids,), {"attention_mask": mask},
                                   dynamic_shapes={"input_ids": {0: batch, 1: seq},
                                                   "attention_mask": {0: batch, 1: seq}})
    return model, count_flops(module)


@pytest.mark.parametrize("batch,length", [(1, 1), (2, 9), (3, 33)])
def test_roberta_matmul_part_matches_flop_counter_mode(eager_roberta, batch, length):
    model, report = eager_roberta
    assert report.unknown == []
    # Attention scores and their product with V grow with L^2.
    seq = _symbol_at(report, 0, 1)
    assert sympy.degree(report.matmul, seq) == 2
    ids, mask = roberta_inputs(batch, length)
    with FlopCounterMode(display=False) as counter:
        model(ids, attention_mask=mask)
    ours = report.evaluate_matmul(**report.bindings_at([ids, mask]))
    assert ours == counter.get_total_flops()
    assert report.at_shapes([ids, mask]) > ours  # layer norms, softmax, adds, ...


TWO_ARGS = """
func.func @f(%arg0: !torch.vtensor<[?,8],f32>, %arg1: !torch.vtensor<[?,8],f32>, %arg2: !torch.int) -> !torch.vtensor<[?,8],f32> {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0], affine_map<()[s0] -> (s0, 8)> : !torch.vtensor<[?,8],f32>
  torch.bind_symbolic_shape %arg1, [%s0], affine_map<()[s0] -> (s0 * 2, 8)> : !torch.vtensor<[?,8],f32>
  %0 = torch.aten.tanh %arg0 : !torch.vtensor<[?,8],f32> -> !torch.vtensor<[?,8],f32>
  %1 = torch.aten.nonzero %arg1 : !torch.vtensor<[?,8],f32> -> !torch.vtensor<[?,2],si64>
  return %0 : !torch.vtensor<[?,8],f32>
}
"""


def test_sources_module_text_bytecode_and_paths(tmp_path):
    ctx = new_context()
    module = parse_module(TWO_ARGS, ctx)
    path = tmp_path / "f.mlirbc"
    path.write_bytes(module_to_bytecode(module))
    func = module.body.operations[0].operation
    reports = [count_flops(module), count_flops(module.operation), count_flops(func),
               count_flops(TWO_ARGS), count_flops(module_to_bytecode(module)),
               count_flops(path), count_flops(str(path))]
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    for report in reports:
        assert report.function == "f"
        assert report.total == 8 * s0
        assert report.symbols == {s0: (0, 0)}


def test_unknown_ops_are_listed_not_counted():
    report = count_flops(TWO_ARGS)
    assert [u.name for u in report.unknown] == ["torch.aten.nonzero"]
    assert report.unknown[0].reason == "no FLOP rule for this op"
    assert "torch.aten.nonzero" not in report.by_op and not report.complete
    assert "unknown: 1\n    torch.aten.nonzero at 7:8: no FLOP rule" in str(report)


def test_at_shapes_checks_the_shapes():
    report = count_flops(TWO_ARGS)
    assert report.at_shapes([(5, 8), (10, 8), None]) == 40
    with pytest.raises(ValueError, match="has 3 arguments: expected 3 shapes, got 2"):
        report.at_shapes([(5, 8), (10, 8)])
    with pytest.raises(ValueError, match=r"argument 0: expected rank 2, got shape \(5,\)"):
        report.at_shapes([(5,), (10, 8), None])
    with pytest.raises(ValueError, match="argument 0 dim 1 is 8 = 8 for these shapes; got 9"):
        report.at_shapes([(5, 9), (10, 8), None])
    with pytest.raises(ValueError, match=r"argument 1 dim 0 is 2\*s0 = 10 for these shapes; got 7"):
        report.at_shapes([(5, 8), (7, 8), None])
    with pytest.raises(ValueError, match="argument 2 is not a tensor"):
        report.at_shapes([(5, 8), (10, 8), (1,)])
    with pytest.raises(ValueError, match="8\\*s0 needs a value for s0"):
        report.evaluate()
    with pytest.raises(ValueError, match="has no symbol s1 \\(its symbols: s0\\)"):
        report.evaluate(s0=1, s1=2)


def test_shared_symbol_must_agree():
    text = TWO_ARGS.replace("(s0 * 2, 8)", "(s0, 8)")
    report = count_flops(text)
    with pytest.raises(ValueError, match="argument 1 dim 0 is s0, which argument 0 dim 0 "
                                         "set to 5; got 6"):
        report.at_shapes([(5, 8), (6, 8), None])


def test_a_module_of_several_functions_needs_a_name():
    text = TWO_ARGS + TWO_ARGS.replace("@f(", "@g(")
    with pytest.raises(ValueError, match=r"2 functions with a body \(f, g\): name one"):
        count_flops(text)
    assert count_flops(text, function="g").function == "g"
    with pytest.raises(ValueError, match=r"no function @h with a body \(functions: f, g\)"):
        count_flops(text, function="h")
