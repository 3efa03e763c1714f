"""Fuzzing: seeded random programs (``fuzz_programs.py``) through the default pipeline.

Each program is exported with a dynamic batch and length, imported to the torch
dialect, and given to ``anyshape.check``: the module as imported and after the
default passes, both compiled by IREE for the CPU, run on the same random
inputs at random (batch, length) within the dims' ranges. A case fails on any
output beyond the tolerance and on any exception (an import, pass or IREE
failure is a crash, which is a failure); its message holds the program's
source, which rebuilds it.

``make test`` runs seeds 0-99; ``make fuzz`` runs 500 (``ANYSHAPE_FUZZ_COUNT``
and ``ANYSHAPE_FUZZ_START`` pick the range).
"""

from __future__ import annotations

import os
import traceback

import pytest
from fuzz_programs import EXAMPLE_SHAPE, MAX_LENGTH, dynamic_shapes, example_inputs, generate

import anyshape
from anyshape.check import check
from anyshape.passes import DEFAULT_PIPELINE

START = int(os.environ.get("ANYSHAPE_FUZZ_START", "0"))
COUNT = int(os.environ.get("ANYSHAPE_FUZZ_COUNT", "100"))
TRIALS = 2


@pytest.mark.parametrize("seed", range(START, START + COUNT))
def test_default_pipeline_keeps_program_exact(seed):
    program = generate(seed)
    try:
        module = program.build()
        text = str(anyshape.import_torch(module, example_inputs(*EXAMPLE_SHAPE),
                                         dynamic_shapes=dynamic_shapes()))
        trials = check(text, list(DEFAULT_PIPELINE), trials=TRIALS, seed=seed,
                       max_size=MAX_LENGTH)
    except Exception:  # noqa: BLE001 - a crash anywhere is this case's failure
        pytest.fail(f"{program.describe()}\ncrashed:\n{traceback.format_exc()}", pytrace=False)
    bad = [f"sizes {t.sizes}: {e.output}: max abs {e.max_abs:.3g}, max rel {e.max_rel:.3g}"
           for t in trials for e in t.errors if not e.ok]
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
