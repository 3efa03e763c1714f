"""anyshape-compile: compile a model through the anyshape pipeline and IREE into an
artifact directory that ``anyshape.load`` runs.

The model is one of: torch-dialect MLIR (from ``anyshape.import_torch`` or
``anyshape-opt``); ``--hf TYPE --task TASK``, a HuggingFace transformers model
built from the default config of a model type (``--config`` overrides; random
weights); or ``--model MODULE:FACTORY``, a function of yours returning
``(model, example_inputs)`` or ``(model, example_inputs, dynamic_shapes)``,
where the example inputs are a dict of keyword arguments or a tuple of
positional ones.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HF_TASKS = ("sequence-classification", "masked-lm", "causal-lm", "causal-lm-last-token",
            "seq2seq-lm", "pretraining")  # anyshape.frontend.hf.TASKS, without importing torch for --help
# A generator (anyshape.compile_generator) that anyshape-generate runs: HF's
# pipeline task names, each with the model class it builds (anyshape.frontend.hf.TASKS).
GENERATION_TASKS = {"text-generation": "causal-lm", "text2text-generation": "seq2seq-lm"}
DEFAULT_MAX_BATCH = 16
DEFAULT_MAX_SEQ = 512   # anyshape.frontend.hf.DEFAULT_MAX_SEQ


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="anyshape-compile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", nargs="?",
                        help="torch-dialect MLIR, text or bytecode ('-' for stdin); or give "
                             "--hf or --model instead")
    parser.add_argument("-o", "--output", help="artifact directory to write (required)")
    parser.add_argument("--cache-info", action="store_true",
                        help="list what the compile cache holds (its directory, bound, "
                             "entries by last use) and exit")
    model = parser.add_argument_group("a PyTorch model instead of MLIR")
    model.add_argument("--hf", metavar="MODEL_TYPE",
                       help="a transformers model type (bert, roberta, electra, distilbert, "
                            "gpt2, t5, ...) with its default config")
    model.add_argument("--task", choices=[*HF_TASKS, *GENERATION_TASKS],
                       help="with --hf: which model of that type (required)")
    model.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                       help="with --hf: a config field to override (repeatable), "
                            "e.g. num_hidden_layers=2")
    model.add_argument("--model", metavar="MODULE:FACTORY",
                       help="a Python module (dotted name or file.py) and a function in it "
                            "that returns (model, example_inputs[, dynamic_shapes])")
    model.add_argument("--hf-dir", metavar="DIR",
                       help="a HF checkpoint directory (save_pretrained's config.json and "
                            "safetensors) of a causal LM or a text encoder-decoder, compiled "
                            "for generation (anyshape-generate) without loading its weights "
                            "into memory")
    model.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None,
                       help="with --hf-dir: the dtype to compile in (default: the "
                            "checkpoint's)")
    model.add_argument("--dynamic", default="batch,seq",
                       help="which dims are dynamic: a comma list of batch (dim 0 of every "
                            "input) and seq (dim 1; a seq2seq decoder's length is its own "
                            "dim, dynamic with it), or 'none' (default: batch,seq)")
    model.add_argument("--batch", type=int, default=1,
                       help="the batch size when batch is not dynamic (default 1)")
    model.add_argument("--seq", type=int, default=128,
                       help="the sequence length when seq is not dynamic (default 128)")
    model.add_argument("--max-batch", type=int, default=None,
                       help=f"largest dynamic batch (default: unbounded with --hf, "
                            f"{DEFAULT_MAX_BATCH} with --model)")
    model.add_argument("--max-seq", type=int, default=None,
                       help="longest dynamic sequence (default with --hf: unbounded, or the "
                            "bound torch.export needs that the model's config states; with "
                            f"--model: {DEFAULT_MAX_SEQ})")
    model.add_argument("--params", choices=["inline", "external"], default="inline",
                       help="weights in module.vmfb (inline, default) or in params.irpa "
                            "beside it (external)")
    parser.add_argument("--target", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--cuda-arch", default=None, help="with --target=cuda (default sm_80)")
    parser.add_argument("--target-cpu", default=None,
                        help="with --target=cpu: the CPU the code is for: 'host' (default: this "
                             "machine's), a CPU such as znver3 or skylake-avx512, or a level "
                             "such as x86-64-v3 (a host lacking its features refuses to run it)")
    parser.add_argument("--opt-level", default=None, help="IREE optimization level (O0-O3)")
    parser.add_argument("--data-tiling", choices=["auto", "on", "off"], nargs="?", const="on",
                        default="auto",
                        help="IREE data tiling (adds anyshape-data-tiling-forms): 'auto' "
                             "(default) on for cpu, compiled again without it if IREE fails "
                             "with it; 'on' (also a bare --data-tiling): a failure is an "
                             "error; 'off'")
    parser.add_argument("--matmul-precision", choices=["highest", "medium"], default="highest",
                        help="'medium': matrix products take bfloat16 inputs and accumulate in "
                             "float32, as torch.set_float32_matmul_precision('medium'); CPUs "
                             "with AVX-512 BF16 only (default: 'highest', float32)")
    parser.add_argument("--product-kernel", choices=["anyshape", "iree"], default="anyshape",
                        help="float32 products with a weight of the model on x86-64 CPUs: "
                             "'anyshape' (default) runs anyshape's kernel, which computes only "
                             "the rows there are; 'iree' runs IREE's, which computes whole "
                             "tiles of 16 rows")
    parser.add_argument("--weights", choices=["float32", "int8", "int4"], default="float32",
                        help="the weights of linear layers, LM heads and embeddings: float32 "
                             "(default, as the model has them), or quantized at compile time "
                             "and stored so: int8 (a scale per output channel) or int4 (a "
                             "scale per --group-size inputs); CPU targets (docs/api.md)")
    parser.add_argument("--group-size", type=int, choices=[32, 64, 128], default=None,
                        help="with --weights int4: inputs per scale (default 32)")
    parser.add_argument("--activations", choices=["float32", "int8", "int16"],
                        default="float32",
                        help="int8 with --weights int4, int16 with --weights int8: rounds "
                             "every row (a prefill's and each decode step's) per block of "
                             "32 inputs and multiplies in integers, faster, less exact "
                             "(docs/api.md)")
    parser.add_argument("--calibrate", metavar="TEXT_FILE", default=None,
                        help="with --weights int8 or int4: round the weights by GPTQ against "
                             "the inputs each layer sees on these texts, one sample per "
                             "non-empty line, tokenized by --tokenizer (anyshape.calibrated; "
                             "docs/quantized-weights.md), rather than to nearest")
    parser.add_argument("--tokenizer", metavar="DIR", default=None,
                        help="with --calibrate: a HF tokenizer directory (save_pretrained's)")
    parser.add_argument("--eliminate-padding", action="store_true",
                        help="run the token-wise layers on the real tokens only, as the input "
                             "attention_mask marks them (anyshape.compile(padding='eliminate'))")
    parser.add_argument("--passes", default=None,
                        help="comma-separated anyshape passes (default: the default pipeline; "
                             "'' for none)")
    parser.add_argument("--function", default="main", help="entry function (default: main)")
    parser.add_argument("--dump-ir-dir", default=None, help="write the IR after every stage here")
    parser.add_argument("--load-passes", action="append", default=[], metavar="FILE.py",
                        help="a Python file that registers more passes")
    parser.add_argument("--progress", choices=["bars", "lines", "none"], default=None,
                        help="how stages are shown on stderr: a line per stage with its "
                             "clock running (bars, the default on a terminal), a printed line "
                             "per message with the seconds since the start (lines, the "
                             "default otherwise), or not at all")
    return parser


def print_cache_info() -> int:
    """What ``--cache-info`` prints: the compile cache's directory, bound and
    entries, the most recently used first."""
    import time

    from anyshape.driver.compile_cache import SIZE_ENV, held, size_bound
    from anyshape.options import cache_root

    def size(count: int) -> str:
        return f"{count / 2 ** 20:.1f} MiB" if count < 2 ** 30 else f"{count / 2 ** 30:.2f} GiB"

    try:
        bound = size_bound()
    except ValueError as error:
        print(f"anyshape-compile: {error}", file=sys.stderr)
        return 2
    entries = held()
    print(f"compile cache: {cache_root()}")
    print(f"bound: {size(bound)} ({SIZE_ENV})")
    print(f"holds: {size(sum(e.bytes for e in entries))} in {len(entries)} entries")
    for entry in entries:
        used = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.last_used))
        written = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.written))
        print(f"  {entry.key[:16]}  {size(entry.bytes):>11}  last used {used}  written {written}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cache_info:
        return print_cache_info()
    if not args.output:
        parser.error("the following arguments are required: -o/--output")
    if sum(map(bool, (args.input, args.hf, args.model, args.hf_dir))) != 1:
        parser.error("give one model: an MLIR file, --hf MODEL_TYPE, --model MODULE:FACTORY "
                     "or --hf-dir DIR")
    if args.dtype and not args.hf_dir:
        parser.error("--dtype goes with --hf-dir")
    if args.hf_dir:
        for flag, given in (("--task", args.task), ("--config", args.config),
                            ("--eliminate-padding", args.eliminate_padding),
                            ("--passes", args.passes is not None),
                            ("--calibrate", args.calibrate is not None)):
            if given:
                parser.error(f"{flag} does not apply to --hf-dir (a checkpoint is compiled "
                             f"for generation, its dims and passes anyshape's to choose)")
    if args.hf and not args.task:
        parser.error(f"--hf needs --task (one of {', '.join(HF_TASKS)})")
    if (args.task or args.config) and not args.hf:
        parser.error("--task and --config go with --hf")
    if args.task in GENERATION_TASKS:
        for flag, given in (("--eliminate-padding", args.eliminate_padding),
                            ("--passes", args.passes is not None),
                            ("--params external", args.params == "external")):
            if given:
                parser.error(f"{flag} does not apply to --task {args.task} (its dims and "
                             f"passes are anyshape's to choose)")
    if args.group_size is not None and args.weights != "int4":
        parser.error(f"--group-size goes with --weights int4, got --weights {args.weights}")
    # quantized_weights.INTEGER_ACTIVATIONS inverted, without importing torch for --help
    integer_weights = {"int8": "int4", "int16": "int8"}
    if args.activations != "float32" and args.weights != integer_weights[args.activations]:
        parser.error(f"--activations {args.activations} goes with --weights "
                     f"{integer_weights[args.activations]}, got --weights {args.weights}")
    if args.calibrate is not None and args.weights == "float32":
        parser.error("--calibrate goes with --weights int8 or int4, got --weights float32")
    if args.calibrate is not None and not args.tokenizer:
        parser.error("--calibrate needs --tokenizer DIR (to make the texts the model's inputs)")
    if args.tokenizer and args.calibrate is None:
        parser.error("--tokenizer goes with --calibrate TEXT_FILE")
    if args.calibrate is not None and args.task in ("seq2seq-lm", "text2text-generation"):
        parser.error(f"--calibrate: --task {args.task} is an encoder-decoder's, whose decoder "
                     f"inputs a text file does not give; calibrate it in Python "
                     f"(anyshape.calibrated with samples holding decoder_input_ids)")
    if args.input and args.weights != "float32":
        parser.error(f"--weights {args.weights}: an MLIR file's weights cannot be read to "
                     f"quantize them; give --hf or --model")
    if args.input and args.params == "external":
        parser.error("--params external: an MLIR file's weights are compiled inline; "
                     "give --hf or --model for external parameters")
    if Path(args.output).exists() and not Path(args.output).is_dir():
        parser.error(f"-o/--output: expected an artifact directory (new or existing), got the "
                     f"file '{args.output}'")
    if args.calibrate is not None:
        # Read before the model is built (seconds): a file or tokenizer the
        # compile cannot use is named at once.
        try:
            args.calibration_lines = _calibration_lines(args.calibrate)
            _check_tokenizer_directory(args.tokenizer)
        except ValueError as error:
            print(f"anyshape-compile: {error}", file=sys.stderr)
            return 1
    if args.target_cpu is not None and args.target == "cpu":
        from anyshape.iree.cpu import resolve

        try:  # a probe of iree-compile's, kept for the compile: named before the model is built
            resolve(args.target_cpu)
        except ValueError as error:
            print(f"anyshape-compile: {error}", file=sys.stderr)
            return 1
    from anyshape.errors import CompileError
    from anyshape.mlir import MLIRError
    from anyshape.passes import load_pass_file
    from anyshape.mlir import diagnostics_of

    for plugin in args.load_passes:
        try:
            load_pass_file(plugin)
        except OSError as error:
            print(f"anyshape-compile: cannot load passes from '{plugin}': {error.strerror}",
                  file=sys.stderr)
            return 1
        except ValueError as error:  # a pass the registry refuses
            print(f"anyshape-compile: cannot load passes from '{plugin}': {error}",
                  file=sys.stderr)
            return 1
    from anyshape.stages import close_progress

    report = _progress(args.progress)
    described = None
    try:
        try:
            if args.input:
                compiled = _compile_mlir(args, report)
            else:
                compiled, described = _compile_torch(args, report)
        finally:  # the running stage's line closed before an error is printed
            close_progress(report)
        if compiled is None:
            return 1
    except MLIRError as error:
        name = "<stdin>" if args.input == "-" else args.input or "<module>"
        for diag in diagnostics_of(error, name):
            print(diag.render(), file=sys.stderr)
        return 1
    except (ValueError, KeyError, TypeError, NotImplementedError) as error:
        print(f"anyshape-compile: {error.args[0] if error.args else error}", file=sys.stderr)
        return 1
    except CompileError as error:
        print(f"anyshape-compile: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # e.g. a --dump-ir-dir that cannot be made or written
        where = f"'{error.filename}': " if error.filename else ""
        print(f"anyshape-compile: {where}{error.strerror or error}", file=sys.stderr)
        return 1
    try:
        out = compiled.save(args.output)
    except OSError as error:
        print(f"anyshape-compile: cannot write the artifact to '{args.output}': "
              f"{error.strerror}", file=sys.stderr)
        return 1
    print(summary(getattr(compiled, "module", compiled), out, described))
    if hasattr(compiled, "generate"):
        print(f"  generate: anyshape-generate {out} --ids 1,2,3 --max-new-tokens 20")
    return 0


def _progress(style: str | None):
    from anyshape.stages import on_terminal, progress_printer

    if style is None:
        style = "bars" if on_terminal() else "lines"
    return progress_printer(False if style == "none" else style, prefix="anyshape-compile")


def _target(args):
    from anyshape.iree.flags import make_target, with_matmul_precision, with_product_kernel

    return with_product_kernel(
        with_matmul_precision(make_target(args.target, args.cuda_arch, args.opt_level,
                                          _data_tiling(args), args.target_cpu),
                              args.matmul_precision),
        args.product_kernel)


def _data_tiling(args) -> bool | None:
    return {"auto": None, "on": True, "off": False}[args.data_tiling]


def _passes(args):
    from anyshape.passes import DEFAULT_PIPELINE
    from anyshape.driver.pipeline import split_top_level

    return DEFAULT_PIPELINE if args.passes is None else split_top_level(args.passes)


def _compile_mlir(args, report):
    from anyshape.driver.compile import compile_module
    from anyshape.driver.ir_signature import signature_from_module
    from anyshape.mlir import parse_module
    from anyshape.dialects import new_context

    name = "<stdin>" if args.input == "-" else args.input
    try:
        data = sys.stdin.buffer.read() if args.input == "-" else open(args.input, "rb").read()
    except OSError as error:
        print(f"anyshape-compile: cannot read '{name}': {error.strerror}", file=sys.stderr)
        return None
    target = _target(args)
    module = parse_module(data, new_context())
    signature = signature_from_module(module, args.function)
    return compile_module(module, signature, target, _passes(args),
                          dump_ir_dir=args.dump_ir_dir, report=report, entry=args.function)


def _compile_torch(args, report):
    """--hf or --model: build the model and its inputs, then ``anyshape.compile``."""
    import anyshape
    from anyshape.frontend import hf

    dynamic = _dynamic_dims(args.dynamic)
    for flag, value in (("--batch", args.batch), ("--seq", args.seq),
                        ("--max-batch", args.max_batch), ("--max-seq", args.max_seq)):
        if value is not None and value < 1:
            raise ValueError(f"{flag}: expected a positive size, got {value}")
    if args.task in GENERATION_TASKS:
        return _compile_generator(args, report)
    if args.hf_dir:
        return _compile_checkpoint(args, report)
    if args.hf:
        model, inputs, shapes, described = _hf_model(args, dynamic, args.max_batch, report)
        call_args, call_kwargs = (), inputs
    else:
        model, call_args, call_kwargs, shapes, described = _factory_model(
            args, dynamic, args.max_batch or DEFAULT_MAX_BATCH, report)
    if args.calibrate is not None:
        if call_args or "input_ids" not in call_kwargs:
            raise ValueError(f"--calibrate: {args.model or args.hf}'s example inputs must be "
                             f"keyword arguments with input_ids (as a HF model takes them) for "
                             f"texts to become its inputs; got "
                             f"{'positional arguments' if call_args else sorted(call_kwargs)}"
                             f" (calibrate it in Python: anyshape.calibrated)")
        model = _calibrated(args, model, "attention_mask" in call_kwargs, report)
    compiled = anyshape.compile(
        model, call_args, call_kwargs, dynamic_shapes=shapes, target=args.target,
        passes=_passes(args),
        dump_ir_dir=args.dump_ir_dir, progress=report,
        padding="eliminate" if args.eliminate_padding else None,
        backend=anyshape.BackendOptions(cuda_arch=args.cuda_arch, target_cpu=args.target_cpu,
                                        opt_level=args.opt_level, data_tiling=_data_tiling(args),
                                        params=args.params,
                                        matmul_precision=args.matmul_precision,
                                        product_kernel=args.product_kernel,
                                        weights=args.weights, group_size=args.group_size,
                                        activations=args.activations))
    described["unique_bytes"] = hf.unique_parameter_bytes(model)
    return compiled, described


def _compile_generator(args, report):
    """--hf TYPE --task text-generation (text2text-generation):
    ``anyshape.compile_generator`` on the causal LM (the encoder-decoder) of
    that model type; the artifact runs with anyshape-generate."""
    import anyshape
    from anyshape.frontend import hf

    overrides = hf.parse_overrides(args.config)
    report(f"building {args.hf} for {args.task} from its default config"
           + (f" with {', '.join(args.config)}" if args.config else ""))
    config = hf.default_config(args.hf, overrides)
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    wanted = "text2text-generation" if encoder_decoder else "text-generation"
    if args.task != wanted:
        kind = "an encoder-decoder" if encoder_decoder else "a decoder-only model"
        raise ValueError(f"--task {args.task}: {args.hf} is {kind}; compile it with "
                         f"--task {wanted}")
    built = hf.build(args.hf, GENERATION_TASKS[args.task], overrides)
    model = built.model
    if args.calibrate is not None:
        model = _calibrated(args, model, True, report)
    generator = anyshape.compile_generator(
        model, target=args.target, progress=report, dump_ir_dir=args.dump_ir_dir,
        backend=_generator_backend(args))
    described = {"model": f"{args.hf} {args.task} ({type(built.model).__name__})",
                 "parameters": built.parameters(),
                 "unique_bytes": hf.unique_parameter_bytes(built.model)}
    return generator, described


def _compile_checkpoint(args, report):
    """--hf-dir: ``anyshape.compile_generator`` on the checkpoint directory."""
    import torch

    import anyshape
    from anyshape.frontend import hf
    from anyshape.frontend.checkpoint import load_checkpoint

    report(f"reading the checkpoint {args.hf_dir} (its weights stay on disk, mapped)")
    model = load_checkpoint(args.hf_dir, getattr(torch, args.dtype) if args.dtype else None,
                            quantized=args.weights != "float32")
    described = {"model": f"{args.hf_dir} ({type(model).__name__}, "
                          f"{next(model.parameters()).dtype})",
                 "parameters": sum(p.numel() for p in model.parameters()),  # tied ones once
                 "unique_bytes": hf.unique_parameter_bytes(model)}
    generator = anyshape.compile_generator(
        model, target=args.target, progress=report, dump_ir_dir=args.dump_ir_dir,
        backend=_generator_backend(args, params=args.params))
    return generator, described


def _generator_backend(args, params: str = "inline"):
    import anyshape

    return anyshape.BackendOptions(cuda_arch=args.cuda_arch, target_cpu=args.target_cpu,
                                   opt_level=args.opt_level, data_tiling=_data_tiling(args),
                                   matmul_precision=args.matmul_precision,
                                   product_kernel=args.product_kernel,
                                   weights=args.weights, group_size=args.group_size,
                                   activations=args.activations, params=params)


# Lines tokenized and padded together, for calibration's forward passes.
CALIBRATION_BATCH = 16


def _calibrated(args, model, with_mask: bool, report):
    """``anyshape.calibrated`` of ``model`` on --calibrate's lines, tokenized
    by --tokenizer: batches of up to CALIBRATION_BATCH lines, right-padded
    where the tokenizer pads and ``with_mask`` (its ``attention_mask`` keeps
    the padded positions out of the statistics), one line at a time where not;
    each cut at the model's position count."""
    import torch

    import anyshape

    lines = args.calibration_lines
    tokenizer = _tokenizer(args.tokenizer)
    from anyshape.frontend.config_bounds import config_limits

    # The HF model inside (a task's wrapper, such as LastTokenLogits, holds one).
    core = next((m for m in model.modules() if hasattr(m, "get_input_embeddings")), None)
    vocab = core.get_input_embeddings().num_embeddings if core is not None else None
    limit = min(config_limits(model), default=None)
    batch = CALIBRATION_BATCH if with_mask and tokenizer.pad_token is not None else 1
    samples = []
    for start in range(0, len(lines), batch):
        encoded = tokenizer([line for _, line in lines[start:start + batch]],
                            return_tensors="pt",
                            padding=batch > 1, truncation=limit is not None,
                            max_length=limit)
        ids = encoded["input_ids"]
        if ids.shape[1] == 0:
            continue
        if vocab is not None and int(ids.max()) >= vocab:
            line = lines[start + int((ids >= vocab).any(dim=1).nonzero()[0, 0])][0]
            raise ValueError(f"--tokenizer: its ids reach {int(ids.max())}, past the model's "
                             f"vocabulary of {vocab} (line {line} of '{args.calibrate}'); "
                             f"give the model's own tokenizer")
        sample = {"input_ids": ids}
        if with_mask:
            sample["attention_mask"] = encoded.get("attention_mask", torch.ones_like(ids))
        samples.append(sample)
    if not samples:
        raise ValueError(f"--calibrate: the tokenizer makes no tokens of '{args.calibrate}'")
    report(f"calibrating the {args.weights} weights on {len(lines)} lines of {args.calibrate}")
    return anyshape.calibrated(model, samples, weights=args.weights,
                               group_size=args.group_size, progress=report)


