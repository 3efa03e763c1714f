"""scaled_dot_product_attention's output, laid out as eager's CPU attention lays it
out (frontend/export.py, ``decomposition_table``).

Eager's CPU flash attention returns [N, H, L, E] stored as [N, L, H, E], so
the heads' transpose back is contiguous and ``.contiguous()`` after it
records nothing in the exported program. Models then ``view`` the heads in
other groupings (JetMoE's experts, AfMoE's gate): the decomposed attention
must give the same layout, or the view fails while the program is decomposed.
"""

import torch
from torch.export import Dim

import anyshape

F = torch.nn.functional


class HeadsRegrouped(torch.nn.Module):
    """Four heads of 16 attended, then viewed as two groups of 32 (JetMoE's
    ``attn_output.view(*input_shape, self.top_k, -1)``)."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(64, 192)

    def forward(self, x):
        batch, length, _ = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, 4, 16).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out = out.transpose(1, 2).contiguous()
        return out.view(batch, length, 2, 32).sum(2)


def test_heads_viewed_in_other_groups_after_attention():
    model = HeadsRegrouped().eval()
    compiled = anyshape.compile(model, (torch.randn(2, 16, 64),),
                                dynamic_shapes=({0: Dim("batch"), 1: Dim("seq")},))
    for batch, length in [(1, 1), (1, 7), (3, 17), (2, 65)]:
        x = torch.randn(batch, length, 64)
        with torch.no_grad():
            expected = model(x)
        torch.testing.assert_close(compiled(x), expected, rtol=1e-5, atol=1e-5)
