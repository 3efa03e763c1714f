"""target="cuda": compiling needs no GPU; running skips cleanly where none is present."""

import json

import pytest
import torch
from models import roberta_inputs, small_roberta
from torch.export import Dim

import anyshape
from anyshape.runtime.compiled_module import cuda_available


@pytest.fixture(scope="module")
def cuda_roberta(tmp_path_factory):
    model = small_roberta(layers=1, hidden=64, max_positions=34)
    ids, mask = roberta_inputs(1, 8)
    seq = Dim("seq", min=1, max=32)
    compiled = anyshape.compile(model, (ids,), {"attention_mask": mask}, target="cuda",
                                dynamic_shapes={"input_ids": {1: seq}, "attention_mask": {1: seq}})
    return model, compiled


def test_cuda_compiles_without_gpu(cuda_roberta, tmp_path):
    _, compiled = cuda_roberta
    assert compiled.target.name == "cuda" and compiled.target.cuda_arch == "sm_80"
    assert "--iree-cuda-target=sm_80" in compiled.iree_flags
    assert len(compiled.vmfb) > 0
    saved = anyshape.load(compiled.save(tmp_path))
    assert saved.target.driver == "cuda"


@pytest.mark.skipif(not cuda_available(), reason="no CUDA device for IREE's cuda driver")
def test_cuda_runs_and_matches_eager(cuda_roberta):
    model, compiled = cuda_roberta
    for length in (1, 9, 32):
        ids, mask = roberta_inputs(1, length, pad_from=length // 2 + 1)
        with torch.no_grad():
            expected = model(ids, attention_mask=mask).logits
        torch.testing.assert_close(compiled(ids, attention_mask=mask).logits, expected,
                                   atol=1e-4, rtol=0)


@pytest.mark.skipif(cuda_available(), reason="checks the no-GPU error")
def test_cuda_run_without_gpu_is_a_clear_error(cuda_roberta):
    _, compiled = cuda_roberta
    ids, mask = roberta_inputs(1, 4)
    with pytest.raises(RuntimeError, match="compiled for CUDA, and no CUDA device is available"):
        compiled(ids, attention_mask=mask)


def test_load_device_must_match_the_target(cuda_roberta, tmp_path):
    _, compiled = cuda_roberta
    compiled.save(tmp_path / "cuda")
    assert anyshape.load(tmp_path / "cuda", device="cuda:1").cuda_ordinal == 1
    assert anyshape.load(tmp_path / "cuda", device="cuda").cuda_ordinal is None
    with pytest.raises(ValueError, match="was compiled for cuda, so it runs on cuda, not 'cpu'"):
        anyshape.load(tmp_path / "cuda", device="cpu")
    for bad in ("gpu", "cuda:x", "cpu:0"):
        with pytest.raises(ValueError, match=f"device: expected 'cpu', 'cuda' or 'cuda:N', got '{bad}'"):
            anyshape.load(tmp_path / "cuda", device=bad)


def test_cuda_float16_compiles_without_gpu():
    model = small_roberta(layers=1, hidden=64, max_positions=34)
    ids, mask = roberta_inputs(1, 8)
    seq = Dim("seq", min=1, max=32)
    compiled = anyshape.compile(model, (ids,), {"attention_mask": mask}, target="cuda",
                                dtype=torch.float16,
                                dynamic_shapes={"input_ids": {1: seq}, "attention_mask": {1: seq}},
                                backend=anyshape.BackendOptions(cuda_arch="sm_86"))
    assert "--iree-cuda-target=sm_86" in compiled.iree_flags
    assert compiled.signature.outputs[0].dtype == "float16"


@pytest.mark.skipif(not (cuda_available() and torch.cuda.is_available()),
                    reason="needs a CUDA device for IREE and for torch")
def test_cuda_outputs_on_the_inputs_device(cuda_roberta):
    model, compiled = cuda_roberta
    ids, mask = roberta_inputs(1, 12, pad_from=7)
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).logits
    got = compiled(ids.cuda(), attention_mask=mask.cuda()).logits
    assert got.device.type == "cuda"
    torch.testing.assert_close(got.cpu(), expected, atol=1e-4, rtol=0)


_ADD = """func.func @add(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = arith.addf %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}"""


def _iree_builds_for(arch: str) -> bool:
    from iree.compiler.tools import CompilerToolError, compile_str

    try:
        compile_str(_ADD, input_type="none", extra_args=[
            "--iree-hal-target-device=cuda", f"--iree-cuda-target={arch}"])
    except CompilerToolError as error:
        assert "missing GPU target" in str(error), str(error)[:500]
        return False
    return True


def test_iree_knows_exactly_the_listed_cuda_archs():
    """/// The substitution table is IREE's own: a new IREE that learns sm_90 fails here."""
    from anyshape.iree.flags import IREE_CUDA_ARCHS

    assert [arch for arch in IREE_CUDA_ARCHS if not _iree_builds_for(arch)] == []
    others = ["sm_53", "sm_88", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_103", "sm_110"]
    assert [arch for arch in others if _iree_builds_for(arch)] == []


def test_unknown_gpu_gets_the_newest_older_arch(tmp_path):
    from anyshape.iree.flags import iree_cuda_arch, make_target

    assert [iree_cuda_arch(a) for a in ("sm_90", "sm_90a", "sm_100", "sm_89", "sm_121")] == \
        ["sm_89", "sm_89", "sm_89", "sm_89", "sm_121"]
    with pytest.raises(ValueError, match="cuda_arch: IREE 3.13 builds for sm_60 and newer .*"
                                         "got 'sm_52'"):
        make_target("cuda", "sm_52")
    model = small_roberta(layers=1, hidden=64, max_positions=34)
    ids, mask = roberta_inputs(1, 8)
    seq = Dim("seq", min=1, max=32)
    substituted = "no GPU target for sm_90, so the module is built for sm_89"
    with pytest.warns(anyshape.CudaArchSubstituted, match=substituted):
        compiled = anyshape.compile(model, (ids,), {"attention_mask": mask}, target="cuda",
                                    dynamic_shapes={
                                        "input_ids": {1: seq}, "attention_mask": {1: seq}},
                                    backend=anyshape.BackendOptions(cuda_arch="sm_90"))
    assert "--iree-cuda-target=sm_89" in compiled.iree_flags
    loaded = anyshape.load(compiled.save(tmp_path))
    assert (loaded.target.cuda_arch, loaded.target.requested_cuda_arch) == ("sm_89", "sm_90")
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["target"]["requested_cuda_arch"] == "sm_90"

