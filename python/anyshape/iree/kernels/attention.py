"""Attention over a whole sequence in one kernel call (issue 39).

An encoder's self-attention (and a decoder's, over a prompt) reaches IREE as
anyshape's passes leave it: ``softmax(Q K^T * scale + bias) V`` with the
softmax's normalization deferred past the product and rows whose scores are
all ``-inf`` set to zero (``anyshape-defer-softmax-normalization``), the
padding mask folded into the scores' product (``anyshape-data-tiling-forms``).
IREE 3.13 then writes the ``[B*H, L, S]`` scores, unpacks them from the
product's tiles, takes their max, exponentials and sums in passes of their
own, packs the exponentials for the second product, and transposes the heads
in and out: BART-base's ``encode`` at 4 x 333 tokens spent about 150 ms of
880 there, for 8 GFLOP of products.

``attention.c`` computes it in one pass per 32 query rows of a head,
flash attention's way (a running max and sum per row), reading Q, K and V
where the projections wrote them (``[B, L, H, D]`` before the head
transpose) and writing its output as ``[B, L, H, D]``, which the output
projection reads as it is. ``route_attention`` rewrites each attention it
recognizes into a call of it; one it does not recognize stays IREE's.

Recognized (float32; ``D`` static, a multiple of 16, at most 128):

- ``where(flatten(amax(S) == -inf), 0, bmm(flatten(exp(S - amax(S))), V) /
  flatten(sum(exp(S - amax(S)))))``, the deferred form, with ``S`` ``[B, H,
  L, S]``;
- ``S`` = ``unflatten(bmm(flatten(Q * a), flatten(K^T * b)))`` plus a bias
  ``[B | 1, H | 1, L | 1, S]`` (T5's position bias, a causal mask), or
  ``unflatten(bmm(cat(Q * a, 1), cat(K^T * b, mask)))`` (the padding mask
  folded in), the scale ``a * b``.

The kernel's sums are the same sums in another order, and the exponential
its own (a degree-6 polynomial after range reduction: IREE's embedded ELF has
no libm); ``test_attention.py`` compares each code path with float64.
"""

from __future__ import annotations

import dataclasses
import math
import struct
import warnings
from pathlib import Path
from typing import Sequence

from anyshape.dialects import vtensor_shape
from anyshape.iree.cpu import HOST
from anyshape.iree.kernels.build import (KernelUnavailable, binding_pointers, entry_function,
                                         executable_target, isa_for_cpu, kernel_executable,
                                         kernel_object, pipeline_layout, target_cpu_of)
from anyshape.mlir import rewrite_with_iree_bindings
from anyshape.iree.torch_ir_builders import call_with_builtin_tensors, matches, new_constant_int
from anyshape.passes.torch_ir.constants import (constant_as_float, constant_bool, constant_int,
                                               int_list)

SOURCE = Path(__file__).with_name("attention.c")
EXECUTABLE = "anyshape_attention"
ROWS_PER_WORKGROUP = 32  # attention.c's WG_ROWS
MAX_HEAD_DIM = 128  # attention.c's MAX_D
# attention.c's bias modes: where the bias varies.
BIAS_BATCH, BIAS_HEADS, BIAS_ROWS = 1, 2, 4


def kernel(target_cpu: str = HOST) -> Path | None:
    """The attention kernel's object file, with the instruction sets
    ``target_cpu`` has; None, with a ``KernelUnavailable`` warning that says
    why, where it cannot be built."""
    built, why = kernel_object(SOURCE, isa_for_cpu(target_cpu))
    if built is None:
        warnings.warn(f"attention over a whole sequence keeps IREE's form, because anyshape's "
                      f"attention kernel is unavailable: {why}", KernelUnavailable, stacklevel=4)
    return built


def _owner(value, name: str):
    op = value.owner
    return op if getattr(op, "name", None) == name else None


def _shape(value):
    """(sizes, dtype) of a ``!torch.vtensor``, else (None, None)."""
    shape = vtensor_shape(value.type)
    return shape if shape is not None else (None, None)


def _flattened_from(value):
    """x where ``value`` is ``flatten(x, 0, 1)``; else None."""
    op = _owner(value, "torch.aten.flatten.using_ints")
    if op is None or [constant_int(v) for v in op.operands[1:3]] != [0, 1]:
        return None
    return op.operands[0]


