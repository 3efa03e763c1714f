"""User-facing error paths of anyshape.compile, anyshape.load, a loaded module and the
two command-line tools that no other test file covers, each checked by its message
(test/ERROR_PATHS.md lists every path and the test that covers it).

The triggers are cheap: the errors come before any IREE compile (the tools are
called in-process, artifacts are written by hand around a placeholder .vmfb)."""

import json
import re
import textwrap

import pytest
import torch
import torch.utils._pytree as pytree
from torch.export import Dim

import anyshape
from anyshape.iree.flags import make_target
from anyshape.runtime.compiled_module import CompiledModule
from anyshape.runtime.signature import ModuleSignature, Symbol, TensorSpec
from anyshape.tools import compile as compile_tool
from anyshape.tools import opt as opt_tool


class Tanh(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x)


def x3():
    return (torch.randn(3),)


# --- anyshape.compile: arguments ---------------------------------------------

@pytest.mark.parametrize("dtype", [None, torch.float16])
def test_compile_model_must_be_a_module(dtype):
    with pytest.raises(TypeError, match="model: expected a torch.nn.Module, got function"):
        anyshape.compile(lambda x: x, x3(), dtype=dtype)


def test_compile_passes_must_be_a_list():
    with pytest.raises(TypeError, match=r"passes: expected a list of pass names \(or None: the "
                                        r"default pipeline\), got the string 'anyshape-lower'; "
                                        r"write \['anyshape-lower'\]"):
        anyshape.compile(Tanh(), x3(), passes="anyshape-lower")


def test_compile_opt_level():
    with pytest.raises(ValueError, match="opt_level: expected one of O0, O1, O2, O3, got 'O9'"):
        anyshape.compile(Tanh(), x3(), backend=anyshape.BackendOptions(opt_level="O9"))


def test_backend_must_be_backend_options():
    with pytest.raises(TypeError, match="backend: expected an anyshape.BackendOptions, got dict"):
        anyshape.compile(Tanh(), x3(), backend={"threads": 1})


def test_backend_and_old_keywords_together():
    with pytest.raises(TypeError, match="backend: given together with threads=1; put threads in "
                                        "the BackendOptions"):
        anyshape.compile(Tanh(), x3(), backend=anyshape.BackendOptions(), threads=1)


def test_old_backend_keywords_still_work_with_a_warning():
    """The keywords compile took before BackendOptions keep working, and say what to
    write instead; the module is the one BackendOptions gives."""
    with pytest.warns(DeprecationWarning, match=re.escape(
            "compile(opt_level='O1') is deprecated: write compile(..., "
            "backend=anyshape.BackendOptions(opt_level='O1'))")) as caught:
        compiled = anyshape.compile(Tanh(), x3(), opt_level="O1")
    assert caught[0].filename == __file__  # points at the caller's line
    assert "--iree-opt-level=O1" in compiled.iree_flags
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), torch.tanh(x))


def test_compile_cuda_arch_needs_cuda():
    with pytest.raises(ValueError, match="cuda_arch: expected None with target='cpu' .*, "
                                         "got 'sm_80'"):
        anyshape.compile(Tanh(), x3(), backend=anyshape.BackendOptions(cuda_arch="sm_80"))


@pytest.mark.parametrize("threads", [0, -2, 1.5, True])
def test_compile_threads(threads):
    with pytest.raises(ValueError, match=rf"threads: expected a positive int \(or None: all \d+ "
                                         rf"cores\), got {threads!r}"):
        anyshape.compile(Tanh(), x3(), backend=anyshape.BackendOptions(threads=threads))


def test_compile_pass_element_syntax():
    with pytest.raises(ValueError, match=r"cannot parse pipeline element 'anyshape-lower\{': "
                                         r"expected a pass name with optional \{key=value ...\} "
                                         r"options"):
        anyshape.compile(Tanh(), x3(), passes=["anyshape-lower{"])


def test_compile_pass_options_syntax():
    with pytest.raises(ValueError, match="cannot parse pass options 'garbage': expected key=value "
                                         "pairs"):
        anyshape.compile(Tanh(), x3(), passes=["anyshape-lower{garbage}"])


