"""A CPU module compiled with ``params="external"`` keeps its weights packed as
its products read them (runtime/parameter_encoding.py): its load maps them
and copies nothing, an archive written for another module is refused, and
new weights are packed when they are written."""

import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.export import Dim

import anyshape
import anyshape.iree.invocation
import anyshape.runtime.compiled_module
from huge_pages import host_maps_files_on_huge_pages, huge_mapped_bytes, mapping_fields
from kernel_objects import skip_unless_packings_match
from models import one_layer_llama

WIDTH = 1024


class Layers(torch.nn.Module):
    def __init__(self, count: int, width: int = WIDTH):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(count))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def _compile(model, width: int = WIDTH):
    return anyshape.compile(model, (torch.randn(5, width),),
                            dynamic_shapes={"x": {0: Dim("rows")}}, cache=False,
                            backend=anyshape.BackendOptions(params="external"))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    model = Layers(4).eval()
    compiled = _compile(model)
    directory = tmp_path_factory.mktemp("encoded") / "artifact"
    compiled.save(directory)
    return model, compiled, directory


@pytest.mark.builds_after_export
def test_the_archive_holds_the_weights_packed_for_this_module(saved):
    model, compiled, directory = saved
    assert "--iree-global-opt-data-tiling" in compiled.iree_flags
    assert compiled.encoder_path is not None
    assert sorted(path.name for path in directory.iterdir()) == [
        "encoder.vmfb", "manifest.json", "module.vmfb", "params.irpa"]
    x = torch.randn(17, WIDTH)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)


# A fresh process's resident bytes of one kind ("RssAnon", "RssFile").
_RESIDENT = textwrap.dedent("""
    import sys, torch, anyshape

    def resident(kind):
        for line in open("/proc/self/status"):
            if line.startswith(kind + ":"):
                return int(line.split()[1]) * 1024
""")

_LOAD = _RESIDENT + textwrap.dedent("""
    module = anyshape.load(sys.argv[1])
    torch.manual_seed(1)
    x = torch.randn(7, int(sys.argv[2]))
    module(x)  # IREE's runtime and workers started: the second load is the module alone
    before = resident("RssAnon")
    del module
    module = anyshape.load(sys.argv[1])
    module(x)
    print(resident("RssAnon") - before)
""")


