"""Running ``iree-compile``, and the error a failure is reported by.

IREE compiles in two runs around the flow-level workarounds
(``workarounds.rewrite_flow``): the input to the flow phase, then from the
flow phase to the ``.vmfb``. A failing run raises :class:`CompileError` for
the stage ``iree-compile`` with its first error, its input kept as a
reproducer and the ``iree-compile`` command that replays it.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import shlex
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

from anyshape.errors import CompileError
from anyshape.iree.parameter_reads import parameters_read
from anyshape.iree.workarounds import rewrite_flow
from anyshape.mlir import iree_tool
from anyshape.runtime.compiled_module import PARAMETER_SCOPE
from anyshape.runtime.parameter_encoding import ENCODED_SCOPE
from anyshape.stages import IREE_COMPILE_STAGE, IREE_INPUT_STAGE, file_digest, keep_reproducer


# A census of a build (iree/dispatch_census.py) stops IREE at this phase:
# the module's file is then that phase's output, not a .vmfb.
_STOP_AT: contextvars.ContextVar[str | None] = contextvars.ContextVar("anyshape_iree_stop_at",
                                                                       default=None)


@contextlib.contextmanager
def stopping_at(phase: str):
    """IREE builds in this context stop at ``phase`` (``--compile-to``)."""
    token = _STOP_AT.set(phase)
    try:
        yield
    finally:
        _STOP_AT.reset(token)


def stop_phase() -> str | None:
    """The phase IREE builds stop at here (``stopping_at``); None: a whole build."""
    return _STOP_AT.get()


def compile_with_iree(input_file: Path, flags: list[str], dump_ir_dir,
                      report: Callable[[str], None], cpu: bool,
                      output: Path | None = None, phase: str | None = None,
                      meanwhile: Callable[[], None] | None = None,
                      encoder: Path | None = None,
                      encode: Callable[[Path, str, list], None] | None = None) -> Path:
    """iree-compile in two runs around the flow-level workarounds
    (``workarounds.rewrite_flow``; float64 math for the CPU only), into
    ``output`` (default: ``module.vmfb`` beside the input). ``phase``: stop
    there (``--compile-to``: "executable-configurations" writes each
    dispatch's configuration, as ``iree/dispatch_census.py`` reads it).
    ``meanwhile``: called once the first run has started (the parameter
    archive's write). ``encoder``: where to build the module that packs the
    weights into an archive of their own (``runtime/parameter_encoding.py``),
    so that the main module reads them packed; ``encode(encoder, layout,
    reads)`` is then called, instead of ``meanwhile``, while IREE builds the
    main module's code (``layout``: the SHA-256 of the main module before its
    code is built, which fixes where it reads each packed weight; ``reads``:
    the (scope, key) of each parameter the main module reads,
    ``parameter_reads.py``). Where IREE found nothing
    to move out of the module's initializers, ``meanwhile`` is called then
    instead."""
    phase = phase or stop_phase()
    flow = input_file.with_name("iree-flow.mlirbc")
    untied = input_file.with_name("iree-flow-untied.mlirbc")
    vmfb = output if output is not None else \
        input_file.with_name(f"{phase}.mlir" if phase else "module.vmfb")
    encoding = encoder is not None and not phase
    # Where the encoder writes the archive, writing it by name first would be
    # the weights' bytes written for nothing, and twice the disk while the
    # packed one is written beside it.
    run_iree_compile(input_file, [*flags, "--compile-to=flow", "--emit-mlir-bytecode"], flow,
                     dump_ir_dir, report, repro_stem=IREE_INPUT_STAGE,
                     meanwhile=None if encoding else meanwhile)
    rewritten = rewrite_flow(flow, untied, f64_math_in_f32=cpu)
    report(f"  made {rewritten.untied} repeated dispatch workload sizes distinct")
    if rewritten.narrowed:
        report(f"  computed {rewritten.narrowed} float64 math ops IREE's CPU code lacks in "
               f"float32")
    if rewritten.filled:
        report(f"  gave {rewritten.filled} in-place writes into a fill a fill of their own")
    if rewritten.unbarriered:
        report(f"  kept {rewritten.unbarriered} inputs written in place out of the closing "
               f"barrier (iree/in_place_writes.py)")
    if rewritten.shared:
        report(f"  shared {rewritten.shared} values the initializers computed more than once "
               f"(iree/shared_initializers.py)")
    if rewritten.guarded:
        report(f"  kept {rewritten.guarded} integer divisions from dividing by 0 past a "
               f"partial vector's end")
    flow.unlink()
    if encoding:
        return _compile_with_encoder(untied, flags, vmfb, dump_ir_dir, report, encoder, encode,
                                     meanwhile)
    last = [f"--compile-to={phase}"] if phase else []
    run_iree_compile(untied, [*flags, "--compile-from=flow", *last], vmfb, dump_ir_dir, report,
                     repro_stem=untied.stem)
    untied.unlink()
    return vmfb


def _compile_with_encoder(untied: Path, flags: list[str], vmfb: Path, dump_ir_dir,
                          report: Callable[[str], None], encoder: Path,
                          encode: Callable[[Path, str, list], None],
                          meanwhile: Callable[[], None] | None) -> Path:
    """From the flow phase in two runs: to the stream phase, where IREE
    splits the packing of the weights out into an encoder module, then the
    main module's code, while the encoder is built and run (``meanwhile``
    where there is none)."""
    stream = untied.with_name("iree-stream.mlirbc")
    encoder_input = untied.with_name("iree-encoder.mlirbc")
    encoder_input.unlink(missing_ok=True)
    run_iree_compile(untied, [*flags, "--compile-from=flow", "--compile-to=stream",
                              "--emit-mlir-bytecode",
                              f"--iree-parameter-encoder-output-file={encoder_input}"],
                     stream, dump_ir_dir, report, repro_stem=untied.stem)
    untied.unlink()
    layout = f"sha256:{file_digest(stream)}"

    def build_and_run_encoder() -> None:
        if encoder_input.is_file():
            report("  compiling the encoder that packs the weights, while IREE builds the code")
            try:
                run_iree_compile(encoder_input, encoder_flags(flags), encoder, dump_ir_dir,
                                 report, repro_stem=encoder_input.stem)
                encoder_input.unlink()
                encode(encoder, layout,
                       parameters_read(stream, (PARAMETER_SCOPE, ENCODED_SCOPE)))
            except (CompileError, RuntimeError, ValueError) as error:  # not a full disk's OSError
                raise EncoderFailed(error) from error
        elif meanwhile is not None:
            meanwhile()

    run_iree_compile(stream, [*flags, "--compile-from=stream"], vmfb, dump_ir_dir, report,
                     repro_stem=stream.stem, meanwhile=build_and_run_encoder)
    stream.unlink()
    return vmfb


class EncoderFailed(Exception):
    """IREE failed to build or run the encoder of the weights (``error``)."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


