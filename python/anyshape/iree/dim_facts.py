"""The ``anyshape.dims`` argument facts (from ``anyshape-lower``) as IREE range assumptions.

IREE's torch input turns a ``torch.bind_symbolic_shape`` on an argument into
``util.assume.int`` on the argument's dims, but with every minimum replaced by
1 (a ``Dim("s", min=16)`` reaches IREE as ``umin = 1``), and torch-mlir's own
linalg pipeline cannot lower the bindings at all; so ``anyshape-lower``
records the facts as a plain attribute and this module states them to IREE
directly, in IREE's own ops (hence in IREE's bindings: torch-mlir's context
has no ``util`` or ``flow`` dialect). For each argument with facts, at the
function entry::

    %t = torch_c.to_builtin_tensor %arg
    %d = tensor.dim %t, %axis                          (one per distinct expr)
    %a = util.assume.int %d<umin = 16, umax = 512, udiv = 2> : index
    %s = flow.tensor.tie_shape %t : tensor<2x?xf32>{%a}
    %x = torch_c.from_builtin_tensor %s                (every other use of %arg)

Dims with equal expressions share one assumed value, across arguments too,
as IREE's own binding lowering does: IREE then knows they are equal. A dim
that is a constant multiple of a symbol already stated (``2*s`` after ``s``)
is computed from it (``arith.muli``), so IREE knows that relation as well.

``python -m anyshape.iree.dim_facts IN -o OUT`` runs the rewrite on a file
(the replay command of a failure here); without ``-o`` it prints the
rewritten IR (test/iree/dim-facts.mlir).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from anyshape.dialects import DIMS_ATTR, builtin_tensor_text
from anyshape.iree.rewrite_cli import rewrite_main
from anyshape.mlir import ir, rewrite_with_iree_bindings
from anyshape.stages import Workaround


# A canonical expr that is a constant multiple of one symbol: "2*s0".
_MULTIPLE = re.compile(r"(\d+)\*([A-Za-z_]\w*)")


def has_dim_facts(module: ir.Module) -> bool:
    """Whether a function of ``module`` (torch-mlir's bindings) has ``anyshape.dims``."""
    for op in module.body.operations:
        attributes = op.operation.attributes
        if op.operation.name == "func.func" and "arg_attrs" in attributes:
            if any(DIMS_ATTR in ir.DictAttr(d) for d in ir.ArrayAttr(attributes["arg_attrs"])):
                return True
    return False


def inject_dim_facts(in_file: Path, out_file: Path, text_file: Path | None = None) -> int:
    """Rewrite ``in_file`` (bytecode or text) into ``out_file`` (bytecode), and into
    ``text_file`` as text when given. Returns how many arguments got facts.

    Raises ValueError naming the function and argument when a fact does not fit
    the argument's type, or when IREE cannot read the IR."""
    def inject(iree_ir, module) -> int:
        return sum(_inject_function(iree_ir, op.operation) for op in module.body.operations
                   if op.operation.name == "func.func")

    return rewrite_with_iree_bindings(in_file, out_file, text_file, inject)


def _inject_function(iree_ir, function) -> int:
    if "arg_attrs" not in function.attributes:
        return 0
    name = iree_ir.StringAttr(function.attributes["sym_name"]).value
    block = function.regions[0].blocks[0]
    index = iree_ir.IndexType.get()
    axis_constants: dict[int, object] = {}
    assumed: dict[str, object] = {}  # expr -> its assumed value
    kept_attributes, count = [], 0

    def create(op_name, results, operands, attributes=None):
        return iree_ir.Operation.create(op_name, results=results, operands=operands,
                                        attributes=attributes or {})

    with iree_ir.InsertionPoint(block.operations[0]), function.location:
        all_attrs = iree_ir.ArrayAttr(function.attributes["arg_attrs"])
        for number, (argument, attrs) in enumerate(zip(block.arguments, all_attrs)):
            attrs = iree_ir.DictAttr(attrs)
            entries = {attrs[i].name: attrs[i].attr for i in range(len(attrs))}
            facts = entries.pop(DIMS_ATTR, None)
            kept_attributes.append(iree_ir.DictAttr.get(entries))
            if facts is None:
                continue
            where = f"@{name} argument {number} ({argument.type})"
            tensor_text = builtin_tensor_text(argument.type)
            if tensor_text is None:
                raise ValueError(f"{where}: {DIMS_ATTR} on a value that is not a ranked "
                                 f"!torch.vtensor of a known dtype")
            tensor_type = iree_ir.RankedTensorType(iree_ir.Type.parse(tensor_text))
            by_axis = {}
            for fact in iree_ir.ArrayAttr(facts):
                fact = _read_fact(iree_ir, iree_ir.DictAttr(fact), where)
                if not 0 <= fact["axis"] < tensor_type.rank or \
                        not tensor_type.is_dynamic_dim(fact["axis"]):
                    raise ValueError(f"{where}: {DIMS_ATTR} names dim {fact['axis']}, which is "
                                     f"not a dynamic dim of the argument")
                by_axis[fact["axis"]] = fact
            builtin = create("torch_c.to_builtin_tensor", [tensor_type], [argument])
            sizes = []
            for axis in range(tensor_type.rank):
                if not tensor_type.is_dynamic_dim(axis):
                    continue
                fact = by_axis.get(axis)
                if fact is not None and fact["expr"] in assumed:
                    sizes.append(assumed[fact["expr"]])
                    continue
                multiple = _MULTIPLE.fullmatch(fact["expr"]) if fact is not None else None
                if multiple is not None and multiple.group(2) in assumed:
                    # 2*s next to s: computed from s, so IREE knows the relation too.
                    factor = create("arith.constant", [index], [], {
                        "value": iree_ir.IntegerAttr.get(index, int(multiple.group(1)))}).result
                    size = create("arith.muli", [index], [assumed[multiple.group(2)], factor]).result
                else:
                    if axis not in axis_constants:
                        axis_constants[axis] = create("arith.constant", [index], [], {
                            "value": iree_ir.IntegerAttr.get(index, axis)}).result
                    size = create("tensor.dim", [index], [builtin.result, axis_constants[axis]]).result
                if fact is not None:
                    size = create("util.assume.int", [index], [size], {
                        "assumptions": iree_ir.Attribute.parse(f"[[{_assumption(fact)}]]")}).result
                    assumed[fact["expr"]] = size
                sizes.append(size)
            tied = create("flow.tensor.tie_shape", [tensor_type], [builtin.result, *sizes])
            torch_value = create("torch_c.from_builtin_tensor", [argument.type], [tied.result])
            argument.replace_all_uses_except(torch_value.result, builtin)
            count += 1
    if any(len(d) for d in kept_attributes):
        function.attributes["arg_attrs"] = iree_ir.ArrayAttr.get(kept_attributes)
    else:
        del function.attributes["arg_attrs"]
    return count


def _read_fact(iree_ir, fact, where: str) -> dict:
    try:
        out = {key: iree_ir.IntegerAttr(fact[key]).value for key in ("axis", "min", "divisor")}
        out["max"] = iree_ir.IntegerAttr(fact["max"]).value if "max" in fact else None
        out["expr"] = iree_ir.StringAttr(fact["expr"]).value
    except (KeyError, ValueError) as error:
        raise ValueError(f"{where}: malformed {DIMS_ATTR} entry {fact}: expected integer axis, "
                         f"min, divisor, optional max and a string expr ({error})") from None
    return out


def _assumption(fact: dict) -> str:
    parts = [f"umin = {fact['min']}"]
    if fact["max"] is not None:
        parts.append(f"umax = {fact['max']}")
    if fact["divisor"] > 1:
        parts.append(f"udiv = {fact['divisor']}")
    return f"#util.int.assumption<{', '.join(parts)}>"


def main(argv: list[str] | None = None) -> int:
    return rewrite_main("anyshape.iree.dim_facts",
                        "State anyshape.dims argument facts as IREE util.assume.int (the "
                        "compile stage 'iree-input')", "MLIR after anyshape-lower, text or bytecode",
                        inject_dim_facts,
                        lambda count, where: f"stated dim facts of {count} arguments in {where}",
                        argv)


if __name__ == "__main__":
    sys.exit(main())


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='dim_facts_real_minimum', stage='iree-input',
        where='inject_dim_facts (with passes/lower.py: anyshape-lower writes anyshape.dims)',
        upstream="IREE's torch input turns torch.bind_symbolic_shape on an argument into "
                 "util.assume.int with every minimum replaced by 1 (Dim('s', min=16) reaches IREE"
                 " as umin = 1), and torch-mlir's linalg pipeline cannot lower the bindings at "
                 'all; the facts are stated directly as util.assume.int + flow.tensor.tie_shape.',
        guard=('test/python/iree/test_dim_facts.py::test_iree_input_states_real_minimum',
               'test/iree/dim-facts.mlir',
               'test/passes/lower.mlir'),
        remove_when="(inferred) when IREE's torch input keeps each symbol's minimum (and "
                    'torch-mlir lowers the bindings)'),
)
