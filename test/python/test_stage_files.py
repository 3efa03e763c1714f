"""A compile's stage files hold the IR without the weights, which join it in
the iree-input stage only; every stage's file is kept and reads back as it
was written."""

import errno
from pathlib import Path

import pytest
import torch
from torch.export import Dim

import anyshape
import anyshape.driver.stage_files
from anyshape.runtime import parameter_encoding


class TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(33, 65)
        self.second = torch.nn.Linear(65, 17)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


def test_every_stage_is_kept_and_reads_back_as_dumped(tmp_path):
    torch.manual_seed(0)
    model = TwoLayers().eval()
    x = torch.randn(7, 33)
    compiled = anyshape.compile(model, (x,), dynamic_shapes={"x": {0: Dim("rows")}},
                                dump_ir_dir=tmp_path, cache=False)
    stages = compiled.stages
    passes = stages[1:-1]
    assert stages[0] == "import" and stages[-1] == "iree-input" and passes
    workdir = compiled.stage_file("import").parent
    assert len(list(workdir.glob("*.mlirbc"))) == len(stages)
    dumped = {path.stem.split("-", 1)[1]: path.read_text() for path in tmp_path.glob("*.mlir")}
    for stage in stages:
        assert compiled.ir(stage) == dumped[stage.replace("#", "-")], stage
    assert "dense_resource<first.weight>" in compiled.ir(passes[0])  # named, without data
    assert "dialect_resources" not in compiled.ir(passes[0])
    assert "dialect_resources" in compiled.ir("iree-input")  # inline: the data joined here
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)


class Wide(torch.nn.Module):
    """8 MB of weights in one layer."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(1024, 2048)

    def forward(self, x):
        return self.layer(x)


@pytest.mark.parametrize("params", ["inline", "external"])
def test_stage_files_hold_the_ir_and_the_weights_join_at_the_iree_input(params):
    torch.manual_seed(0)
    model = Wide().eval()
    x = torch.randn(7, 1024)
    compiled = anyshape.compile(model, (x,), dynamic_shapes={"x": {0: Dim("rows")}},
                                cache=False, backend=anyshape.BackendOptions(params=params))
    weight_bytes = 4 * (1024 * 2048 + 2048)
    sizes = {stage: compiled.stage_file(stage).stat().st_size for stage in compiled.stages}
    ir_only = [stage for stage in compiled.stages if stage != "iree-input"]
    assert max(sizes[stage] for stage in ir_only) < weight_bytes / 50, sizes
    if params == "inline":
        assert sizes["iree-input"] > weight_bytes, sizes
        assert compiled.vmfb_path.stat().st_size > weight_bytes
    else:
        assert sizes["iree-input"] < weight_bytes / 50, sizes
        assert compiled.vmfb_path.stat().st_size < weight_bytes / 10
    for rows in (1, 7, 33):
        x = torch.randn(rows, 1024)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)


def test_a_detached_import_needs_a_table_for_the_arrays():
    from anyshape.frontend.importer import import_program

    program = torch.export.export(TwoLayers().eval(), (torch.randn(7, 33),))
    with pytest.raises(ValueError, match="detach: the weights' arrays need a table"):
        import_program(program, detach=True)
    table = {}
    module = import_program(program, weights=table, detach=True)
    assert sorted(table) == ["first.bias", "first.weight", "second.bias", "second.weight"]
    assert "dense_resource<first.weight>" in str(module)
    assert "dialect_resources" not in str(module)


def test_a_full_disk_names_the_working_directory_and_tmpdir(monkeypatch):
    def full(module, path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(anyshape.driver.stage_files, "write_bytecode", full)
    with pytest.raises(OSError) as info:
        anyshape.compile(TwoLayers().eval(), (torch.randn(7, 33),), cache=False)
    assert info.value.errno == errno.ENOSPC
    message = str(info.value)
    assert "the compile's working directory" in message and "TMPDIR" in message
    weights = 4 * (33 * 65 + 65 + 65 * 17 + 17)
    assert f"the compile needs about {2 * weights / 1e3:.1f} kB there" in message  # inline: twice
    assert Path(info.value.filename).name.startswith("anyshape-")


def _iree_compile_running() -> bool:
    """Whether a child process of this one is iree-compile."""
    import os

    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
            cmdline = (status.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and b"iree-compile" in cmdline:
            return True
    return False


@pytest.mark.builds_after_export
def test_the_parameter_archive_is_written_while_iree_compile_runs(monkeypatch):
    """/// A CUDA module's weights go into params.irpa as they are, which
    /// iree-compile never reads: the archive is written once its process has
    /// started, not before it (a 4.1 GB archive: seconds)."""
    real = anyshape.driver.stage_files.write_archive
    seen = []

    def watched(path, arrays):
        seen.append((Path(path).name, _iree_compile_running()))
        real(path, arrays)

    monkeypatch.setattr(anyshape.driver.stage_files, "write_archive", watched)
    compiled = anyshape.compile(TwoLayers().eval(), (torch.randn(7, 33),),
                                dynamic_shapes={"x": {0: Dim("rows")}}, cache=False, target="cuda",
                                backend=anyshape.BackendOptions(params="external"))
    assert seen == [("params.irpa", True)]
    assert compiled.encoder_path is None


