"""The op knowledge in passes/torch_ir/ agrees with torch-mlir's generated op
classes, and the passes build torch ops through those classes: generic
``ir.Operation.create`` stays in the one adapter (``values.rebuilt``)."""
import inspect
import re
from pathlib import Path

import pytest

from anyshape.mlir import ir, torch_ops
from anyshape.dialects import new_context
from anyshape.passes.torch_ir.ops import REDUCTIONS, keepdim, reduced_axes
from anyshape.passes.torch_ir.values import is_a, rebuilt, typed

ROOT = Path(__file__).resolve().parents[3]

_CLASSES = {cls.OPERATION_NAME: cls for cls in vars(torch_ops).values()
            if isinstance(cls, type) and getattr(cls, "OPERATION_NAME", None)
            and not cls.__name__.endswith("Adaptor")}


def _builder_parameters(cls) -> tuple[list[str], list[str]]:
    """The generated builder's result types and operands, by name (a reduction
    has no attributes: its operands start at ``self_``)."""
    parameters = [p for p in list(inspect.signature(cls.__init__).parameters)[1:]
                  if p not in ("loc", "ip")]
    first_operand = parameters.index("self_")
    return parameters[:first_operand], parameters[first_operand:]


def _with_distinct_operands(name: str, results: int):
    """A ``name`` op whose operands are distinct block arguments, so a by-name
    accessor can be matched to its position."""
    count = len(_builder_parameters(_CLASSES[name])[1])
    any_type = ir.Type.parse("!torch.vtensor<[2,3],f32>")
    func = ir.Module.parse(
        "func.func private @f(" + ", ".join(f"%a{i}: !torch.vtensor<[2,3],f32>"
                                             for i in range(count)) + ") { return }")
    block = func.body.operations[0].regions[0].blocks[0]
    with ir.InsertionPoint.at_block_begin(block):
        op = ir.Operation.create(name, results=[any_type] * results,
                                 operands=list(block.arguments))
    return func, op


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_operands_read_by_name(name):
    """reduced_axes and keepdim read ``dim`` and ``keepdim`` by name; hoisting
    moves a selection onto operand 0 as the input: every form must have them."""
    assert name in _CLASSES, f"{name}: no generated op class"
    result_names, _ = _builder_parameters(_CLASSES[name])
    assert len(result_names) == REDUCTIONS[name].results
    with new_context(), ir.Location.unknown():
        func, op = _with_distinct_operands(name, REDUCTIONS[name].results)
        view, operands = typed(op), list(op.operands)
        assert view.self_ == operands[0]
        assert view.dim in operands[1:]
        assert view.keepdim in operands[1:]


def test_reduction_readers_on_real_ir():
    text = """func.func @f(%x: !torch.vtensor<[2,3,4],f32>) -> !torch.vtensor<[2,1,4],f32> {
      %int1 = torch.constant.int -2
      %dims = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
      %true = torch.constant.bool true
      %int0 = torch.constant.int 0
      %r = torch.aten.var.correction %x, %dims, %int0, %true :
        !torch.vtensor<[2,3,4],f32>, !torch.list<int>, !torch.int, !torch.bool
        -> !torch.vtensor<[2,1,4],f32>
      return %r : !torch.vtensor<[2,1,4],f32>
    }"""
    with new_context():
        module = ir.Module.parse(text)
        op = next(o.operation for o in module.body.operations[0].regions[0].blocks[0].operations
                  if o.operation.name == "torch.aten.var.correction")
        assert reduced_axes(op, 3) == {1}
        assert keepdim(op) is True


def test_rebuilt_keeps_kind_and_attributes_unless_told():
    text = """func.func @f(%x: !torch.vtensor<[2,3],f32>, %y: !torch.vtensor<[2,3],f32>)
        -> !torch.vtensor<[2,3],f32> {
      %r = torch.aten.mul.Tensor %x, %y {tag = 7 : i64} :
        !torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
      return %r : !torch.vtensor<[2,3],f32>
    }"""
    with new_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        block = module.body.operations[0].regions[0].blocks[0]
        mul = block.operations[0].operation
        x, y = block.arguments
        with ir.InsertionPoint(mul):
            same = rebuilt(mul, [y, x])
            narrower = rebuilt(mul, [x, x], [ir.Type.parse("!torch.vtensor<[?,3],f32>")], {})
        assert same.name == "torch.aten.mul.Tensor" and list(same.operands) == [y, x]
        assert same.results[0].type == mul.results[0].type
        assert str(same.attributes["tag"]) == "7 : i64"
        assert str(narrower.results[0].type) == "!torch.vtensor<[?,3],f32>"
        assert "tag" not in narrower.attributes
        assert isinstance(typed(same), torch_ops.AtenMulTensorOp)


