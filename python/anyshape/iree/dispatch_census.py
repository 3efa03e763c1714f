"""The products of a build as IREE's GPU configuration takes them: a census
read without a GPU.

``iree-compile --compile-to=executable-configurations`` stops after IREE has
chosen, for each dispatch, its pipeline (``translation_info``) and each root
op's tiles (``lowering_config``): what the GPU would run. ``census(module)``
compiles a module's iree-input stage that far, with the module's own flags
and the same flow-level rewrites (``iree/invocation.py``), and reads every
product in it:

- its rows: the loops its first operand and its result index and its second
  does not (``M``; batch dims are in all three, ``N`` in the second and the
  result, ``K`` reduced), each as a size or None where it is dynamic;
- its pipeline, whether its configuration is IREE's reduction strategy
  (``partial_reduction``: one workgroup per output element, a
  matrix-vector strategy), and the MMA intrinsic it computes with (tensor
  cores), if any.

A product is a ``linalg`` op with a reduced loop whose body multiplies its
two inputs and adds the product to its output, or an attention. A linalg op
with a reduced loop that is neither, and that multiplies, is refused: the
census never passes a product it could not read.

``python -m anyshape.iree.dispatch_census IREE_INPUT FLAGS...`` prints the
census of an iree-input file compiled with ``FLAGS``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable

from anyshape.iree.invocation import compile_with_iree, stopping_at
from anyshape.mlir import iree_bindings

PHASE = "executable-configurations"
_HALF = ("f16", "bf16")


@dataclasses.dataclass(frozen=True)
class ProductConfig:
    dispatch: str                   # the dispatch function
    op: str                         # linalg.generic, iree_linalg_ext.attention, ...
    rows: tuple                     # the sizes of its M loops (None: dynamic)
    batch: tuple                    # of its batch loops
    columns: tuple                  # of its N loops
    reduced: tuple                  # of its K loops
    operand_types: tuple[str, str]  # the element types of its two operands
    pipeline: str | None            # TileAndFuse, VectorDistribute, ...
    reduction_strategy: bool        # partial_reduction in its lowering config
    mma: str | None                 # its MMA intrinsic, e.g. NV_MMA_SYNC_F32_16x8x16_F16

    @property
    def dynamic_rows(self) -> bool:
        return None in self.rows

    @property
    def one_row(self) -> bool:
        """A matrix-vector product (per batch element): its rows are static and one."""
        return not self.dynamic_rows and math.prod(self.rows) == 1

    @property
    def half(self) -> bool:
        """Both operands are 16-bit floats."""
        return all(t in _HALF for t in self.operand_types)

    def describe(self) -> str:
        size = lambda s: "?" if s is None else str(s)  # noqa: E731
        shape = lambda dims: "x".join(size(s) for s in dims) or "-"  # noqa: E731
        return (f"{self.dispatch}: B {shape(self.batch)} M {shape(self.rows)} "
                f"N {shape(self.columns)} K {shape(self.reduced)} "
                f"{'x'.join(self.operand_types)}, {self.pipeline}"
                f"{', reduction strategy' if self.reduction_strategy else ''}"
                f"{', ' + self.mma if self.mma else ''}")


def census(module) -> list[ProductConfig]:
    """The products of ``module`` (a CompiledModule, CUDA or CPU) as IREE
    configures them, compiled again from its iree-input stage with its flags."""
    return census_of_file(module.stage_file("iree-input"), module.iree_flags)


def census_of_build(build: Callable[[], object]) -> list[ProductConfig]:
    """The products of the module ``build()`` compiles (``anyshape.compile``,
    ``compile_generator``), IREE stopped once it has configured them: the
    same stages and flags as the whole build, without its code generation
    (a third of the time), nothing cached. What ``build`` returns cannot run."""
    with stopping_at(PHASE):
        built = build()
    module = getattr(built, "module", built)  # a Generator's module
    return products_of(module.vmfb_path.read_bytes())


def census_of_file(iree_input: Path, flags: list[str]) -> list[ProductConfig]:
    with tempfile.TemporaryDirectory(prefix="anyshape-census-") as scratch:
        source = Path(scratch) / "iree-input.mlirbc"
        shutil.copyfile(iree_input, source)
        configured = compile_with_iree(source, list(flags), None, lambda message: None,
                                       cpu="--iree-hal-target-device=local" in flags,
                                       output=Path(scratch) / "configured.mlir",
                                       phase=PHASE)
        return products_of(configured.read_bytes())


def products_of(configured: bytes | str) -> list[ProductConfig]:
    """The products in IR compiled to executable configurations."""
    ir = iree_bindings()
    found: list[ProductConfig] = []
    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(configured)

        def visit(op):
            if op.name == "func.func" and "translation_info" in op.attributes:
                _read_dispatch(ir, op, found)
                return ir.WalkResult.SKIP
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def _read_dispatch(ir, func, found: list[ProductConfig]) -> None:
    name = ir.StringAttr(func.attributes["sym_name"]).value
    pipeline = re.search(r"pipeline<(\w+)>", str(func.attributes["translation_info"]))

    def visit(op):
        if op.name.startswith(("linalg.", "iree_linalg_ext.")):
            product = _product(ir, op)
            if product is not None:
                rows, batch, columns, reduced, types = product
                config = " ".join(str(op.attributes[name]) for name in
                                  ("lowering_config", "decomposition_config")
                                  if name in op.attributes)
                mma = re.search(r"mma_kind = #iree_gpu\.mma_layout<(\w+)>", config)
                found.append(ProductConfig(
                    name, op.name, rows, batch, columns, reduced, types,
                    pipeline.group(1) if pipeline else None,
                    "partial_reduction" in config, mma.group(1) if mma else None))
        return ir.WalkResult.ADVANCE

    func.walk(visit)


# Named products: the loops their first operand, second operand and result
# index ("k" is reduced).
_NAMED = {
    "linalg.matmul": (("m", "k"), ("k", "n"), ("m", "n")),
    "linalg.batch_matmul": (("b", "m", "k"), ("b", "k", "n"), ("b", "m", "n")),
    "linalg.matvec": (("m", "k"), ("k",), ("m",)),
    "linalg.vecmat": (("k",), ("k", "n"), ("n",)),
    "linalg.batch_matvec": (("b", "m", "k"), ("b", "k"), ("b", "m")),
}


def _product(ir, op):
    """(rows, batch, columns, reduced, operand element types) of a product;
    None for an op that is not one; ValueError for one that multiplies its
    operands in a way not read here."""
    operands = [v for v in op.operands if isinstance(v.type, ir.ShapedType)]
    if op.name in ("iree_linalg_ext.attention", "iree_linalg_ext.online_attention"):
        # query, key, value, [mask,] output(s): its rows are the query's
        maps = [m for m in _maps(ir, op) if m]  # the scale's map has no results
        query, key, out = maps[0], maps[1], maps[len(operands) - len(op.results)]
        reduced = (set(query) | set(key)) - set(out)
        return _loops(ir, operands, maps, query, key, out, reduced)
    if op.name in _NAMED:
        return _named_loops(ir, operands, _NAMED[op.name])
    if op.name != "linalg.generic":
        if any(word in op.name for word in ("mat", "dot", "mmt4d", "contract", "conv")):
            raise ValueError(f"census: {op.name} is a product the census does not read")
        return None
    iterators = re.findall(r"#linalg\.iterator_type<(\w+)>|\"?(parallel|reduction)\"?",
                           str(op.attributes["iterator_types"]))
    kinds = [a or b for a, b in iterators]
    if "reduction" not in kinds:
        return None
    inputs = len(operands) - len(op.results)
    if not _multiplies_two_inputs(ir, op, inputs):
        return None  # a sum, a sum of squares (a norm's variance), a max
    if inputs != 2:
        raise ValueError(f"census: {op.name} multiplies two of its {inputs} inputs in a "
                         f"reduction; only two-operand products are read")
    maps = _maps(ir, op)
    reduced = {i for i, kind in enumerate(kinds) if kind == "reduction"}
    return _loops(ir, operands, maps, maps[0], maps[1], maps[2], reduced)


_CASTS = ("arith.extf", "arith.truncf", "arith.extsi", "arith.extui", "arith.sitofp",
          "arith.uitofp")


def _multiplies_two_inputs(ir, op, inputs: int) -> bool:
    """Whether the body multiplies two different inputs (through casts)."""
    block = op.regions[0].blocks[0]
    arguments = list(block.arguments)[:inputs]

    def source(value):
        while not isinstance(value.owner, ir.Block) and value.owner.name in _CASTS:
            value = value.owner.operands[0]
        for index, argument in enumerate(arguments):
            if value == argument:
                return index
        return None

    for inner in block.operations:
        if inner.name in ("arith.mulf", "arith.muli"):
            sources = {source(v) for v in inner.operands}
            if None not in sources and len(sources) == 2:
                return True
    return False


def _maps(ir, op) -> list[list[int | None]]:
    """Each indexing map's results as loop positions (None: not a plain loop)."""
    out = []
    for attr in ir.ArrayAttr(op.attributes["indexing_maps"]):
        affine = ir.AffineMapAttr(attr).value
        out.append([e.position if isinstance(e, ir.AffineDimExpr) else None
                    for e in affine.results])
    return out