def _unflattened_from(value):
    """x where ``value`` is ``unflatten(x, 0, [B, H])``; else None."""
    op = _owner(value, "torch.aten.unflatten.int")
    if op is None or constant_int(op.operands[1]) != 0:
        return None
    return op.operands[0]


def _last_dim_list(value) -> bool:
    items = int_list(value)
    return items is not None and len(items) == 1 and items[0] in (3, -1)


def _fill_of(value, of) -> float | None:
    """The fill value where ``value`` is ``full_like(of, fill)``; else None."""
    op = _owner(value, "torch.aten.full_like")
    if op is None or op.operands[0] != of:
        return None
    return constant_as_float(op.operands[1])


def _scaled(value):
    """(x, factor) where ``value`` is ``x * factor`` (a constant), or (value, 1.0)."""
    op = _owner(value, "torch.aten.mul.Scalar")
    if op is None:
        return value, 1.0
    factor = constant_as_float(op.operands[1])
    return (op.operands[0], factor) if factor is not None else (None, None)


@dataclasses.dataclass
class _Attention:
    """What the call takes: q, k and v as stored, each with its layout (0:
    [B, H, N, D]; 1: [B, N, H, D]), the bias and its mode, the scale."""
    q: tuple
    k: tuple
    v: tuple
    bias: object
    bias_mode: int
    scale: float
    heads: int
    head_dim: int


def _stored(x):
    """(value, layout): x [B, H, N, D] itself (0), or the [B, N, H, D] it is
    the head transpose of (1)."""
    op = _owner(x, "torch.aten.permute")
    if op is not None and int_list(op.operands[1]) == [0, 2, 1, 3]:
        return op.operands[0], 1
    return x, 0


def _bias_mode(sizes, heads: int) -> int | None:
    """The kernel's mode for a bias of ``sizes`` [B | 1, H | 1, L | 1, S], or
    None for another shape (one that broadcasts along the keys)."""
    if len(sizes) != 4 or sizes[3] == 1 or sizes[1] not in (1, heads):
        return None
    return (BIAS_BATCH if sizes[0] != 1 else 0) | (BIAS_HEADS if sizes[1] == heads else 0) | \
        (BIAS_ROWS if sizes[2] != 1 else 0)


def _scores(scores, heads: int, head_dim: int):
    """(q4, k4, bias, scale) where ``scores`` [B, H, L, S] is q4 . k4^T *
    scale (+ bias); else None."""
    bias = None
    add = _owner(scores, "torch.aten.add.Tensor")
    if add is not None:
        if constant_as_float(add.operands[2]) != 1.0:
            return None
        for product, other in (add.operands[:2], reversed(list(add.operands[:2]))):
            if _unflattened_from(product) is not None:
                scores, bias = product, other
                break
        else:
            return None
    flat = _unflattened_from(scores)
    bmm = flat is not None and _owner(flat, "torch.aten.bmm")
    if not bmm:
        return None
    lhs, rhs = bmm.operands
    lhs_cat, rhs_cat = _owner(lhs, "torch.aten.cat"), _owner(rhs, "torch.aten.cat")
    if lhs_cat is not None or rhs_cat is not None:
        # The padding mask folded in: [Q, 1] . [K^T; mask].
        if bias is not None or lhs_cat is None or rhs_cat is None \
                or constant_int(lhs_cat.operands[1]) not in (2, -1) \
                or constant_int(rhs_cat.operands[1]) != 1:
            return None
        lhs_parts = _owner(lhs_cat.operands[0], "torch.prim.ListConstruct")
        rhs_parts = _owner(rhs_cat.operands[0], "torch.prim.ListConstruct")
        if lhs_parts is None or rhs_parts is None or len(lhs_parts.operands) != 2 \
                or len(rhs_parts.operands) != 2:
            return None
        lhs, ones = lhs_parts.operands
        rhs, mask = rhs_parts.operands
        ones_of = _owner(ones, "torch.aten.full_like")
        column = ones_of is not None and _owner(ones_of.operands[0], "torch.aten.slice.Tensor")
        if not column or column.operands[0] != lhs or constant_as_float(ones_of.operands[1]) != 1.0 \
                or [constant_int(v) for v in column.operands[1:]] not in ([2, 0, 1, 1],
                                                                         [-1, 0, 1, 1]):
            return None
        expanded = _flattened_from(mask)
        expand = expanded is not None and _owner(expanded, "torch.aten.expand")
        if not expand:
            return None
        bias = expand.operands[0]
        sizes, dtype = _shape(bias)
        if dtype != "f32" or sizes is None or len(sizes) != 4 or sizes[1:3] != [1, 1]:
            return None
    q_scaled, k_scaled = _flattened_from(lhs), _flattened_from(rhs)
    if q_scaled is None or k_scaled is None:
        return None
    q4, q_factor = _scaled(q_scaled)
    kt, k_factor = _scaled(k_scaled)
    swap = kt is not None and _owner(kt, "torch.aten.permute")
    if q4 is None or not swap or int_list(swap.operands[1]) not in ([0, 1, 3, 2], [0, 1, -1, -2]):
        return None
    k4 = swap.operands[0]
    for value in (q4, k4):
        sizes, dtype = _shape(value)
        if dtype != "f32" or sizes is None or len(sizes) != 4 or sizes[1] != heads \
                or sizes[3] != head_dim:
            return None
    return q4, k4, bias, q_factor * k_factor


