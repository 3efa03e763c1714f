"""Property test for ``anyshape-hoist-slices``: random programs, with and without the pass.

Each case is a seeded random program (``random_programs.py``): a DAG of the ops
the pass moves selections through, ending in a random selection. Compiling is
what costs (the export and each IREE compile take 30-40 s for a bundle of 30
programs on a 2-core machine), so the cases of one module seed are bundled
into one ``torch.nn.Module`` that returns every case's output; it is exported
and imported once, and that IR is compiled with the pass for IREE's CPU
backend. Every output is compared with eager PyTorch at several (batch,
length) shapes; a failure names the case's seed, prints its program and says
whether the compile without the pass fails the same way (that compile is made
only then: where the pass's build passes, the stack without it has nothing to
add).

The compiles run as ``anyshape-compile`` processes, two at a time, while the
next bundles are exported (one iree-compile uses one core; compiling in two
threads of this process instead aborted it inside the MLIR bindings), so two
cores stay busy.

The pass must also have changed a good share of the cases (the ops each output
depends on differ before and after it), so that the comparison cannot pass
because nothing was rewritten.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from extent import quick_or_full
from random_programs import Bundle, Program, dynamic_shapes, generate, inputs

import anyshape
from anyshape.mlir import ir, parse_module
from anyshape.dialects import new_context

# Bundles of 30 programs each: 3 (90 programs) in the quick extent, 8 (240) in
# the full one (extent.py).
MODULE_SEEDS = quick_or_full(range(3), range(8))
CASES_PER_MODULE = 30
WITH_PASS = ["anyshape-canonicalize-shapes", "anyshape-hoist-slices", "anyshape-lower"]
WITHOUT_PASS = ["anyshape-canonicalize-shapes", "anyshape-lower"]
# (batch, length): the smallest the programs allow (their indices are chosen for
# it), an odd size, and the largest length.
SHAPES = [(1, 4), (3, 11), (2, 32)]
EXPORT_SHAPE = (2, 7)
# Relative tolerance, and absolute tolerance per unit of the output's magnitude:
# float32 kernels that sum in another order (IREE against eager) differ by a
# few ulps of the largest terms.
RTOL = 1e-4
ATOL_PER_MAGNITUDE = 1e-4
# The share of cases whose computation the pass must have changed.
MIN_CHANGED_SHARE = 0.4

# anyshape-compile, run by this interpreter (the test's virtual environment).
_COMPILE_TOOL = [sys.executable, "-m", "anyshape.tools.compile"]


def _programs(module_seed: int) -> list[Program]:
    hidden = 8 if module_seed % 2 == 0 else 16
    return [generate(module_seed * 1000 + i, hidden) for i in range(CASES_PER_MODULE)]


@dataclasses.dataclass
class _Compiled:
    """An ``anyshape-compile`` run: its artifact and the IR after each stage."""
    artifact: Path
    ir_dir: Path

    def load(self):
        return anyshape.load(self.artifact)

    def ir(self, stage: str) -> str:
        return next(self.ir_dir.glob(f"*-{stage}.mlir")).read_text()


def _compile_file(mlir_file: Path, passes: list[str], out: Path) -> _Compiled:
    """``passes`` and IREE (CPU) on imported IR, in a process of its own; raises
    RuntimeError with the tool's message (stage, diagnostic, reproducer)."""
    out.mkdir(parents=True)
    command = [*_COMPILE_TOOL, str(mlir_file), "-o", str(out / "artifact"),
               "--passes", ",".join(passes), "--dump-ir-dir", str(out / "ir")]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        lines = [line for line in run.stderr.splitlines() if not line.startswith("[anyshape-compile]")]
        raise RuntimeError("\n".join(lines).strip())
    return _Compiled(out / "artifact", out / "ir")


@dataclasses.dataclass
class _Bundle:
    """Cases bundled in one module: the eager module and its compiles (futures of
    ``_Compiled``, one per pass list, in order)."""
    programs: list[Program]
    model: torch.nn.Module | None = None
    compiles: list[concurrent.futures.Future] = dataclasses.field(default_factory=list)
    import_error: Exception | None = None
    mlir_file: Path | None = None