@pytest.mark.builds_after_export
def test_the_load_maps_the_packed_weights_without_copying_them(saved):
    """/// Without the encoder the load packed every weight into new memory:
    /// the weights' bytes again, in anonymous pages."""
    model, compiled, directory = saved
    weights = sum(p.numel() * 4 for p in model.parameters())
    result = subprocess.run([sys.executable, "-c", _LOAD, str(directory), str(WIDTH)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    grown = int(result.stdout.split()[-1])
    assert grown < weights / 4, (grown, weights)


@pytest.mark.builds_after_export
def test_an_archive_written_for_another_module_is_refused(saved, tmp_path, monkeypatch):
    """/// The packed layout is one compile's: read by another module, the
    /// same bytes would be other weights, silently. Refused before the load
    /// maps and touches every page of the archive (gigabytes, for a big model)."""
    _, _, directory = saved
    other = _compile(Layers(3).eval())
    other.save(tmp_path / "other")
    shutil.copyfile(directory / "params.irpa", tmp_path / "other" / "params.irpa")
    loaded = anyshape.load(tmp_path / "other")
    mapped = []
    map_archive = anyshape.runtime.compiled_module.mapped_archive

    def recorded(path, progress):
        mapped.append(path)
        return map_archive(path, progress)

    monkeypatch.setattr(anyshape.runtime.compiled_module, "mapped_archive", recorded)
    with pytest.raises(ValueError, match=r"other/params.irpa: expected weights packed for this "
                                         r"module's layout sha256:\w+, got one packed for "
                                         r"layout sha256:\w+ \(another compile's\); write "
                                         r"them again with anyshape.write_parameters"):
        loaded(torch.randn(2, WIDTH))
    assert mapped == []


@pytest.mark.builds_after_export
def test_new_weights_are_packed_as_they_are_written(saved, tmp_path):
    _, _, directory = saved
    copy = tmp_path / "copy"
    shutil.copytree(directory, copy)
    torch.manual_seed(2)
    retrained = Layers(4).eval()
    anyshape.write_parameters(copy, retrained)
    x = torch.randn(33, WIDTH)
    torch.testing.assert_close(anyshape.load(copy)(x), retrained(x), rtol=1e-4, atol=1e-4)


@pytest.mark.builds_after_export
def test_writing_weights_without_the_encoder_is_refused(saved, tmp_path):
    _, _, directory = saved
    copy = tmp_path / "copy"
    shutil.copytree(directory, copy)
    (copy / "encoder.vmfb").unlink()
    with pytest.raises(FileNotFoundError, match=r"copy/encoder.vmfb: the encoder that packs this "
                                                r"module's weights is missing"):
        anyshape.write_parameters(copy, Layers(4).eval())


_PAGES = _RESIDENT + textwrap.dedent("""
    module = anyshape.load(sys.argv[1])
    before = resident("RssFile")
    assert module.preload()
    print(resident("RssFile") - before)
""")


@pytest.mark.builds_after_export
def test_the_load_maps_every_page_of_the_archive(saved):
    """/// The first call does not fault in the weights page by page: the load
    /// has mapped them all (docs/api.md, params="external")."""
    _, _, directory = saved
    archive = (directory / "params.irpa").stat().st_size
    result = subprocess.run([sys.executable, "-c", _PAGES, str(directory)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.split()[-1]) >= 0.9 * archive, (result.stdout, archive)


@pytest.mark.builds_after_export
def test_a_failing_encoder_leaves_the_module_packing_at_load(monkeypatch):
    """/// The module without the encoder is the floor: where IREE cannot build
    /// the encoder, the module is compiled again to pack its weights when it
    /// loads, with a warning that says why."""
    monkeypatch.setattr(anyshape.iree.invocation, "encoder_flags",
                        lambda flags: [*flags[:1], "--iree-no-such-flag"])
    torch.manual_seed(3)
    model = Layers(2).eval()
    with pytest.warns(anyshape.PackedWeightsFallback,
                      match=r"the encoder that packs the weights could not be built or run "
                            r"\(stage 'iree-compile' failed: .*no-such-flag"):
        compiled = _compile(model)
    assert compiled.encoder_path is None
    x = torch.randn(7, WIDTH)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)


@pytest.mark.builds_after_export
def test_a_generator_archive_holds_each_weight_packed_once():
    """/// The step computes Q, K and V with the kernel, part by part; the
    /// decode functions kept them on their concatenated weights, which IREE
    /// packed a second time (0.43 GiB for the TinyLlama-1.1B shape). IREE's
    /// float32 tiles match the kernel's panels with AVX-512 only."""
    skip_unless_packings_match()
    model = one_layer_llama(256, 512, heads=8, kv_heads=2, vocab=1000, seed=4)
    generator = anyshape.compile_generator(model, cache=False, backend=anyshape.BackendOptions(
        params="external"))
    assert set(generator.spec["decode_entries"]) == {"1", "4", "8"}
    weights = sum(p.numel() * 4 for p in model.parameters())
    qkv = sum(model.model.layers[0].self_attn.get_submodule(name).weight.numel() * 4
              for name in ("q_proj", "k_proj", "v_proj"))
    archive = generator.module.parameters_path.stat().st_size
    assert archive < weights + qkv / 4, (archive, weights, qkv)
    ids = torch.tensor([[5, 7, 9, 11, 2, 3, 17]])
    assert torch.equal(generator.generate(ids, max_new_tokens=8, do_sample=False),
                       model.generate(ids, max_new_tokens=8, do_sample=False))



@pytest.mark.builds_after_export
def test_a_gpt2_generator_archive_holds_its_fused_projection_once():
    """/// GPT-2's decode functions reshape c_attn's product with a view before
    /// its Q, K and V slices (the step unflattens it): read through the view
    /// too, the fused weight is packed in parts, as the step's kernel packs
    /// it, not a second time whole. The step's last layer still reads its
    /// c_attn whole (slice hoisting takes the query rows from that product),
    /// so one layer's is packed whole as well."""
    from transformers import GPT2Config, GPT2LMHeadModel

    skip_unless_packings_match()
    torch.manual_seed(7)
    model = GPT2LMHeadModel(GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=1000,
                                       n_positions=128)).eval()
    generator = anyshape.compile_generator(model, cache=False, backend=anyshape.BackendOptions(
        params="external"))
    weights = sum(p.numel() * 4 for p in model.parameters())  # the tied table once
    table = model.lm_head.weight.numel() * 4  # read as it is, and packed for the LM head
    one_layer = model.transformer.h[0].attn.c_attn.weight.numel() * 4
    archive = generator.module.parameters_path.stat().st_size
    assert archive < weights + table + 1.5 * one_layer, (archive, weights, table, one_layer)
    ids = torch.tensor([[5, 7, 9, 11, 2, 3, 17]])
    assert torch.equal(generator.generate(ids, max_new_tokens=8, do_sample=False),
                       model.generate(ids, max_new_tokens=8, do_sample=False))

class Classifier(torch.nn.Module):
    def __init__(self, labels: int = 2):
        super().__init__()
        self.body = torch.nn.Linear(256, 256)
        self.head = torch.nn.Linear(256, labels)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


def _compile_classifier(model):
    return anyshape.compile(model, (torch.randn(7, 256),),
                            dynamic_shapes={"x": {0: Dim("rows")}}, cache=False,
                            backend=anyshape.BackendOptions(params="external"))


@pytest.mark.builds_after_export
def test_a_weight_the_encoder_leaves_is_read_by_name_from_the_archive(tmp_path):
    """/// IREE's encoder packs a weight only where padding grows it at most
    /// 1.2x: a 2-label head, padded to 16 rows, stays packed at load and read
    /// by its name, which the packed archive alone lacked ("no provider
    /// registered that handles scopes like 'model'")."""
    torch.manual_seed(5)
    model = Classifier().eval()
    compiled = _compile_classifier(model)
    assert compiled.encoder_path is not None
    assert compiled.parameters_by_name == ["head.weight"]
    x = torch.randn(5, 256)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    compiled.save(tmp_path / "artifact")
    torch.testing.assert_close(anyshape.load(tmp_path / "artifact")(x), model(x),
                               rtol=1e-5, atol=1e-5)
    retrained = Classifier().eval()
    anyshape.write_parameters(tmp_path / "artifact", retrained)
    torch.testing.assert_close(anyshape.load(tmp_path / "artifact")(x), retrained(x),
                               rtol=1e-5, atol=1e-5)


class NamedLikeTheEncodersSlab(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(256, 256)
        self.parameter0 = torch.nn.Parameter(torch.randn(2, 256))

    def forward(self, x):
        return torch.relu(self.body(x)) @ self.parameter0.T


@pytest.mark.builds_after_export
def test_a_weight_named_as_the_encoders_slab_falls_back_to_packing_at_load():
    """/// A weight read by name shares the archive with the encoder's slabs
    /// (parameter0, ...): one name for both would read the wrong bytes."""
    torch.manual_seed(6)
    model = NamedLikeTheEncodersSlab().eval()
    with pytest.warns(anyshape.PackedWeightsFallback,
                      match=r"weights named parameter0: expected names other than the "
                            r"encoder's own keys, got the same"):
        compiled = _compile_classifier(model)
    assert compiled.encoder_path is None
    x = torch.randn(5, 256)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.builds_after_export
def test_the_load_tells_how_much_of_the_archive_it_has_mapped(saved):
    _, _, directory = saved
    archive = (directory / "params.irpa").stat().st_size
    messages = []
    module = anyshape.load(directory, progress=messages.append)
    assert module.preload()
    assert messages[-1] == (f"mapping params.irpa: {archive / 1e9:.2f} of "
                            f"{archive / 1e9:.2f} GB"), messages


@pytest.mark.builds_after_export
def test_by_default_a_bar_shows_the_mapping_of_a_big_archive_on_a_terminal(
        saved, capsys, monkeypatch):
    """/// Without ``progress``, a bar is drawn on a terminal for an archive of
    /// 1 GiB or more (here 16 MB counts as big), and nothing is shown
    /// otherwise."""
    import anyshape.runtime.archive_pages as archive_pages

    _, _, directory = saved
    monkeypatch.setattr(archive_pages, "on_terminal", lambda: True)
    assert anyshape.load(directory).preload()
    assert capsys.readouterr().err == ""  # 16.8 MB: not big
    monkeypatch.setattr(archive_pages, "BIG_ARCHIVE_BYTES", 16 << 20)
    assert anyshape.load(directory).preload()
    assert "mapping params.irpa" in capsys.readouterr().err
    monkeypatch.setattr(archive_pages, "on_terminal", lambda: False)
    assert anyshape.load(directory).preload()
    assert capsys.readouterr().err == ""  # big, but no terminal


@pytest.mark.builds_after_export
def test_a_big_archive_is_mapped_on_huge_pages_and_a_small_one_as_it_is(
        saved, tmp_path, monkeypatch):
    """/// A decode step reads every weight once, and the products read them
    /// faster from 2 MiB pages. A copied archive is held in small pages of
    /// the page cache: a big one is read again into huge ones (from 16 MiB
    /// here, 1 GiB by default; its first 4 MiB, then the rest), a small one
    /// is not."""
    import anyshape.runtime.archive_pages as archive_pages

    if not host_maps_files_on_huge_pages(tmp_path):
        pytest.skip("this host does not map a file's page cache on 2 MiB pages")
    model, _, directory = saved
    small = tmp_path / "small"
    shutil.copytree(directory, small)
    archive = small / "params.irpa"
    loaded = anyshape.load(small)
    assert loaded.preload()
    fields = mapping_fields(archive)
    assert "hg" not in fields["VmFlags"].split(), fields  # no MADV_HUGEPAGE asked
    del loaded
    big = tmp_path / "big"
    shutil.copytree(directory, big)
    archive = big / "params.irpa"
    monkeypatch.setattr(archive_pages, "HUGE_PAGES_FROM_BYTES", 16 << 20)
    monkeypatch.setattr(archive_pages, "PROBE_BYTES", 4 << 20)  # the rest read again after it
    loaded = anyshape.load(big)
    assert loaded.preload()
    assert huge_mapped_bytes(archive) >= archive.stat().st_size // 2, mapping_fields(archive)
    x = torch.randn(17, WIDTH)
    torch.testing.assert_close(loaded(x), model(x), rtol=1e-4, atol=1e-4)


def test_a_progress_load_does_not_take_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match=r"progress: expected True, False, 'bars', 'lines' or "
                                         r"a function of a message, got 'loud'"):
        anyshape.load(tmp_path, progress="loud")
