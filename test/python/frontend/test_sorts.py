"""Sorts and topk give eager's values and indices, several in one module.

IREE 3.13 gave wrong indices when a module has two sorts of the same shape
(anyshape/iree/distinct_fills.py has the cause): every MoE model with more
than one layer was wrong (issue 36's family sweep, ``experts_implementation=
"batched_mm"``); its sort puts NaN anywhere (anyshape.frontend.graph_fixes.packed_sort_keys). And torch-mlir negates integers through float32
(anyshape.frontend.graph_fixes.integer_negation)."""

import pytest
import torch
from torch.export import Dim

import anyshape
from anyshape.frontend.graph_fixes.packed_sort_keys import rewrite_sorts_as_packed_keys

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64,
          torch.int64, torch.int32, torch.uint8, torch.bool]


class ManySorts(torch.nn.Module):
    """Every sort form, on inputs of every dtype, in one module (one build)."""

    def forward(self, f32, f16, bf16, f64, i64, i32, u8, b):
        out = []
        for x in (f32, f16, bf16, f64, i64, i32, u8, b):
            out += torch.sort(x, -1)
            out += torch.sort(x, dim=0, descending=True, stable=True)
            out += torch.sort(x.t(), dim=-1, stable=True)
            out.append(torch.argsort(x, -1, descending=True))
            if x.dtype is not torch.bool:  # eager has no topk of bools
                out += torch.topk(x, 2, -1)
                out += torch.topk(x, 1, 0, largest=False)
        return tuple(out)


FORMS = ["sort", "sort stable descending dim 0", "sort stable of the transpose",
         "argsort descending", "topk 2", "topk smallest dim 0"]
STABLE = {1, 2}  # forms that promise an order among ties


def sample(dtype: torch.dtype, rows: int, seed: int) -> torch.Tensor:
    """Ties, signed zeros, NaN of both signs, infinities and the extremes."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 6, generator=g) * 3
    if dtype is torch.bool:
        return x > 0
    if dtype.is_floating_point:
        x = x.to(dtype)
        x[0, :5] = torch.tensor([float("nan"), -0.0, 0.0, float("-inf"), -float("nan")],
                                dtype=dtype)
        x[-1, 2:4] = torch.tensor([float("inf"), -0.0], dtype=dtype)
    else:
        info = torch.iinfo(dtype)
        x = (x.abs() * 40).to(dtype) if dtype is torch.uint8 else (x * 1e3).to(dtype)
        x[0, :2] = torch.tensor([info.min, info.max], dtype=dtype)
        if dtype is torch.int64:  # beyond float32's and float64's integers
            x[-1, :2] = torch.tensor([2 ** 53 + 1, 2 ** 53], dtype=dtype)
    if rows > 2:
        x[1] = x[1, 0]  # a row of ties
    return x


@pytest.fixture(scope="module")
def many_sorts():
    rows = Dim("rows")
    examples = tuple(sample(d, 5, 0) for d in DTYPES)
    return anyshape.compile(ManySorts().eval(), examples,
                            dynamic_shapes=tuple({0: rows} for _ in DTYPES))


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32 if t.element_size() == 4
                  else torch.int64) if t.is_floating_point() else t


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal, NaN equal to NaN (its sign is eager's choice of which NaN came first)."""
    if a.is_floating_point():
        return bool(((a == b) | (a.isnan() & b.isnan())).all()) and \
            bool((torch.signbit(a) == torch.signbit(b))[~a.isnan()].all())
    return torch.equal(a, b)


@pytest.mark.parametrize("rows", [1, 3, 7, 33])
def test_many_sorts_in_one_module_as_eager(many_sorts, rows):
    xs = tuple(sample(d, rows, rows) for d in DTYPES)
    expected, got = ManySorts()(*xs), many_sorts(*xs)
    assert len(got) == len(expected)
    results = iter(zip(expected, got))
    for x, dtype in zip(xs, DTYPES):
        forms = [(f, part) for f in range(4 if dtype is torch.bool else len(FORMS))
                 for part in range(1 if f == 3 else 2)]
        for form, part in forms:
            e, g = next(results)
            what = f"{dtype} {FORMS[form]} at {rows} rows, {'indices' if part or form == 3 else 'values'}"
            assert g.dtype == e.dtype and g.shape == e.shape, what
            if part == 0 and form != 3:  # values: bit for bit but for which NaN
                assert _same(g, e), f"{what}: {g} against eager {e}"
            elif form in STABLE:
                assert torch.equal(g, e), f"{what}: {g} against eager {e}"
            else:  # ties in any order: the indices must pick eager's values
                source = x.t() if form == 2 else x
                dim = 0 if form == 5 else -1
                assert _same(source.gather(dim, g), source.gather(dim, e)), \
                    f"{what}: {g} picks other values than eager's {e}"


