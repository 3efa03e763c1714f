"""Which OpInfo samples are cases, and the id that names each.

A case id is ``<op>[.<variant>]-<dtype>-<index>``: the index is the sample's
position in ``op.sample_inputs("cpu", dtype)`` drawn right after
``torch.manual_seed(0)``, so an id names the same sample in every process.
"""

from __future__ import annotations

import concurrent.futures
import fnmatch
import functools
import warnings

import torch
from torch.utils._pytree import tree_leaves

DTYPES = {"float32": torch.float32, "int64": torch.int64}
SEED = 0


@functools.cache
def op_table() -> dict:
    """OpInfo by its full name (``name`` plus ``.variant`` where it has one)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db
    return {full_name(op): op for op in op_db}


def full_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def case_id(op_name: str, dtype: str, index: int) -> str:
    return f"{op_name}-{dtype}-{index}"


def parse_case_id(case: str) -> tuple[str, str, int]:
    # Only the dtype and index are split off: one variant name holds a dash
    # (interpolate's "nearest-exact").
    op_name, dtype, index = case.rsplit("-", 2)
    return op_name, dtype, int(index)


@functools.lru_cache(maxsize=8)
def samples(op_name: str, dtype: str) -> tuple:
    # torch's sample iterator looks for a unittest test up the caller's stack
    # (inspect.stack, which reads each frame's source): from pytest's
    # collection, about 0.2 s a call. A thread's stack is a few frames, with no
    # test in it either: the same samples, drawn with the same seeds.
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        return thread.submit(_drawn, op_table()[op_name], dtype).result()


def _drawn(op, dtype: str) -> tuple:
    torch.manual_seed(SEED)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tuple(op.sample_inputs("cpu", DTYPES[dtype], requires_grad=False))


def sample_of(case: str):
    """The OpInfo and the sample an id names."""
    op_name, dtype, index = parse_case_id(case)
    return op_table()[op_name], samples(op_name, dtype)[index]


def leaves(sample) -> list:
    return tree_leaves((sample.input, sample.args, sample.kwargs))


def not_applicable(sample) -> str | None:
    """Why a sample cannot be a module's inputs at all (None: it can)."""
    tensors = [x for x in leaves(sample) if isinstance(x, torch.Tensor)]
    if not tensors:
        return "no tensor input"
    for t in tensors:
        if t.layout != torch.strided or t.is_nested:
            return "sparse or nested input"
        if t.is_complex():
            return "complex input"
        if type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
            return f"tensor subclass input ({type(t).__name__})"
    return None


def dynamic_dims(sample) -> int:
    return sum(size > 1 for t in leaves(sample) if isinstance(t, torch.Tensor) for size in t.shape)


def pick(usable: list[int], drawn: tuple, wanted: int | None) -> list[int]:
    """``wanted`` of the ``usable`` sample indices: first the sample with the
    most dims of size > 1 (what anyshape makes dynamic; OpInfo generators often
    begin with 0-d tensors), then the rest evenly spread over the others."""
    if wanted is None or len(usable) <= wanted:
        return usable
    best = max(usable, key=lambda i: (dynamic_dims(drawn[i]), -i))
    rest = [i for i in usable if i != best]
    if wanted == 1:
        return [best]
    step = (len(rest) - 1) / max(wanted - 2, 1)
    spread = {rest[round(k * step)] for k in range(wanted - 1)} if wanted > 2 else {rest[0]}
    return sorted({best} | spread)


def op_names(patterns: list[str] | None = None) -> list[str]:
    """Full names in op_db's order; ``patterns`` are shell-style globs
    (``nn.functional.*``) or exact names."""
    names = list(op_table())
    if not patterns:
        return names
    return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]


def enumerate_cases(patterns: list[str] | None = None, dtypes: list[str] | None = None,
                    max_samples_per_op: int | None = None):
    """Case ids and not-applicable samples (id, reason), in op_db's order.

    Per op and dtype, ``max_samples_per_op`` is taken from the applicable
    samples, so an op whose first sample has no tensors still gets a case."""
    cases, skipped = [], []
    for name in op_names(patterns):
        op = op_table()[name]
        for dtype in dtypes or list(DTYPES):
            if DTYPES[dtype] not in op.supported_dtypes("cpu"):
                continue
            try:
                drawn = samples(name, dtype)
            except Exception as error:  # an OpInfo whose generator fails on this build
                skipped.append((case_id(name, dtype, 0),
                                f"sample_inputs raised {type(error).__name__}"))
                continue
            usable = []
            for index, sample in enumerate(drawn):
                reason = not_applicable(sample)
                if reason:
                    skipped.append((case_id(name, dtype, index), reason))
                else:
                    usable.append(index)
            cases += [case_id(name, dtype, i) for i in pick(usable, drawn, max_samples_per_op)]
    return cases, skipped
