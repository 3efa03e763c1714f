"""anyshape against IREE on a static export, eager PyTorch, inductor and onnxruntime, in one run.

roberta-base sequence classification (its logits) and GPT-2 small last-token
logits, fp32 on CPU, random weights (``bench/models.py``), at each batch and
sequence length asked for. The systems, side by side:

- ``anyshape``: ``anyshape.compile`` once with a dynamic batch and length,
  the default passes;
- ``anyshape passes=[]``: the same export and IREE build without anyshape's
  passes;
- ``IREE static``: ``anyshape.compile`` with the default passes and no dynamic
  dims, i.e. ``torch.export`` at exactly that (batch, L) compiled by IREE, one
  build per shape (what a per-shape static compile costs and gives);
- ``eager``: the PyTorch module under ``torch.no_grad()``;
- ``inductor``: ``torch.compile(model, dynamic=True)``;
- ``onnxruntime``: ``torch.onnx.export`` with a dynamic batch and length, run
  by an ``InferenceSession`` on the CPU execution provider.

Every compile runs in a child process of its own (its time and peak RSS are
that process's; an ``iree-compile`` or inductor compile worker shows up as
the largest subprocess); the artifact is saved there and loaded here. The
memory of a run is measured in a fresh process per system as well, at each
batch's longest length. In each
(model, batch, L) cell every system is warmed up (2 calls, the first checked
against eager), then the systems run round-robin ``--runs`` times, so drift on
the machine hits them alike; a figure is the median. A system whose output is
further than 1e-3 from eager is reported as WRONG, not with a time. A failure
(compile error, run error) is written into its cell and the run goes on.

    python bench/compare.py [--models roberta gpt2] [--batches 1 8]
        [--lengths 16 32 64 128 256 512] [--systems ...] [--runs 10]
        [--threads N] [--out bench/results] [--tiny]

Writes ``compare.md`` (tables), ``compare.json`` (all samples) and
``compare.png`` (latency against length) under ``--out`` and prints the tables.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# The systems alternate in one process. With OpenMP's default active wait,
# torch's threads keep spinning after each eager/inductor call and take the
# cores from IREE's workers on the next call (and IREE's from torch): measured
# at L = 128, anyshape took 1003 ms after eager calls with it and 483 ms with
# PASSIVE. Set before torch is imported (child processes inherit it).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

TOLERANCE = 1e-3  # max |system - eager| above which a system's time is not reported
# bfloat16 products (matmul_precision="medium") are off by bfloat16's rounding:
# their own bound, and the table shows each cell's difference.
TOLERANCES = {"anyshape-bf16": 5e-2}
# Systems the sweep and the served workload run only when named in --systems.
OPTIONAL_SYSTEMS = ["anyshape-bf16", "anyshape-iree-products"]
WARMUP = 2
CHILD_TIMEOUT_S = 3600
EXAMPLE_SHAPE = (2, 8)  # for the dynamic exports: batch 1 would be specialized by torch.export

MODEL_KEYS = {"roberta": "roberta-base classifier", "gpt2": "gpt2-small last-token logits"}
SYSTEMS = {  # key -> label in the tables
    "anyshape": "anyshape",
    "anyshape-nopasses": "anyshape passes=[]",
    "anyshape-packed": "anyshape padding=\"eliminate\"",
    "anyshape-bf16": "anyshape matmul_precision=\"medium\"",
    "anyshape-iree-products": "anyshape product_kernel=\"iree\"",
    "iree-static": "IREE static",
    "eager": "eager",
    "inductor": "inductor",
    "onnxruntime": "onnxruntime",
}
BASELINE = "anyshape"


# -- memory --------------------------------------------------------------------
#
# Not RUSAGE_CHILDREN: on Linux a child's ru_maxrss starts from the high-water
# mark of the memory it had before exec, and a vfork()ed child (how Python's
# subprocess starts iree-compile) has its parent's, so an iree-compile started
# by a 600 MB Python process reads 600 MB whatever it used. The subprocesses
# are sampled instead (VmHWM is exact per process; the tree's sum is sampled).

SAMPLE_S = 0.05


def _kib_to_mb(kib: int) -> float:
    return kib / 1024  # ru_maxrss and /proc/PID/status are in KiB on Linux


def _status(field: str, pid: int | str = "self") -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    return int(match.group(1)) if match else None


def _reset_peak_rss() -> bool:
    """Set this process's VmHWM back to its current RSS (Linux >= 4.0)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(f"/proc/{entry.name}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


