"""The compile cache (anyshape/driver/compile_cache.py): hits, what the key covers,
damaged and half-written entries, two processes filling one entry (one
compiles, the other waits for it), cache=False."""

import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch
from torch.export import Dim

import anyshape
from anyshape.driver import compile_cache


class Small(torch.nn.Module):
    def __init__(self, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.weight = torch.nn.Parameter(torch.randn(8, 8, generator=g))

    def forward(self, x):
        return torch.tanh(x @ self.weight)


DIMS = ({0: Dim("rows")},)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(compile_cache.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def entries(root: Path) -> list[Path]:
    return sorted(p for p in (root / compile_cache.LAYOUT).glob("*/*")
                  if p.is_dir() and not p.name.startswith("."))


def from_cache(module) -> bool:
    return "cache" in module.stage_seconds and "iree-compile" not in module.stage_seconds


def test_a_hit_loads_in_well_under_a_second_and_runs_the_same(cache_dir):
    model = Small().eval()
    first = anyshape.compile(model, (torch.randn(3, 8),), dynamic_shapes=DIMS)
    second = anyshape.compile(model, (torch.randn(3, 8),), dynamic_shapes=DIMS)
    assert not from_cache(first) and from_cache(second)
    assert second.stage_seconds["cache"] < 0.5, second.stage_seconds
    assert len(entries(cache_dir)) == 1
    x = torch.randn(7, 8)
    assert torch.equal(first(x), second(x)) and torch.allclose(second(x), model(x), atol=1e-6)
    assert second.vmfb == first.vmfb
    # Its stages are compiled again when asked for.
    assert "torch.aten.tanh" in second.ir("import") and second.stages == first.stages


def test_the_key_covers_weights_options_and_versions(cache_dir, monkeypatch):
    x = torch.randn(3, 8)
    anyshape.compile(Small(0), (x,), dynamic_shapes=DIMS)
    other_weights = anyshape.compile(Small(1), (x,), dynamic_shapes=DIMS)
    assert not from_cache(other_weights)
    assert not from_cache(anyshape.compile(Small(0), (x,), dynamic_shapes=DIMS, passes=[]))
    assert not from_cache(anyshape.compile(Small(0), (x,), dynamic_shapes=DIMS,
                                           backend=anyshape.BackendOptions(data_tiling=False)))
    assert not from_cache(anyshape.compile(Small(0), (x,), dynamic_shapes=({0: Dim("n", max=64)},)))
    assert not from_cache(anyshape.compile(Small(0), (x,), dynamic_shapes=DIMS,
                                           backend=anyshape.BackendOptions(target_cpu="x86-64-v2")))
    assert len(entries(cache_dir)) == 6
    # another anyshape source or IREE version: compiled again
    monkeypatch.setattr(compile_cache, "source_digest", lambda: "a changed pass")
    assert not from_cache(anyshape.compile(Small(0), (x,), dynamic_shapes=DIMS))
    from anyshape import mlir

    real = mlir.versions
    monkeypatch.setattr(mlir, "versions", lambda: {**real(), "iree": "0.0.0"})
    assert not from_cache(anyshape.compile(Small(0), (x,), dynamic_shapes=DIMS))
    assert len(entries(cache_dir)) == 8
    # The other weights' artifact computes with its weights.
    assert torch.allclose(other_weights(x), Small(1)(x), atol=1e-6)


@pytest.mark.parametrize("damage", ["truncated module", "altered manifest", "no record",
                                    "empty directory"])
def test_a_damaged_or_half_written_entry_is_compiled_again(cache_dir, damage):
    model = Small().eval()
    anyshape.compile(model, (torch.randn(3, 8),), dynamic_shapes=DIMS)
    [entry] = entries(cache_dir)
    if damage == "truncated module":
        vmfb = entry / "module.vmfb"
        vmfb.write_bytes(vmfb.read_bytes()[:1000])
    elif damage == "altered manifest":
        (entry / "manifest.json").write_text((entry / "manifest.json").read_text()
                                             .replace('"rows"', '"other"'))
    elif damage == "no record":  # as a writer that died before its last file
        (entry / compile_cache.RECORD).unlink()
    else:
        for path in entry.iterdir():
            path.unlink()
    again = anyshape.compile(model, (torch.randn(3, 8),), dynamic_shapes=DIMS)
    assert not from_cache(again), f"{damage}: loaded"
    x = torch.randn(5, 8)
    assert torch.allclose(again(x), model(x), atol=1e-6)
    # ... and the entry is whole again.
    assert from_cache(anyshape.compile(model, (torch.randn(3, 8),), dynamic_shapes=DIMS))


def test_a_staging_directory_left_by_a_dead_writer_is_not_an_entry(cache_dir):
    model = Small().eval()
    anyshape.compile(model, (torch.randn(3, 8),), dynamic_shapes=DIMS)
    [entry] = entries(cache_dir)
    staging = entry.with_name(f".{entry.name[:16]}-dead")
    staging.mkdir()
    (staging / "module.vmfb").write_bytes(b"half")
    assert from_cache(anyshape.compile(model, (torch.randn(3, 8),), dynamic_shapes=DIMS))


FILL = textwrap.dedent("""
    import sys, torch, anyshape
    from torch.export import Dim
    sys.path.insert(0, {here!r})
    from test_compile_cache import Small
    model = Small().eval()
    compiled = anyshape.compile(model, (torch.randn(3, 8),), dynamic_shapes=({{0: Dim("rows")}},))
    x = torch.randn(5, 8)
    assert torch.allclose(compiled(x), model(x), atol=1e-6)
    print("cache" in compiled.stage_seconds)
""")


@pytest.mark.builds_in_subprocess
def test_two_processes_filling_one_entry_at_once(cache_dir, tmp_path):
    script = tmp_path / "fill.py"
    script.write_text(FILL.format(here=str(Path(__file__).parent)))
    env = {**os.environ, compile_cache.CACHE_ENV: str(cache_dir)}
    procs = [subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err[-2000:]
    # One compiled; the other waited for its lock and read the entry.
    assert sorted(out.strip() for out, _ in outs) == ["False", "True"], outs
    [entry] = entries(cache_dir)
    assert not [p for p in entry.parent.iterdir() if p.name.startswith(".")], "staging left"
    third = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                           timeout=600)
    assert third.returncode == 0 and third.stdout.strip() == "True", third.stderr[-2000:]


def test_a_compile_waits_for_the_lock_until_its_holder_exits(cache_dir):
    """/// The lock is the OS's: a holder killed mid-compile frees it."""
    key = "0" * 64
    (cache_dir / compile_cache.LOCKS).mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time\n"
         "lock = open(sys.argv[1], 'a'); fcntl.flock(lock, fcntl.LOCK_EX)\n"
         "print('held', flush=True); time.sleep(600)",
         str(cache_dir / compile_cache.LOCKS / f"{key}.lock")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        messages, entered = [], threading.Event()

        def fill():
            with compile_cache.filling(key, messages.append):
                entered.set()

        thread = threading.Thread(target=fill, daemon=True)
        thread.start()
        assert not entered.wait(1.0), "entered while another process held the lock"
    finally:
        holder.kill()
        holder.wait()
    assert entered.wait(30), "still waiting after the holder died"
    assert messages and messages[0].startswith("waiting for another process"), messages


def test_cache_false_neither_reads_nor_writes(cache_dir):
    model = Small().eval()
    anyshape.compile(model, (torch.randn(3, 8),), dynamic_shapes=DIMS, cache=False)
    assert not entries(cache_dir)
    anyshape.compile(model, (torch.randn(3, 8),), dynamic_shapes=DIMS)
    assert not from_cache(anyshape.compile(model, (torch.randn(3, 8),), dynamic_shapes=DIMS,
                                           cache=False))


class ByteSort(torch.nn.Module):
    def forward(self, x):
        return torch.sort(x, -1)  # IREE 3.13 compiles it only without data tiling


def test_a_hit_warns_as_its_compile_did(cache_dir):
    """A DataTilingFallback is part of what the artifact is: said again on a hit."""
    x = (torch.rand(3, 6) * 200).to(torch.uint8)
    for attempt in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled = anyshape.compile(ByteSort(), (x,), dynamic_shapes=({0: Dim("rows")},))
        fallbacks = [w for w in caught if issubclass(w.category, anyshape.DataTilingFallback)]
        assert len(fallbacks) == 1 and fallbacks[0].filename == __file__, \
            (attempt, [(str(w.message)[:80], w.filename) for w in caught])
        assert from_cache(compiled) == (attempt == 1)


def test_the_source_digest_reads_every_kernel_file():
    """/// A module links the kernels' code into itself: a changed kernel source
    or header must change the key, or a cached artifact keeps the old code."""
    from anyshape.iree.kernels import linear_rows

    kernels = [p for p in linear_rows.SOURCE.parent.iterdir() if p.is_file()]
    assert {p.suffix for p in kernels} >= {".c", ".h"}
    assert all(p.suffix in compile_cache.SOURCE_SUFFIXES for p in kernels)


def _use(entry: Path, at: float) -> None:
    os.utime(entry / compile_cache.RECORD, (at, at))


def _compile_seed(seed: int):
    return anyshape.compile(Small(seed).eval(), (torch.randn(3, 8),), dynamic_shapes=DIMS)


def test_the_entries_used_least_recently_go_past_the_bound(cache_dir, monkeypatch):
    """Three entries, the first used again (a hit) after the second was
    written: a bound of two entries keeps the first and the third."""
    first = _compile_seed(1)
    assert not from_cache(first)
    [one] = entries(cache_dir)
    _use(one, 1_000_000)
    _compile_seed(2)
    [two] = [e for e in entries(cache_dir) if e != one]
    _use(two, 2_000_000)
    assert from_cache(_compile_seed(1))  # a hit is a use
    # Room for two entries and a quarter, not three: the entries' sizes differ
    # by a few bytes (their records).
    sizes = {e.key: e.bytes for e in compile_cache.held(cache_dir)}
    monkeypatch.setenv(compile_cache.SIZE_ENV,
                       str(int(1.25 * (sizes[one.name] + sizes[two.name]))))
    _compile_seed(3)
    kept = {e.name for e in entries(cache_dir)}
    assert one.name in kept and two.name not in kept and len(kept) == 2
    assert not from_cache(_compile_seed(2))  # compiled again, not served


def test_an_artifact_larger_than_the_bound_is_not_kept(cache_dir, monkeypatch):
    monkeypatch.setenv(compile_cache.SIZE_ENV, "1K")
    with pytest.warns(UserWarning, match=r"compile cache: the artifact \(.* MiB\) is larger "
                                         r"than the cache's bound \(0\.0 MiB, "
                                         r"ANYSHAPE_CACHE_SIZE\); not kept"):
        _compile_seed(4)
    assert entries(cache_dir) == []


@pytest.mark.parametrize("text, size", [("20G", 20 * 2 ** 30), ("500M", 500 * 2 ** 20),
                                        ("1.5K", 1536), ("4096", 4096), ("2GiB", 2 * 2 ** 30),
                                        ("0", 0)])
def test_the_bound_is_read_as_a_size(monkeypatch, text, size):
    monkeypatch.setenv(compile_cache.SIZE_ENV, text)
    assert compile_cache.size_bound() == size


def test_a_bad_bound_is_refused_before_compiling(cache_dir, monkeypatch):
    monkeypatch.setenv(compile_cache.SIZE_ENV, "lots")
    with pytest.raises(ValueError, match=r"ANYSHAPE_CACHE_SIZE: expected a size such as 20G, "
                                         r"500M or a count of bytes \(0 keeps nothing\), "
                                         r"got 'lots'"):
        anyshape.compile(Small().eval(), (torch.randn(3, 8),), dynamic_shapes=DIMS)


def test_trim_removes_staging_directories_left_a_day_ago(tmp_path):
    shard = tmp_path / compile_cache.LAYOUT / "ab"
    old, fresh = shard / ".abcdef-dead", shard / ".abcdef-writing"
    for staging in (old, fresh):
        staging.mkdir(parents=True)
        (staging / "module.vmfb").write_bytes(b"x" * 10)
    os.utime(old, (time.time() - 2 * 24 * 3600,) * 2)
    compile_cache.trim(2 ** 30, root=tmp_path)
    assert not old.exists() and fresh.exists()


def test_cache_info_lists_the_entries_by_last_use(cache_dir, capsys):
    from anyshape.tools.compile import main

    _compile_seed(5)
    _compile_seed(6)
    held = compile_cache.held(cache_dir)
    assert main(["--cache-info"]) == 0
    out = capsys.readouterr().out
    assert f"compile cache: {cache_dir}" in out
    assert "bound: 20.00 GiB (ANYSHAPE_CACHE_SIZE)" in out
    assert "in 2 entries" in out
    lines = [line for line in out.splitlines() if line.startswith("  ")]
    assert [line.split()[0] for line in lines] == [entry.key[:16] for entry in held]
