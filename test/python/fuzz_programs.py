"""Seeded random programs for ``make fuzz``: shape queries, aranges, broadcasts and slices.

A program is a small ``torch.nn.Module`` whose ``forward(x, ids, mask)`` takes
``x: [B, L, H]`` floats, ``ids: [B, L]`` token ids and ``mask: [B, L]`` 0/1
integers, with B and L dynamic. Its statements are drawn from the forms real
models use around the sequence length, which are what anyshape's passes
rewrite:

- shape queries feeding tensor factories and views: ``torch.arange(t.size(1))``,
  ``torch.ones(t.size(0), t.size(1))``, ``t.view(t.size(0), t.size(1), 2, -1)``,
  ``t.reshape(-1, H)`` and back, ``expand(x.size(0), -1)``;
- position ids and masks built from them: ``cumsum(mask)``, ``pos[None, :] <=
  pos[:, None]``, ``masked_fill``, ``where``;
- broadcasts across ranks (``[L]`` and ``[B, 1, L]`` against ``[B, L, H]``);
- elementwise, linear, layer norm, softmax, reductions, attention products;
- slices and selects on the length (``t[:, 0]``, ``t[:, -1]``, ``t[:, 1:]``,
  ``t[:, :-1]``, ``t[:, ::2]``, ``t.narrow(1, 1, t.size(1) - 2)``), often last.

Each program is Python source (``Program.source``), so a failing case prints as
code that rebuilds it. Shapes are tracked per value as dims ("B", "L", an
expression of L such as "L-1", or an int); two values are combined only when
their dims broadcast for every size, so every program runs in eager PyTorch
at every (B, L) in range, and torch.export meets no guard that narrows a dim.
"""

from __future__ import annotations

import dataclasses
import random
import re

import torch
from random_programs import seeded, seeded_linear

H = 8
VOCAB = 5  # ids are drawn from [0, 2) by anyshape.check; the table is larger
MIN_BATCH, MAX_BATCH = 1, 4
MIN_LENGTH, MAX_LENGTH = 4, 32
MAX_OUTPUTS = 4
EXAMPLE_SHAPE = (2, 7)  # torch.export specializes a dim whose example size is 0 or 1


@dataclasses.dataclass
class Program:
    seed: int
    source: str
    ops: list[str]

    @property
    def class_name(self) -> str:
        return f"Fuzz{self.seed}"

    def build(self) -> torch.nn.Module:
        namespace = {"torch": torch, "seeded": seeded, "seeded_linear": seeded_linear}
        exec(compile(self.source, f"<fuzz program {self.seed}>", "exec"), namespace)
        return namespace[self.class_name]().eval()

    def describe(self) -> str:
        return f"fuzz program {self.seed}: {' -> '.join(self.ops)}\n{self.source}"


@dataclasses.dataclass
class _Value:
    name: str
    dims: tuple
    kind: str  # "float", "int" or "bool"


def _broadcast(a: tuple, b: tuple) -> tuple | None:
    """The broadcast dims of ``a`` and ``b`` when they broadcast at every size."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(reversed(out))


class _Builder:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.seed = seed
        self.init_lines: list[str] = []
        self.lines: list[str] = []
        self.ops: list[str] = []
        self.count = 0
        self.params = 0
        self.pool = [_Value("x", ("B", "L", H), "float"), _Value("ids", ("B", "L"), "int"),
                     _Value("mask", ("B", "L"), "int")]

    def emit(self, expr: str, dims, kind: str, op: str) -> _Value:
        value = _Value(f"t{self.count}", tuple(dims), kind)
        self.count += 1
        self.lines.append(f"{value.name} = {expr}")
        self.pool.append(value)
        self.ops.append(op)
        return value

    def module(self, init: str) -> str:
        name = f"m{self.params}"
        self.params += 1
        self.init_lines.append(f"self.{name} = {init}")
        return f"self.{name}"

    def pick(self, kind: str | None = None, where=lambda v: True) -> _Value | None:
        """A value, the recent ones likelier, so that programs form chains."""
        found = [v for v in self.pool if (kind is None or v.kind == kind) and where(v)]
        if not found:
            return None
        weights = [1 + 3 * (i >= len(found) - 3) for i in range(len(found))]
        return self.rng.choices(found, weights)[0]

    def size_of(self, dim) -> str:
        """An expression for a dynamic dim's size, read from a value that has it."""
        holders = [(v, i) for v in self.pool for i, d in enumerate(v.dims) if d == dim]
        v, i = self.rng.choice(holders)
        return f"{v.name}.size({i})" if self.rng.random() < 0.7 else f"{v.name}.shape[{i}]"