PLUGIN = textwrap.dedent('''
    import dataclasses

    from anyshape.passes import ModulePass, register


    @register
    @dataclasses.dataclass
    class Counted(ModulePass):
        argument = "anyshape-test-errors-counted"
        description = "Test pass with an int and a bool option; does nothing"
        count: int = 1
        strict: bool = False

        def apply(self, module_op):
            pass


    @register
    @dataclasses.dataclass
    class Crashes(ModulePass):
        argument = "anyshape-test-errors-crashes"
        description = "Test pass with a bug: raises a Python exception"

        def apply(self, module_op):
            raise RuntimeError("boom")
''')


@pytest.fixture(scope="module")
def plugin_passes(tmp_path_factory):
    """Registers the PLUGIN passes in this process, once."""
    from anyshape.passes import load_pass_file

    path = tmp_path_factory.mktemp("plugin") / "error_passes.py"
    path.write_text(PLUGIN)
    load_pass_file(str(path))
    return path


@pytest.mark.parametrize("element, message", [
    ("anyshape-test-errors-counted{count=many}",
     "pass 'anyshape-test-errors-counted' option 'count' expects int, got 'many'"),
    ("anyshape-test-errors-counted{strict=maybe}",
     "pass 'anyshape-test-errors-counted' option 'strict' expects bool, got 'maybe'"),
])
def test_compile_pass_option_type(plugin_passes, element, message):
    with pytest.raises(ValueError, match=message):
        anyshape.compile(Tanh(), x3(), passes=[element])


# --- anyshape.compile: what the exported program may hold --------------------

class ScaleBy(torch.nn.Module):
    def forward(self, x, n: int):
        return x * n


def test_compile_non_tensor_input():
    with pytest.raises(TypeError, match="input 'n': only tensor inputs can vary at run time, got "
                                        "SymInt; pass Python values through a wrapper module"):
        anyshape.compile(ScaleBy().eval(), (torch.randn(3), 2),
                         dynamic_shapes={"x": None, "n": Dim.DYNAMIC})


class Cholesky(torch.nn.Module):
    def forward(self, x):
        return torch.linalg.cholesky(x)  # its error check is an effect torch.export orders by token


def test_compile_refuses_effectful_forward():
    x = torch.eye(3) * 2
    with pytest.raises(ValueError, match="model: expected a forward without side effects, got ops "
                                         "torch.export orders by effect tokens"):
        anyshape.compile(Cholesky().eval(), (x,))


class BranchOnTheData(torch.nn.Module):
    def forward(self, x):
        any_positive = (x > 0).any().item()
        if any_positive:
            return x + 1
        return x - 1


def test_a_branch_on_the_data_names_the_model_line_and_what_to_do():
    """torch's own message named neither (longformer, BLT, DBRX in the family sweep)."""
    with pytest.raises(anyshape.CompileError) as caught:
        anyshape.compile(BranchOnTheData().eval(), (torch.randn(2, 8),),
                         dynamic_shapes=({1: Dim("seq")},))
    message = str(caught.value)
    assert "Could not guard on data-dependent expression" in message
    assert f"{__file__}:{BranchOnTheData.forward.__code__.co_firstlineno + 2}:\n" \
           "    if any_positive:" in message
    assert "torch.where" in message and "torch.cond" in message


class Box:
    def __init__(self, tensor):
        self.tensor = tensor


pytree.register_pytree_node(Box, lambda box: ([box.tensor], None), lambda leaves, _: Box(*leaves))


class Boxed(torch.nn.Module):
    def forward(self, x):
        return Box(x + 1)


def test_compile_output_structure_without_field_names():
    with pytest.raises(TypeError, match="output: expected tensors in tuples, lists, dicts, "
                                        "dataclasses or namedtuples, got a Box"):
        anyshape.compile(Boxed().eval(), x3())


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(3))

    def forward(self, x):
        self.calls.add_(1)
        return x * 10 + self.calls


