"""Complex tensors inside a model as pairs of real ones: rotary embeddings written with ``torch.polar``.

Llama 4 and DeepSeek-V2 rotate queries and keys as complex numbers
(``view_as_complex(q) * polar(1, angle)``, then ``view_as_real``). torch-mlir
imports the complex ops, and IREE refuses them ("Only integer/float dtype
supported"), so these models failed to compile. Where every complex value is
made and used inside the graph by the ops below, ``rewrite_complex_as_pairs``
computes each as a real tensor with a trailing dim of 2 (``view_as_real``'s
layout): a product is ``(ac - bd, ad + bc)``, and views act on the leading
dims. FNet mixes its tokens with ``fftn(x).real``, whose ``aten._fft_c2c``
torch-mlir cannot lower at all: as pairs it is a discrete Fourier transform
(``_dft``), products with cosine and sine matrices of each transformed dim's
size, the dynamic length's included. The real FFTs are the same transform: of
a real signal (``_fft_r2c``: rfft, fft of a real tensor) and back to one from
the first ``n // 2 + 1`` frequencies (``_fft_c2r``: irfft, hfft, with
``conj``), and ``abs`` of a complex value is its magnitude. A graph with a
complex input or output, or any other complex op, is left as it was. Guarded
by ``test_complex_rotary_matches_eager`` and
``test_fft_over_a_dynamic_length_matches_eager`` (test_complex_as_pairs.py).
"""

from __future__ import annotations

import math
import operator

import torch
from torch.fx import Graph, Node

from anyshape.frontend.graph_fixes.fx_emit import Emitter
from anyshape.stages import Workaround

aten = torch.ops.aten

_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64,
            torch.complex32: torch.float16}
# Views and copies of a complex tensor: the same op on its pair, with dims
# counted on the complex tensor (so a negative dim moves one to the left).
_DIM_OPS = {aten.slice.Tensor, aten.unsqueeze.default, aten.select.int, aten.squeeze.dim}
_SHAPE_OPS = {aten.view.default, aten.reshape.default, aten._unsafe_view.default,
              aten.expand.default}
_SAME_OPS = {aten.clone.default, aten.alias.default}
_PRODUCERS = {aten.view_as_complex.default, aten.polar.default, aten.complex.default,
              aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor, aten.permute.default,
              aten.transpose.int, aten._to_copy.default, aten._conj.default,
              aten._fft_c2c.default, aten._fft_r2c.default} | _DIM_OPS | _SHAPE_OPS | _SAME_OPS
_CONSUMERS = {aten.view_as_real.default, aten.real.default, aten.imag.default,
              aten._assert_tensor_metadata.default, aten._fft_c2r.default, aten.abs.default}


def _is_complex(x) -> bool:
    value = x.meta.get("val") if isinstance(x, Node) else None
    return isinstance(value, torch.Tensor) and value.is_complex()


def _supported(graph: Graph) -> bool:
    for node in graph.nodes:
        if not _is_complex(node):
            continue
        if node.op != "call_function" or node.target not in _PRODUCERS:
            return False
        if any(isinstance(a, torch.Tensor) and a.is_complex() for a in node.args):
            return False  # a complex constant
        if node.target in (aten.add.Tensor, aten.sub.Tensor) and (
                not all(_is_complex(a) for a in node.args[:2]) or node.kwargs.get("alpha", 1) != 1):
            return False
        for user in node.users:
            if not _is_complex(user) and (user.op != "call_function" or
                                          user.target not in _CONSUMERS):
                return False
    return True