def _match(guard):
    """The ``_Attention`` whose output ``guard`` (``where(all -inf row, 0,
    deferred softmax product)``) is; else None."""
    condition, zeros, out = guard.operands
    div = _owner(out, "torch.aten.div.Tensor")
    if div is None or _fill_of(zeros, out) != 0.0:
        return None
    product, sums_flat = div.operands
    pv = _owner(product, "torch.aten.bmm")
    sums = _flattened_from(sums_flat)
    total = sums is not None and _owner(sums, "torch.aten.sum.dim_IntList")
    if pv is None or not total or not _last_dim_list(total.operands[1]) \
            or constant_bool(total.operands[2]) is not True \
            or str(total.operands[3].type) != "!torch.none":
        return None
    exps = _flattened_from(pv.operands[0])
    v4 = _flattened_from(pv.operands[1])
    exp = exps is not None and _owner(exps, "torch.aten.exp")
    if not exp or v4 is None or total.operands[0] != exps:
        return None
    shifted = _owner(exp.operands[0], "torch.aten.sub.Tensor")
    if shifted is None or constant_as_float(shifted.operands[2]) != 1.0:
        return None
    scores, row_max = shifted.operands[:2]
    amax = _owner(row_max, "torch.aten.amax")
    if amax is None or amax.operands[0] != scores or not _last_dim_list(amax.operands[1]) \
            or constant_bool(amax.operands[2]) is not True:
        return None
    all_minus_inf = _flattened_from(condition)
    equal = all_minus_inf is not None and _owner(all_minus_inf, "torch.aten.eq.Scalar")
    if not equal or equal.operands[0] != row_max \
            or constant_as_float(equal.operands[1]) != -math.inf:
        return None
    sizes, dtype = _shape(scores)
    v_sizes, v_dtype = _shape(v4)
    if dtype != "f32" or v_dtype != "f32" or sizes is None or len(sizes) != 4 \
            or v_sizes is None or len(v_sizes) != 4:
        return None
    heads, head_dim = v_sizes[1], v_sizes[3]
    if heads is None or heads != sizes[1] or head_dim is None or head_dim % 16 \
            or head_dim > MAX_HEAD_DIM or _shape(out)[1] != "f32":
        return None
    found = _scores(scores, heads, head_dim)
    if found is None:
        return None
    q4, k4, bias, scale = found
    mode = 0
    if bias is not None:
        bias_sizes, bias_dtype = _shape(bias)
        mode = None if bias_dtype != "f32" else _bias_mode(bias_sizes, heads)
        if mode is None:
            return None
    return _Attention(_stored(q4), _stored(k4), _stored(v4), bias, mode, scale, heads,
                      head_dim)


