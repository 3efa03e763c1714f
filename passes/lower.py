"""``anyshape-lower``: anyshape ops to upstream ops, symbolic-shape bookkeeping resolved.

- ``anyshape.iota_like %ref {dim}`` becomes the dynamic iota
  ``linalg.generic`` over ``tensor.empty(tensor.dim %ref, dim)`` yielding
  ``linalg.index 0``, bridged to and from the torch dialect with ``torch_c``.
- ``torch.bind_symbolic_shape`` on values other than function arguments is
  erased (their facts are already in the IR's shapes and in the shape passes'
  rewrites). Bindings on arguments, with their ``torch.symbolic_int`` ops, are
  kept by default: IREE's torch input turns them into ``util.assume.int``
  range facts. ``keep-argument-bindings=false`` erases them too, for
  torch-mlir's own linalg backend pipeline, which cannot lower them.
"""

import dataclasses

from anyshape.dialects import vtensor_shape
from anyshape.mlir import ir
from anyshape.passes import ModulePass, apply_patterns, register

_BUILTIN_ELEMENT = {"f16": "f16", "bf16": "bf16", "f32": "f32", "f64": "f64", "i1": "i1",
                    "si8": "i8", "si16": "i16", "si32": "i32", "si64": "i64", "ui8": "ui8"}


def builtin_tensor_type(vtensor: ir.Type) -> ir.Type | None:
    """The builtin tensor type torch_c bridges ``vtensor`` to (signless integers)."""
    shape = vtensor_shape(vtensor)
    if shape is None or shape[1] not in _BUILTIN_ELEMENT:
        return None
    sizes, dtype = shape
    dims = "x".join("?" if s is None else str(s) for s in sizes)
    return ir.Type.parse(f"tensor<{dims + 'x' if dims else ''}{_BUILTIN_ELEMENT[dtype]}>")


def _create(name: str, results, operands, attributes=None) -> ir.Operation:
    return ir.Operation.create(name, results=results, operands=operands,
                               attributes=attributes or {})


def lower_iota_like(op, rewriter) -> bool:
    ref = op.operands[0]
    dim = ir.IntegerAttr(op.attributes["dim"]).value
    ref_tensor_type = builtin_tensor_type(ref.type)
    result_type = op.results[0].type
    result_tensor_type = builtin_tensor_type(result_type)
    if ref_tensor_type is None or result_tensor_type is None:
        return False
    element = ir.RankedTensorType(result_tensor_type).element_type
    index = ir.IndexType.get()
    with ir.InsertionPoint(op), op.location:
        ref_tensor = _create("torch_c.to_builtin_tensor", [ref_tensor_type], [ref]).result
        sizes = []
        if ir.RankedTensorType(result_tensor_type).is_dynamic_dim(0):
            position = _create("arith.constant", [index], [],
                               {"value": ir.IntegerAttr.get(index, dim)}).result
            sizes.append(_create("tensor.dim", [index], [ref_tensor, position]).result)
        empty = _create("tensor.empty", [result_tensor_type], sizes).result
        identity = ir.AffineMapAttr.get(ir.AffineMap.get_identity(1))
        generic = ir.Operation.create(
            "linalg.generic", results=[result_tensor_type], operands=[empty],
            attributes={
                "indexing_maps": ir.ArrayAttr.get([identity]),
                "iterator_types": ir.ArrayAttr.get([ir.Attribute.parse("#linalg.iterator_type<parallel>")]),
                "operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 1]),
            },
            regions=1)
        body = generic.regions[0].blocks.append(element)
        with ir.InsertionPoint(body):
            position = _create("linalg.index", [index], [], {"dim": ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), 0)}).result
            value = _create("arith.index_cast", [element], [position]).result
            _create("linalg.yield", [], [value])
        iota = _create("torch_c.from_builtin_tensor", [result_type], [generic.result]).result
    rewriter.replace_op(op, [iota])
    return True


def _is_function_argument(value: ir.Value) -> bool:
    return isinstance(value.owner, ir.Block)


@register
@dataclasses.dataclass
class LowerPass(ModulePass):
    argument = "anyshape-lower"
    description = ("Lower anyshape ops to tensor/linalg (through torch_c) and erase "
                   "symbolic-shape bookkeeping that IREE and torch-mlir do not need")
    keep_argument_bindings: bool = True

    def apply(self, module_op):
        apply_patterns(module_op, [("anyshape.iota_like", lower_iota_like)])
        self._resolve_symbolic_shapes(module_op)

    def _resolve_symbolic_shapes(self, module_op) -> None:
        bindings, symbols = [], []

        def visit(op):
            if op.name == "torch.bind_symbolic_shape":
                if not (self.keep_argument_bindings and _is_function_argument(op.operands[0])):
                    bindings.append(op)
            elif op.name == "torch.symbolic_int" and not self.keep_argument_bindings:
                symbols.append(op)
            return ir.WalkResult.ADVANCE

        module_op.walk(visit)
        for op in bindings + symbols:  # bindings first: they use the symbolic ints
            op.erase()
