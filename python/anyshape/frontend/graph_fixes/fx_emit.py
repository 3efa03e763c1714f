"""Building aten ops into an exported FX graph before torch-mlir imports it.

The rewrites that run on the exported graph (``edge_value_math``,
``stable_logcumsumexp``, ``checked_det``, ``rank0_softmax``) insert ops the
importer must type: each new node gets the fake value its op computes on
its inputs' fake values (symbolic sizes included), and the source location
of the op it stands for, so that diagnostics name the user's line.
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node
from torch.fx.node import map_arg

# Fake values the importer reads (it takes tensor_meta first): not copied.
_TYPE_KEYS = ("val", "tensor_meta")


class Emitter:
    """Inserts ops before ``before``, located at ``located_at`` (default: ``before``)."""

    def __init__(self, graph: Graph, before: Node, located_at: Node | None = None):
        self.graph, self.before = graph, before
        self.located_at = located_at or before
        self._fake_mode = None

    @property
    def fake_mode(self):
        if self._fake_mode is None:
            from torch._guards import detect_fake_mode

            self._fake_mode = detect_fake_mode([n.meta.get("val") for n in self.graph.nodes])
        return self._fake_mode

    def untyped(self, op, *args, value=None, **kwargs) -> Node:
        """An op whose fake run would guard on the data (``Bool.Tensor``,
        ``_assert_scalar``): ``value`` stands in for its result's type."""
        with self.graph.inserting_before(self.before):
            node = self.graph.call_function(op, args, kwargs)
        node.meta.update({k: v for k, v in self.located_at.meta.items() if k not in _TYPE_KEYS})
        node.meta["val"] = value
        return node

    def __call__(self, op, *args, **kwargs) -> Node:
        node = self.untyped(op, *args, **kwargs)
        values = map_arg(args, lambda a: a.meta["val"])
        with self.fake_mode:
            node.meta["val"] = op(*values, **kwargs)
        return node