def _float(b: _Builder, v: _Value) -> str:
    return v.name if v.kind == "float" else f"{v.name}.to(torch.float32)"


# -- the statements ----------------------------------------------------------------

def _positions(b: _Builder) -> bool:
    dim = b.rng.choice(["L", "L", "B"])
    size = b.size_of(dim)
    form = b.rng.choice(["arange(n)", "arange(0, n)", "arange(0, n, 1)", "arange(n, long)"])
    args = {"arange(n)": size, "arange(0, n)": f"0, {size}", "arange(0, n, 1)": f"0, {size}, 1",
            "arange(n, long)": f"{size}, dtype=torch.long"}[form]
    b.emit(f"torch.arange({args}, device=x.device)", (dim,), "int", f"positions {form} of {dim}")
    return True


def _cumsum_positions(b: _Builder) -> bool:
    """RoBERTa's position ids: a running count of the kept tokens."""
    b.emit("torch.cumsum(mask, dim=1) * mask + 1", ("B", "L"), "int", "cumsum positions")
    return True


def _causal(b: _Builder) -> bool:
    pos = b.pick("int", lambda v: v.dims == ("L",))
    if pos is None:
        return False
    op = b.rng.choice(["<=", "<", ">="])
    b.emit(f"{pos.name}[None, :] {op} {pos.name}[:, None]", ("L", "L"), "bool", f"causal {op}")
    return True


def _factory(b: _Builder) -> bool:
    form = b.rng.choice(["ones", "full", "zeros_like", "ones_like", "new_ones"])
    if form in ("ones", "full", "new_ones"):
        dims = b.rng.choice([("B", "L"), ("B", 1, "L"), ("L", 1), ("B", "L", H)])
        sizes = ", ".join(str(d) if isinstance(d, int) else b.size_of(d) for d in dims)
        expr = {"ones": f"torch.ones({sizes}, device=x.device)",
                "full": f"torch.full(({sizes},), 0.5, device=x.device)",
                "new_ones": f"x.new_ones(({sizes},))"}[form]
        b.emit(expr, dims, "float", form)
        return True
    v = b.pick()
    b.emit(f"torch.{form}({v.name})", v.dims, v.kind, form)
    return True


def _embedding(b: _Builder) -> bool:
    ids = b.pick("int", lambda v: all(d != H for d in v.dims) and len(v.dims) <= 2)
    if ids is None:
        return False
    table = b.module(f"seeded(g, ({MAX_LENGTH + 2}, {H}))")
    # Position-like ids run up to L + 1 and products of them further: clamped to the table.
    clamp = "" if ids.name == "ids" else f".clamp(0, {MAX_LENGTH + 1})"
    b.emit(f"torch.nn.functional.embedding({ids.name}{clamp}, {table})", (*ids.dims, H),
           "float", "embedding")
    return True


def _unsqueeze(b: _Builder) -> bool:
    v = b.pick(where=lambda v: len(v.dims) <= 3)
    axis = b.rng.randint(0, len(v.dims))
    form = b.rng.choice(["unsqueeze", "index"])
    expr = (f"{v.name}.unsqueeze({axis})" if form == "unsqueeze"
            else f"{v.name}[{':, ' * axis}None]")
    b.emit(expr, (*v.dims[:axis], 1, *v.dims[axis:]), v.kind, "unsqueeze")
    return True


def _expand(b: _Builder) -> bool:
    v = b.pick(where=lambda v: 1 in v.dims)
    target = v and b.pick(where=lambda t: len(t.dims) == len(v.dims) and t is not v
                          and _broadcast(v.dims, t.dims) == t.dims)
    if not target:
        return False
    sizes = [(b.size_of(t) if isinstance(t, str) else str(t)) if d == 1 and t != 1 else "-1"
             for d, t in zip(v.dims, target.dims)]
    b.emit(f"{v.name}.expand({', '.join(sizes)})", target.dims, v.kind, "expand")
    return True


