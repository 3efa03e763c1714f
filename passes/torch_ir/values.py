"""Values, types and function bodies of torch-dialect IR: who defines a value,
who reads it, tensor types, and the tidying every pass does to a function."""

from anyshape.mlir import ir, torch_ops

# torch's ScalarType codes for the integer dtypes an index tensor may have.
TORCH_INT32, TORCH_INT64 = 3, 4
_DTYPE_CODE = {"si32": TORCH_INT32, "si64": TORCH_INT64}


def defining_op(value: ir.Value) -> ir.Operation | None:
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def typed(op) -> ir.OpView:
    """``op`` as the class torch-mlir generates from the op's definition
    (``AtenScaledDotProductAttentionOp``, ``AtenSoftmaxIntOp``, ...), whose
    operands read by their names there: ``typed(op).is_causal``, not
    ``op.operands[5]``. Ops without such a class (anyshape's own) come back
    as a plain ``OpView``; their operands are read through ``op.operands[i]``."""
    return op.operation.opview


def is_a(op, *classes: type) -> bool:
    """Whether ``op`` (an operation, an op view, or None) is one of the
    generated op ``classes`` (``is_a(op, torch_ops.AtenExpandOp)``): a
    misspelled class fails on import, where a misspelled name never matches."""
    return op is not None and isinstance(op.operation.opview, classes)


def users(value: ir.Value) -> list:
    """The ops using ``value``, its ``torch.bind_symbolic_shape`` annotations aside."""
    return [use.owner for use in value.uses if not is_a(use.owner, torch_ops.BindSymbolicShapeOp)]


def rebuilt(op: ir.Operation, operands, result_types=None, attributes=None) -> ir.Operation:
    """A new op of ``op``'s kind on other ``operands`` (and result types), at the
    current insertion point, keeping ``op``'s attributes unless given others.

    For rewrites that re-issue whichever op of a family they matched (any
    elementwise op, mm or bmm, a reduction from ``ops.REDUCTIONS``), where no
    one generated class fits. An op of a known kind is built through its
    generated class instead: ``torch_ops.AtenUnsqueezeOp(result_type, x, dim)``.
    """
    op = op.operation
    if result_types is None:
        result_types = [result.type for result in op.results]
    if attributes is None:
        # Indexed: iterating ``op.attributes`` yields only the names.
        named = (op.attributes[i] for i in range(len(op.attributes)))
        attributes = {attribute.name: attribute.attr for attribute in named}
    return ir.Operation.create(op.name, results=list(result_types), operands=list(operands),
                               attributes=attributes)


def dtype_code(vtensor_dtype: str) -> int | None:
    return _DTYPE_CODE.get(vtensor_dtype)


def vtensor_type(sizes: list, dtype: str) -> ir.Type:
    dims = ",".join("?" if s is None else str(s) for s in sizes)
    return ir.Type.parse(f"!torch.vtensor<[{dims}],{dtype}>")


def static_info_cast(value: ir.Value, to_type: ir.Type) -> ir.Value:
    """``value`` as ``to_type`` (same data, more or less static shape information)."""
    if value.type == to_type:
        return value
    return torch_ops.TensorStaticInfoCastOp(to_type, value).result


def functions(module_op: ir.Operation):
    """The module's single-block ``func.func`` ops (the ones the passes rewrite)."""
    for op in module_op.regions[0].blocks[0].operations:
        if op.operation.name == "func.func" and len(op.operation.regions[0].blocks) == 1:
            yield op.operation


def hoist_argument_bindings(func: ir.Operation) -> None:
    """Argument bindings right after the symbolic ints they use, duplicates erased.

    torch.export can bind an argument again further down; the root queries go
    after the argument bindings (see ``ScalarBuilder._place_at_entry``), so
    those must all be at the top of the function.
    """
    block = func.regions[0].blocks[0]
    last_symbol, seen, bindings = None, set(), []
    for op in block.operations:
        op = op.operation
        if is_a(op, torch_ops.SymbolicIntOp):
            last_symbol = op
        elif is_a(op, torch_ops.BindSymbolicShapeOp) and isinstance(op.operands[0].owner, ir.Block):
            bindings.append(op)
    for op in bindings:
        key = (op.operands[0].arg_number, tuple(str(v.get_name()) for v in op.operands[1:]),
               str(op.attributes["shape_expressions"]))
        if key in seen:
            op.erase()
            continue
        seen.add(key)
        if last_symbol is not None:
            op.move_after(last_symbol)
            last_symbol = op


_ERASABLE_PREFIXES = ("torch.aten.", "torch.prim.ListConstruct", "torch.constant.",
                      "torch.tensor_static_info_cast", "anyshape.")


def erase_unused(func: ir.Operation) -> None:
    """Erase value-semantics ops the rewrites left unused but for their own
    ``torch.bind_symbolic_shape`` (the greedy driver keeps those alive)."""
    block = func.regions[0].blocks[0]
    for op in reversed(list(block.operations)):
        op = op.operation
        if not op.results or not op.name.startswith(_ERASABLE_PREFIXES):
            continue
        users = [use.owner for result in op.results for use in result.uses]
        if any(not is_a(user, torch_ops.BindSymbolicShapeOp) for user in users):
            continue
        for user in users:
            user.erase()
        op.erase()
