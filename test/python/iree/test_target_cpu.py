"""Which CPU a CPU artifact is for (``target_cpu``), recorded in the manifest, and
a host without its features refusing it by name instead of dying with an
illegal instruction (issue 36; ``anyshape/iree/cpu.py``)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from models import shape_queries_case

import anyshape
from anyshape.iree import cpu

BIN = Path(sys.executable).parent
# CPUs LLVM knows, from the newest x86 extensions down: the test builds for the
# first one whose instruction-set features this host does not all have.
CANDIDATES = ["diamondrapids", "graniterapids", "sapphirerapids", "znver5", "znver4",
              "skylake-avx512", "x86-64-v4", "x86-64-v3"]


def _lacking_cpu():
    for name in CANDIDATES:
        target = cpu.resolve(name)
        missing = cpu.missing_on_this_host(target.arch, target.features)
        if missing:
            return name, missing
    pytest.skip(f"this host has every feature of {', '.join(CANDIDATES)}")


def test_host_target_resolves_to_a_cpu_this_host_runs():
    host = cpu.resolve("host")
    assert host.name != "host" and host.features
    assert cpu.missing_on_this_host(host.arch, host.features) == []


def test_artifact_for_a_cpu_this_host_lacks_is_refused_by_name(shape_queries, tmp_path):
    name, missing = _lacking_cpu()
    model, _ = shape_queries
    _, args, dynamic = shape_queries_case()
    compiled = anyshape.compile(model, args, dynamic_shapes=dynamic,
                                backend=anyshape.BackendOptions(target_cpu=name))
    assert compiled.cpu["requested"] == name and compiled.cpu["name"] == name
    assert f"--iree-llvmcpu-target-cpu={name}" in compiled.iree_flags
    compiled.save(tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["cpu"]["name"] == name and set(missing) <= set(manifest["cpu"]["features"])
    expected = f"built for CPU '{name}' (target_cpu='{name}'), and this host lacks " \
               f"{', '.join(missing)}: it would die with an illegal instruction"
    with pytest.raises(RuntimeError, match="target_cpu='host'") as loading:
        anyshape.load(tmp_path)
    assert expected in str(loading.value)
    assert str(tmp_path) in str(loading.value)
    with pytest.raises(RuntimeError) as calling:  # the module in hand is refused as well
        compiled(*args)
    assert expected in str(calling.value)


@pytest.mark.builds_in_subprocess
def test_cli_builds_for_a_named_level_and_says_so(tmp_path):
    host = cpu.resolve("host")
    if cpu.missing_on_this_host(host.arch, cpu.resolve("x86-64-v3").features):
        pytest.skip("this host is below x86-64-v3")
    model, args, dynamic = shape_queries_case()
    (tmp_path / "model.mlir").write_text(str(anyshape.import_torch(model, args,
                                                                   dynamic_shapes=dynamic)))
    out = tmp_path / "art"
    result = subprocess.run([str(BIN / "anyshape-compile"), str(tmp_path / "model.mlir"),
                             "-o", str(out), "--target-cpu", "x86-64-v3"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "runs on: x86_64 CPU 'x86-64-v3' (--target-cpu x86-64-v3; avx2;" in result.stdout
    compiled = anyshape.load(out)
    assert compiled.cpu["requested"] == "x86-64-v3" and "avx512f" not in compiled.cpu["features"]
    x = torch.randn(3, 17, 8)
    torch.testing.assert_close(compiled(x), model(x).detach(), atol=1e-5, rtol=0)


def test_unknown_cpu_is_refused_before_export():
    model, args, dynamic = shape_queries_case()
    with pytest.raises(ValueError, match=r"target_cpu: expected 'host' or a CPU LLVM knows, "
                                         r"got 'znver33' \(LLVM knows: .*znver3"):
        anyshape.compile(model, args, dynamic_shapes=dynamic,
                         backend=anyshape.BackendOptions(target_cpu="znver33"))
    with pytest.raises(ValueError, match="target_cpu: expected None with target='cuda'"):
        anyshape.compile(model, args, dynamic_shapes=dynamic, target="cuda",
                         backend=anyshape.BackendOptions(target_cpu="znver3"))


def test_cli_unknown_cpu_is_an_error(tmp_path):
    result = subprocess.run([str(BIN / "anyshape-compile"), "--hf", "gpt2", "--task", "causal-lm", "--target-cpu",
                             "bogus", "-o", str(tmp_path / "art")], capture_output=True, text=True)
    assert result.returncode != 0
    assert "target_cpu: expected 'host' or a CPU LLVM knows, got 'bogus'" in result.stderr