def test_compile_refuses_in_place_state_updates():
    """The updated buffer used to come back in place of the model's output."""
    with pytest.raises(ValueError, match="model: expected a forward that updates no state in "
                                         "place .*, got in-place updates of buffer 'calls'"):
        anyshape.compile(Counter().eval(), x3())
    with pytest.warns(UserWarning, match="training mode"), \
            pytest.raises(ValueError, match="in-place updates of buffer 'running_mean', buffer "
                                            "'running_var', buffer 'num_batches_tracked'.*call "
                                            r"model.eval\(\) first"):
        anyshape.compile(torch.nn.BatchNorm1d(3), (torch.randn(2, 3),))


# --- anyshape.compile: the iree-input stage ----------------------------------

def _compile_text(text, weights=None):
    from anyshape.driver.compile import compile_module
    from anyshape.mlir import parse_module
    from anyshape.dialects import new_context

    module = parse_module(text, new_context())
    signature = ModuleSignature([TensorSpec("x", "float32", ["s0"])],
                                [TensorSpec("output_0", "float32", ["s0"])],
                                {"s0": Symbol("s0", 1, 8)}, {"kind": "leaf"})
    return compile_module(module, signature, make_target("cpu", data_tiling=False), [],
                          weights=weights)


def test_iree_input_malformed_fact():
    """A pass (here: the text) wrote an anyshape.dims entry without its divisor."""
    with pytest.raises(anyshape.CompileError, match=r"stage 'iree-input' failed: @main argument 0 "
                                                    r"\(!torch.vtensor<\[\?\],f32>\): malformed "
                                                    r"anyshape.dims entry .*: expected integer axis, "
                                                    r"min, divisor, optional max and a string expr"):
        _compile_text('func.func @main(%arg0: !torch.vtensor<[?],f32> {anyshape.dims = [{axis = '
                      '0 : i64, expr = "s0", min = 1 : i64}]}) -> !torch.vtensor<[?],f32> {\n'
                      '  return %arg0 : !torch.vtensor<[?],f32>\n}\n')


def test_iree_input_fact_on_unranked_argument():
    with pytest.raises(anyshape.CompileError, match=r"stage 'iree-input' failed: @main argument 0 "
                                                    r"\(!torch.vtensor<\*,f32>\): anyshape.dims on "
                                                    r"a value that is not a ranked !torch.vtensor "
                                                    r"of a known dtype"):
        _compile_text('func.func @main(%arg0: !torch.vtensor<*,f32> {anyshape.dims = [{axis = 0 : '
                      'i64, divisor = 1 : i64, expr = "s0", min = 1 : i64}]}) -> '
                      '!torch.vtensor<*,f32> {\n  return %arg0 : !torch.vtensor<*,f32>\n}\n')


def test_iree_input_unreadable_by_iree():
    """An anyshape op left in the IR (its pass list leaves out anyshape-lower)."""
    text = ('func.func @main(%arg0: !torch.vtensor<[?],f32>{FACTS}) -> !torch.vtensor<[?],si64> {\n'
            '  %0 = "anyshape.iota_like"(%arg0) {dim = 0 : i64} : (!torch.vtensor<[?],f32>) -> '
            '!torch.vtensor<[?],si64>\n  return %0 : !torch.vtensor<[?],si64>\n}\n')
    facts = ' {anyshape.dims = [{axis = 0 : i64, divisor = 1 : i64, expr = "s0", min = 1 : i64}]}'
    for source, weights in ((text.replace("{FACTS}", facts), None),
                            (text.replace("{FACTS}", ""), {})):
        with pytest.raises(anyshape.CompileError, match="(?s)stage 'iree-input' failed: IREE's "
                                                        "bindings cannot read .*dialect 'anyshape' "
                                                        "is unknown"):
            _compile_text(source, weights)


# --- anyshape.load and a loaded module ---------------------------------------

SIGNATURE = ModuleSignature(
    [TensorSpec("x", "float32", ["s0", 4]), TensorSpec("pair", "float32", ["2*s0"])],
    [TensorSpec("output_0", "float32", ["s0", 4])],
    {"s0": Symbol("s0", 1, 16, "rows")}, {"kind": "leaf"})