class TreeSampler(threading.Thread):
    """Samples a process and its descendants: the largest descendant's VmHWM and the tree's RSS sum."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.sub_kib, self.tree_kib = pid, 0, 0
        self._done = threading.Event()

    def run(self):
        while not self._done.is_set():
            total = _status("VmRSS", self.pid) or 0
            for child in _descendants(self.pid):
                self.sub_kib = max(self.sub_kib, _status("VmHWM", child) or 0)
                total += _status("VmRSS", child) or 0
            self.tree_kib = max(self.tree_kib, total)
            self._done.wait(SAMPLE_S)

    def stop(self) -> dict:
        self._done.set()
        self.join()
        return {"sub_mb": _kib_to_mb(self.sub_kib), "tree_mb": _kib_to_mb(self.tree_kib)}


# -- the models and their inputs --------------------------------------------------

def build_model(model_key: str, tiny: bool, state_dict_path: str | None = None):
    import torch
    from models import MODELS

    build, max_len = MODELS[MODEL_KEYS[model_key]]
    model = build(tiny=tiny).eval()
    if state_dict_path is not None:
        model.load_state_dict(torch.load(state_dict_path, weights_only=True))
    return model, max_len


def make_inputs(batch: int, length: int, seed: int):
    import torch

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 1000, (batch, length), generator=generator)
    return ids, torch.ones(batch, length, dtype=torch.long)


def dynamic_shapes(max_batch: int, max_len: int):
    from torch.export import Dim

    batch, seq = Dim("batch", min=1, max=max_batch), Dim("seq", min=1, max=max_len)
    return {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}


# -- child processes: one compile each -----------------------------------------------

def child_main(task_path: str) -> int:
    """Run one compile task (JSON file) and write its result beside it."""
    task = json.loads(Path(task_path).read_text())
    result_path = Path(task["result"])
    try:
        result = _child_task(task)
    except BaseException as error:  # noqa: BLE001 - reported to the parent
        result = {"error": _brief(error), "traceback": traceback.format_exc()}
    result["self_mb"] = _kib_to_mb(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    result_path.write_text(json.dumps(result))
    return 0


def _child_task(task: dict) -> dict:
    import torch

    torch.set_num_threads(task["threads"])
    kind, out = task["kind"], Path(task.get("out", "."))
    if kind == "run":
        return _child_run(task)
    model, max_len = build_model(task["model"], task["tiny"], task["state_dict"])
    if kind == "anyshape":
        import anyshape

        if task["dynamic"]:
            ids, mask = make_inputs(*EXAMPLE_SHAPE, seed=0)
            shapes = dynamic_shapes(task["max_batch"], max_len)
        else:
            ids, mask = make_inputs(*task["shape"], seed=0)
            shapes = None
        start = time.perf_counter()
        module = anyshape.compile(model, (ids,), {"attention_mask": mask}, dynamic_shapes=shapes,
                                  passes=task["passes"], padding=task.get("padding"),
                                  backend=anyshape.BackendOptions(
                                      data_tiling=task["data_tiling"],
                                      matmul_precision=task.get("matmul_precision", "highest"),
                                      product_kernel=task.get("product_kernel", "anyshape")))
        seconds = time.perf_counter() - start
        module.save(out)
        return {"seconds": seconds}
    if kind == "onnx":
        import onnxruntime

        ids, mask = make_inputs(*EXAMPLE_SHAPE, seed=0)
        out.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        torch.onnx.export(model, (ids,), str(out / "model.onnx"), kwargs={"attention_mask": mask},
                          dynamic_shapes=dynamic_shapes(task["max_batch"], max_len),
                          input_names=["input_ids", "attention_mask"], output_names=["logits"],
                          dynamo=True, verbose=False)
        exported = time.perf_counter()
        onnxruntime.InferenceSession(str(out / "model.onnx"), _ort_options(task["threads"]),
                                     providers=["CPUExecutionProvider"])
        done = time.perf_counter()
        return {"seconds": done - start, "export_s": exported - start, "session_s": done - exported}
    if kind == "inductor":
        ids, mask = make_inputs(*task["shape"], seed=0)
        compiled = torch.compile(model, dynamic=True)
        start = time.perf_counter()
        with torch.no_grad():
            compiled(ids, mask)
        return {"seconds": time.perf_counter() - start}
    raise ValueError(f"unknown child task kind {kind!r}")


def _child_run(task: dict) -> dict:
    """Peak RSS of a fresh process that loads one system and calls it 3 times at one shape."""
    import numpy  # noqa: F401
    import torch
    import transformers  # noqa: F401
    import anyshape.runtime.compiled_module  # noqa: F401

    if task["system"] == "onnxruntime":
        import onnxruntime
    ids, mask = make_inputs(*task["shape"], seed=1)
    baseline = _status("VmRSS")
    system = task["system"]
    with torch.no_grad():
        if system in ("anyshape", "anyshape-packed", "anyshape-bf16", "anyshape-iree-products",
                      "anyshape-nopasses", "iree-static"):
            module = load_anyshape(Path(task["artifact"]), task["threads"])
            call = lambda: module(ids, attention_mask=mask)  # noqa: E731
        elif system == "onnxruntime":
            session = onnxruntime.InferenceSession(str(Path(task["artifact"]) / "model.onnx"),
                                                   _ort_options(task["threads"]),
                                                   providers=["CPUExecutionProvider"])
            feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
            call = lambda: session.run(None, feed)  # noqa: E731
        else:  # eager, inductor: random weights (loading the benchmark's would hold two copies)
            model, _ = build_model(task["model"], task["tiny"])
            call = (lambda: model(ids, mask)) if system == "eager" else (
                lambda compiled=torch.compile(model, dynamic=True): compiled(ids, mask))
            if system == "inductor":
                call()  # compiles; not part of a run
        loaded = _status("VmRSS")
        exact = _reset_peak_rss()
        for _ in range(3):
            call()
    peak = _status("VmHWM") if exact else None
    if peak is None:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"baseline_mb": _kib_to_mb(baseline), "loaded_mb": _kib_to_mb(loaded),
            "peak_mb": _kib_to_mb(peak), "exact": exact}


def _ort_options(threads: int):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # As torch's (OMP_WAIT_POLICY above): onnxruntime's intra-op threads spin
    # after each call and took the cores from the system timed next (anyshape,
    # in the round-robin order): roberta-base at L = 32 ran in 83 ms right after
    # an onnxruntime call, 60 ms after a pause; with no spinning, 58 ms, and
    # onnxruntime itself was no slower (59 ms against 63).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def run_child(task: dict, workdir: Path, name: str) -> dict:
    """Run ``task`` in a fresh Python process; its result, or ``{"error": ...}``."""
    task_path, result_path, log_path = (workdir / f"{name}.{ext}" for ext in ("task.json", "result.json", "log"))
    task = {**task, "result": str(result_path)}
    task_path.write_text(json.dumps(task))
    result_path.unlink(missing_ok=True)
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", str(task_path)],
                                stdout=log, stderr=subprocess.STDOUT)
        sampler = TreeSampler(proc.pid)
        sampler.start()
        try:
            proc.wait(timeout=CHILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            sampler.stop()
            return {"error": f"child process took over {CHILD_TIMEOUT_S} s"}
        memory = sampler.stop()
    if result_path.is_file():
        result = {**json.loads(result_path.read_text()), **memory}
        if result.get("error"):
            print(f"{name} failed in its child process:\n{result.get('traceback', result['error'])}",
                  file=sys.stderr, flush=True)
        result["tree_mb"] = max(result["tree_mb"], result.get("self_mb") or 0)  # sampling can miss it
        return result
    tail = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()][-1:]
    return {"error": f"child exited {proc.returncode}: {' '.join(tail)}"[:200], **memory}


def _brief(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(error).__name__}: {first}"[:160]


# -- the systems, in the parent ------------------------------------------------------

def load_anyshape(directory: Path, threads: int):
    import anyshape

    return anyshape.load(directory, threads=threads)


def iree_threads_note(threads: int) -> str:
    return f"IREE runtime {threads} threads (anyshape.load(threads=))"


class Cell:
    """One (model, batch, L): per system its samples, error and max |diff| from eager."""

    def __init__(self, model: str, batch: int, length: int):
        self.model, self.batch, self.length = model, batch, length
        self.samples: dict[str, list[float]] = {}
        self.errors: dict[str, str] = {}
        self.diffs: dict[str, float] = {}

    def ms(self, system: str) -> float | None:
        if system in self.errors or not self.samples.get(system):
            return None
        return statistics.median(self.samples[system])

    def to_json(self) -> dict:
        return {"model": self.model, "batch": self.batch, "L": self.length,
                "median_ms": {s: self.ms(s) for s in self.samples},
                "samples_ms": self.samples, "errors": self.errors,
                "max_abs_diff_vs_eager": self.diffs}


def _max_abs_diff(output, expected) -> float:
    import numpy as np
    import torch

    if isinstance(output, np.ndarray):
        output = torch.from_numpy(output)
    if tuple(output.shape) != tuple(expected.shape):
        raise ValueError(f"output shape {tuple(output.shape)}, expected {tuple(expected.shape)}")
    return float((output.float() - expected.float()).abs().max())


def model_setup(model_key: str, args, workdir: Path):
    """The benchmark process's model, its longest length, and the task fields every child shares.

    The weights are saved for the compile children, which load them: every
    system runs the same weights.
    """
    import torch

    # Inductor's cache, empty for each model: the compile child's first call is cold; the
    # benchmark process and the run-memory child then find what it compiled.
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(workdir / f"inductor-cache-{model_key}")
    torch.manual_seed(0)
    model, max_len = build_model(model_key, args.tiny)
    state_dict = workdir / f"{model_key}.pt"
    torch.save(model.state_dict(), state_dict)
    base_task = {"model": model_key, "tiny": args.tiny, "state_dict": str(state_dict),
                 "threads": args.threads, "max_batch": max(8, *args.batches)}
    return model, max_len, base_task


def build_systems(model_key: str, model, args, workdir: Path, base_task: dict, record_compile, log,
                  first_shape: tuple[int, int]):
    """The systems built once per model: ``(runners, failed, artifacts)``.

    ``runners[system](ids, mask)`` calls it; ``failed[system]`` is why one could
    not be built (reported in every cell); ``artifacts[system]`` its saved build.
    Each compile runs in a child process (``run_child``); inductor's first call
    there is at ``first_shape``.
    """
    import torch

    from models import MODELS

    max_len = MODELS[MODEL_KEYS[model_key]][1]
    max_batch = base_task["max_batch"]
    runners: dict[str, object] = {}
    failed: dict[str, str] = {}
    artifacts: dict[str, Path] = {}
    dynamic_note = f"dynamic batch 1..{max_batch}, L 1..{max_len}"
    for system, passes, padding, precision, kernel in (
            ("anyshape", None, None, "highest", "anyshape"),
            ("anyshape-packed", None, "eliminate", "highest", "anyshape"),
            ("anyshape-bf16", None, None, "medium", "anyshape"),
            ("anyshape-iree-products", None, None, "highest", "iree"),
            ("anyshape-nopasses", [], None, "highest", "anyshape")):
        if system not in args.systems:
            continue
        log(f"compiling {SYSTEMS[system]} (child process)")
        out = workdir / f"{model_key}-{system}"
        result = run_child({**base_task, "kind": "anyshape", "dynamic": True, "passes": passes,
                            "padding": padding,
                            "matmul_precision": precision, "product_kernel": kernel,
                            "data_tiling": args.data_tiling if passes is None else None,
                            "out": str(out)}, workdir, f"{model_key}-{system}")
        record_compile(system, dynamic_note, result)
        if result.get("error"):
            failed[system] = result["error"]
            continue
        artifacts[system] = out
        try:
            module = load_anyshape(out, args.threads)
            runners[system] = lambda ids, mask, module=module: module(ids, attention_mask=mask)
        except Exception as error:  # noqa: BLE001
            failed[system] = _brief(error)
    if "onnxruntime" in args.systems:
        log("exporting to ONNX and creating a session (child process)")
        out = workdir / f"{model_key}-onnx"
        result = run_child({**base_task, "kind": "onnx", "out": str(out)}, workdir, f"{model_key}-onnx")
        note = (f"export {result['export_s']:.1f} s + session {result['session_s']:.1f} s"
                if "export_s" in result else "")
        record_compile("onnxruntime", dynamic_note, result, note)
        if result.get("error"):
            failed["onnxruntime"] = result["error"]
        else:
            artifacts["onnxruntime"] = out
            try:
                import onnxruntime

                session = onnxruntime.InferenceSession(str(out / "model.onnx"), _ort_options(args.threads),
                                                       providers=["CPUExecutionProvider"])
                runners["onnxruntime"] = lambda ids, mask, session=session: session.run(
                    None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
            except Exception as error:  # noqa: BLE001
                failed["onnxruntime"] = _brief(error)
    if "inductor" in args.systems:
        log("inductor: first call, cold (empty cache), in a child process (compile time and memory)")
        result = run_child({**base_task, "kind": "inductor", "shape": list(first_shape)}, workdir,
                           f"{model_key}-inductor")
        record_compile("inductor", f"dynamic=True, first call at {first_shape[0]}x{first_shape[1]}", result,
                       "first-call time; later recompiles below")
        compiled = torch.compile(model, dynamic=True)
        runners["inductor"] = lambda ids, mask: compiled(ids, mask)
    if "eager" in args.systems:
        runners["eager"] = lambda ids, mask: model(ids, mask)
    return runners, failed, artifacts


def build_static(model_key: str, batch: int, length: int, args, workdir: Path, base_task: dict,
                 record_compile, out: Path):
    """IREE static for one shape (a child process compiles it): ``(runner, None)`` or ``(None, error)``."""
    result = run_child({**base_task, "kind": "anyshape", "dynamic": False, "passes": None,
                        "data_tiling": args.data_tiling, "shape": [batch, length], "out": str(out)},
                       workdir, f"{model_key}-static-{batch}x{length}")
    record_compile("iree-static", f"{batch}x{length} only", result)
    if result.get("error"):
        return None, f"failed: {result['error']}"
    try:
        static = load_anyshape(out, args.threads)
    except Exception as error:  # noqa: BLE001
        return None, f"failed: {_brief(error)}"
    return (lambda ids, mask: static(ids, attention_mask=mask)), None


def bench_model(model_key: str, args, workdir: Path, compiles: list, cells: list,
                memory: list) -> None:
    name = MODEL_KEYS[model_key]
    model, max_len, base_task = model_setup(model_key, args, workdir)

    def log(text):
        print(f"[{time.strftime('%H:%M:%S')}] {name}: {text}", flush=True)

    def record_compile(system, built_for, result, note=""):
        compiles.append({"model": name, "system": SYSTEMS[system], "built_for": built_for,
                         "seconds": result.get("seconds"), "self_mb": result.get("self_mb"),
                         "sub_mb": result.get("sub_mb"), "tree_mb": result.get("tree_mb"),
                         "error": result.get("error"), "note": note})

    def run_memory(cell, systems, artifacts):
        """Peak RSS of a fresh process per system that loads it and runs this cell's shape."""
        for system in systems:
            log(f"batch {cell.batch}, L {cell.length}: run memory of {SYSTEMS[system]} (child process)")
            result = run_child({**base_task, "kind": "run", "system": system,
                                "artifact": str(artifacts.get(system, "")),
                                "shape": [cell.batch, cell.length]},
                               workdir, f"{model_key}-run-{system}-{cell.batch}x{cell.length}")
            memory.append({"model": name, "batch": cell.batch, "L": cell.length, "system": SYSTEMS[system],
                           **{k: result.get(k) for k in ("baseline_mb", "loaded_mb", "peak_mb",
                                                         "exact", "sub_mb", "error")}})

    first = (args.batches[0], next((n for n in args.lengths if n <= max_len), 1))
    runners, failed, artifacts = build_systems(model_key, model, args, workdir, base_task,
                                               record_compile, log, first)

    # Run memory at each batch's longest length (a child process per system).
    longest = max((length for length in args.lengths if length <= max_len), default=None)
    for batch in args.batches:
        for length in args.lengths:
            cell = Cell(name, batch, length)
            cells.append(cell)
            cell_runners = dict(runners)
            for system, error in failed.items():
                cell.errors[system] = f"failed: {error}"
            if length > max_len:
                for system in args.systems:
                    cell.errors[system] = f"failed: L > {max_len}"
                continue
            static_dir = workdir / f"{model_key}-static-{batch}x{length}"
            if "iree-static" in args.systems:
                log(f"batch {batch}, L {length}: compiling IREE static (child process)")
                static, error = build_static(model_key, batch, length, args, workdir, base_task,
                                             record_compile, static_dir)
                if error:
                    cell.errors["iree-static"] = error
                else:
                    cell_runners["iree-static"] = static
            log(f"batch {batch}, L {length}: warm-up and {args.runs} round-robin runs")
            _measure(cell, model, cell_runners, args, record_compile)
            cell_runners = static = None  # unmaps this shape's static build
            gc.collect()
            shown = ", ".join(f"{SYSTEMS[s]} {cell.ms(s):.2f}" for s in args.systems
                              if cell.ms(s) is not None)
            log(f"batch {batch}, L {length}: ms {shown}")
            if length == longest:
                run_memory(cell, [s for s in args.systems if s not in cell.errors],
                           {**artifacts, "iree-static": static_dir})
            _remove_tree(static_dir)
    # Free this model's systems before the next model.
    runners.clear()
    gc.collect()


