"""The console scripts as a user runs them."""

import os
import subprocess
import sys
from pathlib import Path

import torch
from models import shape_queries_case

import anyshape

BIN = Path(sys.executable).parent
PLUGIN = Path(__file__).parent.parent / "lib" / "test_passes.py"


def run(*argv, stdin=None):
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], input=stdin, capture_output=True,
                          text=True)


def test_opt_round_trips_stdin():
    result = run("anyshape-opt", stdin="func.func @f() { return }")
    assert result.returncode == 0, result.stderr
    assert "func.func @f()" in result.stdout and "return" in result.stdout
    again = run("anyshape-opt", stdin=result.stdout)
    assert again.stdout == result.stdout


def test_opt_parse_error_exit_status_and_location(tmp_path):
    path = tmp_path / "bad.mlir"
    path.write_text("func.func @f() {\n  %0 = arith.constant 1 : i33x\n  return\n}\n")
    result = run("anyshape-opt", str(path))
    assert result.returncode == 1
    assert f"{path}:2:26: error: expected non-function type" in result.stderr
    assert result.stdout == ""


def test_opt_writes_output_file(tmp_path):
    out = tmp_path / "out.mlir"
    result = run("anyshape-opt", "-", "-o", str(out), "--cse", stdin="func.func @g() { return }")
    assert result.returncode == 0 and result.stdout == ""
    assert "func.func @g()" in out.read_text()


def test_opt_list_passes():
    plain = run("anyshape-opt", "--list-passes")
    assert plain.returncode == 0 and "anyshape passes:" in plain.stdout
    loaded = run("anyshape-opt", f"--load-passes={PLUGIN}", "--list-passes")
    assert "--anyshape-test-fold-double-neg" in loaded.stdout
    assert "op-name=str (default 'torch.aten.neg')" in loaded.stdout


def test_opt_usage_error():
    result = run("anyshape-opt", "a.mlir", "b.mlir")
    assert result.returncode == 2 and "expected one input file" in result.stderr


def test_compile_cli_from_imported_text(tmp_path):
    model, args, dynamic = shape_queries_case()
    (tmp_path / "model.mlir").write_text(str(anyshape.import_torch(model, args,
                                                                   dynamic_shapes=dynamic)))
    result = run("anyshape-compile", str(tmp_path / "model.mlir"), "-o", str(tmp_path / "art"),
                 "--dump-ir-dir", str(tmp_path / "ir"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "ir" / "00-import.mlir").is_file()
    compiled = anyshape.load(tmp_path / "art")
    assert compiled.signature.symbols[compiled.signature.inputs[0].dims[1]].max == 64
    x = torch.randn(3, 21, 8)
    torch.testing.assert_close(compiled(x), model(x).detach(), atol=1e-5, rtol=0)


def test_compile_cli_data_tiling_auto_by_default_off_on_request(tmp_path):
    model, args, dynamic = shape_queries_case()
    (tmp_path / "model.mlir").write_text(str(anyshape.import_torch(model, args,
                                                                   dynamic_shapes=dynamic)))
    for flags, tiled in (((), True), (("--data-tiling=off",), False), (("--data-tiling",), True)):
        out = tmp_path / f"art-{tiled}"
        result = run("anyshape-compile", str(tmp_path / "model.mlir"), "-o", str(out), *flags)
        assert result.returncode == 0, result.stderr
        compiled = anyshape.load(out)
        assert compiled.target.data_tiling is tiled
        assert ("--iree-global-opt-data-tiling" in compiled.iree_flags) is tiled
        x = torch.randn(2, 9, 8)
        torch.testing.assert_close(compiled(x), model(x).detach(), atol=1e-5, rtol=0)


def test_compile_cli_reports_parse_error(tmp_path):
    path = tmp_path / "bad.mlir"
    path.write_text("func.func @main() {\n  bogus\n}\n")
    result = run("anyshape-compile", str(path), "-o", str(tmp_path / "art"))
    assert result.returncode == 1 and f"{path}:2:" in result.stderr