def encoder_flags(flags: list[str]) -> list[str]:
    """The flags that build the weights' encoder for the device and CPU the
    module is for (the encoder runs wherever the module's weights are written)."""
    kept = ("--iree-hal-target-device=", "--iree-hal-local-target-device-backends=",
            "--iree-llvmcpu-target-cpu=", "--iree-llvmcpu-target-cpu-features=")
    return [flag for flag in flags if flag.startswith(kept)]


def run_iree_compile(input_file: Path, flags: list[str], output: Path, dump_ir_dir,
                     report: Callable[[str], None], repro_stem: str,
                     meanwhile: Callable[[], None] | None = None) -> None:
    command = [iree_tool("iree-compile"), str(input_file), *flags, "-o", str(output)]
    started = time.monotonic()
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as proc:
        stderr_chunks: list[bytes] = []
        reader = threading.Thread(target=lambda: stderr_chunks.append(proc.stderr.read()))
        reader.start()
        if meanwhile is not None:
            try:
                meanwhile()
            except BaseException:
                proc.kill()
                reader.join()
                raise
        while True:
            try:
                proc.wait(timeout=15)
                break
            except subprocess.TimeoutExpired:
                report(f"  iree-compile running, {time.monotonic() - started:.0f}s")
        reader.join()
    stderr = b"".join(stderr_chunks).decode(errors="replace")
    if proc.returncode != 0:
        repro = keep_reproducer(input_file, dump_ir_dir, repro_stem)
        replay = " ".join(shlex.quote(a) for a in
                          ["iree-compile", str(repro), *flags, "-o", str(repro.with_suffix(".out"))])
        raise CompileError(IREE_COMPILE_STAGE, first_error(stderr), str(repro), replay,
                           details=stderr)


def first_error(stderr: str) -> str:
    """The first ``error:`` line of iree-compile's output and the notes right after it."""
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if "error:" in line:
            notes = [l.strip() for l in lines[i + 1:i + 4] if "note:" in l]
            return "\n".join([_name_unlowered_op(line.strip())] + notes)
    if "Stack dump:" in stderr:
        return _crash_summary(stderr)
    return stderr.strip() or "iree-compile failed with no diagnostic"


_CRASHED_PASS = re.compile(r"([A-Za-z]\w*?)(?:Pass)?::runOnOperation\(\)")
_CRASHED_PATTERN_OP = re.compile(r"matchAndRewrite\((?:mlir::)?(?:\w+::)*(\w+Op)\b")


def _crash_summary(stderr: str) -> str:
    """iree-compile died (an assertion, a segfault) rather than reporting an
    error: its output opens with "Please report issues" and a stack dump. The
    pass and the op being rewritten, read from the stack, say what to
    reduce (the whole output is the error's ``details``)."""
    pass_match = _CRASHED_PASS.search(stderr)
    op_match = _CRASHED_PATTERN_OP.search(stderr)
    where = "".join([f" in {pass_match[1]}" if pass_match else "",
                     f" while rewriting {op_match[1]}" if op_match else ""])
    return (f"iree-compile crashed{where} (a bug of IREE or torch-mlir, not of the model; "
            f"the stack dump is in the error's details)")


_OPAQUE_OP = re.compile(r"^(?P<at>.*?error: )failed to legalize operation 'torch\.operator'"
                        r".*?name = \"torch\.(?P<op>[\w.]+)\"")

# How a user gets around an op without a lowering, where there is a way.
_AROUND = {
    "aten.histc": "anyshape decomposes histc in float32 and float64 only "
                  "(frontend/grouped_experts.py); compute it in float32",
}
_FFT_AROUND = ("anyshape computes FFTs whose complex values stay inside the model "
               "(frontend/graph_fixes/complex_as_pairs.py); this model has a complex input or "
               "output, or a complex op other than products, sums, views, conj and abs")
_AROUND.update({op: _FFT_AROUND for op in ("aten._fft_c2c", "aten._fft_r2c", "aten._fft_c2r",
                                           "aten._conj")})


def _name_unlowered_op(line: str) -> str:
    """IREE's 'failed to legalize torch.operator' as what it means: torch-mlir
    imported an op it has no lowering for, opaque, and nothing can compile it."""
    match = _OPAQUE_OP.match(line)
    if not match:
        return line
    op = match["op"]
    around = f"; {_AROUND[op]}" if op in _AROUND else ""
    return (f"{match['at']}torch-mlir has no lowering for {op} (it imports as an opaque "
            f"'torch.operator' that IREE cannot compile){around}")
