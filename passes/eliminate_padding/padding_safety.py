"""Proof that unpacked padding never reaches a real token's value.

``anyshape-eliminate-padding`` computes token-wise ops on the real tokens
only. Where the ops that read across positions need the padded layout back,
a padded position holds a copy of some real token's row, not what eager
computes there: it is *tainted*. This analysis follows the taint through
the rest of the function, axis by axis, and proves that no real token (and
no per-sequence output) reads a tainted entry; where it cannot, it names the
op that mixes positions.

Each axis of a value carries a set of roles:
- ``B``: the axis indexes sequences (alone or merged with heads);
- taint: ``L`` (token positions), ``BL`` (sequences x positions, flattened),
  ``L*`` (positions merged or offset, which no mask lines up with),
  ``at:c`` (the one position ``c`` of each sequence), ``row:c`` (a
  sequence axis whose rows are exact where position ``c`` is a real token);
- facts of untainted values, on a position axis, at padded positions:
  ``keep`` (0 / false: the attention mask itself), ``pad`` (1 / true),
  ``add`` (at most -1e30: an additive mask), ``dead`` (the same value
  <= -1e30 as eager: scores plus an additive mask), ``zero`` (exactly 0:
  the softmax of dead scores).

A reduction or contraction over a tainted axis is safe only against a
``zero`` axis (probabilities that ignore padded keys); one over a ``B`` axis
of a tainted value never is. Ops without a rule poison tainted inputs.
The runtime guarantees the mask holds 0 and 1 only (what ``keep`` and
``pad`` assume) and that every sequence row read this way is finite.
"""

from __future__ import annotations

import sympy

from anyshape.dialects import vtensor_shape
from anyshape.mlir import ir, torch_ops
from anyshape.passes.torch_ir.constants import constant_int, constant_number, list_items
from anyshape.passes.torch_ir.ops import (BROADCASTING, ELEMENTWISE, LAYER_NORMS,
                                          REDUCTIONS, SOFTMAXES, VIEWS, dropout_in_eval,
                                          keepdim, reduced_axes)
from anyshape.passes.torch_ir.shape_analysis import same_size
from anyshape.passes.torch_ir.values import defining_op, is_a, typed

BIG_NEGATIVE = -1e30
FACTS = frozenset({"keep", "pad", "add", "dead", "zero"})
_NO_ROLES: frozenset = frozenset()


def is_taint(role: str) -> bool:
    return role in ("L", "BL", "L*") or role.startswith(("at:", "row:"))


def tainted(roles: list[frozenset]) -> bool:
    return any(is_taint(r) for axis in roles for r in axis)


class Poison:
    """Entries anywhere may differ from eager: ``op`` read across padded positions."""

    def __init__(self, op: ir.Operation, why: str):
        self.op, self.why = op, why


_CASTS = {"torch.aten._to_copy", "torch.aten.to.dtype", "torch.prims.convert_element_type",
          "torch.aten.clone", "torch.aten.contiguous", "torch.aten.detach", "torch.aten.alias",
          "torch.tensor_static_info_cast", "torch.aten.type_as", "torch.aten.to.dtype_layout"}
_MATMULS = {"torch.aten.bmm", "torch.aten.matmul", "torch.aten.mm"}
_ZERO_FILLS = {"torch.aten.zeros_like", "torch.aten.zeros", "torch.aten.new_zeros"}


def held_number(value: ir.Value) -> float | None:
    """The number a scalar operand, a 0-d tensor or a splat literal holds."""
    op = defining_op(value)
    if op is None:
        return None
    if is_a(op, torch_ops.ConstantFloatOp, torch_ops.ConstantIntOp):
        return constant_number(value)
    if is_a(op, torch_ops.AtenFullLikeOp, torch_ops.AtenNewFullOp, torch_ops.AtenFullOp):
        return held_number(typed(op).fill_value)
    if is_a(op, torch_ops.AtenScalarTensorOp):
        return held_number(typed(op).s)
    if op.name in _ZERO_FILLS:
        return 0.0
    if op.name in _CASTS:
        return held_number(op.operands[0])
    if is_a(op, torch_ops.ValueTensorLiteralOp):
        try:
            dense = ir.DenseElementsAttr(op.attributes["value"])
        except (ValueError, TypeError):
            return None  # a resource blob: not a splat
        if dense.is_splat:
            splat = dense.get_splat_value()
            for kind in (ir.FloatAttr, ir.IntegerAttr):
                try:
                    return kind(splat).value
                except (ValueError, TypeError):
                    continue
    return None