def _start(programs: list[Program], pool, directory: Path,
           passes: tuple[list[str], ...] = (WITH_PASS,)) -> _Bundle:
    """Export and import the bundle in this thread (the slow part that is left to
    it), then queue its compiles (by default with the pass) on ``pool``."""
    model = Bundle(programs).eval()
    example = inputs(*EXPORT_SHAPE, programs[0].hidden, seed=0)
    try:
        text = str(anyshape.import_torch(model, example, dynamic_shapes=dynamic_shapes()))
    except Exception as error:  # noqa: BLE001  reported by the seed's test
        return _Bundle(programs, import_error=error)
    directory.mkdir(parents=True)
    mlir_file = directory / "bundle.mlir"
    mlir_file.write_text(text)
    return _Bundle(programs, model, [pool.submit(_compile_file, mlir_file, p, directory / f"passes{i}")
                                     for i, p in enumerate(passes)], mlir_file=mlir_file)


@pytest.fixture(scope="module")
def pool():
    """Two threads that only wait on compile processes."""
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    yield executor
    executor.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def bundles(request, tmp_path_factory, pool):
    """The bundle of every module seed this session runs, exported in turn, each
    one's compiles running while the next is exported."""
    seeds = [item.callspec.params["module_seed"] for item in request.session.items
             if getattr(item, "originalname", None) == "test_hoisted_selections_match_eager"]
    root = tmp_path_factory.mktemp("hoist-slices")
    return {seed: _start(_programs(seed), pool, root / f"module{seed}") for seed in seeds}


def _failure(bundle: _Bundle) -> str | None:
    """Why the bundle's (first) compile failed, or None."""
    if bundle.import_error is not None:
        return f"export/import: {bundle.import_error}"
    error = bundle.compiles[0].exception()
    return None if error is None else str(error)


