"""Where each index of an indexed read (an embedding, a gather) comes from, and so who checks it.

Eager raises ``IndexError`` for an index outside its table. torch-mlir lowers
``embedding``, ``gather`` and ``index_select`` as a ``tensor.extract`` at the
index with no bounds check, and IREE reads whatever lies there: past a learned
position table (GPT-2 past ``n_positions``, RoBERTa past 512 tokens) that is NaN
or another row, and a token id far out of range can crash the process.
torch.export needs no bound on a dim that only feeds such a read, so an
unbounded ``Dim("seq")`` reaches it.

Each read's index is classified by what it is made of, exactly (every op on
the way keeps the set of values, so the bounds are attained and a check
refuses nothing eager accepts):

- ``constant``: some values of a constant all in range (BERT's positions, a
  slice of its ``arange(512)`` buffer): nothing to check.

- ``input``: an input tensor as it is (``input_ids`` into the word
  embeddings). The runtime checks its values before the call and names the
  argument (``runtime/index_bounds.py``).
- ``sizes``: sizes only (GPT-2's ``arange(seq)`` positions, plus offsets): a
  condition on the input sizes, checked on the host before the call.
- ``data``: anything else (RoBERTa's positions, a cumulative sum of the mask).
  Where it is made of comparisons, cumulative sums, sums, products and
  integer copies of inputs, sizes and constants, ``data_bounds`` bounds its
  values by the sizes (RoBERTa's: ``padding_idx + seq`` at most), and the
  runtime checks that bound as a size condition before the call. That bound
  is not always attained, so it may refuse a batch eager accepts (a padded
  batch longer than the table whose rows are all shorter); the message says
  so. Others are not checked: an assertion in the module before the read
  broke IREE 3.13 (its CPU code generator fails on the check's reduction
  fused with T5's relative-position buckets, "offset 0 is out-of-bounds: 0 >=
  -1", and its CUDA backend on RoBERTa's), so past the table such a read is
  NaN or another row, as on the plain stack.
"""

from __future__ import annotations

import dataclasses

import sympy
import torch
from torch.fx import Graph, Node

aten = torch.ops.aten

# Ops whose result holds exactly the values of their first operand (for a
# non-empty result): the bounds pass through them unchanged.
_SAME_VALUES = {
    aten.view.default, aten._unsafe_view.default, aten.reshape.default,
    aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default,
    aten.expand.default, aten.clone.default, aten.alias.default, aten.contiguous.default,
    aten.permute.default, aten.transpose.int, aten.t.default, aten.flatten.using_ints,
    aten.repeat.default, aten.lift_fresh_copy.default,
}
# ...and ops whose result holds some of their first operand's values.
_SOME_VALUES = _SAME_VALUES | {aten.slice.Tensor, aten.select.int, aten.narrow.default,
                               aten.gather.default, aten.index_select.default,
                               aten.index.Tensor}
_INTEGER_DTYPES = {torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8}


@dataclasses.dataclass
class IndexedRead:
    node: Node
    index: Node
    table: str            # what the indices select from, for messages
    rows: int             # the extent the index selects along
    low: int              # the smallest valid index (0; -rows where eager wraps)
    kind: str             # "input", "sizes", "data"; "constant": all in range
    input: str | None = None                 # kind "input": the placeholder's name
    bounds: tuple | None = None              # "sizes", "data": (min, max) as sympy or int


def _val(x):
    return x.meta.get("val") if isinstance(x, Node) else x


def _module_path(node: Node) -> str | None:
    stack = node.meta.get("nn_module_stack") or {}
    if stack:
        path = list(stack.values())[-1][0].removeprefix("L['self'].")
        if path and path != "L['self']":
            return path
    return None


def _table(node: Node, table, dim: int, rows: int) -> str:
    """``transformer.wpe (64 rows)``, ``dim 1 of 'x' (size 7)``, ..."""
    where = _module_path(node)
    if node.target is aten.embedding.default:
        return f"{where or 'an embedding'} ({rows} rows)"
    op = node.target.__name__.split(".")[0]
    if isinstance(table, Node) and table.op == "placeholder" and not where:
        return f"dim {dim} of '{table.name}' ({op}, size {rows})"
    return f"dim {dim} of the {op} operand{' in ' + where if where else ''} (size {rows})"


