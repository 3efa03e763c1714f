"""When iree-compile fails, what anyshape builds again another way: one table.

Each IREE 3.13 failure that a second build of the same module avoids is a row
of ``FALLBACKS``: the failure it answers (a predicate on the error and on how
the failed build was made), what is built again (iree-compile alone, the IREE
input, or the passes from the imported IR), what changes, which error is
raised when the second build fails too, and the warning a user gets when it
works. The three retry paths below (``without_peeling``,
``without_dim_facts``, ``without_data_tiling``) ask the table at the three
places ``compile.py`` can redo a build, from the cheapest out: a failure is
first offered to the iree-compile row, then to the IREE-input row, then to
the passes row.

The rows are also this stage's workarounds (``WORKAROUNDS``, listed in
docs/workarounds.md with the tests that guard them).
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Callable, TypeVar

from anyshape.errors import CompileError, DataTilingFallback
from anyshape.iree.flags import PEELING_FAILURE, PEELING_FLAG
from anyshape.stages import IREE_COMPILE_STAGE, Workaround, discard_reproducer

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Build:
    """How a build that failed was made."""
    flags: tuple[str, ...]       # iree-compile's
    data_tiling: bool
    data_tiling_automatic: bool  # data_tiling=None: anyshape chose
    dim_facts: bool              # the IREE input states the arguments' dim ranges


@dataclasses.dataclass(frozen=True)
class Fallback:
    name: str
    redo: str                    # "iree-compile", "iree-input" or "passes"
    change: str                  # what the second build does differently (the report)
    applies: Callable[[CompileError, Build], bool]
    raise_when_both_fail: str    # "first" or "second": which failure the user sees
    warning: type[Warning] | None = None  # given when the second build works


FALLBACKS: dict[str, Fallback] = {f.name: f for f in (
    # Peeled, a dispatch may need a scratch buffer of dynamic size, which IREE
    # refuses; IREE's default vector strategy does not.
    Fallback("peeling", redo="iree-compile", change="without peeling",
             applies=lambda error, build: PEELING_FLAG in build.flags
             and PEELING_FAILURE in error.diagnostic,
             raise_when_both_fail="second"),
    # The dim ranges are for speed; a failure with them that goes away without
    # them was theirs. Where it fails without them too, the first failure is the
    # one the module has.
    Fallback("dim_facts", redo="iree-input", change="without the argument dim ranges",
             applies=lambda error, build: build.dim_facts and not build.data_tiling
             and error.stage == IREE_COMPILE_STAGE,
             raise_when_both_fail="first"),
    # Data tiling anyshape chose (data_tiling=None) is dropped with a warning;
    # asked for (True), its failure is the user's error.
    Fallback("data_tiling", redo="passes", change="without data tiling",
             applies=lambda error, build: build.data_tiling_automatic and build.data_tiling
             and error.stage == IREE_COMPILE_STAGE,
             raise_when_both_fail="second", warning=DataTilingFallback),
)}


def without_peeling(compile_iree: Callable[[list[str]], Path], flags: list[str],
                    made: Callable[[list[str]], Build], report: Callable[[str], None],
                    dump_ir_dir) -> tuple[Path, list[str]]:
    """``compile_iree(flags)``, and again without the peeling flag where the
    failure is peeling's (iree/flags.py): the artifact and the flags it was
    built with. Without peeling the module compiles as IREE does by default,
    whose failure is the one raised."""
    peeling = FALLBACKS["peeling"]
    try:
        return compile_iree(flags), flags
    except CompileError as error:
        if not peeling.applies(error, made(flags)):
            raise
        report(f"compiling again {peeling.change}: " + error.diagnostic.splitlines()[0])
        discard_reproducer(error.reproducer, dump_ir_dir)
    flags = [flag for flag in flags if flag != PEELING_FLAG]
    return compile_iree(flags), flags


def without_dim_facts(first: Callable[[], T], second: Callable[[], T], build: Build,
                      report: Callable[[str], None], dump_ir_dir,
                      abandon_second: Callable[[], None], keep_second: Callable[[], None]) -> T:
    """``first()`` (IREE input with the dim facts), and where IREE fails with
    them, ``second()`` (an IREE input without them): the dim facts are for
    speed without data tiling, and IREE 3.13 fails on some modules with them
    that it compiles without. When both fail the first failure is raised, with
    its reproducer; ``abandon_second`` drops the second's stage file and
    ``keep_second`` makes it the IREE input when it works."""
    dim_facts = FALLBACKS["dim_facts"]
    try:
        return first()
    except CompileError as error:
        if not dim_facts.applies(error, build):
            raise
        failure = error
    report(f"compiling again {dim_facts.change}: " + failure.diagnostic.splitlines()[0])
    reproducer = Path(failure.reproducer)
    # Set aside: the retry's reproducer may take its name.
    kept = reproducer.rename(reproducer.with_name(reproducer.name + ".first"))
    try:
        result = second()
    except CompileError as second_failure:
        if dim_facts.raise_when_both_fail == "second":
            raise
        discard_reproducer(second_failure.reproducer, dump_ir_dir)
        abandon_second()
        kept.replace(reproducer)
        raise failure from None
    kept.replace(reproducer)
    discard_reproducer(failure.reproducer, dump_ir_dir)
    keep_second()
    return result


def without_data_tiling(first: Callable[[], T], second: Callable[[], T], data_tiling: bool,
                        report: Callable[[str], None]) -> T:
    """``first()`` (the passes and IREE with automatic data tiling), and where
    IREE fails with it, ``second()`` (the passes again from the imported IR,
    without it), with a ``DataTilingFallback`` warning when that works. A
    failure without data tiling too was not data tiling's: it is raised as it
    is, with no warning."""
    fallback = FALLBACKS["data_tiling"]
    try:
        return first()
    except CompileError as error:
        if not fallback.applies(error, Build((), data_tiling, True, False)):
            raise
        failure = error
    report(f"compiling again {fallback.change}: " + failure.diagnostic.splitlines()[0])
    try:
        compiled = second()
    except CompileError:
        if fallback.raise_when_both_fail == "second":
            raise
        raise failure from None
    warnings.warn(f"IREE could not compile this module with data tiling, so it was compiled "
                  f"without it (slower matmuls; data_tiling=False skips the first attempt): "
                  f"{failure.diagnostic}\nreproducer: {failure.reproducer}",
                  fallback.warning, stacklevel=4)
    return compiled


WORKAROUNDS = (
    Workaround(
        name='data_tiling_fallback', stage='iree-fallback',
        where='FALLBACKS["data_tiling"], run by without_data_tiling from compile.compile_module',
        upstream='IREE 3.13 fails to compile some modules with data tiling (e.g. '
                 '"delinearize_index" failures; a uint8 sort); with data_tiling=None the module '
                 'is compiled again without it, with a DataTilingFallback warning.',
        guard=('test/python/iree/test_data_tiling.py::test_automatic_data_tiling_falls_back_with_a_warning',
               'test/python/iree/test_data_tiling.py::test_data_tiling_compile_failure_is_an_error',
               'test/python/test_compile_cache.py::test_a_hit_warns_as_its_compile_did'),
        remove_when='(inferred) when IREE data-tiles every module it compiles without data tiling'),
    Workaround(
        name='peeling_fallback', stage='iree-fallback',
        where='FALLBACKS["peeling"], run by without_peeling from compile._compile_stages',
        upstream='Peeled, some dispatches (a one-row softmax over a dynamic axis) need a scratch '
                 'buffer of dynamic size, which IREE 3.13 refuses ("\'memref.alloca\' op expected '
                 'no unbounded stack allocations"); compiled again without the peeling flag.',
        guard='test/python/iree/test_targets.py::test_module_that_peeling_cannot_compile_is_compiled_without_it',
        remove_when="(inferred) when IREE's peeled code needs no unbounded stack allocation (or "
                    'peeling is dropped)'),
    Workaround(
        name='dim_facts_fallback', stage='iree-fallback',
        where='FALLBACKS["dim_facts"], run by without_dim_facts from compile._compile_stages',
        upstream='IREE 3.13 fails on some modules with the argument dim ranges that it compiles '
                 'without them ("\'linalg.generic\' op write affecting operations on global '
                 'resources are restricted to workgroup distributed contexts": '
                 'torch.cumulative_trapezoid\'s slices; "offset 0 is out-of-bounds": bincount); '
                 'without data tiling the module is compiled again without the facts.',
        guard=('test/python/test_opinfo_floor.py::test_floor[cumulative_trapezoid-float32-0]',
               'test/python/test_opinfo_floor.py::test_floor[bincount-int64-0]'),
        remove_when='(inferred) when IREE compiles those modules with util.assume.int facts'),
)
