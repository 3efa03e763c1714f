# RUN: %PYTHON %s | FileCheck %s

# Indices of embeddings and gathers: the runtime checks inputs and sizes before
# the call (anyshape/frontend/indexed_reads.py), so the module has no check. A
# sequence-classification head's argmax and paired read
# (graph_fixes/argmax_as_reductions.py, paired_indices.py).

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

import torch  # noqa: E402
from imported import show  # noqa: E402
from torch.export import Dim  # noqa: E402


class TokensAndPositions(torch.nn.Module):
    """GPT-2's embeddings: token ids as given, positions from arange(seq)."""

    def __init__(self):
        super().__init__()
        self.tokens, self.positions = torch.nn.Embedding(50, 4), torch.nn.Embedding(16, 4)

    def forward(self, ids):
        return self.tokens(ids) + self.positions(torch.arange(ids.shape[1]))


# /// Token ids straight from an input and positions from the sizes are
# /// checked by the runtime before the call: no assertion in the module.
# CHECK-LABEL: // CASE: negative_tokens_and_positions
# CHECK-NOT: torch.aten._assert_scalar
# CHECK: torch.aten.embedding
# CHECK-NOT: torch.aten._assert_scalar
# CHECK: torch.aten.embedding
# CHECK-NOT: torch.aten._assert_scalar
show("negative_tokens_and_positions", TokensAndPositions(), (torch.zeros(2, 5, dtype=torch.long),),
     ({0: Dim("batch"), 1: Dim("seq")},))
class PositionsFromABuffer(torch.nn.Module):
    """BERT's positions: a slice of its arange buffer."""

    def __init__(self):
        super().__init__()
        self.positions = torch.nn.Embedding(16, 4)
        self.register_buffer("position_ids", torch.arange(16).expand(1, -1), persistent=False)

    def forward(self, ids):
        return self.positions(self.position_ids[:, :ids.shape[1]]) + ids[..., None]


# /// Some values of a constant, all within the table: nothing to check (past
# /// 16 the slice is shorter than ids, and the add refuses the sizes).
# CHECK-LABEL: // CASE: negative_positions_from_a_buffer
# CHECK-NOT: torch.aten._assert_scalar
# CHECK: torch.aten.embedding
# CHECK-NOT: torch.aten._assert_scalar
show("negative_positions_from_a_buffer", PositionsFromABuffer(), (torch.zeros(2, 5),),
     ({0: Dim("batch"), 1: Dim("seq", max=16)},))
print("// CASE: end")


class LastTokenOfEachRow(torch.nn.Module):
    """A decoder's sequence-classification head: the last real token's logits."""

    def forward(self, logits, mask):
        positions = torch.arange(mask.shape[-1]) * mask
        return logits[torch.arange(logits.shape[0]), positions.argmax(-1)]


# /// argmax over a dynamic dim is a max, a compare and a min of positions;
# /// x[arange(dim0), argmax] reads rows r * dim1 + c of x flattened (all in range).
# CHECK-LABEL: // CASE: last_token_of_each_row
# CHECK-NOT: torch.aten.argmax
# CHECK: %[[MAX:.+]] = torch.aten.amax %[[VALUES:.+]], %{{.+}}, %true
# CHECK: torch.aten.eq.Tensor %[[VALUES]], %[[MAX]]
# CHECK: torch.aten.where.ScalarOther
# CHECK: %[[LAST:.+]] = torch.aten.amin
# CHECK: %[[ROW:.+]] = torch.aten.add.Tensor %{{.+}}, %[[LAST]]
# CHECK: %[[FLAT:.+]] = torch.aten.reshape %arg0
# CHECK: torch.aten.index_select %[[FLAT]], %{{.+}}, %[[ROW]]
# CHECK-NOT: torch.aten.index.Tensor
show("last_token_of_each_row", LastTokenOfEachRow(),
     (torch.randn(2, 5, 3), torch.ones(2, 5, dtype=torch.long)),
     ({0: Dim("batch"), 1: Dim("seq")}, {0: Dim("batch"), 1: Dim("seq")}))