def _element(ir, value) -> str:
    return str(ir.ShapedType(value.type).element_type)


def _loops(ir, operands, maps, first, second, result, reduced_loops):
    sizes: dict[int, int | None] = {}
    for value, positions in zip(operands, maps):
        shaped = ir.ShapedType(value.type)
        for axis, loop in enumerate(positions):
            if loop is not None and loop not in sizes:
                sizes[loop] = None if shaped.is_dynamic_dim(axis) else shaped.shape[axis]
    first_set, second_set, result_set = set(first), set(second), set(result)
    loops = sorted(sizes)
    rows = tuple(sizes[i] for i in loops if i in first_set and i in result_set
                 and i not in second_set)
    batch = tuple(sizes[i] for i in loops if i in first_set and i in second_set
                  and i in result_set)
    columns = tuple(sizes[i] for i in loops if i in second_set and i in result_set
                    and i not in first_set)
    reduced = tuple(sizes[i] for i in loops if i in reduced_loops)
    types = (_element(ir, operands[0]), _element(ir, operands[1]))
    return rows, batch, columns, reduced, types


def _named_loops(ir, operands, roles):
    """As ``_loops``, for a named op whose operands index its loops as ``roles``."""
    letters: dict[str, int | None] = {}
    for value, letters_of_value in zip(operands, roles):
        shaped = ir.ShapedType(value.type)
        for axis, letter in enumerate(letters_of_value):
            letters.setdefault(letter, None if shaped.is_dynamic_dim(axis) else shaped.shape[axis])
    pick = lambda letter: tuple([letters[letter]] if letter in letters else [])  # noqa: E731
    types = (_element(ir, operands[0]), _element(ir, operands[1]))
    return pick("m"), pick("b"), pick("n"), pick("k"), types


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print("usage: python -m anyshape.iree.dispatch_census IREE_INPUT [IREE FLAGS...]",
              file=sys.stderr)
        return 2
    for product in census_of_file(Path(argv[0]), argv[1:]):
        print(product.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
