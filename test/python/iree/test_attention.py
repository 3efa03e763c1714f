"""anyshape's attention kernel (``iree/kernels/attention.py``, ``attention.c``).

The kernel's AVX-512, AVX2 and portable code run directly from the objects
modules link (kernel_objects.linked_object) against float64, over the remainders
of its tiles (32 query rows, 12 or 6 keys), every bias mode and layout; and
modules built by ``anyshape.compile`` route attention to it and match eager.
"""

import ctypes
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

import anyshape
from anyshape.iree.kernels import attention, build, linear_rows
from kernel_objects import linked_object

KERNEL, UNAVAILABLE = build.kernel_object(attention.SOURCE)
needs_kernel = pytest.mark.skipif(KERNEL is None, reason=f"kernel unavailable: {UNAVAILABLE}")


def _host_library(tmp_path, isa: str):
    """The object a module built for ``isa`` links, called from this process."""
    kernel = linked_object(attention.SOURCE, isa, tmp_path)
    pointer, size = ctypes.c_void_p, ctypes.c_size_t
    kernel.anyshape_attention.argtypes = [pointer, size] * 5 + [size] * 8
    kernel.anyshape_attention_no_bias.argtypes = [pointer, size] * 4 + [size] * 8
    return kernel


def _reference(q, k, v, bias, scale):
    """float64 attention, rows whose scores are all -inf zero (torch's SDPA decomposition)."""
    scores = np.einsum("bhld,bhsd->bhls", q.astype(np.float64), k.astype(np.float64)) * scale
    if bias is not None:
        scores = scores + bias.astype(np.float64)
    top = scores.max(-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.exp(scores - top)
        p = np.where(np.isneginf(top), 0.0, e / e.sum(-1, keepdims=True))
    return np.einsum("bhls,bhsd->bhld", p, v.astype(np.float64))


def _run(kernel, q, k, v, bias, scale, layouts=(0, 0, 0), mode=0):
    """The kernel over every workgroup, as IREE would dispatch it; [B, H, L, D]."""
    batch, heads, length, dim = q.shape
    keys = k.shape[2]
    stored = [np.ascontiguousarray(x.transpose(0, 2, 1, 3) if layout else x)
              for x, layout in zip((q, k, v), layouts)]
    out = np.zeros((batch, length, heads, dim), np.float32)
    code = layouts[0] | layouts[1] << 1 | layouts[2] << 2
    scale_bits = struct.unpack("<I", struct.pack("<f", scale))[0]
    operands = []
    for x in stored:
        operands += [x.ctypes.data, 0]
    if bias is not None:
        rows = mode & attention.BIAS_ROWS  # passed transposed, as route_attention passes it
        kept = np.ascontiguousarray(bias.transpose(0, 1, 3, 2) if rows else bias, np.float32)
        operands += [kept.ctypes.data, 0]
        code |= mode << 3
    operands += [out.ctypes.data, 0]
    entry = kernel.anyshape_attention if bias is not None else kernel.anyshape_attention_no_bias
    for gy in range(batch * heads):
        for gx in range(-(-length // attention.ROWS_PER_WORKGROUP)):
            entry(*operands, heads, length, keys, dim, scale_bits, code, gx, gy)
    return out.transpose(0, 2, 1, 3)


def _bias(kind: str, rng, batch, heads, length, keys):
    """(bias, the kernel's mode for it)."""
    if kind == "none":
        return None, 0
    if kind == "padding":  # [B, 1, 1, S]: 0 or -inf, the last sequence fully masked
        bias = np.zeros((batch, 1, 1, keys), np.float32)
        for b in range(batch):
            bias[b, 0, 0, rng.integers(1, keys + 1):] = -np.inf
        if batch > 1:
            bias[-1] = -np.inf
        return bias, attention.BIAS_BATCH
    if kind == "per-row":  # T5's position bias with its mask: [B, H, L, S], finfo.min
        bias = rng.standard_normal((batch, heads, length, keys)).astype(np.float32) * 3
        bias[..., ::3] = np.finfo(np.float32).min
        return bias, attention.BIAS_BATCH | attention.BIAS_HEADS | attention.BIAS_ROWS
    shared = rng.standard_normal((1, heads, length, keys)).astype(np.float32)  # by batches
    return shared, attention.BIAS_HEADS | attention.BIAS_ROWS


@pytest.mark.parametrize("isa", ["avx512", "avx2", "portable"])
def test_every_path_matches_float64(tmp_path, isa):
    """One query row and one key; query rows around a workgroup's 32 and key
    counts around the tiles' 12 and 6; head dims 16 to 128; each bias mode, a
    fully masked sequence among them; q, k and v as [B, H, N, D] and as
    [B, N, H, D]."""
    kernel = _host_library(tmp_path, isa)
    rng = np.random.default_rng(0)
    shapes = [(1, 1, 1, 1, 16), (2, 3, 7, 9, 16), (1, 2, 33, 17, 64), (2, 2, 65, 333, 64),
              (1, 1, 40, 5, 128), (3, 2, 31, 13, 32)]
    for batch, heads, length, keys, dim in shapes:
        q, k, v = (rng.standard_normal((batch, heads, n, dim)).astype(np.float32)
                   for n in (length, keys, keys))
        for kind in ("none", "padding", "per-row", "shared"):
            bias, mode = _bias(kind, rng, batch, heads, length, keys)
            for layouts in ((0, 0, 0), (1, 1, 1), (1, 0, 1)):
                scale = 1 / np.sqrt(dim) if kind != "per-row" else 1.0
                got = _run(kernel, q, k, v, bias, scale, layouts, mode)
                want = _reference(q, k, v, bias, scale)
                np.testing.assert_allclose(got, want, atol=3e-5, rtol=0, err_msg=(
                    f"{isa} B={batch} H={heads} L={length} S={keys} D={dim} {kind} {layouts}"))


@pytest.mark.parametrize("isa", ["avx512", "avx2", "portable"])
def test_a_nan_score_makes_its_rows_nan(tmp_path, isa):
    kernel = _host_library(tmp_path, isa)
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 2, 20, 16)).astype(np.float32) for _ in range(3))
    k[0, 0, 3, 0] = np.nan  # every query row of head 0 reads it
    out = _run(kernel, q, k, v, None, 0.25)
    assert np.isnan(out[0, 0]).all() and not np.isnan(out[0, 1]).any()