def _calibration_lines(path: str) -> list[tuple[int, str]]:
    """--calibrate's non-empty lines, each with its line number."""
    try:
        with open(path, encoding="utf-8") as text:
            lines = [(number, line.strip()) for number, line in enumerate(text, 1)
                     if line.strip()]
    except OSError as error:
        raise ValueError(f"--calibrate: cannot read '{path}': {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"--calibrate: '{path}' is not UTF-8 text "
                         f"({error.reason} at byte {error.start})") from None
    if not lines:
        raise ValueError(f"--calibrate: '{path}' holds no text (one sample per non-empty line)")
    return lines


def _check_tokenizer_directory(directory: str) -> None:
    if not Path(directory).is_dir():
        raise ValueError(f"--tokenizer: expected a HF tokenizer directory, got '{directory}'")


def _tokenizer(directory: str):
    from transformers import AutoTokenizer

    _check_tokenizer_directory(directory)
    try:
        return AutoTokenizer.from_pretrained(directory)
    except (OSError, ValueError) as error:
        raise ValueError(f"--tokenizer: cannot load a tokenizer from '{directory}': "
                         f"{error}") from None


def _dynamic_dims(text: str) -> set[str]:
    if text.strip() == "none":
        return set()
    names = {n.strip() for n in text.split(",") if n.strip()}
    unknown = names - {"batch", "seq"}
    if unknown or not names:
        raise ValueError(f"--dynamic: expected a comma list of batch and seq, or none; "
                         f"got '{text}'")
    return names