def test_passes_match_torch_ops_through_generated_classes():
    """An op is matched by its generated class (``is_a(op, torch_ops.AtenExpandOp)``),
    not by comparing its name with a string: a misspelled class fails on import,
    a misspelled name never matches. Op tables keyed by name (ops.py) aside."""
    by_name = re.compile(r"\.name (==|!=|in|not in) \(?\"torch\.")
    offenders = [f"{path.relative_to(ROOT)}:{number}"
                 for path in sorted((ROOT / "passes").rglob("*.py"))
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if by_name.search(line)]
    assert offenders == []


def test_passes_build_torch_ops_through_generated_classes():
    """A torch op named in a string is built generically only in the adapter;
    lower.py builds upstream tensor/linalg ops, which are not torch's."""
    generic = re.compile(r"Operation\.create\(\s*\"torch")
    offenders = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "passes").rglob("*.py"))
                 if generic.search(path.read_text())]
    assert offenders == []


def test_padding_proof_reads_each_fill_by_name():
    """held_number reads a constructor's fill value by name: new_full's is its
    third operand (its second is the size list, which it once read)."""
    from anyshape.passes.eliminate_padding.padding_safety import held_number

    t = "!torch.vtensor<[2,3],f32>"
    text = f"""func.func @f(%x: {t}) -> ({t}, {t}, {t}, !torch.vtensor<[],f32>) {{
      %fill = torch.constant.float -3.500000e+00
      %none = torch.constant.none
      %int2 = torch.constant.int 2
      %int3 = torch.constant.int 3
      %size = torch.prim.ListConstruct %int2, %int3 : (!torch.int, !torch.int) -> !torch.list<int>
      %full = torch.aten.full %size, %fill, %none, %none, %none, %none :
        !torch.list<int>, !torch.float, !torch.none, !torch.none, !torch.none, !torch.none -> {t}
      %like = torch.aten.full_like %x, %fill, %none, %none, %none, %none, %none :
        {t}, !torch.float, !torch.none, !torch.none, !torch.none, !torch.none, !torch.none -> {t}
      %new = torch.aten.new_full %x, %size, %fill, %none, %none, %none, %none :
        {t}, !torch.list<int>, !torch.float, !torch.none, !torch.none, !torch.none, !torch.none -> {t}
      %scalar = torch.aten.scalar_tensor %fill, %none, %none, %none, %none :
        !torch.float, !torch.none, !torch.none, !torch.none, !torch.none -> !torch.vtensor<[],f32>
      return %full, %like, %new, %scalar : {t}, {t}, {t}, !torch.vtensor<[],f32>
    }}"""
    with new_context():
        module = ir.Module.parse(text)
        block = module.body.operations[0].regions[0].blocks[0]
        returned = list(block.operations)[-1].operation.operands
        assert [held_number(v) for v in returned] == [-3.5] * 4


def test_is_a_matches_an_op_by_its_generated_classes():
    with new_context(), ir.Location.unknown():
        module = ir.Module.parse("""
          func.func @f(%x: !torch.vtensor<[2],f32>) -> !torch.vtensor<[2],f32> {
            %0 = torch.aten.neg %x : !torch.vtensor<[2],f32> -> !torch.vtensor<[2],f32>
            return %0 : !torch.vtensor<[2],f32>
          }""")
        neg = list(module.body.operations[0].regions[0].blocks[0].operations)[0]
        assert is_a(neg, torch_ops.AtenNegOp)
        assert is_a(neg.operation, torch_ops.AtenAbsOp, torch_ops.AtenNegOp)
        assert not is_a(neg, torch_ops.AtenAbsOp)
        assert not is_a(None, torch_ops.AtenNegOp)
        # A class that names no op is a mistake in the pass, not a non-match.
        with pytest.raises(TypeError, match="is_a: expected generated op classes.*OpView"):
            is_a(neg, ir.OpView)
