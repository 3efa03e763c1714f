"""Repeated workload sizes made distinct (iree/distinct_workloads.py): exact
results, and the call left as one execution region of IREE's streams."""

from __future__ import annotations

import subprocess

import pytest
import torch
from torch.export import Dim

import anyshape
from anyshape.iree.workarounds import rewrite_flow
from anyshape.mlir import iree_tool


class ScoresBlock(torch.nn.Module):
    """Products and a [B, L, L] softmax: dispatches whose workloads repeat L."""

    def __init__(self):
        super().__init__()
        self.query = torch.nn.Linear(32, 32)
        self.out = torch.nn.Linear(32, 32)

    def forward(self, x):
        scores = torch.softmax(self.query(x) @ x.transpose(1, 2), dim=-1)
        return self.out(scores @ x) + x


@pytest.fixture(scope="module")
def compiled():
    torch.manual_seed(0)
    model = ScoresBlock().eval()
    dims = {"x": {0: Dim("batch", max=8), 1: Dim("seq", max=512)}}
    module = anyshape.compile(model, (torch.randn(2, 9, 32),), dynamic_shapes=dims)
    return model, module


@pytest.mark.parametrize("batch, length", [(1, 1), (1, 33), (2, 65), (3, 17)])
def test_matches_float64_with_the_sizes_moved_up(compiled, batch, length):
    """The sizes' arithmetic moved ahead of the dispatches still sizes them:
    L = 33 and 65 span several tiles while B stays small."""
    model, module = compiled
    x = torch.randn(batch, length, 32)
    with torch.no_grad():
        expected = model.double()(x.double())
        model.float()
    torch.testing.assert_close(module(x).double(), expected, atol=1e-4, rtol=1e-4)


def _execution_regions_of_main(stream_ir: str) -> int:
    body = stream_ir.split("util.func public @main$async", 1)[1]
    body = body.split("util.func public @main(", 1)[0]
    return body.count("stream.cmd.execute")


def test_the_call_stays_one_execution_region(compiled, tmp_path):
    """The copies sit ahead of every dispatch: a barrier between two dispatches
    would end IREE's execution region there (roberta-base ran as 34 command
    buffers a call with a barrier before each dispatch)."""
    _, module = compiled
    source = tmp_path / "input.mlir"
    source.write_text(module.ir("iree-input"))
    flow, untied, stream = (tmp_path / name for name in ("flow.mlirbc", "untied.mlirbc",
                                                          "stream.mlir"))
    compile_tool = iree_tool("iree-compile")
    subprocess.run([compile_tool, *module.iree_flags, "--compile-to=flow",
                    "--emit-mlir-bytecode", str(source), "-o", str(flow)], check=True)
    rewritten = rewrite_flow(flow, untied, f64_math_in_f32=True)
    assert rewritten.untied >= 2  # the softmax's and a product's repeated L at least
    subprocess.run([compile_tool, *module.iree_flags, "--compile-from=flow",
                    "--compile-to=stream", str(untied), "-o", str(stream)], check=True)
    text = stream.read_text()
    assert _execution_regions_of_main(text) == 1
    assert "util.optimization_barrier" in text  # the copies survive to the stream phase