def _hf_model(args, dynamic, max_batch, report):
    from anyshape.frontend import hf

    overrides = hf.parse_overrides(args.config)
    report(f"building {args.hf} for {args.task} from its default config"
           + (f" with {', '.join(args.config)}" if args.config else ""))
    built = hf.build(args.hf, args.task, overrides)
    limit = built.max_seq
    # Unbounded, as a user's plain Dim("seq"): where torch.export needs the bound
    # the config states, anyshape.compile applies it with a warning, and indices
    # past a position table are refused at the call (frontend/indexed_reads.py).
    max_seq = args.max_seq
    longest = max_seq if "seq" in dynamic else args.seq
    if limit is not None and longest is not None and longest > limit:
        raise ValueError(f"--max-seq/--seq: {args.hf}'s positions allow at most {limit} tokens, "
                         f"got {longest} (a --config of its position count changes that)")
    batch = min(2, max_batch or 2) if "batch" in dynamic else args.batch
    seq = min(8, max_seq or 8) if "seq" in dynamic else args.seq
    inputs = built.example_inputs(batch, seq, dec_seq=max(1, seq - 3) if "seq" in dynamic else seq)
    shapes = built.dynamic_shapes(dynamic, max_batch, max_seq)
    described = {"model": f"{args.hf} {args.task} ({type(built.model).__name__})",
                 "parameters": built.parameters()}
    return built.model, inputs, shapes, described


