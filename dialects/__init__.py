"""The ``anyshape`` dialect: ops that state shape facts the torch dialect leaves implicit.

Defined in Python through the upstream bindings' IRDL-backed ``dialects.ext``;
its ops therefore print in generic form (``"anyshape.op"(...) {...}``). Every
context anyshape creates loads the dialect, so IR holding its ops parses
anywhere in the tool chain; ``anyshape-lower`` rewrites them to upstream ops
before IREE sees the IR.

The Python verifier runs before IRDL's own checks, so each verifier checks
the presence and kind of everything it reads and reports, never raises.
"""


import re
from typing import Any

from anyshape.mlir import ext, ir, load_torch_conversion_dialect, torch_ops


class AnyshapeDialect(ext.Dialect, name="anyshape"):
    pass


# The function argument attribute ``anyshape-lower`` states an argument's
# dynamic dims in (one ``{axis, expr, min, max, divisor}`` per dim; read by
# ``anyshape.iree.dim_facts`` and ``ir_signature.py``).
DIMS_ATTR = "anyshape.dims"


def computed_from_constants(value, depth: int = 0) -> bool:
    """``value`` (torch-dialect IR, in torch-mlir's bindings or IREE's) is
    computed from the model's constants alone: a ``torch.vtensor.literal``, or
    torch ops on such (the fused Q, K and V projection's ``cat`` of weights).
    IREE hoists what is computed from it into the module's initializers."""
    op = value.owner
    name = getattr(op, "name", None)  # a block argument's owner is its block
    if name is None or depth > 8:
        return False
    if name == "torch.vtensor.literal" or name.startswith("torch.constant."):
        return True
    if not (name.startswith("torch.aten.") or name == "torch.prim.ListConstruct"):
        return False
    return all(computed_from_constants(operand, depth + 1) for operand in op.operands)


# The ops torch.export writes for ``tensor.to(dtype)``.
DTYPE_CASTS = ("torch.aten._to_copy", "torch.prims.convert_element_type", "torch.aten.to.dtype")


def stored_literal(value):
    """The ``torch.vtensor.literal`` that ``value`` is, or that ``value`` casts
    to another dtype (a checkpoint's weight kept as stored, read through a
    cast: ``frontend/checkpoint.py``); else None. In torch-mlir's bindings or
    IREE's."""
    op = value.owner
    if getattr(op, "name", None) in DTYPE_CASTS:
        op = op.operands[0].owner
    return op if getattr(op, "name", None) == "torch.vtensor.literal" else None


def widened_literal(value):
    """The float16 or bfloat16 literal that ``value`` casts to float32 (a
    checkpoint's weight kept as stored, which the compile widens where it
    quantizes it); else None."""
    if getattr(value.owner, "name", None) not in DTYPE_CASTS:
        return None
    literal = stored_literal(value)
    stored = None if literal is None else vtensor_shape(literal.results[0].type)
    widened = vtensor_shape(value.type)
    if stored is None or stored[1] not in ("f16", "bf16") or widened is None \
            or widened[1] != "f32":
        return None
    return literal


_VTENSOR = re.compile(r"!torch\.vtensor<\[([^\]]*)\],(\w+)>")


def vtensor_shape(type_: ir.Type) -> tuple[list[int | None], str] | None:
    """([size or None for '?'], dtype) of a ranked ``!torch.vtensor``; None otherwise."""
    match = _VTENSOR.fullmatch(str(type_))
    if not match:
        return None
    sizes = [None if d.strip() == "?" else int(d) for d in match.group(1).split(",") if d.strip()]
    return sizes, match.group(2)


# torch_c bridges signed/unsigned torch dtypes to signless builtin integers.
_BUILTIN_ELEMENT = {"f16": "f16", "bf16": "bf16", "f32": "f32", "f64": "f64", "i1": "i1",
                    "si8": "i8", "si16": "i16", "si32": "i32", "si64": "i64", "ui8": "ui8"}


