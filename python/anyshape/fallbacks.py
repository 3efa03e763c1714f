"""When iree-compile fails, what anyshape builds again another way: one table.

Each IREE 3.13 failure that a second build of the same module avoids is a row
of ``FALLBACKS``: the failure it answers (a predicate on the error and on how
the failed build was made), what is built again (iree-compile alone, the IREE
input, or the passes from the imported IR), what changes, which error is
raised when the second build fails too, and the warning a user gets when it
works. ``compiler.py`` asks the table at the three places a build can be
redone, from the cheapest out: a failure is first offered to the
iree-compile row, then to the IREE-input row, then to the passes row.

The rows are also this stage's workarounds (``WORKAROUNDS``, listed in
docs/workarounds.md with the tests that guard them).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from anyshape.errors import CompileError, DataTilingFallback
from anyshape.iree.flags import PEELING_FAILURE, PEELING_FLAG
from anyshape.stages import IREE_COMPILE_STAGE
from anyshape.stages import Workaround


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


WORKAROUNDS = (
    Workaround(
        name='data_tiling_fallback', stage='iree-fallback',
        where='FALLBACKS["data_tiling"], run by compiler.compile_module',
        upstream='IREE 3.13 fails to compile some modules with data tiling (e.g. '
                 '"delinearize_index" failures; a uint8 sort); with data_tiling=None the module '
                 'is compiled again without it, with a DataTilingFallback warning.',
        guard=('test/python/iree/test_data_tiling.py::test_automatic_data_tiling_falls_back_with_a_warning',
               'test/python/iree/test_data_tiling.py::test_data_tiling_compile_failure_is_an_error',
               'test/python/test_compile_cache.py::test_a_hit_warns_as_its_compile_did'),
        remove_when='(inferred) when IREE data-tiles every module it compiles without data tiling'),
    Workaround(
        name='peeling_fallback', stage='iree-fallback',
        where='FALLBACKS["peeling"], run by compiler._compile_stages (build)',
        upstream='Peeled, some dispatches (a one-row softmax over a dynamic axis) need a scratch '
                 'buffer of dynamic size, which IREE 3.13 refuses ("\'memref.alloca\' op expected '
                 'no unbounded stack allocations"); compiled again without the peeling flag.',
        guard='test/python/iree/test_targets.py::test_module_that_peeling_cannot_compile_is_compiled_without_it',
        remove_when="(inferred) when IREE's peeled code needs no unbounded stack allocation (or "
                    'peeling is dropped)'),
    Workaround(
        name='dim_facts_fallback', stage='iree-fallback',
        where='FALLBACKS["dim_facts"], run by compiler._compile_stages',
        upstream='IREE 3.13 fails on some modules with the argument dim ranges that it compiles '
                 'without them ("\'linalg.generic\' op write affecting operations on global '
                 'resources are restricted to workgroup distributed contexts": '
                 'torch.cumulative_trapezoid\'s slices; "offset 0 is out-of-bounds": bincount); '
                 'without data tiling the module is compiled again without the facts.',
        guard=('test/python/test_opinfo_floor.py::test_floor[cumulative_trapezoid-float32-0]',
               'test/python/test_opinfo_floor.py::test_floor[bincount-int64-0]'),
        remove_when='(inferred) when IREE compiles those modules with util.assume.int facts'),
)
