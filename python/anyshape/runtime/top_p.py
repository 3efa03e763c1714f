"""HF's top-p warper, with HF's results, without sorting the whole vocabulary.

HF's ``TopPLogitsWarper`` sorts every row's scores, the vocabulary's width
(50257 for GPT-2), each step: a millisecond on the host, most of a sampling
step's processor time (bench/host_overhead.py). It runs after top-k (whose
default, 50, HF's generation config applies whenever it samples), so all but
a few scores of a row are already -inf. ``SparseTopP`` sorts only the others.

The result is HF's, bit for bit: HF's sorted row is the -inf scores and then
the rest in ascending order, so ``SparseTopP`` builds that same row (the
vocabulary's width, the -inf first) and takes its softmax and cumulative sum
with HF's own calls; the reductions then see the same values in the same
places. Only the order of equal scores could differ (HF's sort is not
stable), so a row whose kept scores repeat a value, or that holds a NaN or
+inf, or that is not mostly -inf, or a warper whose filter value is not
-inf (which would overwrite the -inf scores), is left to HF's own code.
"""

from __future__ import annotations

import functools

import torch

# A row is sorted sparsely when at most this share of it is not -inf.
_SPARSE_SHARE = 1 / 16


@functools.cache
def _sparse_top_p_class():
    from transformers.generation.logits_process import TopPLogitsWarper

    class SparseTopP(TopPLogitsWarper):
        """``TopPLogitsWarper`` that sorts only the scores that are not -inf."""

        def __call__(self, input_ids, scores):
            if self.filter_value != -float("inf") or scores.ndim != 2:
                return super().__call__(input_ids, scores)
            rows = [self._sparse_row(row) for row in scores]
            if any(row is None for row in rows):
                return super().__call__(input_ids, scores)
            return torch.stack(rows)

        def _sparse_row(self, row: torch.Tensor) -> torch.Tensor | None:
            kept = torch.nonzero(row != -float("inf")).flatten()
            if len(kept) > _SPARSE_SHARE * row.shape[0]:
                return None
            values = row[kept]
            if not bool(torch.isfinite(values).all()) or len(torch.unique(values)) != len(values):
                return None
            ascending, order = torch.sort(values)
            sorted_row = torch.full_like(row, -float("inf"))
            sorted_row[row.shape[0] - len(kept):] = ascending
            cumulative = sorted_row[None].softmax(dim=-1).cumsum(dim=-1)[0]
            remove = cumulative <= (1 - self.top_p)
            remove[-self.min_tokens_to_keep:] = False
            out = row.clone()
            out[kept[order][remove[row.shape[0] - len(kept):]]] = self.filter_value
            return out

    return SparseTopP


def with_sparse_top_p(processors):
    """``processors`` (a ``LogitsProcessorList``) with each of HF's own top-p
    warpers replaced by a ``SparseTopP`` of the same settings."""
    from transformers.generation.logits_process import TopPLogitsWarper

    sparse = _sparse_top_p_class()
    for index, processor in enumerate(processors):
        if type(processor) is TopPLogitsWarper:
            processors[index] = sparse(processor.top_p, processor.filter_value,
                                       processor.min_tokens_to_keep)
    return processors