def _factory_model(args, dynamic, max_batch, report):
    import torch
    from torch.export import Dim

    report(f"building the model with {args.model}")
    result = load_factory(args.model)()
    if isinstance(result, torch.nn.Module) or not isinstance(result, tuple) or \
            len(result) not in (2, 3) or not isinstance(result[0], torch.nn.Module):
        raise TypeError(f"--model: {args.model} must return (model, example_inputs) or "
                        f"(model, example_inputs, dynamic_shapes) with a torch.nn.Module "
                        f"first, got {type(result).__name__}")
    model, example = result[0], result[1]
    if isinstance(example, dict):
        call_args, call_kwargs = (), example
    elif isinstance(example, (tuple, list)):
        call_args, call_kwargs = tuple(example), {}
    elif isinstance(example, torch.Tensor):
        call_args, call_kwargs = (example,), {}
    else:
        raise TypeError(f"--model: example inputs must be a dict, a tuple or a tensor, got "
                        f"{type(example).__name__}")
    if len(result) == 3:
        shapes = result[2]
    else:
        max_seq = args.max_seq or DEFAULT_MAX_SEQ
        batch = Dim("batch", min=1, max=max_batch) if "batch" in dynamic else None
        seq = Dim("seq", min=1, max=max_seq) if "seq" in dynamic else None

        def dims(value):
            if not isinstance(value, torch.Tensor):
                return None
            chosen = {axis: dim for axis, dim in ((0, batch), (1, seq))
                      if dim is not None and value.dim() > axis}
            return chosen or None

        shapes = ({k: dims(v) for k, v in call_kwargs.items()} if call_kwargs
                  else tuple(dims(v) for v in call_args))
    described = {"model": f"{args.model} ({type(model).__name__})",
                 "parameters": sum(p.numel() for p in model.parameters())}
    return model.eval(), call_args, call_kwargs, shapes, described