def builtin_tensor_text(type_) -> str | None:
    """The builtin tensor type ``torch_c`` bridges a ``!torch.vtensor`` to, as text.

    Text, read from the type's text, so that IR held in IREE's bindings (a
    separate context and type hierarchy) can use it too; None for unranked or
    unknown dtypes."""
    shape = vtensor_shape(type_)
    if shape is None or shape[1] not in _BUILTIN_ELEMENT:
        return None
    sizes, dtype = shape
    dims = "x".join("?" if s is None else str(s) for s in sizes)
    return f"tensor<{dims + 'x' if dims else ''}{_BUILTIN_ELEMENT[dtype]}>"


def _report(op, check) -> bool:
    """Run ``check(op)`` (an error string or None) and turn it into a diagnostic."""
    try:
        problem = check(op)
    except Exception as error:  # a malformed op must give a diagnostic, not a crash
        problem = f"malformed op: {type(error).__name__}: {error}"
    if problem:
        op.location.emit_error(f"'{op.operation.name}' op {problem}")
        return False
    return True


class IotaLikeOp(AnyshapeDialect.Operation, name="iota_like"):
    """``arange_like``: the 1-D integer tensor ``[0, 1, ..., size(ref, dim) - 1]``.

    Its length is read from ``ref`` at run time, so no shape is baked into a
    constant and no scalar size has to flow through the program::

        %pos = "anyshape.iota_like"(%x) {dim = 1 : i64}
            : (!torch.vtensor<[?,?,768],f32>) -> !torch.vtensor<[?],si64>

    ``dim`` must name an axis of ``ref``; the result is a 1-D ``si64`` or
    ``si32`` vtensor whose size is ``ref``'s size along ``dim`` (``?`` when that
    is dynamic).
    """

    ref: ext.Operand[Any]
    dim: ir.IntegerAttr
    result: ext.Result[Any] = ext.result()

    def verify_invariants(self) -> bool:
        return _report(self, IotaLikeOp.problem)

    def problem(self) -> str | None:
        if "dim" not in self.attributes or not isinstance(self.attributes["dim"], ir.IntegerAttr):
            return "requires an integer attribute 'dim'"
        dim = ir.IntegerAttr(self.attributes["dim"]).value
        ref = vtensor_shape(self.operands[0].type)
        if ref is None:
            return f"expects 'ref' to be a ranked !torch.vtensor, got {self.operands[0].type}"
        sizes, _ = ref
        if not 0 <= dim < len(sizes):
            return f"dim {dim} is out of range for a rank-{len(sizes)} 'ref' (expected 0..{len(sizes) - 1})"
        result = vtensor_shape(self.results[0].type)
        if result is None or len(result[0]) != 1 or result[1] not in ("si64", "si32"):
            return f"expects a 1-D si64 or si32 !torch.vtensor result, got {self.results[0].type}"
        if result[0][0] != sizes[dim]:
            expected = "?" if sizes[dim] is None else sizes[dim]
            got = "?" if result[0][0] is None else result[0][0]
            return f"result size {got} does not match size {expected} of 'ref' along dim {dim}"
        return None


def iota_like(ref: ir.Value, dim: int, result_type: ir.Type) -> ir.Value:
    """A new ``anyshape.iota_like`` at the current insertion point."""
    return IotaLikeOp(ref, ir.IntegerAttr.get(ir.IntegerType.get_signless(64), dim),
                      result_type).result


def load_anyshape_dialect() -> None:
    """Load the dialect into the current context (a no-op if it is already there)."""
    if ir.Context.current.is_dialect_loaded(AnyshapeDialect.DIALECT_NAMESPACE):
        return
    AnyshapeDialect.load()


def new_context() -> ir.Context:
    """A context with every dialect anyshape's IR can hold.

    Upstream dialects come from the bindings' registry; ``torch`` must be
    registered by hand; the anyshape dialect is IRDL-defined and loaded per
    context.
    """
    ctx = ir.Context()
    torch_ops.register_dialect(ctx)
    ctx.allow_unregistered_dialects = False
    with ctx, ir.Location.unknown():
        load_anyshape_dialect()
        load_torch_conversion_dialect()
    return ctx
