"""Mamba-2's chunked scan at every length, while anyshape exports.

transformers' PyTorch path of the Mamba-2 mixer (``mamba2_chunk_scan``, copied
into Mamba-2, Bamba, Falcon-H1, GraniteMoE-Hybrid, Nemotron-H and Zamba-2) pads
the sequence to a multiple of the chunk size, splits it into ``-1`` chunks and
cuts the padding off only ``if pad_size > 0``. With an unbounded ``Dim("seq")``
torch.export cannot keep the length dynamic: the branch on the padding holds
only at some lengths, and an example shorter than one chunk makes the chunk
count 1, which torch's size checks then fix (``256 >= seq + pad`` and
``(seq + pad) // 256 == 1`` in its refusal).

``any_length_scans`` puts ``chunk_scan_any_length`` in those modules' place
while the model is exported. It computes what transformers' function computes,
with the same chunk boundaries, in the same order: the same state-space duality
decomposition (a masked product within each chunk, a decayed sum of the chunk
states across chunks). Its chunk count is ``seq // chunk + 2``, which torch
knows is at least 2: the sequence is padded by one chunk more than
transformers pads it (between ``chunk + 1`` and ``2 * chunk`` positions), and
the padding is always cut off. Padded positions come after every real one,
with zero input and zero log-decay, so they change neither the outputs of real
positions nor the final state.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from anyshape.stages import Workaround

WORKAROUNDS = (Workaround(
    name="mamba2_chunk_scan_any_length", stage="export", where="any_length_scans",
    upstream="transformers 5.23's mamba2_chunk_scan (the PyTorch path of Mamba-2, Bamba, "
             "Falcon-H1, GraniteMoE-Hybrid, Nemotron-H, Zamba-2) branches on its padding "
             "(`if pad_size > 0`) and splits the length into -1 chunks, which torch.export "
             "2.13 specializes to the example's chunk count.",
    guard="test/python/frontend/test_chunked_scans.py::"
          "test_mamba2_compiles_with_an_unbounded_seq",
    remove_when="transformers' scan exports with an unbounded length (the guard passes "
                "without the substitution)"),)

# The modules whose copy of transformers' function is replaced, by its name there.
_SCAN_NAME = "mamba2_chunk_scan"
_REFERENCE_MODULE = "transformers.models.mamba2.modeling_mamba2"


def _segment_sum(x: torch.Tensor) -> torch.Tensor:
    """``out[..., i, j] = sum(x[..., j+1 : i+1])`` for ``j <= i``, -inf above the
    diagonal, as transformers' ``segment_sum``. transformers sums a masked
    (chunk, chunk) copy of ``x`` along one axis, a scan that IREE 3.13's CPU
    code generator puts on the stack (1 MiB at chunk 256: "exceeded stack
    allocation limit"); here it is a difference of one float64 cumulative sum,
    whose rounding stays below float32's."""
    size = x.size(-1)
    sums = torch.cumsum(x.double(), dim=-1)
    out = (sums[..., :, None] - sums[..., None, :]).to(x.dtype)
    on_or_below = torch.tril(torch.ones(size, size, device=x.device, dtype=torch.bool), diagonal=0)
    return out.masked_fill(~on_or_below, -torch.inf)


def chunk_scan_any_length(hidden_states: torch.Tensor, dt: torch.Tensor, A: torch.Tensor,
                          B: torch.Tensor, C: torch.Tensor, chunk_size: int,
                          D: torch.Tensor | None = None, dt_bias: torch.Tensor | None = None,
                          initial_states: torch.Tensor | None = None, dt_softplus: bool = False,
                          dt_limit: tuple[float, float] = (0.0, float("inf")),
                          return_final_states: bool = False, **kwargs):
    """transformers' ``mamba2_chunk_scan`` (its PyTorch path; same arguments,
    same results) with a chunk count torch.export keeps dynamic. Packed
    sequences (``seq_idx``, ``cu_seqlens``) are refused, as transformers'
    PyTorch path refuses them."""
    for name in ("seq_idx", "cu_seqlens"):
        if kwargs.get(name) is not None:
            raise ValueError(f"{name}: expected None (packed sequences need mamba_ssm's kernel, "
                             f"which anyshape cannot export), got a tensor")
    batch, length, heads, head_dim = hidden_states.shape
    groups = B.shape[2]
    if dt_bias is not None:
        dt = dt + dt_bias.to(dt.dtype)
    if dt_softplus:
        dt = F.softplus(dt)
    dt = torch.clamp(dt, min=dt_limit[0], max=dt_limit[1])

    x = hidden_states.float()
    B = B.float().repeat_interleave(heads // groups, dim=2, output_size=heads)
    C = C.float().repeat_interleave(heads // groups, dim=2, output_size=heads)
    chunks = length // chunk_size + 2
    pad = chunks * chunk_size - length

    def into_chunks(t: torch.Tensor) -> torch.Tensor:  # (b, l, ...) -> (b, c, chunk, ...)
        t = F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad))
        return t.reshape(batch, chunks, chunk_size, *t.shape[2:])

    D_residual = D[..., None] * x if D is not None else None
    x = x * dt[..., None].float()
    A = A.to(x.dtype) * dt.float()
    x, A, B, C = (into_chunks(t) for t in (x, A, B, C))

    A = A.permute(0, 3, 1, 2)  # (b, h, c, chunk)
    A_cumsum = torch.cumsum(A, dim=-1)
    # within each chunk: a causal, decayed product of C and B (b, c, l, s, h)
    decay = torch.exp(_segment_sum(A))
    scores = torch.einsum("bclhn,bcshn->bclsh", C, B) * decay.permute(0, 2, 3, 4, 1)
    y_diag = torch.einsum("bclsh,bcshp->bclhp", scores, x)
    # each chunk's state, then the states at the chunk boundaries
    decay_states = torch.exp(A_cumsum[:, :, :, -1:] - A_cumsum)
    B_decayed = B * decay_states.permute(0, -2, -1, 1)[..., None]
    states = torch.einsum("bclhn,bclhp->bchpn", B_decayed, x)
    previous = (initial_states[:, None].to(dtype=states.dtype, device=states.device)
                if initial_states is not None else torch.zeros_like(states[:, :1]))
    states = torch.cat([previous, states], dim=1)
    decay_chunk = torch.exp(_segment_sum(F.pad(A_cumsum[:, :, :, -1], (1, 0)))).transpose(1, 3)
    new_states = torch.einsum("bzch,bzhpn->bchpn", decay_chunk, states)
    states, final_state = new_states[:, :-1], new_states[:, -1]
    # the states' contribution to each position
    y_off = torch.einsum("bclhn,bchpn->bclhp", C, states) \
        * torch.exp(A_cumsum).permute(0, 2, 3, 1)[..., None]

    output = (y_diag + y_off).reshape(batch, chunks * chunk_size, heads, head_dim)
    output = output[:, :length]
    if D_residual is not None:
        output = output + D_residual
    if return_final_states:
        return output, final_state
    return output


def _same_code(a, b) -> bool:
    """Whether two code objects do the same: their bytecode, names and constants,
    nested code compared alike (a copy's file and lines differ)."""
    if a.co_code != b.co_code or a.co_names != b.co_names or len(a.co_consts) != len(b.co_consts):
        return False
    return all(_same_code(x, y) if hasattr(x, "co_code") and hasattr(y, "co_code") else
               type(x) is type(y) and x == y for x, y in zip(a.co_consts, b.co_consts))


def _is_transformers_scan(function, module, reference, reference_module) -> bool:
    """Whether ``function`` (in ``module``) is a copy of transformers' reference
    scan: its code, unwrapped from the kernel-hub decorator, and that of each
    module-level function it calls. A changed copy is left alone."""
    def code(f):
        return getattr(getattr(f, "__wrapped__", f), "__code__", None)

    if code(function) is None or not _same_code(code(function), code(reference)):
        return False
    for name in code(reference).co_names:
        helper, expected = module.__dict__.get(name), reference_module.__dict__.get(name)
        if code(expected) is not None and (
                code(helper) is None or not _same_code(code(helper), code(expected))):
            return False
    return True


@contextlib.contextmanager
def any_length_scans() -> Iterator[None]:
    """Within: each loaded transformers module's ``mamba2_chunk_scan`` is
    ``chunk_scan_any_length``."""
    copies = {name: module.__dict__[_SCAN_NAME] for name, module in sorted(sys.modules.items())
              if name.startswith("transformers.models.") and module is not None
              and _SCAN_NAME in module.__dict__}
    replaced = {}
    if copies:
        reference_module = importlib.import_module(_REFERENCE_MODULE)
        reference = getattr(reference_module, _SCAN_NAME)
        for name, function in copies.items():
            if _is_transformers_scan(function, sys.modules[name], reference, reference_module):
                replaced[name] = function
                setattr(sys.modules[name], _SCAN_NAME, chunk_scan_any_length)
    try:
        yield
    finally:
        for name, function in replaced.items():
            setattr(sys.modules[name], _SCAN_NAME, function)
