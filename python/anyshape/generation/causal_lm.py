"""``compile_generator``: an unmodified HF causal LM, compiled once for every length
(an encoder-decoder: ``seq2seq.py``).

The dims are anyshape's to declare: batch, the new tokens of a call (the
prompt at prefill, 1 at decode), the mask's length (the cache's filled slots
and the new tokens) and the cache buffers' capacity are each a dynamic dim
with no bound but the model's positions. One ``CausalLMStep`` is exported
and compiled (``step.py``), with its cache written in place
(``BackendOptions(in_place_writes=True)``).

Beside it, in the same module and on the same weights, the step for one new
token at a static batch of 1, 4 and 8 rows (only the lengths dynamic):
``DECODE_ENTRIES``, which ``generate`` calls for every
token after the first, a batch between them padded up to the next. With the
rows static, IREE packs each product for tiles of that many rows (``mmt4d``
tiles of 1 x 16, 4 x 16, 8 x 16) instead of 16-row tiles of which a few rows
are real: GPT-2's decode step at batch 4 with 335 slots took 35.6 ms against
74.2 ms for the general step (docs/generation.md). And the general step
returning every new token's logits (``VERIFY_ENTRY``): assisted decoding
verifies k draft tokens in one call of k + 1 tokens. It is the one exported;
the general step is its graph with the last position selected, and each
decode step the general step's graph with its batch and new tokens fixed
(``frontend/derived_programs.py``), so the model is traced once for all,
and IREE compiles their shared dispatches once.
"""

from __future__ import annotations

import copy
import os
import time
from typing import Any

import torch


from anyshape.generation.model_spec import (DECODE_ENTRIES, DECODE_ENTRY, VERIFY_ENTRY,
                                             decode_step, generation_config_of, model_spec,
                                             start_building_kernels)
from anyshape.stages import finish_progress, progress_printer
from anyshape.runtime.generator import Generator
from anyshape.generation.step import (CausalLMStep, grouped_query_attention_in_sdpa,
                                      probe_cache, takes_additive_mask)

# Example sizes for torch.export: every dim above 1 (sizes 0 and 1 are
# specialized), each size different (so that no two dims are taken for one).
# "capacity": the cache buffers' slots, more than past + new.
_EXAMPLE = {"batch": 2, "new": 3, "past": 5, "capacity": 11}


def compile_generator(model: torch.nn.Module | str | os.PathLike, *, target: str = "cpu",
                      dtype=None,
                      backend=None, cache: bool = True, progress=False,
                      dump_ir_dir=None, threads=None) -> Generator:
    """Compile ``model`` (an HF ``*ForCausalLM``, or an encoder-decoder's
    ``*ForConditionalGeneration``: ``seq2seq.py``; unmodified, with its
    weights) for ``generate`` at any prompt length, output length and batch.
    Or a checkpoint directory (``save_pretrained``'s: config.json and
    safetensors), compiled without loading its weights into memory
    (``frontend/checkpoint.py``; its ``dtype`` by default is the
    checkpoint's).

    ``dtype``: the dtype to run in (``torch.float16``, ``torch.bfloat16``;
    None keeps the model's; docs/generation.md).
    ``backend``: an ``anyshape.BackendOptions`` (its ``in_place_writes`` is
    set: each step writes its keys and values into the cache buffers;
    ``outer_dim_concat`` is set to False);
    ``threads`` is a shorthand for its field. ``cache``, ``progress``,
    ``dump_ir_dir``: as for ``anyshape.compile``."""
    from anyshape.frontend.prequantized import float_images

    if isinstance(model, (str, os.PathLike)):
        from anyshape.frontend.checkpoint import load_checkpoint

        quantized = backend is not None and backend.weights != "float32"
        model, dtype = load_checkpoint(model, dtype, quantized=quantized), None
    _check_model(model)
    report = progress_printer(progress)  # one clock, one set of bars, for every stage
    with float_images(model, dtype) as checkpoint:
        if checkpoint is not None:
            backend = checkpoint.backend(backend)
        generator = _compiled_generator(model, target, dtype, backend, cache, report,
                                        dump_ir_dir, threads)
    # Loaded now (its weights packed, HF's generation imported), not in the
    # first generate: the time is the "load" stage's.
    report("loading the module into its context (IREE's initializers read and pack its "
           "weights) and HF's generation utilities")
    started = time.monotonic()
    generator.preload()
    generator.module.stage_seconds["load"] = time.monotonic() - started
    finish_progress(report, f"loaded in {generator.module.stage_seconds['load']:.0f}s")
    return generator