def _binary(b: _Builder) -> bool:
    a = b.pick()
    other = b.pick(where=lambda t: t is not a and _broadcast(a.dims, t.dims) is not None)
    if other is None:
        return False
    dims = _broadcast(a.dims, other.dims)
    if a.kind == "bool" and other.kind == "bool":
        op = b.rng.choice(["&", "|"])
        b.emit(f"{a.name} {op} {other.name}", dims, "bool", f"bool {op}")
    elif "bool" in (a.kind, other.kind):
        cond, value = (a, other) if a.kind == "bool" else (other, a)
        form = b.rng.choice(["where", "masked_fill"])
        if form == "where":
            b.emit(f"torch.where({cond.name}, {_float(b, value)}, -2.0)", dims, "float", "where")
        else:
            if _broadcast(value.dims, cond.dims) != value.dims:
                return False
            b.emit(f"{_float(b, value)}.masked_fill(~{cond.name}, -1e4)", value.dims, "float",
                   "masked_fill")
    elif a.kind == "int" and other.kind == "int":
        op = b.rng.choice(["+", "*", "<", "=="])
        kind = "bool" if op in ("<", "==") else "int"
        b.emit(f"{a.name} {op} {other.name}", dims, kind, f"int {op}")
    else:
        op = b.rng.choice(["+", "-", "*", "max"])
        left, right = _float(b, a), _float(b, other)
        expr = f"torch.maximum({left}, {right})" if op == "max" else f"{left} {op} {right}"
        b.emit(expr, dims, "float", f"float {op}")
    return True


def _compare(b: _Builder) -> bool:
    v = b.pick(where=lambda v: v.kind != "bool")
    form = b.rng.choice(["> 0", "== 0", "!= 0"])
    b.emit(f"{v.name} {form}", v.dims, "bool", f"compare {form}")
    return True


def _unary(b: _Builder) -> bool:
    v = b.pick("float")
    fn = b.rng.choice(["torch.tanh({})", "torch.relu({})", "torch.sigmoid({})",
                       "torch.exp(-{}.abs())", "({} * 0.5 + 0.25)",
                       "torch.nn.functional.gelu({})"])
    b.emit(fn.format(v.name), v.dims, "float", fn.split("(")[0] or "affine")
    return True


def _hidden_op(b: _Builder) -> bool:
    """An op over the static last axis: linear, layer norm or softmax."""
    v = b.pick("float", lambda v: v.dims[-1:] == (H,))
    if v is None:
        return False
    form = b.rng.choice(["linear", "layer_norm", "softmax"])
    if form == "linear":
        layer = b.module(f"seeded_linear(g, {H}, {H}, bias={b.rng.random() < 0.5})")
        b.emit(f"{layer}({v.name})", v.dims, "float", "linear")
    elif form == "layer_norm":
        b.emit(f"torch.nn.functional.layer_norm({v.name}, ({H},))", v.dims, "float", "layer_norm")
    else:
        b.emit(f"torch.softmax({v.name}, dim=-1)", v.dims, "float", "softmax")
    return True


def _reduce(b: _Builder) -> bool:
    v = b.pick("float", lambda v: len(v.dims) >= 2)
    if v is None:
        return False
    axis = b.rng.randrange(len(v.dims))
    fn = b.rng.choice(["sum", "mean", "amax"])
    keep = b.rng.random() < 0.6
    dims = v.dims[:axis] + ((1,) if keep else ()) + v.dims[axis + 1:]
    b.emit(f"{v.name}.{fn}({axis}, keepdim={keep})", dims, "float", f"{fn}(axis {axis})")
    return True


def _length_softmax(b: _Builder) -> bool:
    """A softmax over the length (attention over positions), masked or not."""
    v = b.pick("float", lambda v: "L" in v.dims)
    if v is None:
        return False
    axis = v.dims.index("L")
    b.emit(f"torch.softmax({v.name}, dim={axis})", v.dims, "float", f"softmax(axis {axis})")
    return True


def _scores(b: _Builder) -> bool:
    """Attention products: ``q @ k^T`` over the length, then ``p @ v``."""
    q = b.pick("float", lambda v: v.dims in (("B", "L", H), ("B", "L", "L")))
    if q is None:
        return False
    if q.dims[-1] == H:
        k = b.pick("float", lambda v: v.dims == ("B", "L", H))
        b.emit(f"{q.name} @ {k.name}.transpose(-1, -2) * 0.3", ("B", "L", "L"), "float", "q k^T")
    else:
        v = b.pick("float", lambda v: v.dims == ("B", "L", H))
        b.emit(f"torch.bmm({q.name}, {v.name})", ("B", "L", H), "float", "p v")
    return True


