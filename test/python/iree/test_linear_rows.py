"""anyshape's row-exact product kernel (``iree/kernels/linear_rows.py``, ``linear_rows.c``).

IREE's own products compute whole tiles of 16 rows; the kernel computes the
rows given, so every remainder of every tile it uses (up to 15 rows on AVX-512,
6 on AVX2) and every run of rows a workgroup takes is a separate code path.
Each is checked against float64: the kernel's AVX-512, AVX2 and portable code
run directly from the very objects modules link (each built with the module's
flags for one instruction set, linked into a shared library), and modules
built by ``anyshape.compile`` against eager, with the AVX2 and portable code
in modules built for CPUs without AVX-512 or AVX2 (test_attention.py).
"""

import copy
import ctypes
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.export import Dim

import anyshape
from anyshape.iree.flags import iree_flags, make_target, with_product_kernel
from anyshape.iree.kernels import build, linear_rows
from anyshape.mlir import iree_tool
from kernel_objects import linked_object

KERNEL, UNAVAILABLE = build.kernel_object(linear_rows.SOURCE)
needs_kernel = pytest.mark.skipif(KERNEL is None, reason=f"kernel unavailable: {UNAVAILABLE}")


def _host_library(tmp_path, isa: str):
    kernel = linked_object(linear_rows.SOURCE, isa, tmp_path)
    sizes = [ctypes.c_size_t] * 7
    pointer = ctypes.c_void_p
    kernel.anyshape_linear_rows.argtypes = [pointer, ctypes.c_size_t] * 4 + sizes
    kernel.anyshape_linear_rows_no_bias.argtypes = [pointer, ctypes.c_size_t] * 3 + sizes
    return kernel