def _bisect_compile_failures(programs: list[Program], passes: list[str], root: Path) -> list[tuple]:
    """The smallest groups of cases that still fail to compile with ``passes``:
    each failing group is halved (the halves compile at once), down to single
    cases or to a group whose halves both compile (the failure needs cases of
    both). Returns [(cases, error)]."""
    found, level, step = [], [programs], 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        while level:
            step += 1
            pairs = [(group[:len(group) // 2], group[len(group) // 2:]) for group in level]
            started = [[_start(half, pool, root / f"step{step}-{i}-{j}", passes=(passes,))
                        for j, half in enumerate(pair)] for i, pair in enumerate(pairs)]
            failing = []
            for group, pair, halves in zip(level, pairs, started, strict=True):
                errors = [_failure(h) for h in halves]
                if not any(errors):
                    found.append(_reduce_group(group, passes, root / f"step{step}-{len(found)}", pool))
                for half, error in zip(pair, errors, strict=True):
                    if error is not None and len(half) == 1:
                        found.append((half, error))
                    elif error is not None:
                        failing.append(half)
            level = failing
    return found


def _reduce_group(group: list[Program], passes: list[str], root: Path, pool) -> tuple:
    """A failure that needs cases of both halves: leave out one case at a time,
    for good where the rest still fails (a few cases are left, often two)."""
    error = "fails only with these cases together"
    kept = list(group)
    for case in list(group):
        if len(kept) == 1:
            break
        rest = [p for p in kept if p is not case]
        failure = _failure(_start(rest, pool, root / f"without{case.seed}", passes=(passes,)))
        if failure is not None:
            kept, error = rest, failure
    return kept, error


def _isolate_compile_failures(programs: list[Program], failing: list[str], other: list[str],
                              root: Path) -> list[str]:
    """A bundle failed to compile with the ``failing`` passes: bisect to the cases
    that make it fail, and compile those with the ``other`` passes too, to say
    whose fault it is."""
    reports = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        for index, (cases, error) in enumerate(_bisect_compile_failures(programs, failing, root)):
            other_error = _failure(_start(cases, pool, root / f"other{index}", passes=(other,)))
            also = ("compiles" if other_error is None else
                    f"fails too (so not the hoist pass's fault): {other_error}")
            described = "\n".join(p.describe() for p in cases)
            reports.append(f"with passes {failing}: {error}\n"
                           f"with passes {other} it {also}\n{described}")
    return reports


def _max_diff(got: torch.Tensor, want: torch.Tensor) -> str:
    if got.shape != want.shape:
        return f"shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    return f"max |diff| {(got.double() - want.double()).abs().max().item():.3g}"


def _mismatch(got: torch.Tensor, want: torch.Tensor) -> str | None:
    scale = max(1.0, want.abs().max().item()) if want.numel() else 1.0
    try:
        torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL_PER_MAGNITUDE * scale)
    except AssertionError:
        return f"{_max_diff(got, want)} (|expected| up to {scale:.3g})"
    return None


def _output_slices(text: str) -> list[collections.Counter]:
    """Per function result: the tensor ops it depends on, as (op, result types)."""
    module = parse_module(text, new_context())
    func = next(op.operation for op in module.body.operations if op.operation.name == "func.func")
    returned = list(func.regions[0].blocks[0].operations)[-1]
    slices = []
    for result in returned.operands:
        seen, ops, stack = set(), collections.Counter(), [result]
        while stack:
            owner = stack.pop().owner
            if isinstance(owner, ir.Block):
                continue  # a function argument
            op = owner.operation
            if op in seen:
                continue
            seen.add(op)
            types = [str(r.type) for r in op.results]
            if op.name != "torch.vtensor.literal" and any(t.startswith("!torch.vtensor") for t in types):
                ops[(op.name, " ".join(types))] += 1
            stack.extend(op.operands)
        slices.append(ops)
    return slices


class _WithoutPass:
    """The bundle compiled without the hoist pass, made on the first mismatch
    that asks whose fault it is."""

    def __init__(self, mlir_file: Path, out: Path):
        self.mlir_file, self.out = mlir_file, out
        self.module, self.error = None, None

    def blame(self, args, index: int, want: torch.Tensor) -> str:
        if self.module is None and self.error is None:
            try:
                self.module = _compile_file(self.mlir_file, WITHOUT_PASS, self.out).load()
            except RuntimeError as error:
                self.error = error
        if self.error is not None:
            return f"without the pass it does not compile: {self.error}"
        baseline = _mismatch(self.module(*args)[index], want)
        return (f"also without the pass ({baseline}): not the pass's fault" if baseline
                else "without the pass it matches")


@pytest.mark.builds_in_subprocess
@pytest.mark.parametrize("module_seed", MODULE_SEEDS)
def test_hoisted_selections_match_eager(bundles, tmp_path, module_seed):
    bundle = bundles[module_seed]
    programs = bundle.programs
    if bundle.import_error is not None:
        pytest.fail(f"the bundle does not export/import (not the pass's fault): "
                    f"{bundle.import_error}", pytrace=False)
    (with_future,) = bundle.compiles
    error = with_future.exception()
    if error is not None:
        reports = _isolate_compile_failures(programs, WITH_PASS, WITHOUT_PASS, tmp_path)
        pytest.fail(f"the bundle does not compile with passes {WITH_PASS}: {error}\n\n"
                    f"{len(reports)} failing case groups:\n\n" + "\n\n".join(reports),
                    pytrace=False)
    compiled = with_future.result()
    with_pass = compiled.load()
    without_pass = _WithoutPass(bundle.mlir_file, tmp_path / "without-pass")

    failures = []
    for batch, length in SHAPES:
        args = inputs(batch, length, programs[0].hidden, seed=module_seed * 100 + length)
        with torch.no_grad():
            expected = bundle.model(*args)
        for index, (program, want, got) in enumerate(zip(programs, expected, with_pass(*args),
                                                         strict=True)):
            problem = _mismatch(got, want)
            if problem is None:
                continue
            failures.append(f"mismatch at batch={batch}, length={length}: {problem}; "
                            f"{without_pass.blame(args, index, want)}\n{program.describe()}")

    before = _output_slices(compiled.ir("anyshape-canonicalize-shapes"))
    after = _output_slices(compiled.ir("anyshape-hoist-slices"))
    changed = [p.seed for p, b, a in zip(programs, before, after, strict=True) if b != a]
    print(f"module seed {module_seed}: {len(programs)} cases, {len(changed)} changed by the pass, "
          f"{len(failures)} mismatches")
    assert not failures, f"{len(failures)} mismatches:\n\n" + "\n\n".join(failures)
    assert len(changed) >= MIN_CHANGED_SHARE * len(programs), (
        f"the pass changed only {len(changed)} of {len(programs)} cases (seeds {changed}): "
        "the comparison says little about it")
