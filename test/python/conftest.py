import os
import shutil
import sys
import tempfile

import pytest
import torch

HERE = os.path.dirname(__file__)
sys.path.insert(0, HERE)

from extent import FULL  # noqa: E402
from models import small_roberta  # noqa: E402
from torch.export import Dim  # noqa: E402

MAX_LEN = 128


@pytest.fixture(scope="session")
def roberta():
    return small_roberta(max_positions=MAX_LEN + 2)


@pytest.fixture(scope="session")
def roberta_dynamic_shapes():
    batch, seq = Dim("batch", min=1, max=4), Dim("seq", min=1, max=MAX_LEN)
    return {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}


@pytest.fixture(scope="session")
def compiled_roberta(roberta, roberta_dynamic_shapes):
    """One dynamic batch x sequence compile shared by the tests that only run it."""
    import anyshape
    from models import roberta_inputs

    ids, mask = roberta_inputs(2, 8)
    return anyshape.compile(roberta, (ids,), {"attention_mask": mask},
                            dynamic_shapes=roberta_dynamic_shapes)


@pytest.fixture(scope="session")
def shape_queries():
    """The ShapeQueries module and its compile with the default passes, shared."""
    import anyshape
    from models import shape_queries_case

    model, args, dynamic = shape_queries_case()
    return model, anyshape.compile(model, args, dynamic_shapes=dynamic)


@pytest.fixture(scope="session")
def test_passes():
    """Register the infrastructure test passes (test/lib/test_passes.py) in this process."""
    import runpy

    runpy.run_path(os.path.join(HERE, "..", "lib", "test_passes.py"))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# `make check`: every test that needs no IREE build. With ANYSHAPE_NO_BUILD=1 a
# test skips where it would first run iree-compile in this process (what a
# build costs), so none is left out that could run; those that build in other
# processes (command lines, fresh-process checks, the OpInfo pool) are marked
# builds_in_subprocess and skipped, and so are those marked builds_after_export
# (a whole model exported, then built: skipped before the export) and
# slow_without_build (a process per case, tens of seconds), to keep `make check`
# within its 4 minutes (docs/testing.md).
NO_BUILD = os.environ.get("ANYSHAPE_NO_BUILD") == "1"

# Compiles share one compile cache per test session (anyshape/driver/compile_cache.py):
# an identical build made by two tests is made once, and no test reads or
# fills the user's cache. Subprocesses inherit it, and so do pytest-xdist's
# workers (make test runs several): they share the controller's, which the
# cache lets several processes fill at once.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if not os.environ.get("ANYSHAPE_TEST_KEEP_CACHE_DIR") and XDIST_WORKER is None:
    os.environ["ANYSHAPE_CACHE_DIR"] = tempfile.mkdtemp(prefix="anyshape-test-cache-")

# Temporary files of the session (the reproducer a failing compile keeps, about
# 180 of them per `make test`, a module's stage files) go into one directory,
# removed at the end, not into the system's: workers and subprocesses inherit it.
SESSION_TMP = tempfile.mkdtemp(prefix="anyshape-test-tmp-") if XDIST_WORKER is None else None
if SESSION_TMP is not None:
    os.environ["TMPDIR"] = tempfile.tempdir = SESSION_TMP


def pytest_configure(config):
    config.addinivalue_line("markers", "builds_in_subprocess: runs an IREE build in another "
                                       "process (skipped by `make check`)")
    config.addinivalue_line("markers", "builds_after_export: exports a whole model, then builds "
                                       "it (skipped by `make check` before the export)")
    config.addinivalue_line("markers", "slow_without_build: builds nothing but takes tens of "
                                       "seconds, a process per case (skipped by `make check`)")
    config.addinivalue_line("markers", "full_extent: a case of a sweep that only "
                                       "ANYSHAPE_TEST_EXTENT=full runs (`make test-full`)")


def pytest_collection_modifyitems(config, items):
    if not FULL:
        quick = pytest.mark.skip(reason="a further case of a sweep: `make test-full` runs it")
        for item in items:
            if "full_extent" in item.keywords:
                item.add_marker(quick)
    if not NO_BUILD:
        return
    in_subprocess = pytest.mark.skip(reason="builds with IREE in a subprocess: `make test` runs it")
    after_export = pytest.mark.skip(reason="builds a whole model with IREE: `make test` runs it")
    slow = pytest.mark.skip(reason="tens of seconds, a process per case: `make test` runs it")
    for item in items:
        if "builds_in_subprocess" in item.keywords:
            item.add_marker(in_subprocess)
        elif "builds_after_export" in item.keywords:
            item.add_marker(after_export)
        elif "slow_without_build" in item.keywords:
            item.add_marker(slow)


def pytest_sessionfinish(session, exitstatus):
    cache = os.environ.get("ANYSHAPE_CACHE_DIR", "")
    if not os.environ.get("ANYSHAPE_TEST_KEEP_CACHE_DIR") and XDIST_WORKER is None and \
            os.path.basename(cache).startswith("anyshape-test-cache-"):
        shutil.rmtree(cache, ignore_errors=True)
    if SESSION_TMP is not None:
        shutil.rmtree(SESSION_TMP, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _no_iree_builds():
    if not NO_BUILD:
        yield
        return
    from anyshape.iree import invocation

    def refuse(*args, **kwargs):
        pytest.skip("builds with IREE: `make test` runs it")

    saved = invocation.run_iree_compile
    invocation.run_iree_compile = refuse
    try:
        yield
    finally:
        invocation.run_iree_compile = saved