def load_factory(spec: str):
    """``package.module:function`` or ``path/file.py:function``, resolved."""
    import importlib
    import importlib.util
    import os

    module_name, sep, function = spec.rpartition(":")
    if not sep or not module_name or not function:
        raise ValueError(f"--model: expected MODULE:FACTORY, got '{spec}'")
    if module_name.endswith(".py") or os.sep in module_name:
        path = Path(module_name)
        if not path.is_file():
            raise ValueError(f"--model: no file '{path}'")
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[path.stem] = module  # as an import would: dataclasses and pickling look it up
        module_spec.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            raise ValueError(f"--model: cannot import '{module_name}': {error}") from None
    factory = getattr(module, function, None)
    if not callable(factory):
        raise ValueError(f"--model: '{module_name}' has no function '{function}'")
    return factory


def _runs_on(compiled) -> str:
    target = compiled.target
    if target.name == "cuda":
        return f"CUDA {target.cuda_arch}"
    cpu = compiled.cpu
    if not cpu:
        return "this host's CPU"
    isa = [f for f in ("avx2", "avx512f", "avx512bf16", "avx512fp16", "amx-tile")
           if f in cpu["features"]]
    return (f"{cpu['arch']} CPU '{cpu['name']}' (--target-cpu {cpu['requested']}; "
            f"{', '.join(isa) or 'no AVX2'}; hosts lacking one of its features refuse it)")