def _read(node: Node) -> tuple[Node, Node | torch.Tensor, int, int] | None:
    """(index, table, dim, low) of a read this module checks, else None."""
    if node.op != "call_function":
        return None
    if node.target is aten.embedding.default:
        return node.args[1], node.args[0], 0, 0
    if node.target in (aten.gather.default, aten.index_select.default):
        return node.args[2], node.args[0], node.args[1], 0
    return None


def indexed_reads(graph: Graph) -> list[IndexedRead]:
    """Every embedding, gather and index_select whose table's extent is static
    and whose index is a tensor, in graph order, classified."""
    reads = []
    for node in graph.nodes:
        found = _read(node)
        if found is None:
            continue
        index, table, dim, low = found
        table_val = _val(table)
        if not isinstance(index, Node) or not isinstance(table_val, torch.Tensor):
            continue
        rows = table_val.shape[dim % table_val.dim()] if table_val.dim() else None
        if not isinstance(rows, int) or not isinstance(_val(index), torch.Tensor):
            continue
        dim %= table_val.dim()
        read = IndexedRead(node, index, _table(node, table, dim, rows), rows, low, "data")
        source = _input_through_same_values(index)
        constant = _constant_source(index)
        if constant is not None:
            if constant.numel() == 0 or (int(constant.min()) >= low and int(constant.max()) < rows):
                read.kind = "constant"
        elif source is not None:
            read.kind, read.input = "input", source.name
        else:
            bounds = size_bounds(index)
            if bounds is not None:
                read.kind, read.bounds = "sizes", bounds
            else:
                read.bounds = data_bounds(index)
        reads.append(read)
    return reads


def _input_through_same_values(node: Node) -> Node | None:
    while node.op == "call_function" and (
            node.target in _SAME_VALUES or _is_integer_copy(node)):
        node = node.args[0]
    return node if node.op == "placeholder" else None


def _constant_source(node: Node) -> torch.Tensor | None:
    """The constant tensor whose values (some of them) ``node`` holds, if any
    (BERT's positions: a slice of its ``arange(512)`` buffer)."""
    x = node
    while isinstance(x, Node) and x.op == "call_function" and (
            x.target in _SOME_VALUES or _is_integer_copy(x)):
        x = x.args[0]
    if isinstance(x, torch.Tensor) and not isinstance(x, torch._subclasses.FakeTensor):
        return x
    return None


def _is_integer_copy(node: Node) -> bool:
    if node.target is not aten._to_copy.default:
        return False
    source, result = _val(node.args[0]), _val(node)
    return isinstance(source, torch.Tensor) and isinstance(result, torch.Tensor) and \
        source.dtype in _INTEGER_DTYPES and result.dtype in _INTEGER_DTYPES and \
        torch.iinfo(result.dtype).bits >= torch.iinfo(source.dtype).bits and \
        not (source.dtype is not torch.uint8 and result.dtype is torch.uint8)


def _scalar(x) -> sympy.Expr | int | None:
    """An int or size argument as a sympy expression over the export's symbols."""
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    value = _val(x)
    if isinstance(value, torch.SymInt):
        return value.node.expr
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def size_bounds(node: Node) -> tuple | None:
    """(min, max) of the values of ``node``, attained, as expressions over the
    input sizes; None unless it is made of aranges, integer offsets and
    value-keeping ops only."""
    if node.op != "call_function":
        return None
    if node.target in _SAME_VALUES or _is_integer_copy(node):
        return size_bounds(node.args[0])
    if node.target in (aten.arange.default, aten.arange.start, aten.arange.start_step):
        args = list(node.args)
        if node.target is aten.arange.default:
            args = [0] + args
        step = args[2] if len(args) > 2 else node.kwargs.get("step", 1)
        start, end = _scalar(args[0]), _scalar(args[1])
        if step != 1 or start is None or end is None:
            return None
        return start, end - 1
    if node.target in (aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar):
        if node.kwargs.get("alpha", 1) != 1 or len(node.args) > 2:
            return None
        base, offset = node.args[0], node.args[1]
        if not isinstance(base, Node) or not isinstance(_val(base), torch.Tensor):
            base, offset = offset, base
            if node.target in (aten.sub.Tensor, aten.sub.Scalar):
                return None
        if not isinstance(base, Node):
            return None
        bounds, shift = size_bounds(base), _scalar(offset)
        if bounds is None or shift is None:
            return None
        if node.target in (aten.sub.Tensor, aten.sub.Scalar):
            shift = -shift
        return bounds[0] + shift, bounds[1] + shift
    return None


