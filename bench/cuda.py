"""anyshape on a GPU against eager PyTorch and ``torch.compile(dynamic=True)``, in one run.

Models (``bench/models.py``, built from their configs, random weights):
roberta-base sequence classification, GPT-2 small last-token and full logits,
BERT-base masked-LM logits and T5-small's decoder logits, each in fp32 and fp16.
Compiling needs IREE's compiler and no GPU; running needs only torch, numpy,
transformers and iree-base-runtime on the GPU machine. So there are two steps,
which may run on different machines (the recipe is in ``bench/README.md``):

    python bench/cuda.py compile --out DIR [--models ...] [--dtypes float32 float16]
        [--cuda-arch sm_80] [--target cuda] [--tiny]
    python bench/cuda.py run DIR [--batches 1 8] [--check-lengths 1 7 64 128 333 512]
        [--lengths 32 128 333 512] [--runs 20] [--inductor roberta gpt2]
        [--deadline-s S] [--device cuda] [--out RESULTS]

``compile`` writes one artifact per (model, dtype) under DIR, compiled once
with a dynamic batch (up to 8) and length (T5: a source and a target length)
and ``params="external"``, and deletes its ``params.irpa``: the weights (about
500 MB for roberta-base) do not travel. ``run`` builds each model from its
config where it runs and writes the artifact's parameter archive from that
model's own weights (``anyshape.write_parameters``), so that all systems
compute with the same weights. Then, per artifact:

1. errors: at every ``--check-lengths`` L and batch, the max |difference| of
   anyshape's output from eager's in the same dtype (TF32 off in fp32). A
   difference over the tolerance (1e-4 fp32, 1e-2 fp16) also gets both
   systems' errors against eager in float64, which decides who is wrong;
2. latency at every ``--lengths`` L and batch: the systems take turns
   ``--runs`` times after 2 warm-up calls (``torch.cuda.synchronize`` around
   each call; anyshape's calls take torch CUDA tensors and return them on the
   GPU, host copies included, as a user calls it). Inductor runs for the
   ``--inductor`` models only, last, and only while the run is inside
   ``--deadline-s``: its compiles are what takes time on the GPU machine.

A figure is the median; the ratio is each system's time over the fastest's.
The decoder length of T5 is (L + 1) // 2. Writes ``cuda.md`` and ``cuda.json``
under ``--out`` after each artifact, so a run cut short keeps what it measured.

``python bench/compare.py --target cuda`` (``make bench BENCH_ARGS='--target cuda'``)
runs both steps on one machine that has the compiler and a GPU.

``compile --target cpu`` and ``run --device cpu`` run the same harness on the
CPU, as a smoke test of the script where there is no GPU (not for figures).
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MODEL_KEYS = {"roberta": "roberta-base classifier", "gpt2": "gpt2-small last-token logits",
              "gpt2-logits": "gpt2-small logits", "bert-mlm": "bert-base masked-LM logits",
              "t5": "t5-small logits"}
MAX_BATCH = 8
MAX_LEN = 512
WARMUP = 2
TOLERANCE = {"float32": 1e-4, "float16": 1e-2}
SYSTEMS = ["anyshape", "eager", "inductor"]


def _torch_dtype(name: str):
    import torch

    return {"float32": torch.float32, "float16": torch.float16, "float64": torch.float64}[name]


def _build(model_key: str, tiny: bool, seed: int = 0):
    import torch
    from models import MODELS

    build, max_len = MODELS[MODEL_KEYS[model_key]]
    torch.manual_seed(seed)
    return build(tiny=tiny).eval(), max_len


def _seq2seq(model_key: str) -> bool:
    from models import SEQ2SEQ

    return MODEL_KEYS[model_key] in SEQ2SEQ


def _inputs(model_key: str, batch: int, length: int, device: str, seed: int) -> dict:
    """Token ids with one padded row (row 0's last quarter); T5 also gets decoder ids."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 1000, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, length - length // 4:] = 0
    inputs = {"input_ids": ids, "attention_mask": mask}
    if _seq2seq(model_key):
        inputs["decoder_input_ids"] = torch.randint(
            3, 1000, (batch, (length + 1) // 2), generator=generator)
    return {name: value.to(device) for name, value in inputs.items()}


# -- step 1: compile (needs IREE's compiler, no GPU) ------------------------------------

def compile_all(out: Path, models: list[str], dtypes: list[str], target: str,
                cuda_arch: str | None, tiny: bool, iree_flags: list[str] = ()) -> None:
    import anyshape
    from anyshape.iree import flags
    from torch.export import Dim

    out.mkdir(parents=True, exist_ok=True)
    # An experiment's extra IREE options (--iree-flag): appended to the options every
    # module gets, and the compile cache bypassed (its key does not hold them).
    flags._COMMON.extend(iree_flags)
    for model_key in models:
        model, max_len = _build(model_key, tiny)
        batch = Dim("batch", min=1, max=MAX_BATCH)
        seq = Dim("seq", min=1, max=min(max_len, MAX_LEN))
        dims = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
        if _seq2seq(model_key):
            dims["decoder_input_ids"] = {0: batch, 1: Dim("target", min=1, max=MAX_LEN)}
        for dtype in dtypes:
            directory = out / f"{model_key}-{dtype}"
            example = _inputs(model_key, 2, 8, "cpu", seed=0)
            started = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                compiled = anyshape.compile(
                    model, (), example, target=target,
                    dynamic_shapes=dims, dtype=_torch_dtype(dtype),
                    cache=not iree_flags,
                    backend=anyshape.BackendOptions(cuda_arch=cuda_arch if target == "cuda" else None,
                                                    params="external"))
            seconds = time.perf_counter() - started
            for warning in caught:
                if "cuda_arch" in str(warning.message):
                    print(f"{directory.name}: {warning.message}", flush=True)
            compiled.save(directory)
            (directory / "params.irpa").unlink()
            info = {"model": model_key, "dtype": dtype, "tiny": tiny, "target": target,
                    "cuda_arch": compiled.target.cuda_arch,
                    "requested_cuda_arch": compiled.target.requested_cuda_arch,
                    "max_len": min(max_len, MAX_LEN), "compile_seconds": seconds,
                    "extra_iree_flags": list(iree_flags)}
            (directory / "bench.json").write_text(json.dumps(info, indent=2) + "\n")
            size = (directory / "module.vmfb").stat().st_size / 1e6
            print(f"{directory.name}: compiled in {seconds:.1f} s, module.vmfb {size:.1f} MB",
                  flush=True)


def compile_generators(out: Path, dtypes: list[str], target: str, cuda_arch: str | None,
                       tiny: bool) -> None:
    """GPT-2 small's ``compile_generator`` per dtype, for the decode tokens/s (``decode``)."""
    import anyshape

    out.mkdir(parents=True, exist_ok=True)
    for dtype in dtypes:
        directory = out / f"gpt2-generate-{dtype}"
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", anyshape.CudaArchSubstituted)
            generator = anyshape.compile_generator(
                _generation_model(tiny, seed=0), target=target, dtype=_torch_dtype(dtype),
                backend=anyshape.BackendOptions(
                    cuda_arch=cuda_arch if target == "cuda" else None, params="external"))
        seconds = time.perf_counter() - started
        generator.save(directory)
        (directory / "params.irpa").unlink()
        info = {"model": "gpt2", "generator": True, "dtype": dtype, "tiny": tiny,
                "target": target, "cuda_arch": generator.module.target.cuda_arch,
                "requested_cuda_arch": generator.module.target.requested_cuda_arch,
                "compile_seconds": seconds}
        (directory / "bench.json").write_text(json.dumps(info, indent=2) + "\n")
        print(f"{directory.name}: compiled in {seconds:.1f} s", flush=True)


def _generation_model(tiny: bool, seed: int):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    size = {} if not tiny else {"n_layer": 2, "n_embd": 64, "n_head": 2}
    return GPT2LMHeadModel(GPT2Config(**size)).eval()


# -- step 2: run (needs torch, numpy, transformers, iree-base-runtime; a GPU) -------------

def _synchronize(device: str) -> None:
    import torch

    if device != "cpu":
        torch.cuda.synchronize()


def _timed_ms(call, device: str) -> float:
    _synchronize(device)
    start = time.perf_counter()
    call()
    _synchronize(device)
    return (time.perf_counter() - start) * 1e3


def _max_diff(output, expected) -> float:
    return float((output.double() - expected.double()).abs().max())


def _check(info: dict, model, module, batches, lengths, device, reference) -> list[dict]:
    """Errors of anyshape against eager in the artifact's dtype, per (batch, L)."""
    import torch

    rows = []
    for batch, length, inputs in _cells(info, batches, lengths, device):
        row = {"batch": batch, "L": length}
        try:
            with torch.no_grad():
                expected = model(**inputs)
                got = module(**inputs)
                row["max_abs_diff"] = _max_diff(got, expected)
                row["max_abs"] = float(expected.double().abs().max())
                if not row["max_abs_diff"] <= TOLERANCE[info["dtype"]]:
                    exact = reference()(**inputs)  # float64 eager decides
                    row["anyshape_vs_float64"] = _max_diff(got, exact)
                    row["eager_vs_float64"] = _max_diff(expected, exact)
        except Exception as error:  # noqa: BLE001 - written into the row
            row["error"] = f"{type(error).__name__}: {error}"[:300]
        rows.append(row)
        print(f"  check batch {batch} L {length}: " + ", ".join(
            f"{k} {v:.2e}" if isinstance(v, float) else f"{k} {v}"
            for k, v in row.items() if k not in ("batch", "L")), flush=True)
    return rows


def _cells(info: dict, batches, lengths, device):
    """(batch, L, inputs) for each cell the artifact takes, the inputs seeded by the cell."""
    for batch in batches:
        for length in lengths:
            if length <= info["max_len"]:
                yield batch, length, _inputs(info["model"], batch, length, device,
                                             seed=batch * 1000 + length)


def _time(info: dict, calls: dict, batches, lengths, runs: int, device: str) -> list[dict]:
    """Medians of the systems in ``calls``, taking turns, per (batch, L)."""
    import torch

    cells = []
    for batch, length, inputs in _cells(info, batches, lengths, device):
        cell = {"batch": batch, "L": length, "samples_ms": {s: [] for s in calls},
                "errors": {}}
        with torch.no_grad():
            for system, call in calls.items():
                try:
                    for _ in range(WARMUP):
                        call(inputs)
                except Exception as error:  # noqa: BLE001 - written into the cell
                    cell["errors"][system] = f"{type(error).__name__}: {error}"[:300]
            for _ in range(runs):
                for system, call in calls.items():
                    if system not in cell["errors"]:
                        cell["samples_ms"][system].append(
                            _timed_ms(lambda: call(inputs), device))
        cell["median_ms"] = {s: statistics.median(v) if v else None
                             for s, v in cell["samples_ms"].items()}
        cells.append(cell)
        print("  time " + _latency_row({**info, **cell}), flush=True)
    return cells


def run_all(artifacts: Path, batches: list[int], check_lengths: list[int], lengths: list[int],
            runs: int, device: str, out: Path, inductor: list[str],
            deadline_s: float | None) -> dict:
    import torch

    import anyshape

    started = time.monotonic()
    # The fp32 reference in full fp32: TF32 matmuls differ from it by ~1e-3.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    directories = sorted(p.parent for p in artifacts.glob("*/bench.json")
                         if not json.loads(p.read_text()).get("generator"))
    generators = sorted(p.parent for p in artifacts.glob("*/bench.json")
                        if json.loads(p.read_text()).get("generator"))
    if not directories:
        raise SystemExit(f"{artifacts}: no artifacts (bench.json) here; run "
                         f"'python bench/cuda.py compile --out {artifacts}' first")
    environment = {
        "device": torch.cuda.get_device_name() if device != "cpu" else platform.processor(),
        "torch": torch.__version__, "python": platform.python_version(),
        "anyshape artifacts": [json.loads((d / "bench.json").read_text()) for d in directories],
        "runs": runs,
        "iree-base-runtime": _version("iree-base-runtime"),
        "transformers": _version("transformers"),
    }
    results = {"environment": environment, "checks": [], "latency": [], "decode": []}

    def artifact(directory):
        info = json.loads((directory / "bench.json").read_text())
        info["artifact"] = directory.name
        model, _ = _build(info["model"], info["tiny"], seed=1)
        model = model.to(_torch_dtype(info["dtype"]))
        anyshape.write_parameters(directory, model)
        module = anyshape.load(directory, device=device)
        return info, model.to(device), module

    def write():
        out.mkdir(parents=True, exist_ok=True)
        (out / "cuda.json").write_text(json.dumps(results, indent=2) + "\n")
        (out / "cuda.md").write_text(_tables(results))

    # 1 and 2 for every artifact: errors, then anyshape and eager timed
    for directory in directories:
        try:
            info, model, module = artifact(directory)
        except Exception as error:  # noqa: BLE001 - recorded, and the next artifact runs
            results.setdefault("failed", {})[directory.name] = f"{type(error).__name__}: {error}"
            print(f"{directory.name}: FAILED to load: {error}", flush=True)
            continue
        print(f"{directory.name} ({info['cuda_arch']}):", flush=True)

        def reference(model=model):
            return copy.deepcopy(model).double()  # the artifact's own weights, in float64

        results["checks"].append({**info, "rows": _check(
            info, model, module, batches, check_lengths, device, reference)})
        calls = {"anyshape": lambda inputs: module(**inputs),
                 "eager": lambda inputs: model(**inputs)}
        for cell in _time(info, calls, batches, lengths, runs, device):
            results["latency"].append({**info, **cell})
        write()
        del model, module
        if device != "cpu":
            torch.cuda.empty_cache()
    # GPT-2's decode, before inductor's compiles.
    for directory in generators:
        info = json.loads((directory / "bench.json").read_text())
        try:
            row = _decode(directory, info, device, runs=3)
        except Exception as error:  # noqa: BLE001 - written into the row
            row = {"error": f"{type(error).__name__}: {error}"[:300]}
        results["decode"].append({**info, "artifact": directory.name, **row})
        print(f"{directory.name}: {row}", flush=True)
        write()
        if device != "cpu":
            torch.cuda.empty_cache()
    # Inductor last: each model's compiles (one per batch-1 and dynamic shape) are slow.
    for directory in directories:
        info = json.loads((directory / "bench.json").read_text())
        if info["model"] not in inductor:
            continue
        if deadline_s is not None and time.monotonic() - started > deadline_s:
            print(f"{directory.name}: inductor skipped, past --deadline-s {deadline_s}",
                  flush=True)
            continue
        try:
            info, model, module = artifact(directory)
        except Exception as error:  # noqa: BLE001 - recorded in the first loop already
            continue
        print(f"{directory.name} with inductor:", flush=True)
        compiled = torch.compile(model, dynamic=True)
        calls = {"anyshape": lambda inputs: module(**inputs),
                 "eager": lambda inputs: model(**inputs),
                 "inductor": lambda inputs: compiled(**inputs)}
        cells = _time(info, calls, batches, lengths, runs, device)
        results["latency"] = [c for c in results["latency"]
                              if c["artifact"] != info["artifact"]] + \
            [{**info, **cell} for cell in cells]
        write()
        del model, module, compiled
        if device != "cpu":
            torch.cuda.empty_cache()
    results["environment"]["seconds"] = time.monotonic() - started
    write()
    print(_tables(results))
    return results


DECODE_PROMPT, DECODE_NEW = 17, 128


def _decode(directory: Path, info: dict, device: str, runs: int) -> dict:
    """GPT-2's greedy generation of DECODE_NEW tokens after a DECODE_PROMPT-token
    prompt at batch 1, anyshape's and HF eager's ``generate`` in turn: tokens
    equal, and decode tokens/s ((DECODE_NEW - 1) / (time of DECODE_NEW tokens -
    time of 1), the medians of ``runs``)."""
    import torch

    import anyshape

    model = _generation_model(info["tiny"], seed=1).to(_torch_dtype(info["dtype"]))
    anyshape.write_parameters(directory, torch.nn.ModuleDict({"model": model}))
    generator = anyshape.load(directory, device=device)
    model = model.to(device)
    ids = torch.randint(3, 1000, (1, DECODE_PROMPT), generator=torch.Generator().manual_seed(7))
    mask = torch.ones_like(ids)

    def anyshape_run(new):
        return generator.generate(ids, attention_mask=mask, max_new_tokens=new,
                                  min_new_tokens=new, do_sample=False)

    def eager_run(new):
        with torch.no_grad():
            return model.generate(ids.to(device), attention_mask=mask.to(device),
                                  max_new_tokens=new, min_new_tokens=new, do_sample=False,
                                  pad_token_id=model.config.eos_token_id).cpu()

    systems = {"anyshape": anyshape_run, "eager": eager_run}
    tokens = {name: run(DECODE_NEW) for name, run in systems.items()}  # warm-up, and the check
    row = {"tokens_equal": bool(torch.equal(tokens["anyshape"], tokens["eager"]))}
    if not row["tokens_equal"]:
        same = (tokens["anyshape"] == tokens["eager"]).all(0).long()
        row["first_difference"] = int(same.argmin())
    times = {name: {1: [], DECODE_NEW: []} for name in systems}
    for _ in range(runs):
        for name, run in systems.items():
            for new in (1, DECODE_NEW):
                times[name][new].append(_timed_ms(lambda: run(new), device))
    for name in systems:
        prefill = statistics.median(times[name][1])
        whole = statistics.median(times[name][DECODE_NEW])
        row[f"{name}_tokens_per_s"] = (DECODE_NEW - 1) / max(whole - prefill, 1e-9) * 1e3
        row[f"{name}_prefill_ms"] = prefill
    return row


def merge_tables(paths: list[Path], out: Path) -> None:
    """``cuda.md`` from several runs' ``cuda.json``, in the order given; a
    (batch, L) cell's check or timing in a later run replaces an earlier run's."""
    runs = [json.loads(path.read_text()) for path in paths]
    devices = {run["environment"]["device"] for run in runs}
    if len(devices) != 1:
        raise SystemExit(f"results: expected runs on one device, got {sorted(devices)}")

    def label(entry):
        return (entry["model"], entry["dtype"], entry["cuda_arch"],
                tuple(entry.get("extra_iree_flags", [])))

    checks, latency = {}, {}
    for run in runs:
        for check in run["checks"]:
            rows = {(r["batch"], r["L"]): r for r in checks.get(label(check), {}).get("rows", [])}
            rows.update({(r["batch"], r["L"]): r for r in check["rows"]})
            checks[label(check)] = {**check, "rows": [rows[k] for k in sorted(rows)]}
        for cell in run["latency"]:
            latency[(*label(cell), cell["batch"], cell["L"])] = cell
    merged = {"environment": runs[-1]["environment"],
              "checks": [checks[k] for k in sorted(checks)],
              "latency": [latency[k] for k in sorted(latency)]}
    merged["environment"]["runs"] = "/".join(sorted({str(r["environment"]["runs"]) for r in runs}))
    out.mkdir(parents=True, exist_ok=True)
    (out / "cuda.md").write_text(_tables(merged) + "\nMerged from: "
                                 + ", ".join(str(p) for p in paths) + "\n")
    print(_tables(merged))


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _ms(cell: dict, system: str) -> str:
    if system in cell["errors"]:
        return f"failed: {cell['errors'][system][:60]}"
    value = cell["median_ms"].get(system)
    return "-" if value is None else f"{value:.2f}"


def _latency_row(cell: dict) -> str:
    times = {s: v for s, v in cell["median_ms"].items() if v is not None}
    fastest = min(times.values()) if times else None

    def ratio(system):
        return f"{times[system] / fastest:.2f}" if system in times else "-"

    flags = "".join(f" {flag}" for flag in cell.get("extra_iree_flags", []))
    return (f"| {cell['model']}{flags} | {cell['dtype']} | {cell['batch']} | {cell['L']} | "
            + " | ".join(_ms(cell, s) for s in SYSTEMS) + " | "
            + " | ".join(ratio(s) for s in SYSTEMS) + " |")


def _check_cell(row: dict, dtype: str) -> str:
    if "error" in row:
        return f"failed: {row['error'][:60]}"
    text = f"{row['max_abs_diff']:.1e}"
    if row["max_abs_diff"] > TOLERANCE[dtype]:
        text += (f" OVER (float64: anyshape {row['anyshape_vs_float64']:.1e}, eager "
                 f"{row['eager_vs_float64']:.1e})")
    return text


def _tables(results: dict) -> str:
    environment = results["environment"]
    lines = [f"Device: {environment['device']}; torch {environment['torch']}, transformers "
             f"{environment.get('transformers')}, iree-base-runtime "
             f"{environment.get('iree-base-runtime')}, Python {environment['python']}.", ""]
    lines += [f"{name}: FAILED: {error}" for name, error in results.get("failed", {}).items()]
    checks = results["checks"]
    if checks:
        keys = sorted({(r["batch"], r["L"]) for c in checks for r in c["rows"]})
        lines += ["Max |anyshape - eager| in the artifact's dtype (TF32 off), per batch x L; "
                  "over the tolerance (1e-4 fp32, 1e-2 fp16), both against eager float64:", "",
                  "| model | dtype | arch | " + " | ".join(f"{b}x{n}" for b, n in keys) + " |",
                  "|" + "---|" * (3 + len(keys))]
        for check in checks:
            by_key = {(r["batch"], r["L"]): r for r in check["rows"]}
            arch = " ".join([str(check["cuda_arch"]), *check.get("extra_iree_flags", [])])
            lines.append(f"| {check['model']} | {check['dtype']} | {arch} | " + " | ".join(
                _check_cell(by_key[k], check["dtype"]) if k in by_key else "-" for k in keys)
                + " |")
        lines.append("")
    if results["latency"]:
        lines += [f"Latency, ms: medians of {environment['runs']} calls after {WARMUP} warm-up "
                  f"calls, the systems taking turns; ratio: time / the fastest's.", "",
                  "| model | dtype | batch | L | " + " | ".join(f"{s} ms" for s in SYSTEMS)
                  + " | " + " | ".join(f"{s} ratio" for s in SYSTEMS) + " |",
                  "|" + "---|" * (4 + 2 * len(SYSTEMS))]
        lines += [_latency_row(cell) for cell in results["latency"]]
    if results.get("decode"):
        lines += ["", f"GPT-2 greedy decode, batch 1, a {DECODE_PROMPT}-token prompt, "
                      f"{DECODE_NEW} new tokens; tokens/s = {DECODE_NEW - 1} / (time of "
                      f"{DECODE_NEW} tokens - time of 1), medians of 3:", "",
                  "| dtype | tokens equal to HF | anyshape tokens/s | eager tokens/s | "
                  "anyshape / eager | anyshape prefill ms | eager prefill ms |",
                  "|---|---|---|---|---|---|---|"]
        for row in results["decode"]:
            if "error" in row:
                lines.append(f"| {row['dtype']} | failed: {row['error'][:80]} | | | | | |")
                continue
            equal = "yes" if row["tokens_equal"] else \
                f"no (from token {row.get('first_difference')})"
            lines.append(
                f"| {row['dtype']} | {equal} | {row['anyshape_tokens_per_s']:.1f} | "
                f"{row['eager_tokens_per_s']:.1f} | "
                f"{row['anyshape_tokens_per_s'] / row['eager_tokens_per_s']:.2f} | "
                f"{row['anyshape_prefill_ms']:.2f} | {row['eager_prefill_ms']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)

    def compile_options(step):
        step.add_argument("--models", nargs="+", choices=list(MODEL_KEYS),
                          default=list(MODEL_KEYS))
        step.add_argument("--dtypes", nargs="+", choices=list(TOLERANCE),
                          default=list(TOLERANCE))
        step.add_argument("--cuda-arch", default=None,
                          help="the GPU's architecture (default: anyshape's, sm_80)")
        step.add_argument("--tiny", action="store_true", help="2-layer models (smoke tests)")

    def run_options(step):
        step.add_argument("--batches", nargs="+", type=int, default=[1, 8])
        step.add_argument("--check-lengths", nargs="+", type=int,
                          default=[1, 7, 64, 128, 333, 512])
        step.add_argument("--lengths", nargs="+", type=int, default=[32, 128, 333, 512])
        step.add_argument("--runs", type=int, default=20)
        step.add_argument("--inductor", nargs="*", choices=list(MODEL_KEYS),
                          default=["roberta", "gpt2"],
                          help="the models timed with torch.compile(dynamic=True) too")
        step.add_argument("--deadline-s", type=float, default=None,
                          help="start no inductor model after this many seconds")
        step.add_argument("--out", type=Path, default=HERE / "results")

    comp = steps.add_parser("compile", help="compile the artifacts (no GPU needed)")
    comp.add_argument("--out", type=Path, required=True)
    compile_options(comp)
    comp.add_argument("--target", choices=["cuda", "cpu"], default="cuda",
                      help="cpu: a smoke test of the harness without a GPU")
    comp.add_argument("--iree-flag", action="append", default=[], dest="iree_flags",
                      help="an experiment: one more IREE option for every module (repeatable)")
    comp.add_argument("--generator", action="store_true",
                      help="also GPT-2's compile_generator per dtype (decode tokens/s)")
    run = steps.add_parser("run", help="check and time the artifacts compiled by 'compile'")
    run.add_argument("artifacts", type=Path)
    run_options(run)
    run.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu (smoke)")
    table = steps.add_parser("table", help="one cuda.md from the cuda.json of several runs "
                                           "on one GPU (runs cut short by a time limit)")
    table.add_argument("results", nargs="+", type=Path)
    table.add_argument("--out", type=Path, required=True)
    both = steps.add_parser("all", help="compile, then run, on this machine")
    compile_options(both)
    run_options(both)
    args = parser.parse_args(argv)
    if any(b > MAX_BATCH for b in getattr(args, "batches", [])):
        parser.error(f"--batches: the artifacts take batch 1..{MAX_BATCH}")
    for option in ("check_lengths", "lengths"):
        if any(not 1 <= n <= MAX_LEN for n in getattr(args, option, [])):
            parser.error(f"--{option.replace('_', '-')}: the artifacts take L 1..{MAX_LEN}")
    run_arguments = lambda directory, device: run_all(  # noqa: E731
        directory, args.batches, args.check_lengths, args.lengths, args.runs, device, args.out,
        args.inductor, args.deadline_s)
    if args.step == "table":
        merge_tables(args.results, args.out)
    elif args.step == "compile":
        compile_all(args.out, args.models, args.dtypes, args.target, args.cuda_arch, args.tiny,
                    args.iree_flags)
        if args.generator:
            compile_generators(args.out, args.dtypes, args.target, args.cuda_arch, args.tiny)
    elif args.step == "run":
        run_arguments(args.artifacts, args.device)
    else:
        import torch

        if not torch.cuda.is_available():
            parser.error("no CUDA device here: compile here with 'bench/cuda.py compile' and "
                         "run on the GPU machine with 'bench/cuda.py run' (bench/README.md)")
        workdir = Path(tempfile.mkdtemp(prefix="anyshape-cuda-bench-"))
        try:
            compile_all(workdir, args.models, args.dtypes, "cuda", args.cuda_arch, args.tiny)
            run_arguments(workdir, "cuda")
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