@needs_kernel
@pytest.mark.skipif(shutil.which("nm") is None, reason="no nm")
def test_object_needs_no_library():
    """/// IREE's embedded ELF loader resolves no symbols: the object must call nothing."""
    undefined = subprocess.run(["nm", "-u", str(KERNEL)], capture_output=True, text=True,
                               check=True).stdout.split()
    assert undefined == []


HEADS, HEAD_DIM = 4, 16


class _TwoAttentions(torch.nn.Module):
    """An encoder's two attention forms: SDPA over a boolean padding mask
    (the mask folded into the scores' product), then SDPA over an additive
    bias per query row (T5's relative-position bias plus the mask)."""

    def __init__(self):
        super().__init__()
        width = HEADS * HEAD_DIM
        self.first, self.second = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, 3 * width)
        self.relative = torch.nn.Embedding(64, HEADS)

    def _attend(self, layer, x, mask):
        batch, length, _ = x.shape
        q, k, v = (t.view(batch, length, HEADS, HEAD_DIM).transpose(1, 2)
                   for t in layer(x).chunk(3, dim=-1))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out.transpose(1, 2).reshape(batch, length, HEADS * HEAD_DIM)

    def forward(self, x, keep):
        length = x.shape[1]
        x = x + self._attend(self.first, x, keep[:, None, None, :])
        positions = torch.arange(length)
        buckets = (positions[None, :] - positions[:, None]).clamp(-31, 32) + 31
        bias = self.relative(buckets).permute(2, 0, 1)[None]
        bias = bias.masked_fill(~keep[:, None, None, :], torch.finfo(torch.float32).min)
        return self._attend(self.second, x, bias)


