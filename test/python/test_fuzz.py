"""Fuzzing: seeded random programs (``fuzz_programs.py``) through the default pipeline.

Each program is exported with a dynamic batch and length, imported to the torch
dialect, and given to ``anyshape.check``: the module as imported and after the
default passes, both compiled by IREE for the CPU, run on the same random
inputs at random (batch, length) within the dims' ranges. A case fails on any
output beyond the tolerance and on any exception (an import, pass or IREE
failure is a crash, which is a failure); its message holds the program's
source, which rebuilds it.

Seeds are built fifty to a module (``Bundle``); a seed that fails there is
checked again alone, whose failure names it. ``make test`` runs seeds 0-49,
``make test-full`` 0-99 (``extent.py``), ``make fuzz`` 500 (``ANYSHAPE_FUZZ_COUNT``
and ``ANYSHAPE_FUZZ_START`` pick the range).
"""

from __future__ import annotations

import os
import traceback

import pytest
import torch
from extent import quick_or_full
from fuzz_programs import EXAMPLE_SHAPE, MAX_LENGTH, dynamic_shapes, example_inputs, generate

import anyshape
from anyshape.tools.check import check
from anyshape.passes import DEFAULT_PIPELINE

START = int(os.environ.get("ANYSHAPE_FUZZ_START", "0"))
COUNT = int(os.environ.get("ANYSHAPE_FUZZ_COUNT", quick_or_full("50", "100")))
TRIALS = 2


# Seeds are checked BUNDLE at a time: one module runs their programs side by
# side on the same inputs (two IREE builds a bundle, not two a seed: each build
# costs about 4 s besides its programs). A seed whose bundle crashed or went
# wrong anywhere is checked again alone, so the failure names its program, as
# before bundling. A bundle draws BUNDLE_TRIALS sizes: as many over 100 seeds
# as ten bundles of ten drew.
BUNDLE = 50
BUNDLE_TRIALS = 10


class Bundle(torch.nn.Module):
    def __init__(self, programs):
        super().__init__()
        self.programs = torch.nn.ModuleList(programs)

    def forward(self, x, ids, mask):
        outputs = []
        for program in self.programs:
            result = program(x, ids, mask)
            outputs.extend(result if isinstance(result, tuple) else (result,))
        return tuple(outputs)


def _check(module, seed, trials=TRIALS):
    text = str(anyshape.import_torch(module, example_inputs(*EXAMPLE_SHAPE),
                                     dynamic_shapes=dynamic_shapes()))
    return check(text, list(DEFAULT_PIPELINE), trials=trials, seed=seed, max_size=MAX_LENGTH)


def _mismatches(trials, first: int = 0, count: int | None = None) -> list[str]:
    """The outputs ``first`` to ``first + count`` (all from ``first`` when None)
    that differ."""
    end = None if count is None else first + count
    return [f"sizes {t.sizes}: {e.output}: max abs {e.max_abs:.3g}, max rel {e.max_rel:.3g}"
            for t in trials for e in t.errors[first:end] if not e.ok]


_bundles: dict[int, dict[int, bool]] = {}


def _passed_in_bundle(seed: int) -> bool:
    """Whether ``seed``'s outputs were exact in its bundle's check (which runs
    once, for the bundle's first seed to ask)."""
    start = START + (seed - START) // BUNDLE * BUNDLE
    if start not in _bundles:
        seeds = range(start, min(start + BUNDLE, START + COUNT))
        outcome = dict.fromkeys(seeds, False)
        try:
            programs = [generate(s).build() for s in seeds]
            example = example_inputs(*EXAMPLE_SHAPE)
            counts = [len(r) if isinstance(r, tuple) else 1
                      for r in (p(*example) for p in programs)]
            trials = _check(Bundle(programs), start, BUNDLE_TRIALS)
            if all(len(t.errors) == sum(counts) for t in trials) and trials:
                first = 0
                for s, count in zip(seeds, counts):
                    outcome[s] = not _mismatches(trials, first, count)
                    first += count
        except Exception:  # noqa: BLE001 - its seeds are checked alone, which names the crash
            pass
        _bundles[start] = outcome
    return _bundles[start][seed]


@pytest.mark.parametrize("seed", range(START, START + COUNT))
def test_default_pipeline_keeps_program_exact(seed):
    if _passed_in_bundle(seed):
        return
    program = generate(seed)
    try:
        # Alone at the sizes its bundle drew (the same seed and count), so that a
        # mismatch seen there is seen again.
        start = START + (seed - START) // BUNDLE * BUNDLE
        trials = _check(program.build(), start, BUNDLE_TRIALS)
    except Exception:  # noqa: BLE001 - a crash anywhere is this case's failure
        pytest.fail(f"{program.describe()}\ncrashed:\n{traceback.format_exc()}", pytrace=False)
    bad = _mismatches(trials)
    assert not bad, f"{program.describe()}\nmismatch:\n" + "\n".join(bad)
    assert all(t.errors for t in trials), "no outputs compared"


def test_fuzz_harness_catches_a_wrong_rewrite(test_passes):
    """The same harness with a pass that drops every tanh: the first program that
    uses one must fail the check, or the fuzzing above could not fail either."""
    program = next(p for p in map(generate, range(1000)) if "torch.tanh(" in p.source)
    text = str(anyshape.import_torch(program.build(), example_inputs(*EXAMPLE_SHAPE),
                                     dynamic_shapes=dynamic_shapes()))
    broken = [*DEFAULT_PIPELINE, "anyshape-test-drop-op{op-name=torch.aten.tanh}"]
    trials = check(text, broken, trials=TRIALS, seed=program.seed, max_size=MAX_LENGTH)
    assert not any(t.ok for t in trials), program.describe()
