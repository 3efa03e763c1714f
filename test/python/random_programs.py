"""Seeded random programs for the ``anyshape-hoist-slices`` property test.

Each program is a small ``torch.nn.Module`` whose ``forward(x, y, mask)`` takes
``x, y: [B, L, H]`` and ``mask: [B, L]`` (1.0 keep, 0.0 pad), runs a random DAG
of the ops the pass moves selections through (elementwise, broadcasts, casts,
normalizations, softmax, reductions, linear/matmul/bmm, attention written out
and as ``scaled_dot_product_attention``, views, permutes, flatten/unflatten,
unsqueeze/squeeze, expand) and ends in a random selection (select, slice with
any start/end/step, index_select, on the length, batch or a static axis, or a
chain of two).

A program is generated as Python source, so that a failing case prints as code
that rebuilds it: ``Program.source`` is a class definition using only ``torch``
and the two helpers below (``seeded`` and ``seeded_linear``), and its parameters
come from a generator seeded with the case's seed.

``generate(..., mask_value=...)`` changes what attention adds at masked keys
(the padding-elimination property test uses transformers' most negative
float, which it can prove removes the padded keys).

Every selection index is valid for the smallest shapes the test runs:
``B >= MIN_BATCH`` and ``L >= MIN_LENGTH``.
"""

from __future__ import annotations

import dataclasses
import random

import torch

MIN_BATCH = 1
MIN_LENGTH = 4
MAX_BATCH = 4
MAX_LENGTH = 32

# A dim is "B", "L", "BL" (the two flattened together) or a static int.
_MIN_SIZE = {"B": MIN_BATCH, "L": MIN_LENGTH, "BL": MIN_BATCH * MIN_LENGTH}


def seeded(g: torch.Generator, shape, scale: float = 1.0, positive: bool = False):
    """A parameter drawn from ``g``: normal times ``scale``, or in [0.5, 1.5) when ``positive``."""
    if positive:
        value = torch.rand(shape, generator=g) + 0.5
    else:
        value = torch.randn(shape, generator=g) * scale
    return torch.nn.Parameter(value)


def seeded_linear(g: torch.Generator, fan_in: int, fan_out: int, bias: bool) -> torch.nn.Linear:
    """An ``nn.Linear`` with weights from ``g``, scaled by 1/sqrt(fan_in) so that
    values keep their magnitude through a chain of layers."""
    layer = torch.nn.Linear(fan_in, fan_out, bias=bias)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(fan_out, fan_in, generator=g) / fan_in ** 0.5)
        if bias:
            layer.bias.copy_(torch.randn(fan_out, generator=g) * 0.1)
    return layer


@dataclasses.dataclass
class Program:
    seed: int
    hidden: int
    source: str          # the class definition, printable
    ops: list[str]       # the op kinds drawn, in order (a one-line summary)
    selection: str       # the final selection expression

    @property
    def class_name(self) -> str:
        return f"Program{self.seed}"

    def build(self) -> torch.nn.Module:
        namespace = {"torch": torch, "seeded": seeded, "seeded_linear": seeded_linear}
        code = compile(self.source, f"<random program {self.seed}>", "exec")
        exec(code, namespace)
        return namespace[self.class_name]().eval()

    def describe(self) -> str:
        return (f"case seed {self.seed} (H={self.hidden}): {' -> '.join(self.ops)} -> "
                f"{self.selection}\n{self.source}")


@dataclasses.dataclass
class _Value:
    name: str
    dims: tuple