def _inputs(batch, length, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, HEADS * HEAD_DIM, generator=generator)
    keep = torch.ones(batch, length, dtype=torch.bool)
    for row in range(1, batch):  # a different amount of padding per sequence
        keep[row, max(1, length - row * length // batch):] = False
    return x, keep


@pytest.fixture(scope="module")
def encoder():
    torch.manual_seed(0)
    model = _TwoAttentions().eval()
    batch, seq = Dim("batch"), Dim("seq")
    module = anyshape.compile(model, _inputs(2, 9, 0),
                              dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}))
    return model, module


@needs_kernel
@pytest.mark.builds_after_export
def test_both_forms_run_the_kernel(encoder):
    _, module = encoder
    text = module.ir("iree-input")
    assert len(re.findall(r"call @anyshape_attention_\d+\(", text)) == 2
    assert "flow.dispatch @anyshape_attention::@x86_64::@attention[" in text


@needs_kernel
@pytest.mark.parametrize("batch,length", [(1, 1), (1, 7), (2, 17), (3, 33), (2, 65)])
@pytest.mark.builds_after_export
def test_encoder_matches_eager(encoder, batch, length):
    model, module = encoder
    args = _inputs(batch, length, length)
    torch.testing.assert_close(module(*args), model(*args), atol=2e-5, rtol=1e-5)


@needs_kernel
@pytest.mark.builds_after_export
def test_fully_masked_sequence_is_eager(encoder):
    model, module = encoder
    x, keep = _inputs(3, 6, 1)
    keep[1] = False
    torch.testing.assert_close(module(x, keep), model(x, keep), atol=2e-5, rtol=1e-5)


# Workers' stacks no larger than the kernels' frames need: 48 KiB, where the
# widest frame (the vector paths' 32 query rows of q and of sums) is 36 KiB.
SMALL_WORKER_STACK = 48 * 1024
_RUN_ON_SMALL_STACKS = """
import sys
import numpy as np
import iree.runtime
iree.runtime.flags.parse_flags(f"--task_worker_stack_size={sys.argv[2]}")
import anyshape
module = anyshape.load(sys.argv[1])
for name in sys.argv[3:]:
    args = np.load(name + ".npz")
    np.save(name + ".out.npy", np.asarray(module(args["x"], args["keep"])))
"""


@needs_kernel
@pytest.mark.builds_after_export
def test_encoder_runs_on_workers_with_small_stacks(encoder, tmp_path):
    """/// The attention kernel's frames fit workers of SMALL_WORKER_STACK (a
    frame past one faults on its guard page, the stack probed page by page),
    in a process of its own: one workgroup of rows and several."""
    model, module = encoder
    module.save(tmp_path / "module")
    inputs = {"short": _inputs(1, 7, 7), "long": _inputs(2, 65, 65)}
    for name, (x, keep) in inputs.items():
        np.savez(tmp_path / f"{name}.npz", x=x.numpy(), keep=keep.numpy())
    done = subprocess.run([sys.executable, "-c", _RUN_ON_SMALL_STACKS, str(tmp_path / "module"),
                           str(SMALL_WORKER_STACK), *(str(tmp_path / n) for n in inputs)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for name, args in inputs.items():
        with torch.no_grad():
            want = model(*args)
        torch.testing.assert_close(torch.from_numpy(np.load(tmp_path / f"{name}.out.npy")), want,
                                   atol=2e-5, rtol=1e-5)


# On CPUs without AVX-512 (x86-64-v3) and without AVX2 (x86-64-v2) the
# modules link the kernels' objects capped at AVX2 and at their portable code.
CAPPED = {"x86-64-v3": build.ISA_AVX2, "x86-64-v2": build.ISA_PORTABLE}


@pytest.fixture(scope="module", params=list(CAPPED))
def capped_encoder(request):
    torch.manual_seed(0)
    model = _TwoAttentions().eval()
    batch, seq = Dim("batch"), Dim("seq")
    module = anyshape.compile(model, _inputs(2, 9, 0),
                              dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}),
                              backend=anyshape.BackendOptions(target_cpu=request.param))
    return request.param, model, module