_COMPARISONS = {getattr(aten, name).Tensor for name in ("eq", "ne", "lt", "le", "gt", "ge")} | \
    {getattr(aten, name).Scalar for name in ("eq", "ne", "lt", "le", "gt", "ge")}


def _nonnegative(x) -> bool:
    x = sympy.sympify(x)
    return bool(x >= 0) if x.is_number else x.is_nonnegative is True


def data_bounds(node) -> tuple | None:
    """(min, max) bounds, not always attained, of the values of ``node`` as
    expressions over the input sizes: through comparisons ([0, 1]), integer
    copies, cumulative sums of nonnegative values (a sum of at most the dim's
    size of them), products of nonnegative values, sums and differences, down
    to aranges (``size_bounds``), constants and numbers; None for anything else."""
    if not isinstance(node, Node):
        scalar = _scalar(node)
        return None if scalar is None else (scalar, scalar)
    if node.op != "call_function":
        return None
    exact = size_bounds(node)
    if exact is not None:
        return exact
    constant = _constant_source(node)
    if constant is not None and constant.numel() and not constant.dtype.is_floating_point:
        return int(constant.min()), int(constant.max())
    value = _val(node)
    if not isinstance(value, torch.Tensor) or value.dtype.is_floating_point:
        return None
    if node.target in _COMPARISONS:
        return 0, 1
    if node.target in _SAME_VALUES or node.target is aten._to_copy.default:
        return data_bounds(node.args[0])
    if node.target is aten.cumsum.default:
        bounds = data_bounds(node.args[0])
        if bounds is None or not _nonnegative(bounds[0]):
            return None
        size = _scalar(value.shape[node.args[1] % value.dim()])
        return None if size is None else (bounds[0], size * bounds[1])
    if node.target in (aten.mul.Tensor, aten.mul.Scalar):
        a, b = (data_bounds(x) for x in node.args[:2])
        if a is None or b is None or not all(_nonnegative(x) for x in (a[0], b[0])):
            return None
        return a[0] * b[0], a[1] * b[1]
    if node.target in (aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar):
        if node.kwargs.get("alpha", 1) != 1 or len(node.args) > 2:
            return None
        a, b = (data_bounds(x) for x in node.args)
        if a is None or b is None:
            return None
        if node.target in (aten.sub.Tensor, aten.sub.Scalar):
            return a[0] - b[1], a[1] - b[0]
        return a[0] + b[0], a[1] + b[1]
    return None


def size_condition(read: IndexedRead) -> str | None:
    """For a ``sizes`` read, the condition on the input sizes that keeps its
    index in range, in Python syntax over the export's symbols; None when it
    holds at every size. For a ``data`` read, whose bounds need not be reached,
    the upper one only: a loose lower bound would refuse sizes for nothing."""
    low, high = (sympy.sympify(bound) for bound in read.bounds)
    (low_shift, low_rest), (high_shift, high_rest) = low.as_coeff_Add(), high.as_coeff_Add()
    parts = []
    relations = [sympy.Le(high_rest, read.rows - 1 - high_shift)]
    if read.kind != "data":
        relations.insert(0, sympy.Ge(low_rest, read.low - low_shift))
    for relation in relations:
        if relation is sympy.true:
            continue
        if relation is sympy.false:
            return "False"
        parts.append(str(relation))
    return " and ".join(parts) or None
