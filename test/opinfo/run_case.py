"""One case end to end: eager, anyshape, the plain stack, at every size.

``run_case`` returns a JSON-able record. Per stack: ``status`` (``pass``,
``export-fail``: torch.export refused the module, ``fail``), the failing
``stage`` and its ``cause`` (``classify``), the ``error``'s first line, for
anyshape whether the error was ``clear``, and per size ``ok`` or what went
wrong. A case that cannot be run at all has ``na`` (the reason) instead.

A stack's answer at a size is its outputs and its inputs as the call leaves
them, both against eager's: a module that updates an input in place must
leave it as eager does, and one that does not must leave it alone.
"""

from __future__ import annotations

import dataclasses
import time
import warnings

import torch

from opinfo import classify, compare, plain
from opinfo.cases import not_applicable, parse_case_id, sample_of
from opinfo.wrap import dynamic_shapes, make_module, other_sizes, resized_inputs

STACKS = ("anyshape", "plain")
THREADS = 1  # one per worker process: the pool runs one worker per core

# Ops whose integer outputs are indices that ties make ambiguous (int64
# samples are full of equal values; unstable sorts, topk and the order
# statistics may return any of the tied positions): those outputs are compared
# by shape and dtype, the values beside them exactly.
TIED_INDICES = {"sort", "argsort", "topk", "kthvalue", "mode", "median", "nanmedian",
                "cummax", "cummin"}


@dataclasses.dataclass
class Answer:
    outputs: list        # flat, as compare.leaves gives them
    inputs_after: list   # the inputs as the call left them


def clones(tensors) -> tuple:
    return tuple(t.clone() for t in tensors)


def eager(module, inputs: tuple, seed: int = 0) -> Answer:
    torch.manual_seed(seed)
    tensors = clones(inputs)
    with torch.no_grad():
        return Answer(compare.leaves(module(*tensors)), list(tensors))


def differs(got: Answer, expected: Answer, random: bool = False, ties: bool = False) -> str | None:
    why = compare.mismatch(got.outputs, expected.outputs, random, ties)
    if why is None:
        why = compare.mismatch(got.inputs_after, expected.inputs_after, random)
        why = why and f"inputs after the call: {why}"
    return why


def _unsupported_output(outputs: list) -> str | None:
    for t in outputs:
        if isinstance(t, torch.Tensor):
            if t.layout != torch.strided:
                return "sparse output"
            if t.is_complex():
                return "complex output"
    return None


def describe(op, sample) -> str:
    """The call as a one-line repro: tensors by shape and dtype, the rest as values."""
    def show(value):
        if isinstance(value, torch.Tensor):
            return f"T{list(value.shape)}:{str(value.dtype).removeprefix('torch.')}"
        if isinstance(value, (list, tuple)):
            inner = ", ".join(show(v) for v in value)
            return f"[{inner}]" if isinstance(value, list) else f"({inner})"
        return repr(value)
    parts = [show(sample.input), *(show(a) for a in sample.args),
             *(f"{k}={show(v)}" for k, v in sample.kwargs.items())]
    return f"{op.name}({', '.join(parts)})"


def _seeded_random(program) -> bool:
    """Whether the exported graph draws random numbers (OpInfo wraps such ops
    to reseed on every call, so eager alone does not show it)."""
    return any(torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())
               for node in program.graph.nodes if node.op == "call_function")


def run_case(case: str, stacks=STACKS, progress=lambda stage, partial=None: None,
             plain_when_anyshape_fails: bool = False) -> dict:
    """``progress(stage)`` is told each stage as it starts, and
    ``progress(stage, {key: value})`` each part of the record as it is known.
    ``plain_when_anyshape_fails``: run the plain stack only where anyshape,
    run in this call, did not pass (the floor's assertions ask nothing of it
    then; ``plain`` is ``{"status": "not-run"}``)."""
    started = time.monotonic()
    op_name, dtype, index = parse_case_id(case)
    record = {"case": case, "op": op_name, "dtype": dtype, "index": index}
    op, sample = sample_of(case)
    record["sample"] = describe(op, sample)
    reason = not_applicable(sample)
    if reason:
        return {**record, "na": reason}
    module, inputs = make_module(op, sample)
    dynamic = dynamic_shapes(inputs)
    progress("eager")
    try:
        expected = eager(module, inputs)
    except Exception as error:
        return {**record, "na": f"eager raises on the sample ({type(error).__name__})"}
    reason = _unsupported_output(expected.outputs)
    if reason:
        return {**record, "na": reason}
    random = bool(op.has_nondeterministic_output) or \
        differs(eager(module, inputs, seed=1), expected) is not None

    # The plain stack's export also gives the symbols the other sizes are chosen from.
    progress("plain:export")
    program, export_error = None, None
    try:
        program = plain.export(module, clones(inputs), dynamic)
        random = random or _seeded_random(program)
    except Exception as error:
        export_error = error
    record["random"] = random
    sizes = [("traced", inputs, expected)]
    record["sizes"] = {"traced": [list(t.shape) for t in inputs]}
    if program is not None:
        for name, values in other_sizes(program, inputs):
            resized = resized_inputs(program, inputs, values)
            if resized is None:
                continue
            try:
                sizes.append((name, resized, eager(module, resized)))
                record["sizes"][name] = [list(t.shape) for t in resized]
            except Exception as error:
                record["sizes"][name] = f"not accepted by eager: {classify.first_line(error)}"
    progress("sizes", dict(record))

    check = dict(random=random, ties=op.name in TIED_INDICES)
    flags = None
    if "anyshape" in stacks:
        progress("anyshape:compile")
        record["anyshape"], flags = run_anyshape(module, inputs, dynamic, sizes, check, progress)
        progress("anyshape:done", {"anyshape": record["anyshape"]})
    if "plain" in stacks and plain_when_anyshape_fails and \
            record.get("anyshape", {}).get("status") == "pass":
        record["plain"] = {"status": "not-run", "why": "anyshape passed"}
    elif "plain" in stacks:
        record["plain"] = run_plain(program, export_error, flags, sizes, check, progress)
    classify.across_stacks(record)
    record["seconds"] = round(time.monotonic() - started, 3)
    return record


