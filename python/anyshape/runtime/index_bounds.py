"""Indices into a model's tables, checked before a call as eager checks them.

A compiled module reads past a table where eager raises ``IndexError``
(``frontend/indexed_reads.py`` says why). The indices that come straight from
an input, and those that only the input sizes decide, are checked here on
the host, with an error that names the argument: the former by their values,
the latter by a condition on the sizes. Indices the module computes from the
data (RoBERTa's positions, counted from the mask) are checked by a condition on
the sizes that bounds them (``from_data``): it may refuse a batch eager accepts,
and says so. Needs neither torch nor the compilers.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from anyshape.runtime import size_conditions


@dataclasses.dataclass
class IndexBound:
    table: str                      # what the indices select from, for messages
    rows: int                       # valid indices: [low, rows)
    low: int = 0
    input: str | None = None        # the input whose values are the indices
    condition: str | None = None    # or: the size condition that keeps them in range
    from_data: bool = False         # the condition bounds indices computed from the data

    def describe(self) -> str:
        return f"indices into {self.table}"


def check_index_values(bounds: list[IndexBound], names: list[str], arrays: list[np.ndarray]) -> None:
    for bound in bounds:
        if bound.input is None or bound.input not in names:
            continue
        array = arrays[names.index(bound.input)]
        if array.size == 0:
            continue
        low, high = int(array.min()), int(array.max())
        if low < bound.low or high >= bound.rows:
            raise ValueError(
                f"argument '{bound.input}': expected values in [{bound.low}, {bound.rows}) "
                f"({bound.describe()}; eager raises IndexError), got values from {low} to "
                f"{high}")


def check_index_sizes(bounds: list[IndexBound], values: dict[str, int], sizes, labels) -> None:
    """``sizes(condition)``: the arguments' sizes the condition reads, for the message."""
    for bound in bounds:
        if bound.condition is None:
            continue
        if size_conditions.holds(bound.condition, values) is False:
            why = ("computed in the model from the inputs' values, which at these sizes can "
                   "fall outside it; eager raises IndexError where they do, and the compiled "
                   "module cannot check them, so it refuses these sizes") if bound.from_data \
                else "which grow with these sizes; eager raises IndexError past it"
            raise ValueError(
                f"arguments: expected sizes with "
                f"{size_conditions.readable(bound.condition, labels)} ({bound.describe()}, "
                f"{why}), got {sizes(bound.condition)}")