def _measure(cell: Cell, model, runners: dict, args, record_compile) -> None:
    import torch

    ids, mask = make_inputs(cell.batch, cell.length, seed=cell.batch * 100_003 + cell.length)
    with torch.no_grad():
        expected = model(ids, mask)
    active = [s for s in args.systems if s in runners and s not in cell.errors]
    graphs = _inductor_graph_count()
    with torch.no_grad():
        for system in list(active):  # warm-up; the first call is checked against eager
            try:
                start = time.perf_counter()
                output = runners[system](ids, mask)
                first_s = time.perf_counter() - start
                for _ in range(WARMUP - 1):
                    runners[system](ids, mask)
                diff = _max_abs_diff(output, expected)
                cell.diffs[system] = diff
                if not diff <= TOLERANCES.get(system, TOLERANCE):  # NaN too
                    cell.errors[system] = f"WRONG: max |diff| vs eager {diff:.2e}"
                    active.remove(system)
            except Exception as error:  # noqa: BLE001
                cell.errors[system] = f"failed: {_brief(error)}"
                active.remove(system)
                continue
            if system == "inductor":
                new = _inductor_graph_count() - graphs
                if new > 0:
                    record_compile("inductor", f"{cell.batch}x{cell.length}, in the benchmark process",
                                   {"seconds": first_s}, f"first call compiled {new} new graph(s)")
        for run in range(args.runs):  # round-robin, starting one system later each run
            order = active[run % len(active):] + active[:run % len(active)] if active else []
            for system in order:
                if system in cell.errors:
                    continue
                try:
                    start = time.perf_counter()
                    runners[system](ids, mask)
                    cell.samples.setdefault(system, []).append((time.perf_counter() - start) * 1e3)
                except Exception as error:  # noqa: BLE001
                    cell.errors[system] = f"failed: {_brief(error)}"