class _Builder:
    def __init__(self, seed: int, hidden: int, mask_value: str = "-30.0"):
        self.mask_value = mask_value  # what attention adds at masked keys
        self.rng = random.Random(seed)
        self.seed = seed
        self.hidden = hidden
        self.init_lines: list[str] = []
        self.lines: list[str] = []
        self.ops: list[str] = []
        self.count = 0
        self.params = 0
        self.pool = [_Value("x", ("B", "L", hidden)), _Value("y", ("B", "L", hidden))]

    # -- emitting ---------------------------------------------------------------
    def emit(self, expr: str, dims, op: str | None = None) -> _Value:
        name = f"t{self.count}"
        self.count += 1
        self.lines.append(f"{name} = {expr}")
        value = _Value(name, tuple(dims))
        self.pool.append(value)
        if op:
            self.ops.append(op)
        return value

    def param(self, shape, scale: float = 0.5, positive: bool = False) -> str:
        name = f"p{self.params}"
        self.params += 1
        shape_text = "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
        extra = ", positive=True" if positive else f", scale={scale}"
        self.init_lines.append(f"self.{name} = seeded(g, {shape_text}{extra})")
        return f"self.{name}"

    def linear(self, fan_in: int, fan_out: int, bias: bool) -> str:
        name = f"lin{self.params}"
        self.params += 1
        self.init_lines.append(f"self.{name} = seeded_linear(g, {fan_in}, {fan_out}, bias={bias})")
        return f"self.{name}"

    def index_buffer(self, values) -> str:
        name = f"idx{self.params}"
        self.params += 1
        self.init_lines.append(f"self.register_buffer({name!r}, torch.tensor({list(values)}))")
        return f"self.{name}"

    # -- picking ----------------------------------------------------------------
    def current(self) -> _Value:
        """The latest value (a chain), now and then an earlier one (a branch).
        Second operands come from the whole pool (``partner``), so that values
        get several consumers (residuals, branches that rejoin) and little of
        the program is dead."""
        if len(self.pool) > 2 and self.rng.random() < 0.9:
            return self.pool[-1]
        return self.rng.choice(self.pool)

    def partner(self, value: _Value) -> _Value:
        """Another value of the same dims; ``value`` itself (``t * t``) only when
        there is no other."""
        same = [v for v in self.pool if v.dims == value.dims and v is not value]
        if not same:
            return value
        return self.rng.choice(same)

    def scalar(self) -> str:
        return str(self.rng.choice([0.5, 0.75, 1.25, 1.5, 2.0, -0.5, -1.5]))

    def mask_for(self, dims) -> str | None:
        """``mask`` viewed to broadcast against ``dims``: B on axis 0, L on one of
        the L axes, 1 elsewhere; None when ``dims`` has no such axes."""
        axes = [i for i, d in enumerate(dims) if d == "L"]
        if not dims or dims[0] != "B" or not axes:
            return None
        axis = self.rng.choice(axes)
        items = [":" if i in (0, axis) else "None" for i in range(len(dims))]
        if items == [":", ":"]:
            return "mask"
        return f"mask[{', '.join(items)}]"


def _static(dim) -> bool:
    return isinstance(dim, int)


# -- ops: each takes the builder, returns False when it does not apply -----------

_UNARY = [
    ("tanh", "torch.tanh({t})"), ("relu", "torch.relu({t})"), ("gelu", "torch.nn.functional.gelu({t})"),
    ("gelu(tanh)", "torch.nn.functional.gelu({t}, approximate='tanh')"), ("erf", "torch.erf({t})"),
    ("neg", "-{t}"), ("sigmoid", "torch.sigmoid({t})"), ("silu", "torch.nn.functional.silu({t})"),
    # rsqrt, sqrt and fractional pow on positive values only, to keep NaNs out.
    ("rsqrt", "torch.rsqrt({t} * {t} + 1.0)"), ("sqrt", "torch.sqrt({t}.abs() + 0.5)"),
    ("pow 2", "{t}.pow(2) * 0.5"), ("pow 1.5", "({t}.abs() + 0.5).pow(1.5)"),
    ("exp", "torch.exp(torch.tanh({t}))"), ("clone", "{t}.clone()"),
    ("dropout(eval)", "torch.nn.functional.dropout({t}, p=0.3, training=False)"),
    ("cast f64", "({t}.to(torch.float64) * 1.5).to(torch.float32)"),
    ("double/float", "{t}.double().tanh().float()"),
]


def _unary(b: _Builder) -> bool:
    t = b.current()
    name, form = b.rng.choice(_UNARY)
    b.emit(form.format(t=t.name), t.dims, op=name)
    return True


def _scalar_binary(b: _Builder) -> bool:
    t = b.current()
    c = b.scalar()
    form = b.rng.choice(["{t} + {c}", "{t} - {c}", "{t} * {c}", "{t} / {c}", "{c} - {t}",
                         "torch.add({t}, {c}, alpha=2)"])
    b.emit(form.format(t=t.name, c=c), t.dims, op="scalar " + form.format(t="t", c="c"))
    return True


