"""anyshape-opt against torch-mlir-opt, the C++ driver of the pinned torch-mlir
wheel (the same MLIR build): the same file and flags give the same exit
status, output and diagnostics. Each case is a form torch-mlir's and MLIR's
own tests use; `make opt-compat` runs torch-mlir's whole test tree.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
ANYSHAPE_OPT = shutil.which("anyshape-opt", path=str(BIN))
REFERENCE = shutil.which("torch-mlir-opt", path=str(BIN))

pytestmark = pytest.mark.skipif(REFERENCE is None or ANYSHAPE_OPT is None,
                                reason="torch-mlir-opt or anyshape-opt not installed")

TORCH = """\
// Torch IR in two chunks.
func.func @add(%arg0: !torch.vtensor<[?,4],f32>) -> !torch.vtensor<[?,4],f32> {
  %int1 = torch.constant.int 1
  %0 = torch.aten.add.Tensor %arg0, %arg0, %int1 : !torch.vtensor<[?,4],f32>, !torch.vtensor<[?,4],f32>, !torch.int -> !torch.vtensor<[?,4],f32>
  %1 = torch.aten.tanh %0 : !torch.vtensor<[?,4],f32> -> !torch.vtensor<[?,4],f32>
  return %1 : !torch.vtensor<[?,4],f32>
}

// -----

func.func @softmax(%arg0: !torch.vtensor<[2,3],f32>) -> !torch.vtensor<[2,3],f32> {
  %int1 = torch.constant.int 1
  %none = torch.constant.none
  %0 = torch.aten.softmax.int %arg0, %int1, %none : !torch.vtensor<[2,3],f32>, !torch.int, !torch.none -> !torch.vtensor<[2,3],f32>
  %1 = torch.aten.mul.Tensor %0, %0 : !torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32> -> !torch.vtensor<[2,3],f32>
  return %1 : !torch.vtensor<[2,3],f32>
}
"""

DIALECTS = """\
// Dialects torch-mlir-opt registers besides torch and MLIR's own.
func.func @tm_tensor(%arg0: tensor<3xf32>, %arg1: tensor<3xf32>, %arg2: tensor<f32>) -> tensor<3xf32> {
  %0:2 = tm_tensor.scan dimension(0) inclusive(true) ins(%arg0 : tensor<3xf32>) outs(%arg1, %arg2 : tensor<3xf32>, tensor<f32>) {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %b : f32
    tm_tensor.yield %s : f32
  } -> tensor<3xf32>, tensor<f32>
  return %0#0 : tensor<3xf32>
}
func.func @stablehlo(%arg0: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.add %arg0, %arg0 : tensor<3xf32>
  %1 = chlo.erf %0 : tensor<3xf32> -> tensor<3xf32>
  return %1 : tensor<3xf32>
}
"""

UNREGISTERED = """\
func.func @opaque(%arg0: i32) -> i32 {
  %0 = "mystery.op"(%arg0) {note = "kept"} : (i32) -> i32
  return %0 : i32
}
"""

# Upstream's expectation forms: a space before '@', @above/@below (several in a
# row), @unknown, -re with POSIX classes, a near miss of severity, an unmet one,
# and a warning that only-expected ignores.
VERIFY = """\
func.func @space_before_at() -> i32 {
  // expected-error @+1 {{'func.return' op has 0 operands}}
  return
}

// -----

func.func @below_and_above() -> i32 {
  // expected-error @below {{has 0 operands, but enclosing function}}
  // expected-error-re @below {{enclosing function (@{{[[:alpha:]_]+}}) returns {{[[:digit:]]+}}}}
  return
  // expected-error @above {{'func.return' op}}
}

// -----

func.func @near_miss() -> i32 {
  return // expected-warning {{has 0 operands}}
}

// -----

func.func @unmet() {
  return // expected-error {{never said}}
}

// -----

func.func @regex_does_not_match() -> i32 {
  return // expected-error-re {{has {{[[:digit:]]+}} results}}
}

// -----

// expected-error @unknown {{nothing at an unknown place}}
func.func @unknown_unmet() {
  return
}
"""

VERIFY_OK = """\
// RUN lines of torch-mlir's tests verify and print in one go.
func.func @ok(%arg0: !torch.vtensor<[2],f32>) -> !torch.vtensor<[2],f32> {
  %0 = torch.aten.tanh %arg0 : !torch.vtensor<[2],f32> -> !torch.vtensor<[2],f32>
  return %0 : !torch.vtensor<[2],f32>
}

// -----