class PaddingSafety:
    """Roles of every value reached from ``sources`` (value -> per-axis roles)."""

    def __init__(self, analysis, batch, length):
        self.analysis = analysis
        self.batch, self.length = batch, length
        self.roles: dict[ir.Value, list[frozenset] | Poison] = {}

    def seed(self, value: ir.Value, roles: list[frozenset]) -> None:
        self.roles[value] = roles

    def of(self, value: ir.Value):
        return self.roles.get(value)

    def run(self, block: ir.Block, skip: tuple = ()) -> None:
        """Roles through ``block`` in order; ops with an attribute named in ``skip``
        (those whose results are seeded, or that run on token rows) are not visited."""
        for op in block.operations:
            op = op.operation
            if is_a(op, torch_ops.BindSymbolicShapeOp) or not op.results or \
                    any(mark in op.attributes for mark in skip):
                continue
            states = [self.roles.get(v) for v in op.operands]
            if all(s is None for s in states):
                continue
            poison = next((s for s in states if isinstance(s, Poison)), None)
            if poison is not None:
                for result in op.results:
                    self.roles[result] = poison
                continue
            try:
                results = self._transfer(op, states)
            except _Unsafe as unsafe:
                results = [Poison(op, str(unsafe))] * len(op.results)
            for result, roles in zip(op.results, results):
                if roles is not None and (isinstance(roles, Poison) or any(roles)):
                    self.roles[result] = roles

    # -- transfer functions ---------------------------------------------------
    def _transfer(self, op, states):
        name = op.name
        rank = _rank(op.results[0])
        if rank is None:
            if any(s is not None and tainted(s) for s in states):
                raise _Unsafe("a tainted tensor becomes a non-tensor value")
            return [None] * len(op.results)
        if name in SOFTMAXES:
            return [self._softmax(op, states[0], not SOFTMAXES[name].log)]
        if name in REDUCTIONS:
            return [self._reduction(op, states[0])] * len(op.results)
        if name in _MATMULS:
            return [self._matmul(op, states[0], states[1])]
        if name == "torch.aten.linear":
            roles = self._need(states[0], op, 0)
            if roles[-1] & _TAINT_ANY:
                raise _Unsafe("a linear contracts a position axis")
            if any(s is not None and tainted(s) for s in states[1:]):
                raise _Unsafe("a linear's weight depends on padded values")
            return [_drop_facts(roles[:-1]) + [_NO_ROLES]]
        if name in LAYER_NORMS:
            return self._layer_norm(op, states)
        if name == "torch.aten.dropout":
            if not dropout_in_eval(op):
                raise _Unsafe("dropout in training mode")
            return [states[0]]
        shaped = self._shape_op(op, states)
        if shaped is not _NOT_SHAPE:
            return [shaped]
        if _elementwise(name):
            return [self._elementwise(op, states, rank)]
        if any(s is not None and tainted(s) for s in states):
            raise _Unsafe("no rule says which positions it reads")
        return [None] * len(op.results)

    def _need(self, state, op, position):
        if state is None:
            return [_NO_ROLES] * _rank(op.operands[position])
        return state

    def _softmax(self, op, state, is_softmax):
        roles = list(self._need(state, op, 0))
        dim = constant_int(typed(op).dim) % len(roles)
        axis = roles[dim]
        if axis & _TAINT_ANY or (tainted(roles) and "B" in axis):
            raise _Unsafe("a softmax normalizes over padded positions no mask removes")
        out = _drop_facts(roles)
        out[dim] = frozenset({"zero"}) if is_softmax and axis & {"dead", "add"} else _NO_ROLES
        return out

    def _reduction(self, op, state):
        roles = list(self._need(state, op, 0))
        dims, keep = reduced_axes(op, len(roles)), keepdim(op)
        if dims is None or keep is None:
            if tainted(roles):
                raise _Unsafe("a reduction over axes it cannot tell")
            return None
        for d in dims:
            if roles[d] & _TAINT_ANY or (tainted(roles) and "B" in roles[d]):
                raise _Unsafe("a reduction sums over padded positions")
        out = _drop_facts(roles)
        if keep:
            return [_NO_ROLES if i in dims else r for i, r in enumerate(out)]
        return [r for i, r in enumerate(out) if i not in dims]

    def _matmul(self, op, lhs_state, rhs_state):
        lhs = list(self._need(lhs_state, op, 0))
        rhs = list(self._need(rhs_state, op, 1))
        if len(lhs) < 2 or len(rhs) < 2:
            raise _Unsafe("a matrix-vector product over padded values")
        k_lhs, k_rhs = lhs[-1], rhs[-2]
        for mine, other in ((k_lhs, k_rhs), (k_rhs, k_lhs)):
            if mine & _TAINT_ANY and not (mine <= {"L", "B"} and "zero" in other):
                raise _Unsafe("a product sums over padded positions that are not zeroed")
            if "B" in mine and (tainted(lhs) or tainted(rhs)):
                raise _Unsafe("a product sums over sequences")
        rank = _rank(op.results[0])
        batch = _broadcast([lhs[:-2], rhs[:-2]], rank - 2)
        return _drop_facts(batch + [lhs[-2], rhs[-1]])

    def _layer_norm(self, op, states):
        roles = self._need(states[0], op, 0)
        normalized = list_items(typed(op).normalized_shape)
        count = len(normalized) if normalized is not None else len(roles)
        if any(r & _TAINT_ANY or ("B" in r and tainted(roles)) for r in roles[len(roles) - count:]):
            raise _Unsafe("a normalization over padded positions")
        if any(s is not None and tainted(s) for s in states[2:]):
            raise _Unsafe("a normalization's weights depend on padded values")
        out = _drop_facts(roles)
        results = [out]
        for extra in list(op.results)[1:]:
            extra_rank = _rank(extra)
            results.append(out[:extra_rank] if extra_rank is not None else None)
        return results

    # -- shape ops ------------------------------------------------------------
    def _shape_op(self, op, states):
        name = op.name
        if name in self._SHAPE_RULES:
            roles = list(self._need(states[0], op, 0))
            if any(s is not None and tainted(s) for s in states[1:]):
                raise _Unsafe("a shape computed from padded values")
            return self._SHAPE_RULES[name](self, op, roles)
        return _NOT_SHAPE

    def _permute(self, op, roles):
        order = [constant_int(v) for v in list_items(typed(op).dims) or []]
        if len(order) != len(roles) or None in order:
            raise _Unsafe("a permutation it cannot read")
        return [roles[o % len(roles)] for o in order]

    def _transpose(self, op, roles):
        a, b = constant_int(typed(op).dim0), constant_int(typed(op).dim1)
        if a is None or b is None:
            raise _Unsafe("a transpose it cannot read")
        a, b = a % len(roles), b % len(roles)
        roles[a], roles[b] = roles[b], roles[a]
        return roles

    def _t(self, op, roles):
        return list(reversed(roles))

    def _unsqueeze(self, op, roles):
        dim = constant_int(typed(op).dim) % (len(roles) + 1)
        return roles[:dim] + [_NO_ROLES] + roles[dim:]

    def _squeeze(self, op, roles):
        dim = constant_int(typed(op).dim) % len(roles)
        gone = roles.pop(dim)
        return self._fold_into_batch(roles, gone)

    def _expand(self, op, roles):
        rank = _rank(op.results[0])
        return [_NO_ROLES] * (rank - len(roles)) + roles

    def _flatten(self, op, roles):
        start, end = (constant_int(v) % len(roles)
                      for v in (typed(op).start_dim, typed(op).end_dim))
        return roles[:start] + [_merge(roles[start:end + 1])] + roles[end + 1:]

    def _unflatten(self, op, roles):
        dim = constant_int(typed(op).dim) % len(roles)
        sizes = self._dims(op.results[0])[dim:dim + len(list_items(typed(op).sizes) or [])]
        return roles[:dim] + self._split(roles[dim], sizes) + roles[dim + 1:]

    def _view(self, op, roles):
        source, result = self._dims(op.operands[0]), self._dims(op.results[0])
        if source is None or result is None or None in source or None in result:
            if tainted(roles):
                raise _Unsafe("a reshape of sizes it cannot tell")
            return [_NO_ROLES] * len(result or [])
        # Grouped as sizes: the symbols stand for distinct primes, so equal
        # products are equal expressions.
        symbols = sorted({s for d in source + result for s in d.free_symbols}, key=str)
        primes = dict(zip(symbols, sympy.primerange(1009, 10**6)))
        left_sizes = [int(d.subs(primes)) for d in source]
        right_sizes = [int(d.subs(primes)) for d in result]
        out, i, j = [], 0, 0
        while j < len(right_sizes):
            group_in, group_out, left, right = [], [j], 1, right_sizes[j]
            j += 1
            while i < len(left_sizes) and (left < right or not group_in):
                left, group_in = left * left_sizes[i], group_in + [i]
                i += 1
            while left > right and j < len(right_sizes):
                right, group_out = right * right_sizes[j], group_out + [j]
                j += 1
            if left != right:
                raise _Unsafe("a reshape it cannot group")
            out += self._split(_merge([roles[a] for a in group_in]), [result[b] for b in group_out])
        if i < len(left_sizes) and any(roles[a] for a in range(i, len(left_sizes))):
            raise _Unsafe("a reshape it cannot group")
        return out

    def _slice(self, op, roles):
        dim = constant_int(typed(op).dim) % len(roles)
        if "B" in roles[dim]:
            return _other_sequences(roles)
        if not roles[dim] & _TAINT_ANY and not roles[dim] & FACTS:
            return roles
        start = constant_int(typed(op).start)
        size = vtensor_shape(op.results[0].type)[0][dim]
        if size == 1 and start is not None:
            roles[dim] = frozenset({f"at:{start}"})
        elif roles[dim] & _TAINT_ANY:
            roles[dim] = frozenset({"L*"})
        else:
            roles[dim] = _NO_ROLES  # a fact about positions that moved
        return roles

    def _select(self, op, roles):
        dim = constant_int(typed(op).dim) % len(roles)
        if "B" in roles[dim]:
            roles = _other_sequences(roles)
            roles.pop(dim)
            return roles
        index = constant_int(typed(op).index)
        gone = roles.pop(dim)
        if gone & _TAINT_ANY:
            gone = frozenset({f"at:{index if index is not None else '?'}"})
        return self._fold_into_batch(roles, gone)

    def _fold_into_batch(self, roles, gone):
        """An axis that goes away (size 1) leaves its taint on the sequence axis."""
        taint = {r for r in gone if is_taint(r)}
        if not taint:
            return roles
        rows = frozenset(f"row:{r.split(':')[1]}" if r.startswith(("at:", "row:")) else "L*"
                         for r in taint)
        if "L*" in rows:
            raise _Unsafe("positions folded into another axis")
        for i, axis in enumerate(roles):
            if "B" in axis:
                roles[i] = axis | rows
                return roles
        raise _Unsafe("a position's value lost its sequence axis")

    _SHAPE_RULES = {"torch.aten.permute": _permute, "torch.aten.transpose.int": _transpose,
                    "torch.aten.t": _t, "torch.aten.unsqueeze": _unsqueeze,
                    "torch.aten.squeeze.dim": _squeeze, "torch.aten.expand": _expand,
                    "torch.aten.broadcast_to": _expand,
                    "torch.aten.flatten.using_ints": _flatten,
                    "torch.aten.unflatten.int": _unflatten,
                    "torch.aten.slice.Tensor": _slice, "torch.aten.select.int": _select,
                    **dict.fromkeys(VIEWS, _view)}

    def _split(self, roles, sizes):
        """Roles of the parts an axis splits into (``sizes``: their dims)."""
        if len(sizes) == 1:
            return [roles]
        parts = [set() for _ in sizes]
        for role in roles:
            wants = {"B": [self.batch], "BL": [self.batch, self.length], "L": [self.length]}.get(role)
            if wants is None:
                if is_taint(role) or role in FACTS:
                    if is_taint(role):
                        for part in parts:
                            part.add("L*")
                continue
            hits = [i for i, s in enumerate(sizes) if any(same_size(s, w) for w in wants)]
            if role == "BL" and len(hits) == 2:
                parts[hits[0]].add("B")
                parts[hits[1]].add("L")
            elif role != "BL" and len(hits) == 1:
                parts[hits[0]].add(role)
            else:
                for part in parts:
                    part.add("B" if role == "B" else "L*")
        return [frozenset(p) for p in parts]

    def _dims(self, value):
        dims = self.analysis.dims.get(value)
        if dims is not None:
            return dims
        shape = vtensor_shape(value.type)
        return None if shape is None else [None if s is None else sympy.Integer(s)
                                           for s in shape[0]]

    # -- elementwise ----------------------------------------------------------
    def _elementwise(self, op, states, rank):
        operands = []
        for value, state in zip(op.operands, states):
            shape = vtensor_shape(value.type)
            if shape is None:
                continue
            roles = list(state) if state is not None else [_NO_ROLES] * len(shape[0])
            # A size-1 axis broadcasts: only its taint (one wrong position) carries over.
            roles = [r if n != 1 else frozenset(x for x in r if is_taint(x))
                     for r, n in zip(roles, shape[0])]
            operands.append([_NO_ROLES] * (rank - len(roles)) + roles)
        out = []
        for axis in range(rank):
            axis_roles = [roles[axis] for roles in operands]
            kinds = {_kind(r) for r in axis_roles} - {None}
            if len(kinds) > 1:
                raise _Unsafe("sequences and positions of different axes combine")
            out.append(self._combine(op, axis_roles))
        return out

    def _combine(self, op, axis_roles) -> frozenset:
        name = op.name
        union = frozenset().union(*axis_roles)
        taint = {r for r in union if is_taint(r)}
        batch = {"B"} & union
        facts = [roles & FACTS for roles in axis_roles]
        first = facts[0] if facts else _NO_ROLES
        positions_only = taint <= {"L"}  # padded entries are those of this axis' positions
        if name in _CASTS or name == "torch.aten.dropout":
            return frozenset(taint | batch | first)
        compared = _MASK_COMPARISONS.get(name)
        if compared is not None and first & {"keep", "pad"}:
            threshold = held_number(typed(op).other)
            flip = compared(threshold) if threshold is not None else None
            if flip is not None:
                return frozenset(taint | batch | _flip(first, flip))
        if name in ("torch.aten.logical_not", "torch.aten.bitwise_not"):
            return frozenset(taint | batch | _flip(first, True))
        if name == "torch.aten.rsub.Scalar" and held_number(typed(op).other) == 1 \
                and held_number(typed(op).alpha) == 1:
            return frozenset(taint | batch | _flip(first, True))
        if name == "torch.aten.sub.Tensor" and len(facts) == 2 and \
                held_number(typed(op).self_) == 1 and held_number(typed(op).alpha) == 1:
            return frozenset(taint | batch | _flip(facts[1], True))  # 1.0 - mask
        if name in ("torch.aten.mul.Scalar", "torch.aten.mul.Tensor") and positions_only:
            scale = held_number(typed(op).other)
            if "pad" in first and scale is not None and scale <= BIG_NEGATIVE and not taint:
                return frozenset(batch | {"add"})
            # 0 (the mask's padding, or zeroed probabilities) times a finite value is 0.
            if name.endswith("Tensor") and any(f & {"zero", "keep"} for f in facts):
                return frozenset(batch | {"zero", "keep"})
        if name == "torch.aten.bitwise_and.Tensor" and any("keep" in f for f in facts):
            return frozenset(taint | batch | {"keep"})
        if name == "torch.aten.bitwise_or.Tensor" and any("pad" in f for f in facts):
            return frozenset(taint | batch | {"pad"})
        if name == "torch.aten.where.self" and positions_only:
            chosen = 1 if "pad" in first else 2 if "keep" in first else None
            if chosen is not None:  # padded entries are that branch's
                return frozenset(batch | self._padded_value(op.operands[chosen], facts[chosen],
                                                            bool(taint)))
        if name == "torch.aten.where.self" and positions_only and \
                all("zero" in f or held_number(v) == 0 for f, v in
                    zip(facts[1:], list(op.operands)[1:])):
            return frozenset(batch | {"zero"})  # both choices 0 at padded positions
        if name in ("torch.aten.masked_fill.Scalar", "torch.aten.masked_fill.Tensor") \
                and positions_only and len(facts) > 1 and "pad" in facts[1]:
            return frozenset(batch | self._padded_value(typed(op).value, _NO_ROLES,
                                                        bool(taint)))
        if name == "torch.aten.add.Tensor" and positions_only and len(facts) == 2:
            if any(f & {"add", "dead"} for f in facts) and held_number(typed(op).alpha) == 1:
                return frozenset(batch | {"dead" if taint else "add"})
        return frozenset(taint | batch)

    @staticmethod
    def _padded_value(value: ir.Value, facts: frozenset, tainted_elsewhere: bool) -> set:
        """The facts of a result whose padded entries are ``value``'s (its facts
        there, or a constant): empty when they are merely exact."""
        constant = held_number(value)
        if facts & {"zero"} or constant == 0:
            return {"zero"}
        if facts & {"add", "dead"} or (constant is not None and constant <= BIG_NEGATIVE):
            return {"dead" if tainted_elsewhere else "add"}
        if constant is None and not facts & {"keep", "pad"}:
            raise _Unsafe("padded entries take a value it cannot tell")
        return set()


