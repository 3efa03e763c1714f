"""What the causal-LM and the encoder-decoder compiles share: the decode
entries and their programs, and the spec and generation config a compiled
generator records of its model."""

from __future__ import annotations

import json
import warnings

import torch

from anyshape.generation.step import takes_two_d_mask

# The module's functions for one new token at a static batch, by batch
# (runtime/generator.py calls them; other batches are padded up to the next one).
DECODE_ENTRIES = {1: "decode_one", 4: "decode_four", 8: "decode_eight"}
DECODE_ENTRY = DECODE_ENTRIES[1]
# A causal LM's step that returns every new token's logits: assisted
# decoding's verification of its draft tokens, one call for all of them.
VERIFY_ENTRY = "verify_draft"
# An encoder-decoder's function that selects rows of the encoded source
# (step.SourceRowGather); without it (an earlier build) the rows are encoded again.
SOURCE_ROWS_ENTRY = "select_source_rows"


def decode_step(program: torch.export.ExportedProgram,
                batch: int) -> torch.export.ExportedProgram | None:
    """The step ``program`` (decomposed; its first input the new tokens' ids
    [batch, new]) for ``batch`` rows and one new token, its lengths its only
    dims; None, with a warning that says why, where it cannot be fixed at
    those sizes (that batch then runs the general step, only slower)."""
    from anyshape.frontend.derived_programs import specialized

    try:
        return specialized(program, {(0, 0): batch, (0, 1): 1})
    except Exception as error:  # noqa: BLE001  only speed depends on it: said, not raised
        first = next((line for line in str(error).splitlines() if line.strip()), "")
        warnings.warn(f"compile_generator: the batch-{batch} decode step could not be derived "
                      f"({type(error).__name__}: {first[:200]}); batch-{batch} decode runs "
                      f"the general step", stacklevel=4)
        return None


def start_building_kernels(target: str, backend) -> None:
    """anyshape's CPU kernels, where the compile of ``target`` with
    ``backend`` will link them, built on a thread of their own while the
    steps export (``linear_rows.start_building``). A bad option is left for
    ``anyshape.compile`` to name."""
    from anyshape.iree.flags import products_target
    from anyshape.iree.kernels.linear_rows import start_building

    try:
        compile_target = products_target(target, backend)
    except (TypeError, ValueError):
        return
    start_building(compile_target)


def max_positions(config) -> int | None:
    for name in ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _vocabulary(model) -> int:
    """The LM head's rows, read from its size: its ``weight`` may be a
    checkpoint's weight cast where read (frontend/checkpoint.py), a float32
    copy of the whole head for one number."""
    head = model.get_output_embeddings()
    if head is None:
        return int(model.config.vocab_size)
    rows = getattr(head, "out_features", None)
    return int(rows if isinstance(rows, int) else head.weight.shape[0])


def model_spec(model, shapes) -> dict:
    """What a generator records of its model: its type, vocabulary, positions,
    cache shapes and dtype, and config."""
    config = model.config
    dtype = next(model.parameters()).dtype
    return {
        "model_type": config.model_type,
        "model_class": type(model).__name__,
        "vocab_size": _vocabulary(model),
        # ALiBi (BLOOM, Falcon with alibi) has no table of positions to run out of.
        "max_positions": None if takes_two_d_mask(config) else max_positions(config),
        "cache": [[list(k), list(v)] for k, v in shapes],
        "cache_dtype": str(dtype).removeprefix("torch."),
        "config": json.loads(config.to_json_string(use_diff=False)),
    }


def generation_config_of(model) -> dict:
    """The model's own generation config, as a dict (``generate`` applies it)."""
    config = getattr(model, "generation_config", None)
    if config is None:
        from transformers import GenerationConfig

        config = GenerationConfig.from_model_config(model.config)
    return config.to_dict()