def _inductor_graph_count() -> int:
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001
        return 0


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


# -- report ------------------------------------------------------------------------

def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _fmt_mb(value) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def render(args, cells: list[Cell], compiles: list[dict], memory: list[dict], header: str) -> str:
    systems = args.systems
    lines = [header, ""]
    lines += ["## Latency", "",
              f"Median ms of {args.runs} round-robin runs after {WARMUP} warm-up calls; "
              "in brackets the ratio to anyshape (system ms / anyshape ms: above 1 is slower "
              "than anyshape).", ""]
    head = ["model", "batch", "L"] + [f"{SYSTEMS[s]} ms" for s in systems] + ["worst max \\|diff\\| vs eager"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cell in cells:
        base = cell.ms(BASELINE)
        row = [cell.model, str(cell.batch or "-"), str(cell.length or "-")]
        for system in systems:
            ms = cell.ms(system)
            if ms is None:
                row.append(_md(cell.errors.get(system, "not run")))
            elif system == BASELINE or base is None:
                row.append(f"{ms:.2f}")
            else:
                row.append(f"{ms:.2f} ({ms / base:.2f}x)")
        worst = max(cell.diffs.values(), default=None)
        row.append("n/a" if worst is None else f"{worst:.1e}")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "## Accuracy", "",
              f"max |system - eager| on the first warm-up call (above {TOLERANCE:g}: WRONG, no time "
              "reported"
              + "".join(f"; {SYSTEMS[s]}: above {TOLERANCES[s]:g}" for s in systems if s in TOLERANCES)
              + ").", ""]
    head = ["model", "batch", "L"] + [SYSTEMS[s] for s in systems]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cell in cells:
        row = [cell.model, str(cell.batch or "-"), str(cell.length or "-")]
        row += [f"{cell.diffs[s]:.1e}" if s in cell.diffs else "n/a" for s in systems]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "## Run memory", "",
              "At each batch's longest length, a fresh process per system (after importing torch, "
              "transformers and anyshape's runtime, and onnxruntime for its own) loads the system, calls it once "
              "(inductor: compiles there), and then calls it 3 times. MB above its RSS before "
              "loading: the peak during those 3 calls (VmHWM, reset after the first call), in "
              "brackets the RSS once loaded. Weights count once touched: IREE maps its .vmfb, "
              "onnxruntime copies into its own buffers, eager and inductor hold torch tensors; "
              "IREE static is the build for that one shape.", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    shapes = list(dict.fromkeys((m["model"], m["batch"], m["L"]) for m in memory))
    for model, batch, length in shapes:
        found = {m["system"]: m for m in memory if (m["model"], m["batch"], m["L"]) == (model, batch, length)}
        row = [model, str(batch), str(length)]
        for system in systems:
            entry = found.get(SYSTEMS[system])
            if entry is None:
                row.append("n/a")
            elif entry.get("error") or entry.get("peak_mb") is None:
                row.append(_md(f"failed: {entry.get('error')}"))
            else:
                row.append(f"{entry['peak_mb'] - entry['baseline_mb']:.0f} "
                           f"({entry['loaded_mb'] - entry['baseline_mb']:.0f})"
                           + ("" if entry.get("exact") else " (peak incl. loading)"))
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "## Compile", "",
              "Each compile in a fresh child process (cold: inductor's cache empty); compile s "
              "as measured there. Peak RSS MB: that process's own ru_maxrss (torch, the model and "
              "its weights included); largest subprocess: the largest VmHWM among its subprocesses "
              "(iree-compile; inductor's compile workers); tree: the largest sum of the RSS of the "
              f"process and its subprocesses, sampled every {SAMPLE_S * 1e3:.0f} ms (and at least the "
              "process's own peak). Inductor's "
              "first calls in the benchmark process that compiled new graphs are listed too "
              "(time only; they may reuse what the child put in inductor's cache).", ""]
    head = ["model", "system", "built for", "compile s", "peak RSS MB", "largest subprocess MB",
            "tree peak MB", "note"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for entry in compiles:
        seconds = f"failed: {_md(entry['error'])}" if entry.get("error") else (
            "n/a" if entry["seconds"] is None else f"{entry['seconds']:.1f}")
        lines.append("| " + " | ".join([entry["model"], entry["system"], entry["built_for"], seconds,
                                         _fmt_mb(entry["self_mb"]), _fmt_mb(entry["sub_mb"]),
                                         _fmt_mb(entry["tree_mb"]), _md(entry["note"])]) + " |")
    return "\n".join(lines) + "\n"


def plot(args, cells: list[Cell], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(MODEL_KEYS[m], b) for m in args.models for b in args.batches]
    columns = len(args.batches)
    rows = len(args.models)
    figure, axes = plt.subplots(rows, columns, figsize=(5.5 * columns, 4.2 * rows), squeeze=False)
    for index, (model, batch) in enumerate(panels):
        axis = axes[index // columns][index % columns]
        for system in args.systems:
            points = [(c.length, c.ms(system)) for c in cells
                      if c.model == model and c.batch == batch and c.ms(system) is not None]
            if points:
                axis.plot(*zip(*points), marker="o", label=SYSTEMS[system])
        axis.set_title(f"{model}, batch {batch}", fontsize=10)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xticks(args.lengths, [str(length) for length in args.lengths])
        axis.set_xlabel("sequence length L")
        axis.set_ylabel(f"median ms ({args.runs} runs)")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    figure.suptitle(f"CPU latency, {args.threads} threads" + (" (tiny models)" if args.tiny else ""))
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _cpu_name() -> str:
    try:
        match = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        return match.group(1).strip() if match else platform.processor()
    except OSError:
        return platform.processor()


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for package in ("torch", "iree-base-runtime", "onnxruntime", "transformers"):
        try:
            found.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            pass
    return ", ".join(found)


# -- main --------------------------------------------------------------------------

def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(MODEL_KEYS), default=list(MODEL_KEYS))
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 128, 256, 512])
    parser.add_argument("--systems", nargs="+", choices=list(SYSTEMS),
                        default=[s for s in SYSTEMS if s != "anyshape-packed"])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--data-tiling", choices=["auto", "on", "off"], default="auto",
                        help="data_tiling for anyshape (default passes) and IREE static: "
                             "auto (the default: None, on for CPU), on (True) or off (False); "
                             "passes=[] always runs with the default, which is off without "
                             "anyshape-lower")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="torch, onnxruntime (intra-op) and IREE runtime threads (default: all cores)")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--tiny", action="store_true",
                        help="2 layers, hidden 64: a smoke test of this script, not a benchmark")
    args = parser.parse_args(argv)
    if args.runs < 10:
        parser.error(f"--runs: expected at least 10 (medians of 10 or more), got {args.runs}")
    if args.threads < 1:
        parser.error(f"--threads: expected at least 1, got {args.threads}")
    if min(args.batches) < 1 or min(args.lengths) < 1:
        parser.error("--batches and --lengths: expected positive sizes")
    # Keep the order of the defaults, whatever order they were given in.
    args.data_tiling = {"auto": None, "on": True, "off": False}[args.data_tiling]
    args.systems = [s for s in SYSTEMS if s in args.systems]
    args.models = [m for m in MODEL_KEYS if m in args.models]
    return args