@pytest.fixture
def artifact(tmp_path):
    """An artifact around a placeholder .vmfb: everything before IREE runs works."""
    (tmp_path / "placeholder.vmfb").write_bytes(b"not a module")
    module = CompiledModule(tmp_path / "placeholder.vmfb", SIGNATURE,
                            make_target("cpu", data_tiling=False))
    return module.save(tmp_path / "artifact")


def test_artifact_fixture_loads(artifact):
    assert anyshape.load(artifact).signature.inputs[1].dims == ["2*s0"]


@pytest.mark.parametrize("text, message", [
    ("{not json", r"manifest.json: expected the JSON of an anyshape manifest, got unreadable text "
                  r"\(Expecting property name"),
    ("[1, 2]", "manifest.json: expected format anyshape-artifact schema 1, got a JSON list"),
    ('{"format": "anyshape-artifact", "schema": 99}',
     "manifest.json: expected format anyshape-artifact schema 1, got anyshape-artifact schema 99"),
    ('{"format": "anyshape-artifact", "schema": 1}',
     r"manifest.json: expected a complete anyshape manifest, got one whose fields do not fit "
     r"\(KeyError: 'target'\)"),
])
def test_load_bad_manifest(artifact, text, message):
    (artifact / "manifest.json").write_text(text)
    with pytest.raises(ValueError, match=message):
        anyshape.load(artifact)


def test_load_missing_module(artifact):
    (artifact / "module.vmfb").unlink()
    with pytest.raises(FileNotFoundError, match="module.vmfb: the compiled module this artifact's "
                                                "manifest names is missing"):
        anyshape.load(artifact)


def test_loaded_module_has_no_stages(artifact):
    with pytest.raises(ValueError, match="this module was loaded from disk: its compile stages "
                                         "were not saved"):
        anyshape.load(artifact).ir("import")


def test_write_parameters_needs_an_external_artifact(artifact, tmp_path):
    with pytest.raises(ValueError, match=r"directory: .* holds its weights inside its .vmfb "
                                         r"\(compiled with params='inline'\); only an artifact "
                                         r"compiled with params='external' reads them from "
                                         r"params.irpa"):
        anyshape.write_parameters(artifact, {})
    manifest = json.loads((artifact / "manifest.json").read_text())
    manifest["parameters"] = "params.irpa"
    manifest.pop("parameter_specs", None)
    (artifact / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"manifest lists no parameter shapes \(saved by an "
                                         r"earlier anyshape\); compile it again"):
        anyshape.write_parameters(artifact, {})


def test_call_argument_given_twice(artifact):
    x = torch.randn(2, 4)
    with pytest.raises(ValueError, match="argument 'x' given both by position and by name"):
        anyshape.load(artifact)(x, torch.randn(4), x=x)


def test_call_derived_dim(artifact):
    with pytest.raises(ValueError, match=r"argument 'pair' dim 0: expected size 2\*s0 = 6, got 5"):
        anyshape.load(artifact)(torch.randn(3, 4), torch.randn(5))


def test_output_class_not_importable_warns():
    """Where the model's output class cannot be imported, a call returns its fields."""
    from anyshape.runtime.signature import decode_tree

    tree = {"kind": "class", "module": "no_such_module_for_anyshape", "qualname": "Output",
            "keys": ["logits"], "children": [{"kind": "leaf"}]}
    logits = torch.zeros(2)
    with pytest.warns(UserWarning, match="output class no_such_module_for_anyshape.Output cannot "
                                         "be imported here; returning a dict with its fields "
                                         "instead"):
        assert decode_tree(tree, [logits]) == {"logits": logits}


# --- anyshape-opt -------------------------------------------------------------

def opt(capsys, *argv):
    status = opt_tool.main(list(argv))
    return status, capsys.readouterr().err


@pytest.fixture
def mlir_file(tmp_path):
    path = tmp_path / "f.mlir"
    path.write_text("func.func @f() { return }\n")
    return str(path)


