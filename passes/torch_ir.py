"""Small queries and builders over torch-dialect IR shared by anyshape's passes."""

from anyshape.dialects import vtensor_shape
from anyshape.mlir import ir

# torch's ScalarType codes for the integer dtypes an index tensor may have.
TORCH_INT32, TORCH_INT64 = 3, 4
_DTYPE_CODE = {"si32": TORCH_INT32, "si64": TORCH_INT64}

# Ops computing each element of their result from the same element of their
# tensor operands (broadcast aside).
ELEMENTWISE = frozenset({
    "torch.aten.add.Tensor", "torch.aten.sub.Tensor", "torch.aten.mul.Tensor", "torch.aten.div.Tensor",
    "torch.aten.add.Scalar", "torch.aten.sub.Scalar", "torch.aten.mul.Scalar", "torch.aten.div.Scalar",
    "torch.aten.rsub.Scalar", "torch.aten.where.self", "torch.aten.where.ScalarSelf",
    "torch.aten.where.ScalarOther", "torch.aten.gelu", "torch.aten.tanh", "torch.aten.relu",
    "torch.aten.erf", "torch.aten.pow.Tensor_Scalar", "torch.aten.pow.Tensor_Tensor",
    "torch.aten.neg", "torch.aten.rsqrt", "torch.aten.sqrt", "torch.aten.exp", "torch.aten.sigmoid",
    "torch.aten.silu", "torch.aten.to.dtype", "torch.aten._to_copy", "torch.prims.convert_element_type",
    "torch.aten.clone", "torch.aten.contiguous", "torch.aten.masked_fill.Scalar",
    "torch.aten.masked_fill.Tensor", "torch.aten.eq.Scalar", "torch.aten.ne.Scalar",
    "torch.aten.gt.Scalar", "torch.aten.lt.Scalar", "torch.aten.ge.Scalar", "torch.aten.le.Scalar",
    "torch.aten.eq.Tensor", "torch.aten.ne.Tensor", "torch.aten.gt.Tensor", "torch.aten.lt.Tensor",
    "torch.aten.ge.Tensor", "torch.aten.le.Tensor", "torch.aten.logical_not",
    "torch.aten.bitwise_and.Tensor", "torch.aten.bitwise_or.Tensor", "torch.aten.bitwise_not",
    "torch.aten.maximum", "torch.aten.minimum", "torch.aten.abs", "torch.aten.log",
    "torch.tensor_static_info_cast", "torch.aten.full_like", "torch.aten.zeros_like",
    "torch.aten.ones_like", "torch.aten.empty_like",
})


def defining_op(value: ir.Value) -> ir.Operation | None:
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def users(value: ir.Value) -> list:
    """The ops using ``value``, its ``torch.bind_symbolic_shape`` annotations aside."""
    return [use.owner for use in value.uses if use.owner.name != "torch.bind_symbolic_shape"]


def create(name: str, result_type: ir.Type, *operands: ir.Value) -> ir.Value:
    """The one result of a new ``name`` op at the current insertion point."""
    return ir.Operation.create(name, results=[result_type], operands=list(operands)).result


def constant_int(value: ir.Value) -> int | None:
    op = defining_op(value)
    if op is None or op.name != "torch.constant.int":
        return None
    return ir.IntegerAttr(op.attributes["value"]).value


def is_none(value: ir.Value) -> bool:
    op = defining_op(value)
    return op is not None and op.name == "torch.constant.none"


def size_query(value: ir.Value) -> tuple[ir.Value, int] | None:
    """(tensor, non-negative dim) when ``value`` is ``aten.size.int tensor, <constant>``."""
    op = defining_op(value)
    if op is None or op.name != "torch.aten.size.int":
        return None
    tensor, dim_value = op.operands
    dim = constant_int(dim_value)
    shape = vtensor_shape(tensor.type)
    if dim is None or shape is None:
        return None
    rank = len(shape[0])
    dim = dim + rank if dim < 0 else dim
    return (tensor, dim) if 0 <= dim < rank else None


def dtype_code(vtensor_dtype: str) -> int | None:
    return _DTYPE_CODE.get(vtensor_dtype)


def vtensor_type(sizes: list, dtype: str) -> ir.Type:
    dims = ",".join("?" if s is None else str(s) for s in sizes)
    return ir.Type.parse(f"!torch.vtensor<[{dims}],{dtype}>")


def static_info_cast(value: ir.Value, to_type: ir.Type) -> ir.Value:
    """``value`` as ``to_type`` (same data, more or less static shape information)."""
    if value.type == to_type:
        return value
    return ir.Operation.create("torch.tensor_static_info_cast", results=[to_type],
                               operands=[value]).result


def int_type() -> ir.Type:
    return ir.Type.parse("!torch.int")


def int_constant(value: int) -> ir.Value:
    """``torch.constant.int value`` at the current insertion point."""
    return ir.Operation.create("torch.constant.int", results=[int_type()], attributes={
        "value": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)}).result


def list_items(value: ir.Value) -> list[ir.Value] | None:
    """The elements of a ``torch.prim.ListConstruct``; None for any other list."""
    op = defining_op(value)
    if op is None or op.name != "torch.prim.ListConstruct":
        return None
    return list(op.operands)


def bool_constant(value: bool) -> ir.Value:
    return ir.Operation.create("torch.constant.bool", results=[ir.Type.parse("!torch.bool")],
                               attributes={"value": ir.BoolAttr.get(value)}).result


def none_constant() -> ir.Value:
    return ir.Operation.create("torch.constant.none", results=[ir.Type.parse("!torch.none")]).result


def functions(module_op: ir.Operation):
    """The module's single-block ``func.func`` ops (the ones the passes rewrite)."""
    for op in module_op.regions[0].blocks[0].operations:
        if op.operation.name == "func.func" and len(op.operation.regions[0].blocks) == 1:
            yield op.operation