def _compiled_generator(model, target, dtype, backend, cache, report, dump_ir_dir,
                        threads) -> Generator:
    import anyshape
    from anyshape.frontend.derived_programs import selected_output
    from anyshape.frontend.export import prepare_program
    from anyshape.frontend.repeated_layers import decomposed_step
    from anyshape.options import BackendOptions

    takes_additive_mask(model.config)  # refuses masks it cannot build before a model runs
    if dtype is not None:
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype: expected a floating torch.dtype, got {dtype!r}")
        model = copy.deepcopy(model).to(dtype)
    # The step writes its slots of the cache in place (step.py). Concatenations
    # stay along their dim: IREE's outer-dim form transposed the whole cache
    # out and back every step when the step concatenated it (docs/generation.md).
    backend = BackendOptions(**{**(backend.__dict__ if backend else {}),
                                **({"threads": threads} if threads is not None else {}),
                                "outer_dim_concat": False, "in_place_writes": True})
    model = model.eval()
    if getattr(model.config, "is_encoder_decoder", False):
        from anyshape.generation.seq2seq import compile_seq2seq

        return compile_seq2seq(model, target=target, backend=backend, cache=cache,
                               report=report, dump_ir_dir=dump_ir_dir)
    start_building_kernels(target, backend)
    started = time.monotonic()
    report(f"exporting the step of {type(model).__name__} with torch.export, and "
             f"decomposing it")
    shapes = probe_cache(model)
    # The step is the verifier's last position, and each decode step is the
    # step with its batch and new tokens fixed: the model is traced once, for all.
    verify = decomposed_step(
        model, len(shapes),
        lambda layers: prepare_program(export_step(
            CausalLMStep(model, layers, every_position=True), shapes[:layers])), report)
    program = selected_output(verify, dim=1, index=-1)
    report(f"  deriving the decode steps of batch {', '.join(map(str, DECODE_ENTRIES))} "
             f"from the step")
    entries = {}
    for batch, name in DECODE_ENTRIES.items():
        decode = decode_step(program, batch)
        if decode is not None:
            entries[name] = decode
    entries[VERIFY_ENTRY] = verify
    ids_dims, positions_dims, mask_dims, cache_dims = step_dims(len(shapes))
    names = (ids_dims, positions_dims, mask_dims, *cache_dims)  # as the program's flat inputs

    traced = time.monotonic() - started
    module = anyshape.compile(program, dynamic_shapes=names, target=target, backend=backend,
                              cache=cache, progress=report, dump_ir_dir=dump_ir_dir,
                              entries=entries)
    # torch.export of the verifier, its decomposition and the programs derived
    # from it: the whole front half (the compile's own "export" stage is 0).
    module.stage_seconds = {"export-steps": traced, **module.stage_seconds}
    spec = {**model_spec(model, shapes),
            "decode_entry": DECODE_ENTRY if DECODE_ENTRY in entries else None,
            "verify_entry": VERIFY_ENTRY,
            "decode_entries": {str(batch): name for batch, name in DECODE_ENTRIES.items()
                               if name in entries}}
    return Generator(module, spec, generation_config_of(model))


def _example_inputs(step: CausalLMStep, shapes, batch: int, new: int, past: int,
                    capacity: int) -> tuple:
    """The step's inputs at these sizes: ids, positions, mask, then the cache."""
    dtype = next(step.model.parameters()).dtype
    ids = torch.randint(3, 100, (batch, new))
    positions = torch.arange(past, past + new).expand(batch, new).contiguous()
    mask = torch.ones(batch, past + new, dtype=torch.long)
    cache = tuple(torch.zeros(batch, heads, capacity, dim, dtype=dtype)
                  for layer in shapes for heads, dim in layer)
    return (ids, positions, mask, *cache)


def export_step(step: CausalLMStep, shapes) -> torch.export.ExportedProgram:
    inputs = _example_inputs(step, shapes, _EXAMPLE["batch"], _EXAMPLE["new"], _EXAMPLE["past"],
                             _EXAMPLE["capacity"])
    with torch.no_grad(), grouped_query_attention_in_sdpa():
        return torch.export.export(step, inputs, dynamic_shapes=step_dims(len(shapes)))


def step_dims(layers: int) -> tuple:
    """The step's dynamic dims: batch, the new tokens, the mask's length (the
    filled slots and the new tokens) and the cache's capacity (torch.export's
    guards keep the capacity above the length)."""
    from torch.export import Dim

    # At least one row and one new token (the logits are the last token's),
    # and the masked slot before them: refused below that, never run.
    b, n = Dim("batch", min=1), Dim("new", min=1)
    length, capacity = Dim("length", min=2), Dim("capacity", min=2)
    return ({0: b, 1: n}, {0: b, 1: n}, {0: b, 1: length},
            tuple({0: b, 2: capacity} for _ in range(2 * layers)))


def _check_model(model: Any) -> None:
    config = getattr(model, "config", None)
    if not isinstance(model, torch.nn.Module) or config is None or \
            not hasattr(model, "generate"):
        raise TypeError(f"model: expected a HuggingFace *ForCausalLM or encoder-decoder (a "
                        f"torch.nn.Module with a config and generate), got {type(model).__name__}")
    if getattr(config, "is_encoder_decoder", False) and (
            getattr(model, "main_input_name", "input_ids") != "input_ids"
            or not hasattr(model, "get_encoder")):
        raise NotImplementedError(
            f"model: {type(model).__name__}'s encoder takes "
            f"{getattr(model, 'main_input_name', '?')}, not token ids; compile_generator takes "
            f"text encoder-decoders (T5, BART, ...)")
