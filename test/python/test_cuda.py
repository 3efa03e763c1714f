"""target="cuda": compiling needs no GPU; running skips cleanly where none is present."""

import pytest
import torch
from models import roberta_inputs, small_roberta
from torch.export import Dim

import anyshape
from anyshape.runtime import cuda_available


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