def rewrite_complex_as_pairs(graph: Graph) -> int:
    """Rewrite every complex value as a real pair; returns how many, 0 when
    the graph has none or one this cannot rewrite."""
    if not any(_is_complex(n) for n in graph.nodes) or not _supported(graph):
        return 0
    pairs: dict[Node, Node] = {}
    rewritten = 0
    for node in list(graph.nodes):
        if _is_complex(node):
            pairs[node] = _pair(graph, node, pairs)
            rewritten += 1
        elif node.op == "call_function" and node.target in _CONSUMERS and \
                node.args and _is_complex(node.args[0]):
            pair = pairs[node.args[0]]
            if node.target is aten._assert_tensor_metadata.default:
                graph.erase_node(node)
                continue
            emit = Emitter(graph, node)
            if node.target is aten._fft_c2r.default:
                replacement = _inverse_real_dft(emit, node, pairs)
            elif node.target is aten.abs.default:
                replacement = _magnitude(emit, pair)
            elif node.target is aten.view_as_real.default:
                replacement = pair
            else:
                replacement = emit(aten.select.int, pair, -1,
                                   0 if node.target is aten.real.default else 1)
            node.replace_all_uses_with(replacement)
            graph.erase_node(node)
    for node in reversed(list(pairs)):
        if not node.users:
            graph.erase_node(node)
    return rewritten


def _pair(graph: Graph, node: Node, pairs: dict[Node, Node]) -> Node:
    emit = Emitter(graph, node)
    op, args = node.target, node.args
    rank = node.meta["val"].dim()

    def parts(x):
        return emit(aten.select.int, pairs[x], -1, 0), emit(aten.select.int, pairs[x], -1, 1)

    def joined(re, im):
        return emit(aten.cat.default, [emit(aten.unsqueeze.default, re, -1),
                                       emit(aten.unsqueeze.default, im, -1)], -1)

    if op is aten.view_as_complex.default:
        return args[0]
    if op is aten.polar.default:
        magnitude, angle = args
        return joined(emit(aten.mul.Tensor, magnitude, emit(aten.cos.default, angle)),
                      emit(aten.mul.Tensor, magnitude, emit(aten.sin.default, angle)))
    if op is aten.complex.default:
        return joined(args[0], args[1])
    if op is aten._to_copy.default:  # a real tensor made complex, or a complex one cast
        real_dtype = _REAL_OF[node.meta["val"].dtype]
        if _is_complex(args[0]):
            return emit(op, pairs[args[0]], dtype=real_dtype)
        re = emit(op, args[0], dtype=real_dtype)
        return joined(re, emit(aten.zeros_like.default, re))
    if op is aten._fft_c2c.default:
        return joined(*_dft(emit, *parts(args[0]), *args[1:]))
    if op is aten._fft_r2c.default:  # a real signal's spectrum, or its first n // 2 + 1
        signal, dims, normalization, onesided = args
        rank = signal.meta["val"].dim()
        re, im = _dft(emit, signal, emit(aten.zeros_like.default, signal), dims, normalization,
                      True)
        spectrum = joined(re, im)
        if onesided:
            last = dims[-1] % rank
            size = signal.meta["val"].shape[last]
            half = size // 2 + 1 if isinstance(size, int) else emit(operator.add, emit(
                operator.floordiv, emit(aten.sym_size.int, signal, last), 2), 1)
            spectrum = emit(aten.slice.Tensor, spectrum, last, 0, half)
        return spectrum
    if op is aten._conj.default:
        re, im = parts(args[0])
        return joined(re, emit(aten.neg.default, im))
    if op in (aten.add.Tensor, aten.sub.Tensor):
        return emit(op, pairs[args[0]], pairs[args[1]])
    if op is aten.mul.Tensor:
        a, b = args
        if _is_complex(a) and _is_complex(b):
            (ar, ai), (br, bi) = parts(a), parts(b)
            return joined(emit(aten.sub.Tensor, emit(aten.mul.Tensor, ar, br),
                               emit(aten.mul.Tensor, ai, bi)),
                          emit(aten.add.Tensor, emit(aten.mul.Tensor, ar, bi),
                               emit(aten.mul.Tensor, ai, br)))
        pair, factor = (pairs[a], b) if _is_complex(a) else (pairs[b], a)
        if isinstance(factor, Node):
            factor = emit(aten.unsqueeze.default, factor, -1)
        return emit(aten.mul.Tensor, pair, factor)
    source = pairs[args[0]]
    if op in _SAME_OPS:
        return emit(op, source, *args[1:], **node.kwargs)
    if op in _SHAPE_OPS:
        return emit(op, source, [*args[1], 2])
    if op is aten.permute.default:
        return emit(op, source, [d % rank for d in args[1]] + [rank])
    if op is aten.transpose.int:
        return emit(op, source, args[1] % rank, args[2] % rank)
    # _DIM_OPS: the dim is counted on the complex tensor (unsqueeze: on its result)
    dim_rank = rank if op is aten.unsqueeze.default else args[0].meta["val"].dim()
    return emit(op, source, args[1] % dim_rank, *args[2:])