def _fail(stage: str, cause: str, error, **extra) -> dict:
    status = "export-fail" if cause == classify.EXPORT and stage == "export" else "fail"
    return {"status": status, "stage": stage, "cause": cause,
            "error": classify.first_line(error), **extra}


def run_anyshape(module, inputs, dynamic, sizes, check, progress) -> tuple[dict, list | None]:
    import anyshape

    started = time.monotonic()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled = anyshape.compile(module, clones(inputs), dynamic_shapes=dynamic,
                                        backend=anyshape.BackendOptions(threads=THREADS))
    except Exception as error:
        stage, cause = classify.anyshape_compile_failure(error)
        return _fail(stage, cause, error, clear=classify.is_clear(error),
                     type=type(error).__name__,
                     seconds=round(time.monotonic() - started, 3)), None
    fallback = any(issubclass(w.category, anyshape.DataTilingFallback) for w in caught)
    out = {"flags": flag_choices(compiled.iree_flags), "data_tiling_fallback": fallback,
           "compile_seconds": round(time.monotonic() - started, 3)}

    def call(*tensors) -> Answer:
        return Answer(compare.leaves(compiled(*tensors)), list(tensors))

    return {**out, **_run_sizes("anyshape", call, sizes, check, progress,
                                classify.call_failure)}, compiled.iree_flags


def _run_sizes(stack, call, sizes, check, progress, cause_of) -> dict:
    """Run at each size; the stack passes when every size matches eager."""
    results, failure = {}, None
    for name, tensors, expected in sizes:
        progress(f"{stack}:run:{name}")
        try:
            got = call(*clones(tensors))
        except Exception as error:
            results[name] = f"error: {classify.first_line(error)}"
            failure = failure or _fail("run", cause_of(error), error,
                                       clear=classify.is_clear(error), type=type(error).__name__)
            continue
        why = differs(got, expected, **check)
        results[name] = "ok" if why is None else f"wrong: {why}"
        if why is not None and failure is None:
            # A wrong answer is ours until the plain stack is seen to give it too.
            failure = _fail("numerics", classify.OURS if stack == "anyshape" else classify.IREE,
                            f"wrong answer at {name} sizes: {why}", clear=False, type="wrong")
    return {**(failure or {"status": "pass"}), "runs": results}


def flag_choices(flags: list) -> list:
    """The flags a case's compile chose (data tiling, peeling): the rest are
    the same for every case."""
    return [f.removeprefix("--iree-") for f in flags if "data-tiling" in f or "pproc" in f]


def plain_compile(bytecode: bytes, kinds: list, flags: list | None):
    """The plain stack's module, compiled as anyshape compiled its own: with
    anyshape's final flags where it compiled, else as its automatic data
    tiling tries (on, then off), each try without peeling where IREE refuses
    what peeling needs (iree/flags.py). Raises the last try's StageError."""
    from anyshape.iree.flags import PEELING_FAILURE, PEELING_FLAG, iree_flags, make_target

    tries = [flags] if flags is not None else \
        [iree_flags(make_target("cpu", data_tiling=tiled)) for tiled in (True, False)]
    for attempt in tries:
        for flags_tried in (attempt, [f for f in attempt if f != PEELING_FLAG]):
            try:
                return plain.compile_bytecode(bytecode, kinds, flags_tried), flags_tried
            except plain.StageError as failure:
                error = failure
                if failure.stage != plain.IREE_COMPILE:
                    raise
                if PEELING_FAILURE not in str(failure) or PEELING_FLAG not in flags_tried:
                    break  # not peeling's failure: the next data-tiling try
    raise error


def run_plain(program, export_error, flags, sizes, check, progress) -> dict:
    started = time.monotonic()
    if program is None:
        return _fail("export", classify.EXPORT, export_error)
    progress("plain:compile")
    compiled, error = None, None
    try:
        bytecode, kinds = plain.lower(program)
        compiled, attempt = plain_compile(bytecode, kinds, flags)
    except plain.StageError as failure:
        error = failure
    if compiled is None:
        if error.stage == plain.IREE_COMPILE:
            cause = classify.iree_compile_cause(str(error))
        else:
            cause = {plain.DECOMPOSE: classify.EXPORT, plain.IMPORT: classify.TORCH_MLIR}.get(
                error.stage, classify.IREE)
        return _fail(error.stage, cause, str(error),
                     seconds=round(time.monotonic() - started, 3))
    out = {"flags": flag_choices(attempt), "compile_seconds": round(time.monotonic() - started, 3)}

    def call(*tensors) -> Answer:
        return Answer(*compiled(*tensors))

    return {**out, **_run_sizes("plain", call, sizes, check, progress,
                                lambda error: classify.IREE)}
