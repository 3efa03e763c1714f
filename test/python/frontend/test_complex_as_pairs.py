"""Complex values inside a model computed as real pairs (graph_fixes/complex_as_pairs.py):
Llama 4's and DeepSeek-V2's rotary embeddings, which IREE refuses as complex."""

import os
import sys

import pytest
import torch
from torch.export import Dim

import anyshape

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from opinfo import plain  # noqa: E402


class ComplexRotary(torch.nn.Module):
    """Llama 4's rotation: view_as_complex(q) * polar(1, angle) * scale, back with view_as_real."""

    def __init__(self, heads=3, head_dim=8):
        super().__init__()
        self.proj = torch.nn.Linear(heads * head_dim, heads * head_dim)
        self.heads, self.head_dim = heads, head_dim
        self.register_buffer("inv_freq", 1.0 / 500.0 ** (torch.arange(0, head_dim, 2) / head_dim))

    def forward(self, x, positions):
        b, s, _ = x.shape
        angles = positions[..., None].float() * self.inv_freq
        rotation = torch.polar(torch.ones_like(angles), angles) * 0.5
        q = self.proj(x).view(b, s, self.heads, self.head_dim)
        pairs = torch.view_as_complex(q.float().reshape(b, s, self.heads, -1, 2))
        rotated = torch.view_as_real(pairs * rotation[:, :, None, :]).flatten(3)
        return rotated.type_as(x), torch.view_as_real(rotation + rotation).sum(-1)


def _inputs(batch, length, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, length, 24, generator=generator),
            torch.arange(length).expand(batch, -1) + torch.randint(0, 5, (batch, 1), generator=generator))


def _dims():
    batch, seq = Dim("batch"), Dim("seq")
    return ({0: batch, 1: seq}, {0: batch, 1: seq})


def test_complex_rotary_matches_eager():
    """/// Every complex value is made and used inside the graph: it compiles,
    /// and matches eager (float64 decides) at odd sizes."""
    torch.manual_seed(0)
    model = ComplexRotary().eval()
    compiled = anyshape.compile(model, _inputs(2, 5), dynamic_shapes=_dims())
    for batch, length in [(1, 1), (1, 7), (3, 17), (2, 33)]:
        x, positions = _inputs(batch, length, seed=length)
        with torch.no_grad():
            expected = model(x, positions)
        for got, want in zip(compiled(x, positions), expected):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_the_plain_stack_refuses_the_complex_rotary():
    """/// Why the rewrite exists: IREE refuses torch-mlir's complex tensors.
    /// When this fails, IREE compiles them and the rewrite can go."""
    program = plain.export(ComplexRotary().eval(), _inputs(2, 5), _dims())
    bytecode, kinds = plain.lower(program)
    from anyshape.iree.flags import iree_flags, make_target

    with pytest.raises(plain.StageError, match="Only integer/float dtype supported"):
        plain.compile_bytecode(bytecode, kinds, iree_flags(make_target("cpu", data_tiling=False)))


class ComplexOut(torch.nn.Module):
    def forward(self, x):
        return torch.view_as_complex(x) * 2


def test_negative_a_complex_output_is_left_to_the_compiler():
    """/// A complex value that leaves the graph cannot be a pair: the graph is
    /// left as it was, and the compile error is IREE's, named."""
    with pytest.raises(anyshape.CompileError, match="Only integer/float dtype supported"):
        anyshape.compile(ComplexOut(), (torch.randn(3, 4, 2),))


class FourierMixing(torch.nn.Module):
    """FNet's token mixing: the real part of a 2-D FFT over (seq, hidden)."""

    def forward(self, x):
        return torch.fft.fftn(x, dim=(1, 2)).real


class FourierRoundTrip(torch.nn.Module):
    """Both directions and both normalizations of torch's complex FFT."""

    def forward(self, x):
        spectrum = torch.fft.fft(x.to(torch.complex64), dim=1, norm="ortho")
        return torch.view_as_real(torch.fft.ifft(spectrum * 2, dim=-1))


class RealSpectra(torch.nn.Module):
    """The real FFTs (``_fft_r2c``, ``_fft_c2r``) and ``conj``, with the length
    transformed by rfft and the features by irfft and hfft."""

    def forward(self, x):
        magnitude = torch.fft.rfft(x, dim=1).abs()
        back = torch.fft.irfft(torch.fft.rfft(x, dim=-1, norm="ortho"), n=8, dim=-1,
                               norm="ortho")
        hermitian = torch.fft.hfft(x[:, :1].to(torch.complex64), n=9, dim=-1)
        return magnitude, back, hermitian, torch.fft.rfftn(x, dim=(1, 2)).real


@pytest.mark.parametrize("model", [FourierMixing(), FourierRoundTrip(), RealSpectra()],
                         ids=["fnet-mixing", "round-trip", "real-spectra"])
def test_fft_over_a_dynamic_length_matches_eager(model):
    """/// torch-mlir has no lowering for aten._fft_c2c: as pairs it is a
    /// discrete Fourier transform along each dim, the length's included;
    /// float64 decides, anyshape within 3x eager float32's distance to it."""
    compiled = anyshape.compile(model.eval(), (torch.randn(2, 5, 8),),
                                dynamic_shapes=({0: Dim("batch"), 1: Dim("seq")},))
    for batch, length in [(1, 1), (1, 7), (3, 17), (2, 65)]:
        x = torch.randn(batch, length, 8, generator=torch.Generator().manual_seed(length))
        for got, eager, exact in zip(*(torch.utils._pytree.tree_leaves(outputs) for outputs in (
                compiled(x), model(x), model(x.double())))):
            got, eager = got.double(), eager.double()
            assert (got - exact).abs().max() <= \
                3 * (eager - exact).abs().max() + 1e-6 * exact.abs().max()


def test_the_plain_stack_has_no_fft():
    """/// Why the DFT exists: torch-mlir imports the FFT as an opaque op."""
    program = plain.export(FourierMixing().eval(), (torch.randn(2, 5, 8),),
                           ({0: Dim("batch"), 1: Dim("seq")},))
    with pytest.raises(plain.StageError, match="torch.aten._fft_c2c"):
        bytecode, kinds = plain.lower(program)
        from anyshape.iree.flags import iree_flags, make_target
        plain.compile_bytecode(bytecode, kinds, iree_flags(make_target("cpu", data_tiling=False)))


class Magnitude(torch.nn.Module):
    def forward(self, x):
        return torch.view_as_complex(x).abs()


def test_complex_magnitude_as_hypot_computes_it():
    """/// |re + i im| without squaring the parts: 3e20 + 4e20i is 5e20, not inf,
    /// and 1e-30 + 1e-30i is 1.41e-30, not 0."""
    compiled = anyshape.compile(Magnitude().eval(), (torch.randn(5, 2),),
                                dynamic_shapes=({0: Dim("n")},))
    x = torch.tensor([[3e20, 4e20], [1e-30, 1e-30], [0.0, 0.0], [float("inf"), 1.0],
                      [-2.0, 0.5], [3.0, -4.0]])
    torch.testing.assert_close(compiled(x), Magnitude()(x), rtol=2e-7, atol=0)