def _heads(b: _Builder) -> bool:
    """Split the hidden axis into 2 heads by a view on queried sizes, and merge back."""
    v = b.pick("float", lambda v: v.dims == ("B", "L", H))
    if v is None:
        return False
    split = b.emit(f"{v.name}.view({v.name}.size(0), {v.name}.size(1), 2, -1).transpose(1, 2)",
                   ("B", 2, "L", H // 2), "float", "split heads")
    if b.rng.random() < 0.5:
        split = b.emit(f"torch.tanh({split.name})", split.dims, "float", "tanh")
    b.emit(f"{split.name}.transpose(1, 2).reshape({b.size_of('B')}, {b.size_of('L')}, {H})",
           ("B", "L", H), "float", "merge heads")
    return True


def _rows(b: _Builder) -> bool:
    """Flatten the batch and length into rows, work on rows, and view back."""
    v = b.pick("float", lambda v: v.dims == ("B", "L", H))
    if v is None:
        return False
    rows = b.emit(f"{v.name}.reshape(-1, {H})", ("BL", H), "float", "to rows")
    layer = b.module(f"seeded_linear(g, {H}, {H}, bias=True)")
    rows = b.emit(f"{layer}({rows.name})", rows.dims, "float", "linear on rows")
    b.emit(f"{rows.name}.view({b.size_of('B')}, {b.size_of('L')}, {H})", ("B", "L", H), "float",
           "from rows")
    return True


# Slices of the length. Each keeps at least 2 rows for every L >= MIN_LENGTH: a
# slice that could be empty, have one row or be the whole axis makes torch.export
# add a guard that narrows the dim's range.
_LENGTH_SLICES = [
    ("[{lead}0]", None), ("[{lead}-1]", None), ("[{lead}1]", None),
    ("[{lead}1:]", "L-1"), ("[{lead}:-1]", "L-1"), ("[{lead}1:-1]", "L-2"),
    ("[{lead}-2:]", 2), ("[{lead}:2]", 2), ("[{lead}::2]", "(L+1)//2"),
    (".narrow({axis}, 1, {size} - 2)", "L-2"), ("[{lead}:{size} - 1]", "L-1"),
]


def _slice(b: _Builder) -> bool:
    v = b.pick(where=lambda v: "L" in v.dims or "B" in v.dims)
    if v is None:
        return False
    axis = b.rng.choice([i for i, d in enumerate(v.dims) if d in ("L", "B")])
    lead = ":, " * axis
    if v.dims[axis] == "B":
        form, dim = b.rng.choice([("[{lead}0]", None), ("[{lead}-1]", None), ("[{lead}:1]", 1)])
    else:
        form, dim = b.rng.choice(_LENGTH_SLICES)
    text = form.format(lead=lead, axis=axis, size=f"{v.name}.size({axis})")
    dims = v.dims[:axis] + (() if dim is None else (dim,)) + v.dims[axis + 1:]
    b.emit(f"{v.name}{text}", dims, v.kind, f"slice {text}")
    return True


_STATEMENTS = [
    (_positions, 4), (_cumsum_positions, 1), (_causal, 2), (_factory, 2), (_embedding, 2),
    (_unsqueeze, 3), (_expand, 3), (_binary, 8), (_compare, 2), (_unary, 3), (_hidden_op, 4),
    (_reduce, 2), (_length_softmax, 2), (_scores, 2), (_heads, 1), (_rows, 1), (_slice, 5),
]


def generate(seed: int) -> Program:
    b = _Builder(seed)
    functions, weights = zip(*_STATEMENTS)
    for _ in range(b.rng.randint(4, 10)):
        while not b.rng.choices(functions, weights)[0](b):
            pass
    if b.rng.random() < 0.6:  # the selections real heads end in, after the work they cut
        while not _slice(b):
            pass
    # Every value no later statement reads is an output, so that no drawn
    # statement is dead code that torch.export drops (the last value always is).
    unread = [v for v in b.pool[3:] if not any(re.search(rf"\b{v.name}\b", line)
                                             for line in b.lines[int(v.name[1:]) + 1:])]
    outputs = unread[-MAX_OUTPUTS:]
    init = "\n".join(f"        {line}" for line in
                     [f"g = torch.Generator().manual_seed({seed})", *b.init_lines])
    body = "\n".join(f"        {line}" for line in b.lines)
    returns = ", ".join(o.name for o in outputs)
    source = (f"class Fuzz{seed}(torch.nn.Module):\n"
              f"    def __init__(self):\n        super().__init__()\n{init}\n\n"
              f"    def forward(self, x, ids, mask):\n{body}\n        return {returns}\n")
    return Program(seed, source, b.ops)


def example_inputs(batch: int, length: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, length, H, generator=g),
            torch.randint(0, 2, (batch, length), generator=g),
            torch.randint(0, 2, (batch, length), generator=g))


def dynamic_shapes():
    from torch.export import Dim

    batch = Dim("batch", min=MIN_BATCH, max=MAX_BATCH)
    length = Dim("length", min=MIN_LENGTH, max=MAX_LENGTH)
    dims = {0: batch, 1: length}
    return {"x": dims, "ids": dims, "mask": dims}