class _Unsafe(Exception):
    pass


_NOT_SHAPE = object()


# Comparisons of a 0/1 mask with a threshold between its values: whether the
# result marks padding as the mask does (False) or the other way (True).
_MASK_COMPARISONS = {
    "torch.aten.ne.Scalar": lambda c: False if c == 0 else None,
    "torch.aten.eq.Scalar": lambda c: True if c == 0 else None,
    "torch.aten.gt.Scalar": lambda c: False if 0 <= c < 1 else None,
    "torch.aten.ge.Scalar": lambda c: False if 0 < c <= 1 else None,
    "torch.aten.lt.Scalar": lambda c: True if 0 < c <= 1 else None,
    "torch.aten.le.Scalar": lambda c: True if 0 <= c < 1 else None,
}
_TAINT_ANY = frozenset({"L", "BL", "L*"})


def _flip(facts: frozenset, flip: bool) -> frozenset:
    if not flip:
        return facts & {"keep", "pad"}
    return frozenset({"keep": "pad", "pad": "keep"}[f] for f in facts if f in ("keep", "pad"))


def _merge(axes: list[frozenset]) -> frozenset:
    roles = frozenset().union(*axes) if axes else _NO_ROLES
    taint = {r for r in roles if is_taint(r)}
    if len(axes) == 1:
        return roles
    if {"B", "L"} <= roles and taint == {"L"}:
        if [("B" in a, "L" in a) for a in axes if a] == [(True, False), (False, True)]:
            return frozenset({"BL"})
    if taint:
        if any(r.startswith(("at:", "row:")) for r in taint):
            raise _Unsafe("a position's value merged with other axes")
        return frozenset({"L*"} | ({"B"} & roles))
    return frozenset({"B"} & roles)