@pytest.mark.builds_after_export
def test_a_cpu_module_writes_its_weights_once_packed(monkeypatch):
    """/// A CPU module's encoder writes the archive packed: written by name
    /// first as well, the weights' bytes were written for nothing and the
    /// compile's temporary files held them twice (8.2 GiB for the 1.1B shape's
    /// 4.1 GiB)."""
    real = anyshape.driver.stage_files.write_archive
    seen = []

    def watched(path, arrays):
        seen.append(Path(path).name)
        real(path, arrays)

    monkeypatch.setattr(anyshape.driver.stage_files, "write_archive", watched)
    torch.manual_seed(0)
    model = TwoLayers().eval()
    compiled = anyshape.compile(model, (torch.randn(7, 33),),
                                dynamic_shapes={"x": {0: Dim("rows")}}, cache=False,
                                backend=anyshape.BackendOptions(params="external"))
    assert compiled.encoder_path is not None
    assert seen == []
    x = torch.randn(5, 33)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.builds_after_export
def test_a_full_disk_while_writing_the_archive_stops_iree_compile_and_is_named(monkeypatch):
    """/// The archive's write failing for want of space stops the iree-compile
    /// it overlapped, and says where the space ran out and how much is needed."""
    def full(path, arrays):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(anyshape.driver.stage_files, "write_archive", full)
    with pytest.raises(OSError) as info:
        anyshape.compile(TwoLayers().eval(), (torch.randn(7, 33),), cache=False, target="cuda",
                         backend=anyshape.BackendOptions(params="external"))
    assert info.value.errno == errno.ENOSPC
    weights = 4 * (33 * 65 + 65 + 65 * 17 + 17)
    assert f"the compile needs about {weights / 1e3:.1f} kB there" in str(info.value)  # once
    assert not _iree_compile_running()


@pytest.mark.builds_after_export
def test_a_full_disk_while_packing_the_weights_is_named(monkeypatch):
    """/// A CPU module's archive is written by its encoder after iree-compile;
    /// IREE's "failed to extend file" there is a full disk, named as one."""
    real = parameter_encoding.create_archive_file

    def onto_a_full_device(index, path):
        real(index, Path("/dev/full"))

    monkeypatch.setattr(parameter_encoding, "create_archive_file", onto_a_full_device)
    with pytest.raises(OSError) as info:
        anyshape.compile(TwoLayers().eval(), (torch.randn(7, 33),), cache=False,
                         backend=anyshape.BackendOptions(params="external"))
    assert info.value.errno == errno.ENOSPC
    assert "no space left on the device of the compile's working directory" in str(info.value)
    assert not _iree_compile_running()