def _param_broadcast(b: _Builder) -> bool:
    """t (op) p, with p of t's static sizes or 1 per axis, sometimes of lower rank."""
    t = b.current()
    if not t.dims:
        return False
    rank = len(t.dims)
    keep = b.rng.randint(1, rank)  # trailing axes p has
    shape = []
    for d in t.dims[rank - keep:]:
        shape.append(d if _static(d) and b.rng.random() < 0.7 else 1)
    op = b.rng.choice(["+", "-", "*", "/"])
    p = b.param(shape, positive=op == "/", scale=0.5)
    b.emit(f"{t.name} {op} {p}", t.dims, op=f"{op} param{list(shape)}")
    return True


def _reduced_broadcast(b: _Builder) -> bool:
    """t (op) reduce(u, axis, keepdim=True): a [B, L, 1]- or [B, 1, H]-style operand
    derived from another value."""
    t = b.current()
    u = b.partner(t)
    if len(t.dims) < 2:
        return False
    axis = b.rng.randrange(len(t.dims))
    reduce = b.rng.choice(["mean", "sum", "amax"])
    op = b.rng.choice(["+", "-", "*"])
    operand = f"{u.name}.{reduce}(dim={axis}, keepdim=True)"
    b.emit(f"{t.name} {op} {operand}", t.dims, op=f"{op} {reduce}(keepdim, axis {axis})")
    return True


def _mask_broadcast(b: _Builder) -> bool:
    t = b.current()
    m = b.mask_for(t.dims)
    if m is None:
        return False
    form = b.rng.choice(["{t} * {m}", "{t} + (1.0 - {m}) * -3.0",
                         "{t}.masked_fill({m} < 0.5, -2.0)",
                         "torch.where({m} > 0.5, {t}, 0.25)", "torch.where({m} > 0.5, -0.5, {t})"])
    b.emit(form.format(t=t.name, m=m), t.dims, op=form.format(t="t", m="mask"))
    return True


def _tensor_binary(b: _Builder) -> bool:
    """Two values of the same dims: residuals, branches that rejoin."""
    t = b.current()
    u = b.partner(t)
    form = b.rng.choice(["{t} + {u}", "{t} - {u}", "{t} * {u}", "{t} / ({u}.abs() + 1.0)",
                         "torch.maximum({t}, {u})", "torch.where({t} > {u}, {t}, {u} * 0.5)",
                         "torch.where({u} > 0.0, {t}, 0.0)"])
    b.emit(form.format(t=t.name, u=u.name), t.dims, op=form.format(t="t", u="u"))
    return True


def _layer_norm(b: _Builder) -> bool:
    t = b.current()
    if not t.dims or not _static(t.dims[-1]) or t.dims[-1] < 2:
        return False
    n = t.dims[-1]
    if b.rng.random() < 0.7:
        w, bias = b.param((n,), scale=0.5), b.param((n,), scale=0.1)
        expr = f"torch.nn.functional.layer_norm({t.name}, ({n},), {w}, {bias})"
    else:
        expr = f"torch.nn.functional.layer_norm({t.name}, ({n},))"
    b.emit(expr, t.dims, op="layer_norm")
    return True


def _softmax(b: _Builder) -> bool:
    t = b.current()
    if not t.dims:
        return False
    axis = b.rng.randrange(len(t.dims))
    if b.rng.random() < 0.5:
        axis -= len(t.dims)
    fn = b.rng.choice(["torch.softmax", "torch.log_softmax"])
    b.emit(f"{fn}({t.name}, dim={axis})", t.dims, op=f"{fn.split('.')[-1]}(axis {axis})")
    return True


def _reduction(b: _Builder) -> bool:
    t = b.current()
    rank = len(t.dims)
    if rank < 2:
        return False
    count = 1 if rank == 2 or b.rng.random() < 0.7 else 2
    axes = sorted(b.rng.sample(range(rank), count))
    keep = b.rng.random() < 0.5
    if not keep and rank - count < 2:
        keep = True  # keep a rank >= 2 value for the selections that follow
    reduce = b.rng.choice(["mean", "sum", "amax"])
    dims = [1 if i in axes else d for i, d in enumerate(t.dims)] if keep else \
        [d for i, d in enumerate(t.dims) if i not in axes]
    dim_text = str(axes[0]) if count == 1 and b.rng.random() < 0.5 else str(tuple(axes))
    if reduce == "sum":  # scaled: sums over the length would grow with it
        expr = f"{t.name}.sum(dim={dim_text}, keepdim={keep}) * 0.25"
    elif reduce == "mean":
        expr = f"torch.mean({t.name}, dim={dim_text}, keepdim={keep})"
    else:
        expr = f"torch.amax({t.name}, dim={dim_text}, keepdim={keep})"
    b.emit(expr, dims, op=f"{reduce}({dim_text}, keepdim={keep})")
    return True