def main(argv=None) -> int:
    if argv is None and len(sys.argv) == 3 and sys.argv[1] == "--child":
        return child_main(sys.argv[2])
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--target" in argv:
        # The GPU comparison is its own harness (bench/cuda.py), with its own
        # systems; its options follow --target cuda.
        at = argv.index("--target")
        target = argv[at + 1] if at + 1 < len(argv) else None
        if target != "cuda":
            raise SystemExit(f"--target: expected cuda (the CPU comparison is the default), "
                             f"got {target}")
        import cuda

        return cuda.main(["all", *argv[:at], *argv[at + 2:]])
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    command = shlex.join(["python", *(sys.argv if argv is None else [sys.argv[0], *argv])])
    header = (f"# anyshape compared\n\n"
              f"{platform.machine()} ({_cpu_name()}), {os.cpu_count()} cores; {args.threads} threads "
              f"(torch.set_num_threads, onnxruntime intra-op {args.threads} / inter-op 1; "
              f"{iree_threads_note(args.threads)}; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}); "
              f"fp32, random weights"
              f"{', TINY models (2 layers, hidden 64): not a benchmark' if args.tiny else ''}; "
              f"medians of {args.runs} round-robin runs; {time.strftime('%Y-%m-%d %H:%M')}; "
              f"{_versions()}.\n\nCommand: `{command}`\n\n"
              "IREE static = `anyshape.compile` with the default passes and no dynamic dims: "
              "torch.export at exactly that (batch, L), compiled by IREE, one build per shape. "
              + {None: "Data tiling as `compile` decides by default (on for CPU unless IREE "
                       "fails with it; off for `passes=[]`: without anyshape-lower's dim ranges "
                       "it is wrong).",
                 True: "anyshape and IREE static with `data_tiling=True` (`--data-tiling=on`); "
                       "`passes=[]` without (it needs anyshape-lower's dim ranges).",
                 False: "No data tiling (`--data-tiling=off`)."}[args.data_tiling])
    cells: list[Cell] = []
    compiles: list[dict] = []
    memory: list[dict] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="anyshape-compare-") as temp:
        for model_key in args.models:
            try:
                bench_model(model_key, args, Path(temp), compiles, cells, memory)
            except Exception as error:  # noqa: BLE001 - never lose the other models' results
                traceback.print_exc()
                cell = Cell(MODEL_KEYS[model_key], 0, 0)
                cell.errors = {s: f"failed: {_brief(error)}" for s in args.systems}
                cells.append(cell)
    parent_mb = _kib_to_mb(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    header += (f"\n\nWhole run: {time.perf_counter() - started:.0f} s; benchmark process peak RSS "
               f"{parent_mb:.0f} MB.")
    text = render(args, cells, compiles, memory, header)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compare.md").write_text(text)
    (args.out / "compare.json").write_text(json.dumps(
        {"command": command, "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
         "cells": [c.to_json() for c in cells], "compiles": compiles, "run_memory": memory},
        indent=1) + "\n")
    try:
        plot(args, cells, args.out / "compare.png")
    except Exception as error:  # noqa: BLE001
        print(f"plot failed: {_brief(error)}", file=sys.stderr)
    print()
    print(text)
    print(f"written: {args.out / 'compare.md'}, {args.out / 'compare.json'}, {args.out / 'compare.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