def _other_sequences(roles: list[frozenset]) -> list[frozenset]:
    """Roles after a selection of sequences: its rows no longer line up with the
    mask's. Exact values stay exact (and lose their mask facts); taint cannot
    be told apart any more."""
    if tainted(roles):
        raise _Unsafe("a selection of sequences of a value with padded positions")
    return [r - FACTS - {"B"} for r in roles]


def _drop_facts(roles: list[frozenset]) -> list[frozenset]:
    return [r - FACTS for r in roles]


def _broadcast(parts: list[list[frozenset]], rank: int) -> list[frozenset]:
    out = [set() for _ in range(rank)]
    for roles in parts:
        offset = rank - len(roles)
        for i, r in enumerate(roles):
            out[offset + i] |= r
    return [frozenset(r) for r in out]


def _kind(roles: frozenset) -> str | None:
    """What an axis indexes, for lining operands up: sequences, positions, both."""
    positions = any((is_taint(r) and not r.startswith("row:")) or r in FACTS for r in roles)
    if "BL" in roles or ("B" in roles and positions):
        return "both"
    return "positions" if positions else "sequences" if "B" in roles else None


def _rank(value: ir.Value) -> int | None:
    shape = vtensor_shape(value.type)
    return None if shape is None else len(shape[0])


def _elementwise(name: str) -> bool:
    return name in ELEMENTWISE or name in BROADCASTING