# torch's normalization codes for an FFT: none, by sqrt(n), by n.
_NORMALIZED_BY_ROOT, _NORMALIZED_BY_N = 1, 2


def _angles(emit: Emitter, rows: Node, columns: Node, n, dtype):
    """(``2 pi (row * column mod n) / n`` as a [rows, columns] matrix of
    ``dtype``, ``n`` as an int64 0-d tensor, and as a ``dtype`` one): the
    product is taken modulo ``n`` first, so that the angle keeps float
    precision."""
    products = emit(aten.mul.Tensor, emit(aten.unsqueeze.default, rows, 1),
                    emit(aten.unsqueeze.default, columns, 0))
    size = emit(aten.scalar_tensor.default, n, dtype=torch.int64)
    turns = emit(aten.sub.Tensor, products, emit(aten.mul.Tensor, size, emit(
        aten.div.Tensor_mode, products, size, rounding_mode="trunc")))
    real_size = emit(aten._to_copy.default, size, dtype=dtype)
    angle = emit(aten.div.Tensor, emit(aten.mul.Tensor, emit(
        aten._to_copy.default, turns, dtype=dtype), 2 * math.pi), real_size)
    return angle, size, real_size


def _along(emit: Emitter, x: Node, matrix: Node, dim: int, rank: int) -> Node:
    """``x`` times ``matrix`` along ``dim``."""
    moved = emit(aten.transpose.int, x, dim, rank - 1)
    return emit(aten.transpose.int, emit(aten.matmul.default, moved, matrix), dim, rank - 1)


def _dft(emit: Emitter, re: Node, im: Node, dims, normalization: int, forward: bool):
    """``aten._fft_c2c`` of ``re + i im`` over ``dims`` as discrete Fourier
    transforms: along each dim of size ``n``, a product with ``cos(2 pi jk / n)``
    and ``sin(2 pi jk / n)`` (``jk`` taken modulo ``n`` first, so that the angle
    keeps float precision), ``exp(-i angle)`` forward, ``exp(+i angle)`` back.
    ``n`` may be a dynamic size. torch-mlir has no lowering for the FFT ops."""
    rank = re.meta["val"].dim()
    for dim in (d % rank for d in dims):
        n = emit(aten.sym_size.int, re, dim)
        index = emit(aten.arange.default, n, dtype=torch.int64)
        angle, _, real_size = _angles(emit, index, index, n, re.meta["val"].dtype)
        cos, sin = emit(aten.cos.default, angle), emit(aten.sin.default, angle)

        def along(x, matrix):
            return _along(emit, x, matrix, dim, rank)

        re_cos, im_sin, im_cos, re_sin = along(re, cos), along(im, sin), along(im, cos), \
            along(re, sin)
        if forward:   # (re + i im)(cos - i sin)
            re, im = emit(aten.add.Tensor, re_cos, im_sin), emit(aten.sub.Tensor, im_cos, re_sin)
        else:         # (re + i im)(cos + i sin)
            re, im = emit(aten.sub.Tensor, re_cos, im_sin), emit(aten.add.Tensor, im_cos, re_sin)
        if normalization in (_NORMALIZED_BY_ROOT, _NORMALIZED_BY_N):
            scale = real_size
            if normalization == _NORMALIZED_BY_ROOT:
                scale = emit(aten.sqrt.default, scale)
            re, im = emit(aten.div.Tensor, re, scale), emit(aten.div.Tensor, im, scale)
    return re, im