def _float_bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def executable_text(object_path: Path, target: str) -> str:
    """The executable whose entry points, ``attention`` (with a bias) and
    ``attention_no_bias``, call the kernel. Bindings: q, k, v, [the bias,]
    the output; constants: heads, L, S, D, the scale's bits, the layouts,
    then each binding's size in floats. Workgroups: runs of
    ROWS_PER_WORKGROUP query rows by batch x heads (the workload)."""
    exports, functions = [], []
    for ordinal, (name, bias) in enumerate((("attention", True), ("attention_no_bias", False))):
        bindings = [True] * (4 if bias else 3) + [False]
        count = 6 + len(bindings)
        layout = pipeline_layout(count, bindings)
        loads = []
        for i in range(count):
            loads.append(f"%k{i}_32 = hal.interface.constant.load layout({layout}) ordinal({i}) : i32")
            loads.append(f"%k{i} = arith.index_castui %k{i}_32 : i32 to index")
        lines, pointers, types = binding_pointers(layout, [f"%k{6 + i}" for i in range(len(bindings))])
        args = pointers + [f"%k{i}" for i in range(6)] + ["%gx", "%gy"]
        types += ["index"] * 8
        exports.append(f"""
    hal.executable.export public @{name} ordinal({ordinal}) layout({layout})
        count(%device: !hal.device, %runs: index, %heads: index) -> (index, index, index) {{
      %c1 = arith.constant 1 : index
      hal.return %runs, %heads, %c1 : index, index, index
    }}""")
        workgroup = ["%gx = hal.interface.workgroup.id[0] : index",
                     "%gy = hal.interface.workgroup.id[1] : index"]
        functions.append(entry_function(name, types, workgroup + loads + lines, args))
    return kernel_executable(EXECUTABLE, object_path, target, exports, functions)


def _tensor(sizes) -> str:
    return "tensor<" + "x".join("?" if s is None else str(s) for s in sizes) + "xf32>"


def _function_text(name: str, operands: Sequence[tuple[list, int]], bias_sizes, result_sizes,
                   heads: int, head_dim: int, scale: float, layouts: int) -> str:
    """The function that dispatches the kernel on q, k, v [, bias]
    (``operands``: each one's sizes and layout)."""
    lines = ["%c0 = arith.constant 0 : index", "%c1 = arith.constant 1 : index",
             "%c2 = arith.constant 2 : index", "%c3 = arith.constant 3 : index",
             f"%rows_per_run = arith.constant {ROWS_PER_WORKGROUP} : index"]
    names = ["%q", "%k", "%v"] + (["%bias"] if bias_sizes is not None else [])
    all_sizes = [sizes for sizes, _ in operands] + ([bias_sizes] if bias_sizes is not None else [])
    typed, elements = [], []
    for operand, sizes in zip(names, all_sizes):
        dims, total = [], None
        for i, size in enumerate(sizes):
            if size is None:
                dim = f"{operand}_d{i}"
                lines.append(f"{dim} = tensor.dim {operand}, %c{i} : {_tensor(sizes)}")
                dims.append(dim)
            else:
                dim = f"{operand}_s{i}"
                lines.append(f"{dim} = arith.constant {size} : index")
            if total is None:
                total = dim
            else:
                lines.append(f"{operand}_n{i} = arith.muli {total}, {dim} : index")
                total = f"{operand}_n{i}"
        typed.append(f"{_tensor(sizes)}" + ("{" + ", ".join(dims) + "}" if dims else ""))
        elements.append(total)
    q_sizes, q_layout = operands[0]
    k_sizes, k_layout = operands[1]
    batch, length = "%q_d0" if q_sizes[0] is None else "%q_s0", \
        f"%q_{'d' if q_sizes[1 + (1 - q_layout)] is None else 's'}{2 - q_layout}"
    keys = f"%k_{'d' if k_sizes[2 - k_layout] is None else 's'}{2 - k_layout}"
    result_dims = [d for d, s in zip((batch, length), result_sizes[:2]) if s is None]
    lines += [
        f"%heads = arith.constant {heads} : index",
        f"%out_n = arith.muli {batch}, {length} : index",
        f"%out_hd = arith.constant {heads * head_dim} : index",
        f"%out_size = arith.muli %out_n, %out_hd : index",
        f"%runs = arith.ceildivui {length}, %rows_per_run : index",
        f"%batch_heads = arith.muli {batch}, %heads : index",
    ]
    constants = [("heads", "%heads"), ("length", length), ("keys", keys)]
    scalar_lines, scalars = [], []
    for label, value in constants:
        scalar_lines.append(f"%{label}_32 = arith.index_cast {value} : index to i32")
        scalars.append(f"%{label}_32")
    scalar_lines += [f"%dim_32 = arith.constant {head_dim} : i32",
                     f"%scale_32 = arith.constant {_float_bits(scale)} : i32",
                     f"%layouts_32 = arith.constant {layouts} : i32"]
    scalars += ["%dim_32", "%scale_32", "%layouts_32"]
    for i, total in enumerate(elements + ["%out_size"]):
        scalar_lines.append(f"%size{i}_32 = arith.index_cast {total} : index to i32")
        scalars.append(f"%size{i}_32")
    entry = "attention" if bias_sizes is not None else "attention_no_bias"
    result = _tensor(result_sizes) + ("{" + ", ".join(result_dims) + "}" if result_dims else "")
    arguments = ", ".join(f"{n}: {_tensor(s)}" for n, s in zip(names, all_sizes))
    body = "\n  ".join(lines + scalar_lines)
    return f"""
func.func private @{name}({arguments}) -> {_tensor(result_sizes)} {{
  {body}
  %out = flow.dispatch @{EXECUTABLE}::@x86_64::@{entry}[%runs, %batch_heads]({", ".join(scalars + names)}) : ({", ".join(["i32"] * len(scalars) + typed)}) -> {result}
  return %out : {_tensor(result_sizes)}
}}
"""


