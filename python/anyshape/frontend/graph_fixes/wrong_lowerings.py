"""Ops torch-mlir lowers to wrong values: refused by name, never compiled.

Each was found by the OpInfo floor (``test/opinfo/``) giving a wrong answer
where eager and the op's own definition agree, with static shapes as well as
dynamic ones; a module that uses one gets a ``CompileError`` of stage
``import`` saying what is wrong and what to write instead. Remove an entry
when torch-mlir lowers the op right (its test then fails).
"""

from __future__ import annotations

import re

import torch
from torch.fx import Graph, Node

from anyshape.errors import CompileError
from anyshape.stages import Workaround


def _embedding_bag_with_weights(node: Node) -> str | None:
    args = dict(zip(("weight", "indices", "offsets", "scale_grad_by_freq", "mode", "sparse",
                     "per_sample_weights"), node.args))
    args.update(node.kwargs)
    if args.get("per_sample_weights") is None:
        return None
    return ("embedding_bag with per_sample_weights: torch-mlir's lowering ignores the weights "
            "(every bag is a plain sum); write the weighted sum out, "
            "(F.embedding(indices, weight) * per_sample_weights[..., None]).sum(1)")


def _integer_scatter_mean(node: Node) -> str | None:
    reduce = node.args[4] if len(node.args) > 4 else node.kwargs.get("reduce")
    val = node.meta.get("val")
    if reduce != "mean" or not isinstance(val, torch.Tensor) or val.is_floating_point():
        return None
    return ("scatter_reduce(reduce='mean') of integers: torch-mlir's lowering rounds the mean "
            "toward zero, eager toward -inf; compute the mean in a floating dtype and floor it")


_WRONG = {
    torch.ops.aten.embedding_bag.padding_idx: _embedding_bag_with_weights,
    torch.ops.aten._embedding_bag.default: _embedding_bag_with_weights,
    torch.ops.aten._embedding_bag_forward_only.default: _embedding_bag_with_weights,
    torch.ops.aten.scatter_reduce.two: _integer_scatter_mean,
}


def refuse_wrong_lowerings(graph: Graph) -> None:
    for node in graph.nodes:
        check = _WRONG.get(node.target) if node.op == "call_function" else None
        problem = check(node) if check is not None else None
        if problem:
            frames = re.findall(r'File "([^"]+)", line (\d+)', node.meta.get("stack_trace") or "")
            at = f" at {frames[-1][0]}:{frames[-1][1]}" if frames else ""
            raise CompileError("import", f"{problem}{at}", None, None)


# Workarounds of upstream bugs here (docs/workarounds.md, anyshape/stages.py).
WORKAROUNDS = (
    Workaround(
        name='refuse_embedding_bag_with_weights', stage='import',
        where='refuse_wrong_lowerings (_embedding_bag_with_weights)',
        upstream="torch-mlir's embedding_bag lowering ignores per_sample_weights (every bag is a "
                 'plain sum); refused with a CompileError of stage import naming the way around.',
        guard=('test/python/test_compile_errors.py::test_op_torch_mlir_lowers_wrong_is_refused_by_name',
               'test/python/test_opinfo_floor.py::test_floor[nn.functional.embedding_bag-float32-3]'),
        remove_when='when torch-mlir lowers the op right (its test then fails)'),
    Workaround(
        name='refuse_integer_scatter_mean', stage='import',
        where='refuse_wrong_lowerings (_integer_scatter_mean)',
        upstream="torch-mlir's scatter_reduce(reduce='mean') lowering of integers rounds the mean"
                 ' toward zero, eager toward -inf; refused by name.',
        guard='test/python/test_opinfo_floor.py::test_floor[scatter_reduce.mean-int64-1]',
        remove_when='when torch-mlir lowers the op right (its test then fails)'),
)