def _magnitude(emit: Emitter, pair: Node) -> Node:
    """``|re + i im|`` as hypot computes it, ``m * sqrt(1 + (n / m)^2)`` with
    ``m`` the larger part and ``n`` the smaller: squares of float32 parts
    overflow from 1.8e19 and vanish below 1e-23 (torch-mlir has no hypot)."""
    size = emit(aten.abs.default, pair)
    re, im = emit(aten.select.int, size, -1, 0), emit(aten.select.int, size, -1, 1)
    larger, smaller = emit(aten.maximum.default, re, im), emit(aten.minimum.default, re, im)
    finite = emit(aten.logical_and.default, emit(aten.gt.Scalar, larger, 0),
                  emit(aten.lt.Scalar, larger, math.inf))
    ratio = emit(aten.where.self, finite, emit(aten.div.Tensor, smaller, larger),
                 emit(aten.zeros_like.default, larger))
    return emit(aten.mul.Tensor, larger, emit(aten.sqrt.default, emit(
        aten.add.Tensor, emit(aten.mul.Tensor, ratio, ratio), 1)))


def _inverse_real_dft(emit: Emitter, node: Node, pairs: dict[Node, Node]) -> Node:
    """``aten._fft_c2r``: the inverse transform over every dim but the last
    (``_dft``), then along the last one, from its first ``n // 2 + 1``
    frequencies (torch passes exactly those), the real signal of length ``n``
    whose spectrum is Hermitian: ``x[t] = sum_k w_k (re_k cos - im_k sin)(2 pi k
    t / n)``, with ``w_k`` 1 at ``k = 0`` and ``k = n / 2``, 2 between."""
    source, dims, normalization, n = node.args
    pair = pairs[source]
    re, im = emit(aten.select.int, pair, -1, 0), emit(aten.select.int, pair, -1, 1)
    rank = re.meta["val"].dim()
    dims = [d % rank for d in dims]
    if len(dims) > 1:
        re, im = _dft(emit, re, im, dims[:-1], normalization, forward=False)
    dim = dims[-1]
    frequencies = emit(aten.sym_size.int, re, dim)
    k = emit(aten.arange.default, frequencies, dtype=torch.int64)
    t = emit(aten.arange.default, n, dtype=torch.int64)
    dtype = re.meta["val"].dtype
    angle, size, real_size = _angles(emit, k, t, n, dtype)
    # 2 - [k == 0] - [2k == n], as a column
    once = emit(aten.add.Tensor,
                emit(aten._to_copy.default, emit(aten.eq.Scalar, k, 0), dtype=dtype),
                emit(aten._to_copy.default, emit(aten.eq.Tensor, emit(aten.mul.Tensor, k, 2),
                                                 size), dtype=dtype))
    weight = emit(aten.unsqueeze.default, emit(aten.rsub.Scalar, once, 2), 1)
    cos = emit(aten.mul.Tensor, emit(aten.cos.default, angle), weight)
    sin = emit(aten.mul.Tensor, emit(aten.sin.default, angle), weight)

    signal = emit(aten.sub.Tensor, _along(emit, re, cos, dim, rank),
                  _along(emit, im, sin, dim, rank))
    if normalization in (_NORMALIZED_BY_ROOT, _NORMALIZED_BY_N):
        scale = real_size if normalization == _NORMALIZED_BY_N else \
            emit(aten.sqrt.default, real_size)
        signal = emit(aten.div.Tensor, signal, scale)
    return signal


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='complex_as_real_pairs', stage='import',
        where='rewrite_complex_as_pairs',
        upstream="IREE refuses complex element types from torch-mlir's import ('Only "
                 "integer/float dtype supported'): Llama 4's and DeepSeek-V2's complex rotary "
                 "embeddings (torch.polar, view_as_complex) did not compile; torch-mlir has no "
                 "lowering for aten._fft_c2c (FNet), _fft_r2c, _fft_c2r or _conj.",
        guard=('test/python/frontend/test_complex_as_pairs.py::test_complex_rotary_matches_eager',
               'test/python/frontend/test_complex_as_pairs.py::test_the_plain_stack_has_no_fft'),
        remove_when="when IREE compiles torch-mlir's complex tensors (the test's "
                    "plain-stack case passes)"),
)
