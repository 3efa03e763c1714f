import os
import sys

import pytest
import torch

HERE = os.path.dirname(__file__)
sys.path.insert(0, HERE)

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