@pytest.mark.parametrize("argv, message", [
    (["-o"], "anyshape-opt: option '-o' needs a value"),
    (["--pass-pipeline"], "anyshape-opt: option '--pass-pipeline' needs a value"),
    (["--cse", "--pass-pipeline=builtin.module(cse)"],
     "anyshape-opt: '--pass-pipeline' option can't be used with individual pass options"),
    (["--verify-diagnostics=some"],
     "anyshape-opt: '--verify-diagnostics=some': expected --verify-diagnostics, =all or "
     "=only-expected"),
    (["--mlir-print-debuginfo=maybe"],
     "anyshape-opt: '--mlir-print-debuginfo=maybe': a flag takes no value other than true or "
     "false"),
    (["-load-pass-plugin=x.so"],
     "anyshape-opt: option '-load-pass-plugin=x.so' of torch-mlir-opt is not supported: C++ "
     "plugins load into a C++ driver; use --load-passes=FILE.py"),
])
def test_opt_usage_errors(capsys, argv, message):
    status, err = opt(capsys, *argv)
    assert status == 2 and message in err and "anyshape-opt [FILE|-]" in err, err


def test_opt_cannot_load_passes(capsys, tmp_path, mlir_file):
    status, err = opt(capsys, mlir_file, f"--load-passes={tmp_path / 'none.py'}")
    assert status == 1
    assert f"anyshape-opt: cannot load passes from '{tmp_path / 'none.py'}': No such file or " \
           f"directory" in err
    bad = tmp_path / "bad_name.py"
    bad.write_text("import dataclasses\nfrom anyshape.passes import ModulePass, register\n"
                   "@register\n@dataclasses.dataclass\nclass P(ModulePass):\n"
                   "    argument = 'my-pass'\n    description = ''\n")
    status, err = opt(capsys, mlir_file, f"--load-passes={bad}")
    assert status == 1
    assert f"anyshape-opt: cannot load passes from '{bad}': pass argument 'my-pass' must start " \
           f"with 'anyshape-'" in err, err
    bad.write_text(bad.read_text().replace("'my-pass'", "'anyshape-lower'"))
    status, err = opt(capsys, mlir_file, f"--load-passes={bad}")
    assert status == 1
    assert f"anyshape-opt: cannot load passes from '{bad}': pass argument 'anyshape-lower' of P: " \
           f"expected a name no other pass has, got the argument of LowerPass, already " \
           f"registered" in err, err


def test_opt_cannot_read_input(capsys, tmp_path):
    status, err = opt(capsys, str(tmp_path / "none.mlir"))
    assert status == 1
    assert f"anyshape-opt: cannot read '{tmp_path / 'none.mlir'}': No such file or directory" in err


def test_opt_split_input_file_needs_text(capsys, tmp_path):
    from anyshape.mlir import module_to_bytecode, parse_module
    from anyshape.dialects import new_context

    path = tmp_path / "f.mlirbc"
    path.write_bytes(module_to_bytecode(parse_module("func.func @f() { return }", new_context())))
    status, err = opt(capsys, str(path), "--split-input-file")
    assert status == 1 and "anyshape-opt: --split-input-file needs text input" in err


def test_opt_cannot_write_output(capsys, tmp_path, mlir_file):
    out = tmp_path / "no-such-dir" / "out.mlir"
    status, err = opt(capsys, mlir_file, "-o", str(out))
    assert status == 1 and f"anyshape-opt: cannot write '{out}': No such file or directory" in err


