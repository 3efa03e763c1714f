"""A failing stage raises CompileError with a reproducer that replays the failure."""

import shlex
import subprocess
import warnings
from pathlib import Path

import pytest
import torch
from torch.export import Dim

import anyshape
import anyshape.frontend.importer


class TanhNeg(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(-x)


class Erfinv(torch.nn.Module):
    def forward(self, x):
        return torch.special.erfinv(x)  # IREE 3.13 cannot lower aten.erfinv


def _replay(command: str) -> subprocess.CompletedProcess:
    argv = shlex.split(command)
    argv[0] = str(Path(__import__("sys").executable).parent / argv[0])
    return subprocess.run(argv, capture_output=True, text=True)


def test_pass_failure_names_stage_and_replays(test_passes, tmp_path):
    element = "anyshape-test-fail-on{op-name=torch.aten.tanh}"
    with pytest.raises(anyshape.CompileError) as info:
        anyshape.compile(TanhNeg(), (torch.randn(3),), passes=[element],
                         dynamic_shapes={"x": {0: Dim("n", max=16)}}, dump_ir_dir=tmp_path)
    error = info.value
    assert error.stage == "anyshape-test-fail-on"
    assert "test_compile_errors.py:" in error.diagnostic  # the model's source line
    assert "found torch.aten.tanh" in error.diagnostic
    assert Path(error.reproducer).parent == tmp_path and Path(error.reproducer).is_file()
    assert error.command.startswith("anyshape-opt ")
    plugin = Path(__file__).parent.parent / "lib" / "test_passes.py"
    replay = _replay(f"{error.command} --load-passes={plugin}")
    assert replay.returncode == 1
    assert "error: anyshape-test-fail-on: found torch.aten.tanh" in replay.stderr


def test_iree_failure_names_stage_and_replays():
    """Also without data tiling (tried by default after it fails): the error is
    the one without it, and no data-tiling fallback is announced."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(anyshape.CompileError) as info:
            anyshape.compile(Erfinv(), (torch.rand(4),), passes=[])
    assert not [w for w in caught if issubclass(w.category, anyshape.DataTilingFallback)]
    error = info.value
    assert "--iree-global-opt-data-tiling" not in error.command
    assert error.stage == "iree-compile"
    assert "test_compile_errors.py:" in error.diagnostic
    assert "torch.aten.erfinv" in error.diagnostic
    assert error.command.startswith("iree-compile ") and "--iree-input-type=torch" in error.command
    replay = _replay(error.command)
    assert replay.returncode != 0 and "torch.aten.erfinv" in replay.stderr


class HalfHistogram(torch.nn.Module):
    def forward(self, values):
        # anyshape decomposes histc in float32 and float64 only, and torch-mlir
        # has no lowering for it.
        return torch.histc(values.half(), bins=4, min=0, max=3)


def test_op_without_a_lowering_is_named_with_the_way_around():
    """IREE says "failed to legalize operation 'torch.operator'"; the error says
    which op torch-mlir cannot lower, where, and for histc what to do."""
    with pytest.raises(anyshape.CompileError) as info:
        anyshape.compile(HalfHistogram(), (torch.tensor([0.0, 3.0, 1.0]),),
                         dynamic_shapes={"values": {0: Dim("n")}})
    diagnostic = info.value.diagnostic
    assert info.value.stage == "iree-compile"
    assert f"{__file__}:" in diagnostic
    assert "torch-mlir has no lowering for aten.histc" in diagnostic, diagnostic
    assert "compute it in float32" in diagnostic


class MaskFirstExpert(torch.nn.Module):
    def forward(self, scores, experts):
        return torch.scatter(scores, -1, experts, float("-inf"))  # PhiMoE's router


def test_compiler_crash_names_the_pass_and_the_op(monkeypatch):
    """iree-compile dies with a stack dump, not an error line: the message said
    only "Please report issues to ...". It names the pass and the op being
    rewritten. The crash is real: torch-mlir's scatter lowering at a negative
    dim, with anyshape's rewrite of it (nonnegative_dims) turned off; when this
    stops crashing, that rewrite can go."""
    from anyshape.frontend import graph_fixes

    monkeypatch.setattr(graph_fixes, "GRAPH_FIXES", tuple(
        fix for fix in graph_fixes.GRAPH_FIXES if fix[0] != "nonnegative_dims"))
    with pytest.raises(anyshape.CompileError) as info:
        anyshape.compile(MaskFirstExpert(), (torch.randn(3, 4), torch.tensor([[1], [0], [3]])),
                         dynamic_shapes=({0: Dim("rows")}, {0: Dim("rows")}), cache=False)
    assert info.value.stage == "iree-compile"
    assert info.value.diagnostic == (
        "iree-compile crashed in ConvertTorchToTMTensor while rewriting AtenScatterSrcOp (a "
        "bug of IREE or torch-mlir, not of the model; the stack dump is in the error's "
        "details)"), info.value.diagnostic
    assert "Stack dump:" in info.value.details


class ComplexScale(torch.nn.Module):
    def forward(self, x):
        return torch.view_as_real(x.to(torch.complex64) * 1j)


def test_import_failure_names_the_op_and_line():
    """torch-mlir's importer has no literal for a complex scalar; it said only
    "'NoneType' object is not callable"."""
    with pytest.raises(anyshape.CompileError) as info:
        anyshape.compile(ComplexScale(), (torch.randn(3),))
    assert info.value.stage == "import"
    assert info.value.diagnostic.startswith(
        "torch-mlir's FX importer cannot import call_function aten.mul.Tensor at "
        f"{__file__}:")
    assert "(TypeError: 'NoneType' object is not callable)" in info.value.diagnostic


class WeightedBags(torch.nn.Module):
    def forward(self, table, ids, weights):
        return torch.nn.functional.embedding_bag(ids, table, mode="sum",
                                                 per_sample_weights=weights)


def test_op_torch_mlir_lowers_wrong_is_refused_by_name():
    """torch-mlir's embedding_bag ignored the weights: a plain sum per bag."""
    args = (torch.randn(10, 4), torch.randint(0, 10, (3, 5)), torch.rand(3, 5))
    with pytest.raises(anyshape.CompileError) as info:
        anyshape.compile(WeightedBags(), args)
    assert info.value.stage == "import"
    assert info.value.diagnostic.startswith("embedding_bag with per_sample_weights: "
                                            "torch-mlir's lowering ignores the weights")
    assert f"{__file__}:" in info.value.diagnostic


def test_unknown_pass_fails_before_export():
    with pytest.raises(KeyError, match="unknown anyshape pass 'anyshape-nope'"):
        anyshape.compile(TanhNeg(), (torch.randn(3),), passes=["anyshape-nope"])


def test_bad_pass_option(test_passes):
    with pytest.raises(ValueError, match="pass 'anyshape-test-fail-on' has no option 'colour'"):
        anyshape.compile(TanhNeg(), (torch.randn(3),), passes=["anyshape-test-fail-on{colour=red}"])


def test_bad_target():
    with pytest.raises(ValueError, match="target: expected 'cpu' or 'cuda', got 'tpu'"):
        anyshape.compile(TanhNeg(), (torch.randn(3),), target="tpu")
    with pytest.raises(ValueError, match="cuda_arch: expected an NVIDIA architecture"):
        anyshape.compile(TanhNeg(), (torch.randn(3),), target="cuda",
                         backend=anyshape.BackendOptions(cuda_arch="gfx90a"))


def test_passes_run_as_stages(test_passes, tmp_path):
    compiled = anyshape.compile(TanhNeg(), (torch.randn(3),), dump_ir_dir=tmp_path,
                                passes=["anyshape-test-fold-double-neg"],
                                dynamic_shapes={"x": {0: Dim("n", max=16)}})
    assert compiled.stages == ["import", "anyshape-test-fold-double-neg", "iree-input"]
    assert sorted(p.name for p in tmp_path.glob("*.mlir")) == [
        "00-import.mlir", "01-anyshape-test-fold-double-neg.mlir", "02-iree-input.mlir"]
    x = torch.randn(11)
    torch.testing.assert_close(compiled(x), torch.tanh(-x))