class TwoRouters(torch.nn.Module):
    """Two MoE layers routed by topk, experts gathered per token (transformers'
    batched_mm experts): the second layer's experts were the wrong ones."""

    def __init__(self, experts=4, hidden=8, inner=6, top=2):
        super().__init__()
        self.top = top
        g = torch.Generator().manual_seed(0)
        self.routers = torch.nn.Parameter(torch.randn(2, experts, hidden, generator=g))
        self.up = torch.nn.Parameter(torch.randn(2, experts, inner, hidden, generator=g) * 0.3)
        self.down = torch.nn.Parameter(torch.randn(2, experts, hidden, inner, generator=g) * 0.3)

    def forward(self, x):
        for layer in range(2):
            probs = torch.softmax(x @ self.routers[layer].t(), -1)
            weights, experts = torch.topk(probs, self.top, -1)
            ids = experts.reshape(-1)
            tokens = x.repeat_interleave(self.top, dim=0)
            h = torch.bmm(self.up[layer][ids], tokens.unsqueeze(-1)).squeeze(-1).relu()
            out = torch.bmm(self.down[layer][ids], h.unsqueeze(-1)).squeeze(-1)
            x = x + (out * weights.reshape(-1, 1)).view(x.shape[0], self.top, -1).sum(1)
        return x


@pytest.mark.parametrize("passes", ["default", "none"])
def test_two_topk_routed_layers_as_eager(passes):
    model = TwoRouters().eval()
    kwargs = {} if passes == "default" else {"passes": []}
    compiled = anyshape.compile(model, (torch.randn(5, 8),),
                                dynamic_shapes=({0: Dim("tokens")},), **kwargs)
    for tokens in (1, 7, 17):
        x = torch.randn(tokens, 8, generator=torch.Generator().manual_seed(tokens))
        with torch.no_grad():
            expected = model(x)
        error = float((compiled(x) - expected).abs().max())
        assert error < 1e-5 * max(1.0, float(expected.abs().max())), \
            f"{tokens} tokens: {error:.2e} from eager"


def test_sorts_are_rewritten_in_the_graph():
    """Every sort form becomes a sort of packed keys whose indices are unused."""
    examples = tuple(sample(d, 5, 0) for d in DTYPES)
    program = torch.export.export(ManySorts(), examples).run_decompositions()
    graph = program.graph_module.graph
    sorts_before = sum(n.target in (torch.ops.aten.sort.default, torch.ops.aten.sort.stable,
                                    torch.ops.aten.topk.default) for n in graph.nodes)
    assert rewrite_sorts_as_packed_keys(graph) == sorts_before > 0
    for node in graph.nodes:
        if node.target in (torch.ops.aten.sort.default, torch.ops.aten.sort.stable):
            assert node.args[0].meta["val"].dtype is torch.int64, node.format_node()
            assert all(user.args[1] == 0 for user in node.users), \
                f"{node.format_node()}: its indices are still used"
        assert node.target is not torch.ops.aten.topk.default


class Negations(torch.nn.Module):
    def forward(self, a, b):
        return -a, -b, torch.neg(a * 1)


def test_integer_negation_is_exact():
    """torch-mlir negated int32 and int64 through float32: -(2**40 + 7) was -2**40."""
    a = torch.tensor([-5, 3, 2 ** 40 + 7, 2 ** 63 - 1, -2 ** 63])
    b = torch.tensor([2 ** 31 - 1, -2 ** 31, 16777217, -7], dtype=torch.int32)
    compiled = anyshape.compile(Negations(), (a, b), dynamic_shapes=({0: Dim("n")}, {0: Dim("m")}))
    for got, expected in zip(compiled(a, b), Negations()(a, b)):
        assert torch.equal(got, expected), f"{got.tolist()} against eager {expected.tolist()}"