@needs_kernel
@pytest.mark.builds_after_export
def test_capped_modules_run_the_capped_kernels_as_eager(capped_encoder):
    """/// The AVX2 and portable code of both kernels, as the module links them
    (with the module's flags), at odd row counts: the products at rows 1 to
    65 x 2, attention at one query row to three workgroups of them."""
    cpu, model, module = capped_encoder
    text = module.ir("iree-input")
    for source in (attention.SOURCE, linear_rows.SOURCE):
        built, why = build.kernel_object(source, CAPPED[cpu])
        assert built is not None, why
        assert f'path = "{built}"' in text, (cpu, source.name)
    assert len(re.findall(r"call @anyshape_attention_\d+\(", text)) == 2
    assert re.search(r"call @anyshape_linear_rows_", text)
    for batch, length in [(1, 1), (1, 7), (2, 17), (1, 33), (2, 65)]:
        args = _inputs(batch, length, length)
        torch.testing.assert_close(module(*args), model(*args), atol=2e-5, rtol=1e-5)


class _HeadDims(torch.nn.Module):
    """Self-attention at head dims 48, 80, 96 and 112 (2 heads each): the
    vector paths' output columns in runs of 4 vectors and single ones, mixed."""

    DIMS = (48, 80, 96, 112)

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(32, 6 * d) for d in self.DIMS)
        self.out = torch.nn.ModuleList(torch.nn.Linear(2 * d, 32) for d in self.DIMS)

    def forward(self, x):
        batch, length, _ = x.shape
        for d, qkv, out in zip(self.DIMS, self.qkv, self.out):
            q, k, v = (t.view(batch, length, 2, d).transpose(1, 2)
                       for t in qkv(x).chunk(3, dim=-1))
            attended = F.scaled_dot_product_attention(q, k, v)
            x = x + out(attended.transpose(1, 2).reshape(batch, length, 2 * d))
        return x


@needs_kernel
@pytest.mark.builds_after_export
def test_head_dims_of_both_column_loops_match_eager():
    torch.manual_seed(2)
    model = _HeadDims().eval()
    module = anyshape.compile(model, (torch.randn(2, 9, 32),),
                              dynamic_shapes={"x": {0: Dim("batch"), 1: Dim("seq")}})
    assert len(re.findall(r"call @anyshape_attention_\d+\(", module.ir("iree-input"))) == 4
    for batch, length in [(1, 1), (2, 7), (1, 33), (2, 40)]:
        x = torch.randn(batch, length, 32)
        torch.testing.assert_close(module(x), model(x), atol=2e-5, rtol=1e-5)


@needs_kernel
@pytest.mark.builds_after_export
def test_negative_head_dim_not_a_multiple_of_16_stays_iree():
    """/// The vector paths step through D a vector at a time: D = 8 keeps IREE's form."""
    torch.manual_seed(1)
    layer = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()

    class Model(torch.nn.Module):
        def forward(self, x):
            return layer(x, x, x, need_weights=False)[0]

    model = Model().eval()
    module = anyshape.compile(model, (torch.randn(2, 9, 16),),
                              dynamic_shapes={"x": {0: Dim("batch"), 1: Dim("seq")}})
    assert "anyshape_attention" not in module.ir("iree-input")
    x = torch.randn(3, 13, 16)
    torch.testing.assert_close(module(x), model(x), atol=2e-5, rtol=1e-5)


def test_an_unbuilt_kernel_says_why(monkeypatch):
    """/// Where the kernel cannot be built, attention keeps IREE's form, and a warning says why."""
    monkeypatch.setattr(attention, "kernel_object",
                        lambda source, isa: (None, "no C compiler here"))
    with pytest.warns(build.KernelUnavailable, match="attention.*no C compiler here"):
        assert attention.kernel() is None