func.func @parse_error() {
  // expected-error @+1 {{expected non-function type}}
  %0 = arith.constant 1 : i33x
  return
}
"""

PARSE_ERROR = """\
func.func @f() -> i32 {
  return
}
"""

CASES = {
    "single-dash split and canonicalize": (TORCH, ["-split-input-file", "-canonicalize"]),
    "a func.func pass as a flag nests": (TORCH, ["-split-input-file", "-convert-torch-to-linalg",
                                                 "-canonicalize"]),
    "pass options after '='": (TORCH, ["--split-input-file",
                                       "-torch-decompose-complex-ops=legal-ops=aten.softmax.int"]),
    "several pass options": (TORCH, ["-split-input-file",
                                     "--convert-torch-to-tosa=require-full-tosa-conversion=false "
                                     "disabled-patterns=torch.aten.tanh"]),
    "a registered pipeline": (TORCH, ["-split-input-file", "-pass-pipeline=builtin.module("
                                      "torch-function-to-torch-backend-pipeline"
                                      "{backend-legal-ops=aten.softmax.int})"]),
    "textual pipeline, nested": (TORCH, ["-split-input-file",
                                         "-pass-pipeline=builtin.module(func.func(cse),canonicalize)"]),
    "textual pipeline on any op": (TORCH, ["-pass-pipeline=any(cse)", "-split-input-file"]),
    "textual pipeline anchored wrong": (TORCH, ["-pass-pipeline=func.func(cse)"]),
    "a textual pipeline does not nest": (TORCH, [
        "-pass-pipeline=builtin.module(convert-torch-to-linalg)"]),
    "dialects tm_tensor, stablehlo, chlo": (DIALECTS, []),
    "unregistered dialect refused": (UNREGISTERED, []),
    "unregistered dialect allowed": (UNREGISTERED, ["-allow-unregistered-dialect", "-cse"]),
    "verify-diagnostics": (VERIFY, ["-split-input-file", "-verify-diagnostics"]),
    "verify-diagnostics=only-expected": (VERIFY, ["-split-input-file",
                                                  "--verify-diagnostics=only-expected"]),
    "verify-diagnostics prints what passes": (VERIFY_OK, ["-verify-diagnostics", "-split-input-file",
                                                          "-canonicalize"]),
    "parse and verifier errors": (PARSE_ERROR, []),
    "local scope": (TORCH, ["-split-input-file", "-convert-torch-to-linalg",
                            "-mlir-print-local-scope"]),
    "debug info": (TORCH, ["-mlir-print-debuginfo", "-split-input-file"]),
    "generic form": (TORCH, ["--mlir-print-op-generic", "-split-input-file"]),
    "IR after all": (TORCH, ["-split-input-file", "-mlir-print-ir-after-all", "-cse",
                             "-canonicalize"]),
    "IR before one pass": (TORCH, ["-split-input-file", "-mlir-print-ir-before=canonicalize",
                                   "-cse", "-canonicalize"]),
    "split markers": (TORCH.replace("// -----", "// ====="),
                      ["-split-input-file=// =====", "-output-split-marker=// +++++"]),
    "no threads, no verifier between passes": (TORCH, ["-split-input-file",
                                                       "-mlir-disable-threading",
                                                       "-verify-each=false", "-cse"]),
    "printers and parsers round-trip": (TORCH, ["-split-input-file", "-verify-roundtrip",
                                                "-convert-torch-to-linalg"]),
    "a bytecode version without bytecode": (TORCH, ["-emit-bytecode-version=1"]),
}


def run(tool: str, args: list[str], cwd: Path, stdin: str | None = None):
    return subprocess.run([tool, *args], input=stdin, capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


def normalized(stderr: str) -> str:
    # The dialects a context registers differ (anyshape-opt's bindings register
    # all of MLIR's); MLIR lists them in a note.
    stderr = re.sub(r"Available dialects: [^;]*;", "Available dialects: ...;", stderr)
    # torch-mlir-opt's verifier reports an unmet @unknown expectation twice (it
    # does not clear them after reporting, then reports again when it goes);
    # anyshape-opt once.
    return re.sub(r"^(<unknown>:0: error: expected .* was not produced\n)\1", r"\1", stderr,
                  flags=re.M)


# The cases where both drivers must fail (the rest must succeed: two drivers
# failing alike on a case meant to pass would test nothing).
FAILING = {"textual pipeline anchored wrong", "a textual pipeline does not nest",
           "unregistered dialect refused", "verify-diagnostics",
           "verify-diagnostics=only-expected", "parse and verifier errors",
           "a bytecode version without bytecode"}


@pytest.mark.parametrize("name", list(CASES))
def test_same_as_torch_mlir_opt(name, tmp_path):
    source, args = CASES[name]
    (tmp_path / "input.mlir").write_text(source)
    ours = run(ANYSHAPE_OPT, ["input.mlir", *args], tmp_path)
    reference = run(REFERENCE, ["input.mlir", *args], tmp_path)
    assert (ours.returncode, ours.stdout) == (reference.returncode, reference.stdout), \
        f"{name}: anyshape-opt:\n{ours.stdout}{ours.stderr}\ntorch-mlir-opt:\n" \
        f"{reference.stdout}{reference.stderr}"
    assert normalized(ours.stderr) == normalized(reference.stderr), name
    assert reference.returncode == (1 if name in FAILING else 0), reference.stderr


def test_stdin_and_output_file(tmp_path):
    for tool, out in ((ANYSHAPE_OPT, "ours.mlir"), (REFERENCE, "reference.mlir")):
        result = run(tool, ["-", "-o", out, "-split-input-file", "-cse"], tmp_path, stdin=TORCH)
        assert result.returncode == 0, result.stderr
    assert (tmp_path / "ours.mlir").read_text() == (tmp_path / "reference.mlir").read_text()


def test_stdin_diagnostics_name_stdin(tmp_path):
    ours = run(ANYSHAPE_OPT, ["-verify-diagnostics", "-split-input-file"], tmp_path, stdin=VERIFY)
    reference = run(REFERENCE, ["-verify-diagnostics", "-split-input-file"], tmp_path,
                    stdin=VERIFY)
    assert ours.returncode == reference.returncode == 1
    assert normalized(ours.stderr) == normalized(reference.stderr)
    assert "<stdin>:" in ours.stderr


def test_bytecode_in_and_out(tmp_path):
    (tmp_path / "input.mlir").write_text(TORCH.split("// -----")[0])
    result = run(ANYSHAPE_OPT, ["input.mlir", "-emit-bytecode", "-o", "out.mlirbc"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out.mlirbc").read_bytes().startswith(b"ML\xefR")
    ours = run(ANYSHAPE_OPT, ["out.mlirbc", "-canonicalize"], tmp_path)
    reference = run(REFERENCE, ["out.mlirbc", "-canonicalize"], tmp_path)
    assert (ours.returncode, ours.stdout) == (reference.returncode, reference.stdout)


@pytest.mark.parametrize("version", ["0", "3", "100"])
def test_bytecode_version(version, tmp_path):
    (tmp_path / "input.mlir").write_text(TORCH.split("// -----")[0])
    args = ["input.mlir", "-emit-bytecode", f"-emit-bytecode-version={version}"]
    ours = subprocess.run([ANYSHAPE_OPT, *args], capture_output=True, cwd=tmp_path)
    reference = subprocess.run([REFERENCE, *args], capture_output=True, cwd=tmp_path)
    assert (ours.returncode, ours.stdout) == (reference.returncode, reference.stdout)
    assert normalized(ours.stderr.decode()) == normalized(reference.stderr.decode())
    assert reference.returncode == (1 if version == "100" else 0)


def test_unknown_flag(tmp_path):
    (tmp_path / "input.mlir").write_text(TORCH)
    for tool in (ANYSHAPE_OPT, REFERENCE):
        result = run(tool, ["input.mlir", "-no-such-pass"], tmp_path)
        assert result.returncode == 1
        assert "Unknown command line argument '-no-such-pass'." in result.stderr, result.stderr


def test_show_dialects_lists_every_dialect_of_torch_mlir_opt(tmp_path):
    def listed(tool):
        out = run(tool, ["--show-dialects"], tmp_path).stdout
        assert out.startswith("Available Dialects: "), out
        return set(out.split(":", 1)[1].strip().split(","))

    missing = listed(REFERENCE) - listed(ANYSHAPE_OPT)
    assert not missing, missing


@pytest.mark.slow_without_build
def test_every_pass_of_torch_mlir_opt_is_a_flag(tmp_path):
    """Each pass and pipeline torch-mlir-opt --help lists runs as a flag on an
    empty module (nested where it must be), with the reference's result."""
    help_text = run(REFERENCE, ["--help"], tmp_path).stdout
    section = help_text.split("Compiler passes to run", 1)[1]
    names = re.findall(r"^      --([a-z0-9-]+[a-z0-9])\s", section, re.M)
    assert len(names) > 50, names
    (tmp_path / "empty.mlir").write_text("func.func @f() { return }\n")
    differ = {}
    for name in names:
        ours = run(ANYSHAPE_OPT, ["empty.mlir", f"-{name}"], tmp_path)
        reference = run(REFERENCE, ["empty.mlir", f"-{name}"], tmp_path)
        if (ours.returncode, ours.stdout) != (reference.returncode, reference.stdout):
            differ[name] = (ours.returncode, ours.stderr[-300:], reference.returncode)
    assert not differ, differ


def test_roundtrip_failure_is_reported(monkeypatch):
    """When the fresh context cannot read the printed module back (here a bare
    context without torch-mlir's dialects), --verify-roundtrip says so and fails
    the chunk."""
    from anyshape.tools import opt_session
    from anyshape.mlir import ir
    from anyshape.tools import opt as opt_tool

    contexts = []
    real = opt_session.new_context

    def bare_after_the_first():
        contexts.append(real() if not contexts else ir.Context())
        return contexts[-1]

    monkeypatch.setattr(opt_session, "new_context", bare_after_the_first)
    opts = opt_tool.parse_args(["-verify-roundtrip"])
    result = opt_session.process(TORCH.split("// -----")[0], opts, "input.mlir")
    assert not result.ok and result.output == ""
    assert any("error: 'builtin.module' op failed to parse textual content back, cannot "
               "verify round-trip" in m for m in result.messages), result.messages
