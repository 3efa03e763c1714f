"""A compile keeps the weights on disk in the import and iree-input stages only;
every pass stage, released during the compile, reads back as it was written."""

import errno
from pathlib import Path

import pytest
import torch
from torch.export import Dim

import anyshape
import anyshape.driver.stage_files


class TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(33, 65)
        self.second = torch.nn.Linear(65, 17)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


def test_pass_stages_are_released_and_read_back_as_dumped(tmp_path):
    torch.manual_seed(0)
    model = TwoLayers().eval()
    x = torch.randn(7, 33)
    compiled = anyshape.compile(model, (x,), dynamic_shapes={"x": {0: Dim("rows")}},
                                dump_ir_dir=tmp_path)
    stages = compiled.stages
    passes = stages[1:-1]
    assert stages[0] == "import" and stages[-1] == "iree-input" and passes
    workdir = compiled.stage_file("import").parent
    assert sorted(p.name for p in workdir.glob("*.mlirbc")) == [
        "00-import.mlirbc", f"{len(stages) - 1:02d}-iree-input.mlirbc"]

    # The passes run again on the import stage: the text is the compile's own.
    dumped = {path.stem.split("-", 1)[1]: path.read_text() for path in tmp_path.glob("*.mlir")}
    for stage in reversed(passes):  # the last first: it is made from the import alone
        assert compiled.ir(stage) == dumped[stage.replace("#", "-")], stage
    assert len(list(workdir.glob("*.mlirbc"))) == len(stages)
    assert "dense_resource" in compiled.ir(passes[0])  # weights included
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)


def test_a_full_disk_names_the_working_directory_and_tmpdir(monkeypatch):
    def full(module):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(anyshape.driver.stage_files, "module_to_bytecode", full)
    with pytest.raises(OSError) as info:
        anyshape.compile(TwoLayers().eval(), (torch.randn(7, 33),), cache=False)
    assert info.value.errno == errno.ENOSPC
    message = str(info.value)
    assert "the compile's working directory" in message and "TMPDIR" in message
    assert Path(info.value.filename).name.startswith("anyshape-")
