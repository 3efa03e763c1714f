"""bench/generate.py's ``--interleave``: every system warmed, then one sample per system in turn."""

import importlib.util
from pathlib import Path

import pytest
import torch

_BENCH = Path(__file__).resolve().parents[2] / "bench" / "generate.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_generate", _BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_interleaved_samples_alternate_between_systems_and_keep_each_ones_tokens():
    bench = _bench()
    calls = []

    def system(name, token):
        def run(ids, mask, new):
            calls.append((name, new))
            return torch.full((ids.shape[0], ids.shape[1] + new), token)
        return run

    made = {"a": system("a", 1), "b": system("b", 2)}
    info = {"new_tokens": 4, "runs": {}, "errors": {}}
    ids = torch.zeros(2, 3, dtype=torch.long)
    bench._measure_in_turn(made, "b2", (ids, torch.ones_like(ids)), 3, "model", info)
    warm = [("a", 1), ("a", 4), ("b", 1), ("b", 4)]
    prefills = [("a", 1)] * bench.PREFILL_CALLS
    rounds = (prefills + [("a", 4)] + [("b", 1)] * bench.PREFILL_CALLS + [("b", 4)]) * 3
    assert calls == warm + rounds
    assert set(info["runs"]["b2"]) == {"a", "b"}
    assert int(info["runs"]["b2"]["b"]["tokens"][0, -1]) == 2
    assert not info["errors"]


def test_a_system_that_fails_mid_run_is_reported_and_the_others_go_on():
    bench = _bench()
    state = {"b": 0}

    def good(ids, mask, new):
        return ids

    def flaky(ids, mask, new):
        state["b"] += 1
        if state["b"] > 3:
            raise RuntimeError("out of memory")
        return ids

    info = {"new_tokens": 4, "runs": {}, "errors": {}}
    ids = torch.zeros(1, 3, dtype=torch.long)
    bench._measure_in_turn({"a": good, "b": flaky}, "b1", (ids, ids), 3, "model", info)
    assert set(info["runs"]["b1"]) == {"a"}
    assert info["errors"] == {"b b1": "RuntimeError: out of memory"}


def test_short_prefills_are_taken_several_times_and_the_median_counts(monkeypatch):
    bench = _bench()
    prefill_seconds = iter([0.3, 0.1, 0.2, 0.5, 0.4, 9.0])
    clock = {"now": 0.0}
    calls = []

    def run(ids, mask, new):
        calls.append(new)
        clock["now"] += next(prefill_seconds) if new == 1 else 2.0
        return ids

    monkeypatch.setattr(bench.time, "perf_counter", lambda: clock["now"])
    ids = torch.zeros(1, 3, dtype=torch.long)
    prefill, whole, _ = bench.sample(run, ids, ids, 4)
    # 0.3 + 0.1 + 0.2 + 0.5 passes the one-second budget: four calls, median 0.25.
    assert calls == [1, 1, 1, 1, 4]
    assert prefill == pytest.approx(0.25)
    assert whole == pytest.approx(2.0)


def test_a_long_prefill_is_taken_once(monkeypatch):
    bench = _bench()
    clock = {"now": 0.0}
    calls = []

    def run(ids, mask, new):
        calls.append(new)
        clock["now"] += 6.0 if new == 1 else 30.0
        return ids

    monkeypatch.setattr(bench.time, "perf_counter", lambda: clock["now"])
    ids = torch.zeros(1, 3, dtype=torch.long)
    prefill, _, _ = bench.sample(run, ids, ids, 4)
    assert calls == [1, 4]
    assert prefill == pytest.approx(6.0)


def test_a_label_names_a_run_or_rows_by_tokens_for_odd_length_sweeps():
    bench = _bench()
    assert bench.run_lengths("b4-mixed", bench.RUNS, "p") == [333, 17, 120, 65]
    assert bench.run_lengths("b1-p33", bench.RUNS, "p") == [33]
    assert bench.run_lengths("b3-p7", bench.RUNS, "p") == [7, 7, 7]
    assert bench.run_lengths("b2-s65", bench.SEQ2SEQ_RUNS, "s") == [65, 65]
    for unknown in ("b1-s33", "b0-p3", "b1-p0", "b1-p", "p33", "b1-p33x"):
        assert bench.run_lengths(unknown, bench.RUNS, "p") is None, unknown


def test_an_unknown_label_is_refused_naming_it_and_the_forms_taken(capsys, tmp_path):
    bench = _bench()
    with pytest.raises(SystemExit):
        bench.main(["--models", "gpt2", "--systems", "eager", "--labels", "b1-p17,b1-q9",
                    "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert "--labels: unknown b1-q9 for gpt2" in err and "b<rows>-p<tokens>" in err