def _linear(b: _Builder) -> bool:
    t = b.current()
    if len(t.dims) < 2 or not _static(t.dims[-1]):
        return False
    out = b.rng.choice([8, 16])
    bias = b.rng.random() < 0.6
    layer = b.linear(t.dims[-1], out, bias)
    b.emit(f"{layer}({t.name})", (*t.dims[:-1], out), op=f"linear(bias={bias})")
    return True


def _matmul_param(b: _Builder) -> bool:
    """t @ W: on a [B, L, H] value, torch lowers it to a [B*L, H] mm and a view back."""
    t = b.current()
    if len(t.dims) < 2 or not _static(t.dims[-1]):
        return False
    out = b.rng.choice([8, 16])
    w = b.param((t.dims[-1], out), scale=round(1 / t.dims[-1] ** 0.5, 3))
    b.emit(f"{t.name} @ {w}", (*t.dims[:-1], out), op="matmul W")
    return True


def _flatten_mm(b: _Builder) -> bool:
    """[B, L, H] -> [B*L, H] -> mm -> [B, L, H'] written out, in one of its spellings."""
    t = b.current()
    if t.dims[:2] != ("B", "L") or len(t.dims) != 3 or not _static(t.dims[2]):
        return False
    n = t.dims[2]
    out = b.rng.choice([8, 16])
    w = b.param((n, out), scale=round(1 / n ** 0.5, 3))
    flat = b.rng.choice([f"{t.name}.reshape(-1, {n})", f"{t.name}.flatten(0, 1)",
                         f"{t.name}.view({t.name}.shape[0] * {t.name}.shape[1], {n})"])
    f = b.emit(flat, ("BL", n), op="flatten(0,1)")
    m = b.emit(b.rng.choice([f"torch.mm({f.name}, {w})", f"{f.name} @ {w}"]), ("BL", out), op="mm")
    if b.rng.random() < 0.4:
        return True  # a [B*L, H'] value: later ops and the selection see it flat
    back = b.rng.choice([f"{m.name}.view(x.shape[0], x.shape[1], {out})",
                         f"{m.name}.view({t.name}.shape[0], -1, {out})",
                         f"{m.name}.unflatten(0, (x.shape[0], x.shape[1]))"])
    b.emit(back, ("B", "L", out), op="unflatten")
    return True


def _unflatten_rows(b: _Builder) -> bool:
    """A [B*L, H] value back to [B, L, H]."""
    t = b.current()
    if not t.dims or t.dims[0] != "BL":
        return False
    b.emit(b.rng.choice([f"{t.name}.view(x.shape[0], x.shape[1], -1)",
                         f"{t.name}.unflatten(0, (x.shape[0], x.shape[1]))"]),
           ("B", "L", *t.dims[1:]), op="unflatten")
    return True


def _scores(b: _Builder) -> bool:
    """q @ k^T over two [.., L, d] values: [.., L, L] (bmm / matmul)."""
    t = b.current()
    if len(t.dims) < 3 or t.dims[-2] != "L" or not _static(t.dims[-1]):
        return False
    u = b.partner(t)
    scale = round(1 / t.dims[-1] ** 0.5, 4)
    if len(t.dims) == 3 and b.rng.random() < 0.4:
        expr = f"torch.bmm({t.name}, {u.name}.transpose(1, 2)) * {scale}"
    else:
        expr = f"{t.name} @ {u.name}.transpose(-1, -2) * {scale}"
    b.emit(expr, (*t.dims[:-1], "L"), op="q@k^T")
    return True


def _mix(b: _Builder) -> bool:
    """[.., L, L] @ [.., L, d]: attention weights applied to values."""
    t = b.current()
    if len(t.dims) < 3 or t.dims[-2:] != ("L", "L"):
        return False
    options = [v for v in b.pool if v.dims[:-1] == t.dims[:-1] and _static(v.dims[-1])]
    if not options:
        return False
    v = b.rng.choice(options)
    fn = b.rng.choice(["{p} @ {v}", "torch.matmul({p}, {v})"] +
                      (["torch.bmm({p}, {v})"] if len(t.dims) == 3 else []))
    b.emit(fn.format(p=t.name, v=v.name), v.dims, op="p@v")
    return True