@pytest.mark.parametrize("argv, message", [
    (["-x"], "anyshape-opt: Unknown command line argument '-x'.  Try: 'anyshape-opt --help'"),
    (["--no-such-upstream"], "anyshape-opt: Unknown command line argument '--no-such-upstream'"),
    (["--pass-pipeline=cse"], "<unknown>:0: error: expected pass pipeline to be wrapped with the "
                              "anchor operation type, e.g. 'builtin.module(...)'"),
    (["--pass-pipeline=anyshape-lower"], "error: pass pipeline must be anchored on "
                                         "builtin.module(...), got: anyshape-lower"),
    (["--pass-pipeline=builtin.module(anyshape-lower))"],
     "error: unbalanced ')' in pass pipeline: anyshape-lower)"),
    (["--pass-pipeline=builtin.module(anyshape-lower{)"],
     "error: unbalanced brackets or quotes in pass pipeline: anyshape-lower{"),
    (["--pass-pipeline=builtin.module(func.func(anyshape-lower))"],
     "error: 'func.func(anyshape-lower)': anyshape passes run on the whole module; put them "
     "directly inside builtin.module(...), not in a nested pipeline"),
    (["--anyshape-lower=garbage"], "error: cannot parse pass options 'garbage': expected "
                                   "key=value pairs"),
    (["--anyshape-lower=foo=1"], "error: pass 'anyshape-lower' has no option 'foo' (options: "
                                 "none)"),
])
def test_opt_pipeline_errors(capsys, mlir_file, argv, message):
    status, err = opt(capsys, mlir_file, *argv)
    assert status == 1 and message in err, err


def test_opt_plugin_pass_errors(capsys, plugin_passes, mlir_file):
    status, err = opt(capsys, mlir_file, "--anyshape-test-errors-counted=count=many")
    assert status == 1
    assert "error: pass 'anyshape-test-errors-counted' option 'count' expects int, got 'many'" in err
    status, err = opt(capsys, mlir_file, "--anyshape-test-errors-crashes")
    assert status == 1
    assert "error: anyshape-test-errors-crashes: internal error: RuntimeError: boom (set " \
           "ANYSHAPE_DEBUG=1 for the traceback)" in err, err


# --- anyshape-compile ----------------------------------------------------------

def compile_cli(capsys, *argv):
    try:
        status = compile_tool.main(list(argv))
    except SystemExit as exit:  # argparse
        status = exit.code
    return status, capsys.readouterr().err


TORCH_MAIN = ("func.func @main(%arg0: !torch.vtensor<[?],f32>{FACTS}) -> "
              "!torch.vtensor<[?],f32> {\n  return %arg0 : !torch.vtensor<[?],f32>\n}\n")


@pytest.mark.parametrize("source, argv, message", [
    ("func.func @main(%arg0: i32) -> i32 {\n  return %arg0 : i32\n}\n", [],
     "anyshape-compile: arg0: expected a !torch.vtensor with a known dtype, got i32"),
    (TORCH_MAIN.replace("{FACTS}", ""), ["--function", "forward"],
     "anyshape-compile: function: expected a function of the module (@main), got @forward"),
    (TORCH_MAIN.replace("{FACTS}", ' {anyshape.dims = [{axis = 3 : i64, divisor = 1 : i64, '
                                   'expr = "s0", min = 1 : i64}]}'), [],
     "anyshape-compile: @main argument 0: expected anyshape.dims axes in [0, 0] (the argument "
     "has rank 1), got axis 3"),
    (TORCH_MAIN.replace("{FACTS}", ' {anyshape.dims = [{axis = 0 : i64, min = 1 : i64}]}'), [],
     "anyshape-compile: @main argument 0: expected anyshape.dims entries with integer axis and "
     "min, an optional integer max and a string expr, got {axis = 0 : i64, min = 1 : i64}"),
    (TORCH_MAIN.replace("{FACTS}", ""), ["--opt-level", "O9"],
     "anyshape-compile: opt_level: expected one of O0, O1, O2, O3, got 'O9'"),
    (TORCH_MAIN.replace("{FACTS}", ""), ["--cuda-arch", "sm_80"],
     "anyshape-compile: cuda_arch: expected None with target='cpu' (an architecture is only "
     "meaningful with target='cuda'), got 'sm_80'"),
    (TORCH_MAIN.replace("{FACTS}", ""), ["--passes", "anyshape-nope"],
     "anyshape-compile: unknown anyshape pass 'anyshape-nope' (known: "),
    (TORCH_MAIN.replace("{FACTS}", ""), ["--passes", "anyshape-lower{"],
     "anyshape-compile: unbalanced brackets or quotes in pass pipeline: anyshape-lower{"),
    (TORCH_MAIN.replace("[?]", "[4]").replace("{FACTS}", ' {anyshape.dims = [{axis = 0 : i64, '
                                                         'divisor = 1 : i64, expr = "s0", '
                                                         'min = 1 : i64}]}'), ["--passes", ""],
     "anyshape-compile: stage 'iree-input' failed: @main argument 0 (!torch.vtensor<[4],f32>): "
     "anyshape.dims names dim 0, which is not a dynamic dim of the argument\nreproducer: "),
])
def test_compile_cli_mlir_errors(capsys, tmp_path, source, argv, message):
    (tmp_path / "m.mlir").write_text(source)
    status, err = compile_cli(capsys, str(tmp_path / "m.mlir"), "-o", str(tmp_path / "art"), *argv)
    assert status == 1 and message in err, err
    assert not (tmp_path / "art").exists()