def _packed(weight: np.ndarray) -> np.ndarray:
    """What linear_rows.py's helper computes in the module: panels of 16
    output columns, [panel][k][column], padded with zeros."""
    n, k = weight.shape
    panels = -(-n // 16)
    padded = np.zeros((panels * 16, k), np.float32)
    padded[:n] = weight
    return np.ascontiguousarray(padded.reshape(panels, 16, k).transpose(0, 2, 1))


@pytest.mark.parametrize("isa", ["avx512", "avx2", "portable"])
def test_every_path_computes_every_row_count_exactly(tmp_path, isa):
    """Rows 1 to 37 (every remainder of a 16-row tile; on AVX-512 one tile
    of up to 15 rows, one pass for 16 to 32 with the sums of the rows past 12
    (8 past 28 rows) held in L1, rows dealt out to tiles of up to 14 past
    that; on AVX2 one tile of up to 3 rows by two panels, passes of up to 64
    rows with every row's sums held in L1 past that (65 and 97: two), and a
    last odd panel in tiles of up to 6 rows), whole tiles, and more rows than
    one workgroup takes; n with a partial last panel (and an odd panel, 37
    and 40); k within one block with an odd count (301: x read in place up to
    15 rows, and steps of k left over from the held sums' 3 or 4 at a time),
    one whole block (1024: x's rows copied 256 k at a time on AVX-512, as
    they share L1 sets), and three blocks, the last one short (2560: each
    block resumes from the partial sums the last one stored); and none (0:
    y is the bias, as eager's Linear(0, n) gives). Split over
    workgroups as IREE splits the dispatch (3 x 2 of them), and over one."""
    kernel = _host_library(tmp_path, isa)
    rng = np.random.default_rng(0)
    for k, n in [(301, 37), (1024, 40), (2560, 19), (0, 19)]:
        _check_row_counts(kernel, rng, isa, k, n)


def _check_row_counts(kernel, rng, isa, k, n):
    weight = rng.standard_normal((n, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    packed = _packed(weight)
    for m in [*range(1, 38), 47, 48, 49, 64, 65, 97, 193]:
        x = rng.standard_normal((m, k)).astype(np.float32)
        want = x.astype(np.float64) @ weight.T.astype(np.float64) + bias
        # float32's bound for a sum of k products (k unit roundoffs of the
        # sum of magnitudes), twice over; a term, a block or a row missed is
        # off by far more.
        magnitude = np.abs(x).astype(np.float64) @ np.abs(weight).T.astype(np.float64)
        bound = 2 * (k + 1) * 2.0 ** -24 * (magnitude + np.abs(bias))
        # One workgroup; runs of 48 rows (tiles of 12 split across workgroups);
        # the module's runs (linear_rows.ROWS_PER_WORKGROUP).
        runs = -(-m // linear_rows.ROWS_PER_WORKGROUP)
        for grid in [(1, 1), (3, -(-m // 48)), (3, runs)]:
            for with_bias in (True, False):
                y = np.full((m, n), np.nan, np.float32)
                nx, ny = grid
                for gy in range(ny):
                    for gx in range(nx):
                        if with_bias:
                            kernel.anyshape_linear_rows(
                                x.ctypes.data, 0, packed.ctypes.data, 0, bias.ctypes.data, 0,
                                y.ctypes.data, 0, m, n, k, gx, nx, gy, ny)
                        else:
                            kernel.anyshape_linear_rows_no_bias(
                                x.ctypes.data, 0, packed.ctypes.data, 0, y.ctypes.data, 0,
                                m, n, k, gx, nx, gy, ny)
                expected = want if with_bias else want - bias
                error = np.abs(y - expected)
                # NaN (a row not written) fails too
                assert (error <= bound).all(), (isa, k, m, grid, with_bias, np.nanmax(error))


class _Products(torch.nn.Module):
    """Each form the rewrite takes: linear with and without a bias, GPT-2's
    Conv1D (addmm with a [k, n] weight), mm; n not a multiple of 16, k over
    two blocks of the kernel."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(64, 301)
        self.down = torch.nn.Linear(301, 37, bias=False)
        self.conv_weight = torch.nn.Parameter(torch.randn(37, 50) / 6)
        self.conv_bias = torch.nn.Parameter(torch.randn(50))
        self.mm_weight = torch.nn.Parameter(torch.randn(50, 16) / 7)

    def forward(self, x):
        h = self.down(torch.relu(self.up(x)))
        rows = h.reshape(-1, h.shape[-1])
        conv = torch.addmm(self.conv_bias, rows, self.conv_weight)
        return torch.mm(torch.tanh(conv), self.mm_weight).reshape(*x.shape[:-1], 16)


def _routed(module) -> int:
    """How many products call the kernel (each through a helper function per
    shape, which dispatches it)."""
    text = module.ir("iree-input")
    return len(re.findall(r"call @anyshape_linear_rows_(?:d|\d+)x\d+x\d+_", text))


@pytest.fixture(scope="module")
def products():
    torch.manual_seed(0)
    model = _Products().eval()
    module = anyshape.compile(model, (torch.randn(2, 9, 64),),
                              dynamic_shapes={"x": {0: Dim("batch"), 1: Dim("seq")}})
    return model, module


@needs_kernel
def test_products_run_the_kernel_and_match_eager(products):
    """Batch 1 at every length from 1 to 34 (each remainder of IREE's 16-row
    and the kernel's 12-row tiles), longer lengths across workgroups of rows,
    and batches of several rows."""
    model, module = products
    assert _routed(module) == 4
    shapes = [(1, length) for length in [*range(1, 35), 65, 333]] + [(3, 17), (4, 33), (7, 1)]
    _assert_as_close_as_eager(model, module, shapes, 64)


def _assert_as_close_as_eager(model, module, shapes, features: int) -> None:
    """On x of each (batch, length), the module within 4x eager float32's
    error against eager float64 (or 1e-6 of the largest value)."""
    reference = copy.deepcopy(model).double()
    for batch, length in shapes:
        x = torch.randn(batch, length, features)
        with torch.no_grad():
            want = reference(x.double()).numpy()
            eager = model(x).numpy()
        got = np.asarray(module(x))
        scale = np.abs(want).max()
        error, eager_error = (np.abs(v - want).max() / scale for v in (got, eager))
        assert error < max(4 * eager_error, 1e-6), (batch, length, error, eager_error)


@needs_kernel
def test_static_rows_above_a_tile_run_the_kernel():
    """Rows fixed at export: 17 (IREE would compute 32) run the kernel; 3 (a
    decode function's batch, for which IREE picks tiles of its size) stay
    IREE's."""
    torch.manual_seed(1)
    model = torch.nn.Linear(96, 40).eval()
    for rows, routed in ((17, 1), (3, 0)):
        x = torch.randn(rows, 96)
        module = anyshape.compile(model, (x,))
        assert _routed(module) == routed, rows
        with torch.no_grad():
            want = copy.deepcopy(model).double()(x.double()).numpy()
        assert np.abs(np.asarray(module(x)) - want).max() < 1e-5


class _ColumnParts(torch.nn.Module):
    """Products read only through column slices: Q, K and V projections of one
    input split into heads (which anyshape-data-tiling-forms computes as one
    linear on their concatenated weights, sliced after) and a fused Conv1D
    (addmm with a [k, 3n] weight) split in three; and, as ``negative_``, an
    addmm whose result is sliced and also read whole."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(32, 32) for _ in range(3))
        self.fused_weight = torch.nn.Parameter(torch.randn(32, 96) / 6)
        self.fused_bias = torch.nn.Parameter(torch.randn(96))
        self.read_whole = torch.nn.Parameter(torch.randn(32, 48) / 6)

    def forward(self, x):
        batch, length, _ = x.shape

        def heads(t):
            return t.view(batch, length, 4, 8).transpose(1, 2)

        attended = torch.nn.functional.scaled_dot_product_attention(
            heads(self.q(x)), heads(self.k(x)), heads(self.v(x)))
        rows = attended.transpose(1, 2).reshape(batch * length, 32)
        a, b, c = torch.addmm(self.fused_bias, rows, self.fused_weight).split(32, dim=1)
        whole = torch.mm(a * b + c, self.read_whole)
        return (whole[:, :16] + whole.sum(dim=1, keepdim=True)).reshape(batch, length, 16)


@needs_kernel
def test_products_read_through_column_slices_are_computed_part_by_part():
    """/// Behind the kernel's dispatch IREE cannot fuse a column slice into its
    reader: each would be a strided copy. Each part is its own product (3 + 3),
    the product also read whole stays one, and the results are eager's."""
    torch.manual_seed(4)
    model = _ColumnParts().eval()
    module = anyshape.compile(model, (torch.randn(2, 9, 32),),
                              dynamic_shapes={"x": {0: Dim("batch"), 1: Dim("seq")}})
    text = module.ir("iree-input")
    assert _routed(module) == 7
    assert len(re.findall(r"call @anyshape_linear_rows_dx32x32_nk_bias\(", text)) == 3
    assert len(re.findall(r"call @anyshape_linear_rows_dx32x32_kn_bias\(", text)) == 3
    assert len(re.findall(r"call @anyshape_linear_rows_dx32x48_kn\(", text)) == 1
    _assert_as_close_as_eager(model, module, [(1, 1), (1, 7), (1, 17), (2, 33), (3, 5)], 32)


@needs_kernel
@pytest.mark.parametrize("k, n", [(0, 8), (8, 0)])
def test_empty_products_are_eagers(k, n):
    """/// Linear(0, n) is its bias in eager (the vector paths write y from their
    blocks of k, and with k = 0 there are none); Linear(k, 0) and no rows
    are empty. Each at 0, 1, 7 and 17 rows."""
    torch.manual_seed(5)
    model = torch.nn.Linear(k, n).eval()
    with torch.no_grad():
        model.bias.normal_()  # its initialization draws from [-1/sqrt(k), 1/sqrt(k)]: zeros
    module = anyshape.compile(model, (torch.randn(5, k),),
                              dynamic_shapes={"input": {0: Dim("rows", min=0)}})
    assert _routed(module) == 1
    for m in (0, 1, 7, 17):
        x = torch.randn(m, k)
        with torch.no_grad():
            want = model(x).numpy()
        got = np.asarray(module(x))
        assert got.shape == want.shape, (k, n, m)
        np.testing.assert_array_equal(got, want, err_msg=f"k={k} n={n} m={m}")


def test_product_kernel_iree_keeps_iree_products():
    torch.manual_seed(2)
    model = torch.nn.Linear(32, 24).eval()
    module = anyshape.compile(model, (torch.randn(5, 32),),
                              backend=anyshape.BackendOptions(product_kernel="iree"))
    assert _routed(module) == 0
    with torch.no_grad():
        x = torch.randn(5, 32)
        assert np.abs(np.asarray(module(x)) - model(x).numpy()).max() < 1e-5


def test_bad_product_kernels_are_named():
    with pytest.raises(ValueError, match="product_kernel: expected one of anyshape, iree, "
                                         "got 'mkl'"):
        with_product_kernel(make_target("cpu"), "mkl")


def test_without_a_c_compiler_iree_products_run_with_a_warning(monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    build.kernel_object.cache_clear()
    try:
        torch.manual_seed(3)
        model = torch.nn.Linear(32, 24).eval()
        with pytest.warns(build.KernelUnavailable,
                          match="IREE's own kernel.*the C compiler /nonexistent/cc does not run"):
            module = anyshape.compile(model, (torch.randn(5, 32),), cache=False)
    finally:
        monkeypatch.undo()
        build.kernel_object.cache_clear()
    assert _routed(module) == 0
    with torch.no_grad():
        x = torch.randn(5, 32)
        assert np.abs(np.asarray(module(x)) - model(x).numpy()).max() < 1e-5


def _compile_flags_and_target():
    """iree-compile's flags for a module of the kernel's executable and a
    function that dispatches it (no torch input), and the executable's target."""
    flags = iree_flags(make_target("cpu", data_tiling=True))
    target = build.executable_target(tuple(flags))
    return [flag for flag in flags if not flag.startswith("--iree-input-type")], target


# (workers, n) -> {m: (the runs of panels, the runs of rows) the dispatch is
# given}. Up to 192 rows are one run, each run reading the weights once; where
# there are fewer runs of 8 panels than workers, the rows are spread over more
# runs, up to one per tile of 12, so that no worker waits. Rows of one tile
# (a decode step's) take runs of fewer panels instead: 4 per worker, where
# there are as many panels.
_ROW_RUNS = {
    (1, 37): {1: (3, 1), 13: (1, 1), 192: (1, 1), 193: (1, 2)},
    (5, 37): {1: (3, 1), 13: (1, 2), 49: (1, 5), 100: (1, 5)},  # one run of 8 panels
    (5, 301): {1: (19, 1), 13: (3, 2), 49: (3, 2)},  # 3 runs of 8: 2 of rows fill 5
    (16, 768): {12: (48, 1), 25: (6, 3), 128: (6, 3), 400: (6, 3)},  # roberta-base, 16 cores
}


@needs_kernel
@pytest.mark.parametrize("workers, n", list(_ROW_RUNS))
def test_rows_are_split_for_the_workers(tmp_path, workers, n):
    """The dispatch's workgroup count, as IREE's profiler records it, splits
    the rows (a decode step's panels) as the module's worker count asks, and
    every row is computed."""
    flags, target = _compile_flags_and_target()
    function = linear_rows._function_text("f", None, 32, n, "nk", True).replace(
        "func.func private @f", "func.func @f")
    source = tmp_path / "split.mlir"
    source.write_text(f"module {{{linear_rows.executable_text(KERNEL, target, workers)}{function}}}")
    vmfb = tmp_path / "split.vmfb"
    subprocess.run([iree_tool("iree-compile"), str(source), *flags, "-o", str(vmfb)],
                   check=True, capture_output=True)
    tools = Path(sys.executable).parent  # iree-base-runtime's tools
    rng = np.random.default_rng(workers)
    weight = rng.standard_normal((n, 32)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    np.save(tmp_path / "w.npy", weight)
    np.save(tmp_path / "b.npy", bias)
    for m, (panel_runs, row_runs) in _ROW_RUNS[(workers, n)].items():
        x = rng.standard_normal((m, 32)).astype(np.float32)
        np.save(tmp_path / "x.npy", x)
        profile = tmp_path / f"{m}.ireeprof"
        subprocess.run([str(tools / "iree-run-module"), "--device=local-task",
                        f"--module={vmfb}", "--function=f", f"--input=@{tmp_path / 'x.npy'}",
                        f"--input=@{tmp_path / 'w.npy'}", f"--input=@{tmp_path / 'b.npy'}",
                        f"--output=@{tmp_path / 'y.npy'}", "--device_profiling_mode=host-execution",
                        f"--device_profiling_output={profile}"], check=True, capture_output=True)
        want = x.astype(np.float64) @ weight.T.astype(np.float64) + bias
        assert np.abs(np.load(tmp_path / "y.npy") - want).max() < 1e-4, (workers, n, m)
        listing = subprocess.run([str(tools / "iree-profile"), "dispatch", "--format=jsonl",
                                  str(profile)], check=True, capture_output=True, text=True)
        dispatch = next(json.loads(line) for line in listing.stdout.splitlines()
                        if '"key":"linear_rows"' in line)
        assert dispatch["last_workgroup_count"] == [panel_runs, row_runs, 1], (workers, n, m)


def test_workers_must_be_positive():
    with pytest.raises(ValueError, match="workers: expected a positive int, got 0"):
        linear_rows.executable_text(Path("k.o"), "#target", 0)


@needs_kernel
def test_inline_object_is_still_written_empty(tmp_path):
    """Guards the ``executable_object_by_path`` workaround: IREE 3.13 links an
    inline object (``data = ...``) as an empty file, so the kernel's symbol is
    undefined. When this fails, IREE writes inline objects and the executable
    can carry its object in the IR."""
    flags, target = _compile_flags_and_target()
    executable = linear_rows.executable_text(KERNEL, target)
    data = KERNEL.read_bytes()
    inline = executable.replace(
        f'path = "{KERNEL}"',
        f'path = "linear_rows.o", data = dense<"0x{data.hex().upper()}"> : vector<{len(data)}xi8>')
    assert inline != executable
    function = linear_rows._function_text("f", None, 32, 24, "nk", True).replace(
        "func.func private @f", "func.func @f")
    source = tmp_path / "inline.mlir"
    source.write_text(f"module {{{inline}{function}}}")
    done = subprocess.run([iree_tool("iree-compile"), str(source), *flags,
                           "-o", str(tmp_path / "inline.vmfb")], capture_output=True, text=True)
    assert done.returncode != 0
    assert "undefined symbol: anyshape_linear_rows" in done.stderr
    # The same executable naming the object by path compiles.
    source.write_text(f"module {{{executable}{function}}}")
    subprocess.run([iree_tool("iree-compile"), str(source), *flags,
                    "-o", str(tmp_path / "path.vmfb")], check=True, capture_output=True)


# What a worker's stack holds: the python runtime's workers overran theirs
# when linear_rows.c's frames reached 62 KiB (their default is less than
# --task_worker_stack_size=73728, which ran right), and the logits of a
# DistilBERT classifier came out 1e-3 off, silently. The build now refuses a
# frame past build.FRAME_BUDGET (test_kernel_build.py).
SMALL_WORKER_STACK = 48 * 1024


_RUN_ON_SMALL_STACKS = """
import sys
import numpy as np
import iree.runtime
iree.runtime.flags.parse_flags(f"--task_worker_stack_size={sys.argv[2]}")
import anyshape
module = anyshape.load(sys.argv[1])
for name in sys.argv[3:]:
    np.save(name + ".out.npy", np.asarray(module(np.load(name + ".npy"))))
"""


@needs_kernel
def test_products_run_on_workers_with_small_stacks(products, tmp_path):
    """The module runs right on workers of SMALL_WORKER_STACK, in a process
    of its own (a frame past a worker's stack ends it at the guard page, or
    overwrites what lies beyond). One tile, one pass and tiles of rows."""
    model, module = products
    module.save(tmp_path / "module")
    shapes = {"one": (1, 15), "pass": (3, 7), "tiles": (2, 17), "rows": (1, 333)}
    inputs = {name: torch.randn(*shape, 64) for name, shape in shapes.items()}
    for name, x in inputs.items():
        np.save(tmp_path / f"{name}.npy", x.numpy())
    done = subprocess.run([sys.executable, "-c", _RUN_ON_SMALL_STACKS, str(tmp_path / "module"),
                           str(SMALL_WORKER_STACK), *(str(tmp_path / n) for n in shapes)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for name, x in inputs.items():
        with torch.no_grad():
            want = model(x).numpy()
        got = np.load(tmp_path / f"{name}.out.npy")
        assert np.abs(got - want).max() <= 1e-4 * max(1.0, np.abs(want).max()), name