def _gram(b: _Builder) -> bool:
    """a^T @ b contracting the length: [B, H, H'] (no L left)."""
    t = b.current()
    if len(t.dims) != 3 or t.dims[:2] != ("B", "L") or not _static(t.dims[2]):
        return False
    options = [v for v in b.pool if v.dims[:2] == ("B", "L") and len(v.dims) == 3 and _static(v.dims[2])]
    u = b.rng.choice(options)
    b.emit(f"{t.name}.transpose(1, 2) @ {u.name} * 0.125", ("B", t.dims[2], u.dims[2]), op="a^T@b")
    return True


def _heads(t: _Value, n: int, b: _Builder) -> str:
    d = t.dims[2] // n
    return b.rng.choice([f"{t.name}.view({t.name}.shape[0], {t.name}.shape[1], {n}, {d}).transpose(1, 2)",
                         f"{t.name}.unflatten(-1, ({n}, {d})).permute(0, 2, 1, 3)",
                         f"{t.name}.reshape(x.shape[0], -1, {n}, {d}).transpose(1, 2)"])


def _qkv_projections(b: _Builder):
    """Q, K and V as linear maps of the current [B, L, static] tensor, with a
    random width and head count: (width, heads, head size, (q, k, v)), or None."""
    t = b.current()
    if len(t.dims) != 3 or t.dims[:2] != ("B", "L") or not _static(t.dims[2]):
        return None
    width = b.rng.choice([8, 16])
    heads = b.rng.choice([1, 2])
    q, k, v = (b.emit(f"{b.linear(t.dims[2], width, b.rng.random() < 0.5)}({t.name})", ("B", "L", width))
               for _ in range(3))
    return width, heads, width // heads, (q, k, v)


def _attention(b: _Builder) -> bool:
    """softmax(q k^T * scale + mask) v, one or two heads, every intermediate in
    the pool (so a selection may land on scores or on 4-D head outputs)."""
    projected = _qkv_projections(b)
    if projected is None:
        return False
    width, heads, d, (q, k, v) = projected
    if heads > 1:
        q, k, v = (b.emit(_heads(s, heads, b), ("B", heads, "L", d)) for s in (q, k, v))
    s = b.emit(f"{q.name} @ {k.name}.transpose(-1, -2) * {round(1 / d ** 0.5, 4)}", (*q.dims[:-1], "L"))
    masked = b.rng.random() < 0.6
    if masked:
        bias = (f"(1.0 - mask)[:, None, :] * {b.mask_value}" if heads == 1 else
                f"(1.0 - mask)[:, None, None, :] * {b.mask_value}")
        s = b.emit(f"{s.name} + {bias}", s.dims)
    p = b.emit(f"torch.softmax({s.name}, dim=-1)", s.dims)
    o = b.emit(f"{p.name} @ {v.name}", v.dims)
    if heads > 1 and b.rng.random() < 0.8:
        b.emit(b.rng.choice([f"{o.name}.transpose(1, 2).reshape(x.shape[0], x.shape[1], {width})",
                             f"{o.name}.permute(0, 2, 1, 3).flatten(2)"]), ("B", "L", width))
    b.ops.append(f"attention(heads={heads}, masked={masked})")
    return True


def _sdpa(b: _Builder) -> bool:
    projected = _qkv_projections(b)
    if projected is None:
        return False
    width, heads, d, (q, k, v) = projected
    q, k, v = (b.emit(_heads(s, heads, b), ("B", heads, "L", d)) for s in (q, k, v))
    mode = b.rng.choice(["plain", "mask", "causal"])
    extra = {"plain": "", "mask": f", attn_mask=(1.0 - mask)[:, None, None, :] * {b.mask_value}",
             "causal": ", is_causal=True"}[mode]
    o = b.emit(f"torch.nn.functional.scaled_dot_product_attention({q.name}, {k.name}, {v.name}{extra})",
               v.dims)
    if b.rng.random() < 0.8:
        b.emit(f"{o.name}.transpose(1, 2).reshape(x.shape[0], x.shape[1], {width})", ("B", "L", width))
    b.ops.append(f"sdpa(heads={heads}, {mode})")
    return True


