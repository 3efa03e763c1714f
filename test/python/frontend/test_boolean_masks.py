"""Rows read by a boolean mask at dynamic sizes, against eager
(graph_fixes/boolean_mask_reads.py).

Written as XMOD's per-language adapters write them: the rows of each
language selected with ``hidden[lang_ids == i]``, adapted, and written back
with ``new[lang_ids == i] = ...``, at batches where a language has every
row, some rows and none.
"""

import torch
from torch.export import Dim

import anyshape


class PerLanguageAdapters(torch.nn.Module):
    def __init__(self, languages: int = 2, width: int = 8):
        super().__init__()
        self.adapters = torch.nn.ModuleList(torch.nn.Linear(width, width)
                                            for _ in range(languages))

    def forward(self, hidden, lang_ids):
        new = torch.zeros_like(hidden)
        for language, adapter in enumerate(self.adapters):
            rows = lang_ids == language
            new[rows] = adapter(hidden[rows])
        return new + hidden


class ColumnsByMask(torch.nn.Module):
    def forward(self, x, keep):
        return x[:, keep].sum(1)


def test_rows_selected_by_a_mask_as_eager():
    """torch-mlir lowered a boolean index to a comparison of i1 with i64, which
    IREE rejected ("'arith.cmpi' op requires all operands to have the same type")."""
    model = PerLanguageAdapters().eval()
    compiled = anyshape.compile(model, (torch.randn(2, 16, 8), torch.tensor([0, 1])),
                                dynamic_shapes=({0: Dim("batch"), 1: Dim("seq")},
                                                {0: Dim("batch")}))
    for lang_ids, length in [([0], 1), ([1, 1, 1], 7), ([0, 1, 0], 17)]:
        ids = torch.tensor(lang_ids)
        hidden = torch.randn(len(lang_ids), length, 8)
        with torch.no_grad():
            expected = model(hidden, ids)
        torch.testing.assert_close(compiled(hidden, ids), expected, rtol=1e-5, atol=1e-5)


def test_a_mask_over_a_middle_dim_as_eager():
    model = ColumnsByMask().eval()
    cols = Dim("cols")
    compiled = anyshape.compile(model, (torch.randn(3, 9, 4), torch.rand(9) > 0.5),
                                dynamic_shapes=({1: cols}, {0: cols}))
    for width in (1, 7, 33):
        x, keep = torch.randn(3, width, 4), torch.rand(width) > 0.5
        torch.testing.assert_close(compiled(x, keep), model(x, keep), rtol=1e-5, atol=1e-5)


class SelectPositive(torch.nn.Module):
    def forward(self, x):
        return torch.masked_select(x, x > 0) * 2


def test_masked_select_as_eager():
    """torch-mlir has no lowering of masked_select ("failed to legalize")."""
    model = SelectPositive().eval()
    compiled = anyshape.compile(model, (torch.randn(4, 9),),
                                dynamic_shapes=({0: Dim("rows"), 1: Dim("cols")},))
    for shape in [(1, 1), (3, 7), (2, 33)]:
        x = torch.randn(shape)
        torch.testing.assert_close(compiled(x), model(x))
    x = -torch.ones(3, 5)  # nothing selected
    assert compiled(x).shape == (0,)