def route_attention(in_file: Path, out_file: Path, object_path: Path, flags: Sequence[str],
                    text_file: Path | None = None) -> int:
    """Rewrite ``in_file`` (torch-dialect IR, the iree-input stage) into
    ``out_file`` (bytecode; ``text_file`` as text when given) with every
    attention ``_match`` finds computed by the kernel, for the module that
    iree-compile builds with ``flags``. Returns how many.

    ``object_path``: the kernel as ``kernel()`` built it, for this host. The
    module links the object built for the CPU ``flags`` name instead where
    that is another (a target CPU without AVX-512 on a host with it); where
    that cannot be built, attention keeps IREE's form, with a warning."""
    if object_path == kernel_object(SOURCE, isa_for_cpu(HOST))[0]:
        object_path = kernel(target_cpu_of(flags))

    def rewrite(ir, module) -> int:
        found = matches(ir, module, ("torch.aten.where.self",), _match)
        if not found or object_path is None:
            return 0

        def constant(value: int):
            return new_constant_int(ir, value)

        def int_list_value(items):
            return ir.Operation.create(
                "torch.prim.ListConstruct", results=[ir.Type.parse("!torch.list<int>")],
                operands=[constant(i) for i in items]).result

        def vtensor(sizes) -> ir.Type:
            return ir.Type.parse("!torch.vtensor<[" + ",".join(
                "?" if s is None else str(s) for s in sizes) + "],f32>")

        def permuted(value, order):
            sizes = _shape(value)[0]
            return ir.Operation.create(
                "torch.aten.permute", results=[vtensor([sizes[i] for i in order])],
                operands=[value, int_list_value(order)]).result

        functions: list[str] = []
        for guard, match in found:
            with ir.InsertionPoint(guard), guard.location:
                operands, values = [], []
                for value, layout in (match.q, match.k, match.v):
                    operands.append((list(_shape(value)[0]), layout))
                    values.append(value)
                bias_sizes = None
                if match.bias is not None:
                    bias = match.bias
                    if match.bias_mode & BIAS_ROWS:
                        bias = permuted(bias, [0, 1, 3, 2])
                    bias_sizes = list(_shape(bias)[0])
                    values.append(bias)
                q_sizes, q_layout = operands[0]
                batch = q_sizes[0]
                length = q_sizes[2] if q_layout == 0 else q_sizes[1]
                result_sizes = [batch, length, match.heads, match.head_dim]
                layouts = q_layout | operands[1][1] << 1 | operands[2][1] << 2 | \
                    match.bias_mode << 3
                name = f"anyshape_attention_{len(functions)}"
                functions.append(_function_text(name, operands, bias_sizes, result_sizes,
                                                match.heads, match.head_dim, match.scale,
                                                layouts))
                rows = call_with_builtin_tensors(ir, name, values, vtensor(result_sizes))
                heads_first = permuted(rows, [0, 2, 1, 3])
                flat = ir.Operation.create(
                    "torch.aten.flatten.using_ints", results=[guard.results[0].type],
                    operands=[heads_first, constant(0), constant(1)]).result
            guard.results[0].replace_all_uses_with(flat)
            guard.erase()
        text = executable_text(object_path, executable_target(tuple(flags))) + "".join(functions)
        helpers = ir.Module.parse(f"module {{{text}}}")
        for helper in list(helpers.body.operations):
            module.body.append(helper)
        return len(found)

    return rewrite_with_iree_bindings(in_file, out_file, text_file, rewrite)