def summary(compiled, out: Path, described: dict | None) -> str:
    """What was written, how long each stage took, the dynamic dims, how to call it."""
    from anyshape.runtime.signature import leaf_paths

    signature = compiled.signature
    lines = [f"anyshape-compile: wrote {out}/"]
    if described:
        lines.append(f"  model: {described['model']}, {described['parameters'] / 1e6:.2f}M "
                     f"parameters, {_size(described['unique_bytes'])} of parameters and "
                     f"buffers (each tensor once)")
    if compiled.stage_seconds:
        times = ", ".join(f"{stage} {seconds:.1f}s"
                          for stage, seconds in compiled.stage_seconds.items())
        lines.append(f"  stages: {times} (total {sum(compiled.stage_seconds.values()):.1f}s)")
    files = [f"module.vmfb {_size(compiled.vmfb_path.stat().st_size)}"]
    if compiled.parameters_path is not None:
        packed = compiled.encoder_path is not None
        files.append(f"params.irpa {_size(compiled.parameters_path.stat().st_size)} "
                     f"(the weights{', packed' if packed else ''})")
        if packed:
            files.append(f"encoder.vmfb {_size(compiled.encoder_path.stat().st_size)} "
                         f"(packs new weights: anyshape.write_parameters)")
    else:
        files.append("weights inside module.vmfb")
    lines.append(f"  files: {', '.join(files)}, manifest.json")
    lines.append(f"  runs on: {_runs_on(compiled)}")
    if compiled.target.matmul_precision == "medium":
        lines.append("  matmul precision: medium (matrix products take bfloat16 inputs, "
                     "accumulate in float32)")
    symbols = signature.symbols
    dims = [symbols[s].describe() for s in symbols]
    lines.append(f"  dynamic dims: {', '.join(dims) if dims else 'none'}")

    def shape(spec):
        if spec.python:  # a Python scalar or constant output
            return f"{spec.name} {spec.describe()}"
        names = [symbols[d].label or d if isinstance(d, str) and d in symbols else str(d)
                 for d in spec.dims]
        return f"{spec.name} {spec.dtype} ({', '.join(names)})"

    lines.append(f"  inputs: {'; '.join(shape(s) for s in signature.inputs)}")
    if signature.input_writes:
        lines.append(f"  updated in place, as eager does: {', '.join(signature.input_writes)}")
    tree = signature.output_tree
    paths = leaf_paths(tree)
    outputs = "; ".join(f"outputs{path} {shape(spec).split(' ', 1)[1]}"
                        for path, spec in zip(paths, signature.outputs))
    kind = tree.get("qualname", tree["kind"]) if tree["kind"] != "leaf" else "a tensor"
    lines.append(f"  outputs ({kind}): {outputs}")
    call = ", ".join(f"{s.name}=..." for s in signature.inputs)
    lines += ["  run it:", "    import anyshape", f"    model = anyshape.load({str(out)!r})",
              f"    outputs = model({call})"]
    return "\n".join(lines)


def _size(count: int) -> str:
    return f"{count / 1e6:.1f} MB" if count >= 1e6 else f"{count / 1e3:.1f} KB"


if __name__ == "__main__":
    sys.exit(main())