def _permute(b: _Builder) -> bool:
    t = b.current()
    rank = len(t.dims)
    if rank < 2:
        return False
    if b.rng.random() < 0.5:
        i, j = b.rng.sample(range(rank), 2)
        dims = list(t.dims)
        dims[i], dims[j] = dims[j], dims[i]
        expr = f"{t.name}.transpose({i}, {j})"
    else:
        order = list(range(rank))
        b.rng.shuffle(order)
        dims = [t.dims[i] for i in order]
        expr = f"{t.name}.permute({', '.join(map(str, order))})"
    if b.rng.random() < 0.3:
        expr += ".contiguous()"
    b.emit(expr, dims, op=expr[len(t.name) + 1:].split("(")[0])
    return True


def _split_axis(b: _Builder) -> bool:
    """A static axis of even size into two (unflatten / view)."""
    t = b.current()
    axes = [i for i, d in enumerate(t.dims) if _static(d) and d % 2 == 0 and d >= 4]
    if not axes or len(t.dims) > 3:
        return False
    a = b.rng.choice(axes)
    n = t.dims[a]
    dims = (*t.dims[:a], 2, n // 2, *t.dims[a + 1:])
    if t.dims == ("B", "L", n) and a == 2 and b.rng.random() < 0.5:
        expr = f"{t.name}.view({t.name}.shape[0], {t.name}.shape[1], 2, {n // 2})"
    else:
        expr = f"{t.name}.unflatten({a}, (2, {n // 2}))"
    b.emit(expr, dims, op="split axis")
    return True


def _merge_axes(b: _Builder) -> bool:
    """Two adjacent static axes into one (flatten / reshape)."""
    t = b.current()
    pairs = [i for i in range(len(t.dims) - 1) if _static(t.dims[i]) and _static(t.dims[i + 1])]
    if not pairs:
        return False
    a = b.rng.choice(pairs)
    dims = (*t.dims[:a], t.dims[a] * t.dims[a + 1], *t.dims[a + 2:])
    if t.dims[:2] == ("B", "L") and len(t.dims) == 4 and b.rng.random() < 0.5:
        expr = f"{t.name}.reshape({t.name}.shape[0], {t.name}.shape[1], {dims[2]})"
    else:
        expr = f"{t.name}.flatten({a}, {a + 1})"
    b.emit(expr, dims, op="merge axes")
    return True


def _unsqueeze_squeeze(b: _Builder) -> bool:
    """unsqueeze, or the removal of a unit axis. ``squeeze(d)`` itself exports as
    ``aten.squeeze.dims``, which torch-mlir does not lower (IREE rejects it with
    or without anyshape's passes), so a unit axis goes by a flatten with the
    axis after it: the same shape."""
    t = b.current()
    ones = [i for i, d in enumerate(t.dims) if d == 1 and i + 1 < len(t.dims)]
    if ones and len(t.dims) > 2 and b.rng.random() < 0.6:
        a = b.rng.choice(ones)
        b.emit(f"{t.name}.flatten({a}, {a + 1})", t.dims[:a] + t.dims[a + 1:], op="drop unit axis")
        return True
    if len(t.dims) > 3:
        return False
    a = b.rng.randint(0, len(t.dims))
    b.emit(f"{t.name}.unsqueeze({a})", (*t.dims[:a], 1, *t.dims[a:]), op="unsqueeze")
    return True


def _expand(b: _Builder) -> bool:
    """A unit axis broadcast to 2 or to the length (read from x)."""
    t = b.current()
    ones = [i for i, d in enumerate(t.dims) if d == 1]
    if not ones:
        return False
    a = b.rng.choice(ones)
    to_length = "L" not in t.dims and b.rng.random() < 0.7
    sizes = ["-1"] * len(t.dims)
    sizes[a] = "x.shape[1]" if to_length else "2"
    dims = list(t.dims)
    dims[a] = "L" if to_length else 2
    b.emit(f"{t.name}.expand({', '.join(sizes)})", dims, op=f"expand(axis {a})")
    return True


_OPS = [
    (_unary, 6), (_scalar_binary, 4), (_param_broadcast, 4), (_reduced_broadcast, 2),
    (_mask_broadcast, 2), (_tensor_binary, 4), (_layer_norm, 3), (_softmax, 3), (_reduction, 2),
    (_linear, 5), (_matmul_param, 2), (_flatten_mm, 2), (_unflatten_rows, 2), (_scores, 2),
    (_mix, 6), (_gram, 1), (_attention, 3), (_sdpa, 2), (_permute, 2), (_split_axis, 2),
    (_merge_axes, 2), (_unsqueeze_squeeze, 3), (_expand, 5),
]


# -- the final selection ----------------------------------------------------------

def _min_size(dim) -> int:
    return dim if _static(dim) else _MIN_SIZE[dim]


def _selection(b: _Builder, dims: list, sizes: list,
               index_select: bool = True) -> tuple[str, str, list, list, bool]:
    """A random selection on one axis: (text, kind, dims after, min sizes after,
    whether the axis was static); ``index_select`` False: not that form.
    The text follows the value (``[...]``) or, for index_select, wraps it (``{t}``).
    Every form is chosen valid (in range, non-empty) for the axis' minimum size.

    Not drawn: ``t[i::L]`` on a [B*L, ...] value (one row per group, the form
    the pass itself makes through a flatten): its size, a floor division of
    symbols, is one torch-mlir's importer cannot translate."""
    rank = len(dims)
    weights = [8 if d in ("L", "BL") else 2 if d == "B" else 1 if sizes[i] > 1 else 0.2
               for i, d in enumerate(dims)]
    axis = b.rng.choices(range(rank), weights)[0]
    n, dim, lead = sizes[axis], dims[axis], ":, " * axis

    def done(text, kind, new_size=None):
        """``new_size`` None: the axis is dropped (a select)."""
        new_dims, new_sizes = list(dims), list(sizes)
        if new_size is None:
            del new_dims[axis], new_sizes[axis]
        else:
            # A dynamic axis stays dynamic where the selection keeps its end open.
            new_dims[axis] = new_size if isinstance(new_size, int) else dim
            new_sizes[axis] = new_size if isinstance(new_size, int) else new_size[1]
        return text, kind, new_dims, new_sizes, _static(dim)

    # torch.export turns some selections of a dynamic axis into guards that rule
    # out part of the range (a size that could be 1, or equal to the whole axis):
    # on a dynamic axis a bounded slice ends below the minimum size and an
    # open-ended one keeps at least 2 rows; the batch (minimum 1) only gets
    # selects, its first or last row, and index_select.
    if dim == "B":
        forms = ["select", "first row", "last rows", "index_select"]
        weights = [3, 1, 1, 1]
    else:
        forms = ["select", "slice", "strided slice", "to the end", "index_select"]
        weights = [4 if rank > 2 else 2, 2, 1, 2, 2 if index_select else 0]
    form = b.rng.choices(forms, weights)[0]
    if form == "first row":
        return done(f"[{lead}0:1]", "slice", 1)
    if form == "last rows":
        return done(f"[{lead}-1:]", "last rows", 1)
    if form == "select":
        i = b.rng.randrange(-n, n)
        if axis == rank - 1 and b.rng.random() < 0.5:
            return done(f"[..., {i}]", "select")
        return done(f"[{lead}{i}]", "select")
    static = _static(dim)
    last_end = n if static else n - 1
    if form in ("slice", "strided slice") and last_end >= 1:
        start = b.rng.randrange(last_end)
        end = b.rng.randint(start + 1, last_end)
        if form == "slice":
            return done(f"[{lead}{start}:{end}]", "slice", end - start)
        step = b.rng.choice([2, 3])
        return done(f"[{lead}{start}:{end}:{step}]", "strided slice", len(range(start, end, step)))
    if form == "to the end" and static:
        start = b.rng.randrange(n)
        return done(f"[{lead}{start}:]", "slice to the end", n - start)
    if form in ("slice", "strided slice", "to the end"):
        options = [("-a:", a) for a in range(1, min(n - 1, 3) + 1)]
        options += [("a:", a) for a in range(1, n - 1)]
        options += [("a:-1", a) for a in range(0, n - 2)]
        if options:
            kind, a = b.rng.choice(options)
            if kind == "-a:":
                return done(f"[{lead}-{a}:]", "last rows", a)
            if kind == "a:":
                return done(f"[{lead}{a}:]", "slice to a dynamic end", ("dynamic", n - a))
            return done(f"[{lead}{a or ''}:-1]", "slice to end - 1", ("dynamic", n - a - 1))
    count = b.rng.randint(1, 3)
    idx = b.index_buffer([b.rng.randrange(n) for _ in range(count)])
    return done(f"torch.index_select({{t}}, {axis}, {idx})", "index_select", count)


def generate(seed: int, hidden: int, mask_value: str = "-30.0",
             lead_projection: bool = False) -> Program:
    """The program of ``seed``: 3 to 8 ops drawn from the supported families, then
    one or two selections (sometimes followed by an op on the selected rows).
    ``mask_value``: what attention adds at masked keys (the padding-elimination
    test uses transformers' ``torch.finfo(torch.float32).min``);
    ``lead_projection``: the first op is a projection of ``x``, as a model's
    first layer is (what padding elimination runs on the real tokens)."""
    b = _Builder(seed, hidden, mask_value)
    if lead_projection:
        b.emit(f"{b.linear(hidden, hidden, True)}(x)", ("B", "L", hidden), op="linear(x)")
    target = b.rng.randint(3, 8)
    ops, weights = zip(*_OPS)
    attempts = 0
    while len(b.ops) < target and attempts < 200:
        attempts += 1
        b.rng.choices(ops, weights)[0](b)
    t = b.pool[-1]
    dims, sizes = list(t.dims), [_min_size(d) for d in t.dims]
    expr = t.name
    selections, static_axis = [], False
    for _ in range(2 if b.rng.random() < 0.2 else 1):
        if len(dims) < 2:
            break  # a select on a rank-1 value would leave a scalar
        # IREE 3.13 fails to compile an index_select along the length of a value
        # already selected along a static axis (``index_select(y[:, :, 1], 1, i)``
        # with y an argument or a matmul: "LLVM Translation failed for operation:
        # builtin.unrealized_conversion_cast", with no anyshape pass at all).
        text, kind, dims, sizes, static_axis = _selection(b, dims, sizes,
                                                          index_select=not static_axis)
        expr = text.format(t=expr) if text.startswith("torch.") else f"{expr}{text}"
        selections.append(kind)
    if b.rng.random() < 0.15 and dims and _static(dims[-1]):
        expr = f"torch.tanh({expr}) * 2.0"
        selections.append("tanh after")
    lines = [f"class Program{seed}(torch.nn.Module):",
             "    def __init__(self):",
             "        super().__init__()",
             f"        g = torch.Generator().manual_seed({seed})"]
    lines += [f"        {line}" for line in b.init_lines]
    lines += ["", "    def forward(self, x, y, mask):"]
    lines += [f"        {line}" for line in b.lines]
    lines += [f"        return {expr}", ""]
    return Program(seed, hidden, "\n".join(lines), b.ops, expr + "  # " + ", ".join(selections))


class Bundle(torch.nn.Module):
    """Many programs on the same inputs, one output each: one compile for all."""

    def __init__(self, programs: list[Program]):
        super().__init__()
        self.programs = torch.nn.ModuleList(p.build() for p in programs)

    def forward(self, x, y, mask):
        return tuple(p(x, y, mask) for p in self.programs)


def inputs(batch: int, length: int, hidden: int, seed: int):
    """x, y ~ N(0, 1) and a 0/1 mask whose first MIN_LENGTH positions are kept
    (a padded tail on some rows, so masking changes results)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, hidden, generator=g)
    y = torch.randn(batch, length, hidden, generator=g)
    keep = torch.randint(MIN_LENGTH, length + 1, (batch,), generator=g)
    mask = (torch.arange(length)[None, :] < keep[:, None]).to(torch.float32)
    return x, y, mask


def assert_module_matches(module, program, shapes, hidden: int = 8) -> None:
    """``module`` (a compile of ``program``) against ``program`` in eager on the
    ``inputs`` of each (batch, length) in ``shapes``, every output, to 1e-5."""
    for batch, length in shapes:
        args = inputs(batch, length, hidden, seed=length)
        with torch.no_grad():
            expected = program(*args)
        got = module(*args)
        for g, e in zip(got if isinstance(got, (list, tuple)) else [got],
                        expected if isinstance(expected, (list, tuple)) else [expected]):
            torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)


def dynamic_shapes():
    from torch.export import Dim

    batch = Dim("batch", min=MIN_BATCH, max=MAX_BATCH)
    length = Dim("seq", min=MIN_LENGTH, max=MAX_LENGTH)
    return {"x": {0: batch, 1: length}, "y": {0: batch, 1: length}, "mask": {0: batch, 1: length}}
