"""Translation validation (anyshape.check): a module before and after passes, through
IREE, on random inputs at random sizes within the dims' ranges."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from models import roberta_inputs, shape_queries_case, small_gpt2_last_token
from torch.export import Dim

import anyshape
from anyshape.tools.check import LOWER, check
from anyshape.passes import DEFAULT_PIPELINE


class TanhScale(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x) * x.shape[1]


@pytest.fixture(scope="module")
def shape_queries_text():
    model, args, dynamic = shape_queries_case()
    return str(anyshape.import_torch(model, args, dynamic_shapes=dynamic))


@pytest.fixture(scope="module")
def tanh_text():
    return str(anyshape.import_torch(TanhScale().eval(), (torch.randn(2, 5),),
                                     dynamic_shapes={"x": {1: Dim("n", min=2, max=40)}}))


def test_default_pipeline_is_equivalent(shape_queries_text):
    trials = check(shape_queries_text, DEFAULT_PIPELINE, trials=3, seed=1)
    assert len(trials) == 3 and all(t.ok for t in trials)
    for trial in trials:
        (batch, seq), = [tuple(trial.sizes.values())]
        assert 1 <= batch <= 4 and 1 <= seq <= 64
        assert trial.errors[0].max_abs <= 1e-5


def test_passes_that_leave_anyshape_ops_are_lowered(shape_queries_text):
    """canonicalize-shapes makes anyshape.iota_like, which only anyshape-lower
    turns into something IREE compiles: check ends the passes with it."""
    trials = check(shape_queries_text, ["anyshape-canonicalize-shapes"], trials=2, seed=3)
    assert all(t.ok for t in trials)


def test_wrong_rewrite_is_caught(tanh_text, test_passes):
    trials = check(tanh_text, ["anyshape-test-drop-op{op-name=torch.aten.tanh}"], trials=2)
    assert not any(t.ok for t in trials)
    assert all(t.errors[0].max_abs > 0.1 for t in trials)
    assert all(2 <= size <= 40 for t in trials for size in t.sizes.values())


@pytest.mark.builds_in_subprocess
def test_command_line_exit_status(tanh_text, tmp_path):
    path = tmp_path / "tanh.mlir"
    path.write_text(tanh_text)
    plugin = str(Path(__file__).parent.parent / "lib" / "test_passes.py")
    good = subprocess.run([sys.executable, "-m", "anyshape.check", str(path), "--passes",
                           ",".join(DEFAULT_PIPELINE), "--trials", "2"],
                          capture_output=True, text=True)
    assert good.returncode == 0, good.stderr
    assert "2 of 2 trials within atol 1e-05 + rtol 0.0001" in good.stdout
    bad = subprocess.run([sys.executable, "-c",
                          "import runpy, sys; runpy.run_path(sys.argv[1]); "
                          "from anyshape.tools.check import main; sys.exit(main(sys.argv[2:]))",
                          plugin, str(path), "--passes", "anyshape-test-drop-op", "--trials", "2"],
                         capture_output=True, text=True)
    assert bad.returncode == 1, bad.stderr
    assert "MISMATCH" in bad.stdout and "0 of 2 trials within" in bad.stdout


def test_unbound_dim_is_drawn_up_to_max_size():
    text = ("func.func @main(%arg0: !torch.vtensor<[?],f32>) -> !torch.vtensor<[?],f32> {\n"
            "  %0 = torch.aten.tanh %arg0 : !torch.vtensor<[?],f32> -> !torch.vtensor<[?],f32>\n"
            "  return %0 : !torch.vtensor<[?],f32>\n}\n")
    trials = check(text, [], trials=4, max_size=5)
    assert all(t.ok for t in trials)
    assert all(0 <= size <= 5 for t in trials for size in t.sizes.values())


def test_conditions_are_met_by_every_draw_and_none_met_is_refused(tanh_text):
    # Relations between sizes the IR does not state (a step's cache capacity
    # above its mask length): every draw meets them; none that can is refused
    # before anything is built.
    from anyshape.driver.ir_signature import signature_from_module
    from anyshape.mlir import parse_module
    from anyshape.dialects import new_context

    symbol = next(iter(signature_from_module(parse_module(tanh_text, new_context()),
                                             "main").symbols))
    trials = check(tanh_text, [], trials=3, max_size=40, conditions=[f"({symbol}) % 2 == 0"])
    assert all(t.ok and t.sizes[symbol] % 2 == 0 for t in trials)
    with pytest.raises(ValueError, match=r"conditions: no sizes up to max_size=40 met them in "
                                         r"1000 draws"):
        check(tanh_text, [], max_size=40, conditions=[f"({symbol}) > 1000"])


@pytest.fixture(scope="module")
def gpt2_text():
    """Every default pass rewrites something here: position ids from the length,
    the last-token selection, causal-masked softmaxes."""
    ids, mask = roberta_inputs(2, 8, vocab=500, pad_from=5)
    dims = {0: Dim("batch", min=1, max=4), 1: Dim("seq", min=2, max=64)}
    dynamic = {"input_ids": dims, "attention_mask": dims}
    return str(anyshape.import_torch(small_gpt2_last_token().eval(), (ids, mask),
                                     dynamic_shapes=dynamic))


@pytest.mark.parametrize("pass_name", DEFAULT_PIPELINE)
def test_each_default_pass_alone_is_equivalent(gpt2_text, pass_name):
    """Translation validation of each pass on its own, so that a wrong rewrite is
    pinned to its pass (the default pipeline's test above sees their sum)."""
    trials = check(gpt2_text, [pass_name], trials=2, seed=5, max_size=64)
    assert all(t.ok for t in trials), [(t.sizes, t.errors) for t in trials]
    length, = re.findall(r'torch.symbolic_int "(\w+)" \{min_val = 2, max_val = 64\}', gpt2_text)
    assert all(2 <= t.sizes[length] <= 64 for t in trials), [t.sizes for t in trials]


def test_the_reference_is_built_once_for_several_passes(gpt2_text, monkeypatch):
    # The per-pass test above checks five passes on one module: one reference build.
    import anyshape.driver.compile

    built = []
    real = anyshape.driver.compile.compile_module
    monkeypatch.setattr(anyshape.driver.compile, "compile_module",
                        lambda module, signature, target, pipeline, **kw:
                        built.append(list(pipeline)) or real(module, signature, target,
                                                             pipeline, **kw))
    for pass_name in DEFAULT_PIPELINE[:2]:
        check(gpt2_text, [pass_name], trials=1, seed=5, max_size=64)
    references = [p for p in built if p in ([], [LOWER])]
    assert len(references) <= 1 and len(built) - len(references) == 2, built


class _PackedAttention(torch.nn.Module):
    """A projection, attention under transformers' additive mask, a projection."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(8, 8)
        self.second = torch.nn.Linear(8, 8)

    def forward(self, x, attention_mask):
        h = self.first(x)
        bias = (1.0 - attention_mask[:, None, :]) * torch.finfo(torch.float32).min
        p = torch.softmax(h @ h.transpose(1, 2) + bias, dim=-1)
        return self.second(p @ h)


def test_padding_elimination_is_checked_on_random_masks():
    """Three trials: a random 0/1 mask, every token real, a row of padding only;
    the per-token output compared at real tokens, and 0 required at padding."""
    dims = {0: Dim("batch", max=4), 1: Dim("seq", max=32)}
    text = str(anyshape.import_torch(_PackedAttention().eval(),
                                     (torch.randn(2, 5, 8), torch.ones(2, 5)),
                                     dynamic_shapes=(dims, dims)))
    trials = check(text, ["anyshape-canonicalize-shapes", "anyshape-eliminate-padding{mask=1}"],
                   trials=3, seed=2)
    assert len(trials) == 3 and all(t.ok for t in trials), trials


def test_anyshape_check_is_an_installed_tool():
    """``anyshape-check`` is the console script pyproject.toml installs beside the
    interpreter, as ``anyshape-compile`` is; ``python -m anyshape.check`` above
    is the same tool under its old name."""
    tool = Path(sys.executable).with_name("anyshape-check")
    result = subprocess.run([str(tool), "--help"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: anyshape-check") and "--passes" in result.stdout