def test_compile_cli_cannot_read_input(capsys, tmp_path):
    status, err = compile_cli(capsys, str(tmp_path / "none.mlir"), "-o", str(tmp_path / "art"))
    assert status == 1
    assert f"anyshape-compile: cannot read '{tmp_path / 'none.mlir'}': No such file or " \
           f"directory" in err


def test_compile_cli_output_is_a_file(capsys, tmp_path):
    (tmp_path / "taken").write_text("")
    status, err = compile_cli(capsys, "x.mlir", "-o", str(tmp_path / "taken"))
    assert status == 2
    assert f"-o/--output: expected an artifact directory (new or existing), got the file " \
           f"'{tmp_path / 'taken'}'" in err


def test_compile_cli_dump_dir_is_a_file(capsys, tmp_path):
    (tmp_path / "m.mlir").write_text(TORCH_MAIN.replace("{FACTS}", ""))
    (tmp_path / "taken").write_text("")
    status, err = compile_cli(capsys, str(tmp_path / "m.mlir"), "-o", str(tmp_path / "art"),
                              "--dump-ir-dir", str(tmp_path / "taken"))
    assert status == 1 and f"anyshape-compile: '{tmp_path / 'taken'}': File exists" in err, err


def test_compile_cli_cannot_load_passes(capsys, tmp_path):
    bad = tmp_path / "bad_name.py"
    bad.write_text("import dataclasses\nfrom anyshape.passes import ModulePass, register\n"
                   "@register\n@dataclasses.dataclass\nclass P(ModulePass):\n"
                   "    argument = 'my-pass'\n    description = ''\n")
    for plugin, reason in ((tmp_path / "none.py", "No such file or directory"),
                           (bad, "pass argument 'my-pass' must start with 'anyshape-'")):
        status, err = compile_cli(capsys, "x.mlir", "-o", str(tmp_path / "art"),
                                  "--load-passes", str(plugin))
        assert status == 1
        assert f"anyshape-compile: cannot load passes from '{plugin}': {reason}" in err, err


def test_compile_cli_argparse_choices(capsys, tmp_path):
    status, err = compile_cli(capsys, "--hf", "bert", "--task", "translation", "-o",
                              str(tmp_path / "art"))
    assert status == 2 and "argument --task: invalid choice: 'translation'" in err
    status, err = compile_cli(capsys, "x.mlir")
    assert status == 2 and "the following arguments are required: -o/--output" in err


def test_compile_cli_factory_errors(capsys, tmp_path):
    (tmp_path / "factories.py").write_text(
        "import torch\ndef scalar_inputs():\n    return torch.nn.Linear(2, 2), 3\n")
    status, err = compile_cli(capsys, "--model", f"{tmp_path / 'factories.py'}:scalar_inputs",
                              "-o", str(tmp_path / "art"))
    assert status == 1
    assert "anyshape-compile: --model: example inputs must be a dict, a tuple or a tensor, got " \
           "int" in err
    status, err = compile_cli(capsys, "--model", f"{tmp_path / 'factories.py'}:nope",
                              "-o", str(tmp_path / "art"))
    assert status == 1
    assert f"anyshape-compile: --model: '{tmp_path / 'factories.py'}' has no function " \
           f"'nope'" in err
