"""``anyshape.load`` of a generator and ``compile_generator`` load the module before its first call.

IREE runs a module's initializers (weights read from a parameter archive and
packed for data tiling) as the module joins its context, and a generator's
first ``generate`` imported HF's generation utilities: seconds each, which
made the first call many times slower than the next (docs/benchmarks.md,
"Compile cost"). Both now happen in ``load`` and at the end of
``compile_generator``. Checked in fresh processes, where nothing else has
imported or loaded them; what the first call costs is the benchmark's to
measure (bench/compile_cost.py), not a test's.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from test_generate import small_causal_lm

import anyshape

_LOAD = textwrap.dedent('''
    import sys
    import anyshape
    loaded = anyshape.load(sys.argv[1])
    module = getattr(loaded, "module", loaded)
    print(module._context is not None, "transformers.generation.utils" in sys.modules)
''')


def _fresh(*args) -> str:
    done = subprocess.run([sys.executable, "-c", _LOAD, *map(str, args)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.builds_after_export
def test_a_loaded_generator_is_ready_before_its_first_generate(tmp_path):
    """/// inline and external weights: the context exists and HF's generation
    /// is imported once load returns; the compiled generator is loaded too."""
    for params in ("inline", "external"):
        generator = anyshape.compile_generator(
            small_causal_lm("gpt2"), backend=anyshape.BackendOptions(params=params))
        assert generator.module._context is not None
        assert generator.module.stage_seconds["load"] >= 0
        saved = generator.save(tmp_path / params)
        assert _fresh(saved) == "True True"


def test_a_plain_module_loads_on_request(compiled_roberta, tmp_path):
    """/// A module without a generator is not loaded by load (an artifact loads
    /// for its signature and argument checks without IREE); preload() loads it.
    /// (An archive missing at load is left for the first call to name:
    /// test_hf_families.py, test_missing_parameter_archive_is_named.)"""
    saved = compiled_roberta.save(tmp_path / "art")
    assert _fresh(saved) == "False False"
    loaded = anyshape.load(saved)
    assert loaded.preload() and loaded._context is not None
