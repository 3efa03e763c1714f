"""Compile one named case in this (fresh) process, save the artifact and the IR
of every stage, and print the largest difference from eager on odd shapes as JSON.

``python compile_fresh.py CASE OUT_DIR``; the cases are below. Run by
``test_deterministic_compile.py`` twice per case, with different
``PYTHONHASHSEED``s: anything that depends on hashing, addresses or temporary
paths shows as two different artifacts, and a wrong answer that comes and goes
between processes (BLOOM's, issue 36) as an error in either run.
"""

from __future__ import annotations

import json
import sys

import torch
from torch.export import Dim

import anyshape


class Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          use_cache=False).logits


def bloom():
    """BLOOM: ALiBi slopes from ``torch.pow`` of a float base (issue 36), left padding."""
    import transformers

    torch.manual_seed(0)
    config = transformers.BloomConfig(hidden_size=64, n_layer=2, n_head=4, vocab_size=1000)
    model = Logits(transformers.AutoModelForCausalLM.from_config(config).eval()).eval()
    dims = {0: Dim("batch"), 1: Dim("seq")}
    ids = torch.randint(3, 1000, (2, 16))
    example = (ids, torch.ones_like(ids))

    def inputs(batch, length):
        ids = torch.randint(3, 1000, (batch, length))
        mask = torch.ones_like(ids)
        mask[0, :length // 2] = 0  # left padding, as generation pads
        return ids, mask

    return model, example, {"input_ids": dims, "attention_mask": dims}, inputs


def fuzz_program():
    """A random program of the fuzzer (positions, masks, reductions, slices)."""
    from fuzz_programs import EXAMPLE_SHAPE, MAX_LENGTH, dynamic_shapes, example_inputs, generate

    program = generate(7)
    return (program.build(), example_inputs(*EXAMPLE_SHAPE), dynamic_shapes(),
            lambda batch, length: example_inputs(batch, min(length, MAX_LENGTH), seed=length))


CASES = {"bloom": bloom, "fuzz": fuzz_program}
SHAPES = [(1, 7), (3, 17), (2, 33)]


def _tensors(output):
    return list(output) if isinstance(output, (tuple, list)) else [output]


def main(case: str, out: str) -> None:
    model, example, dynamic_shapes, inputs = CASES[case]()
    compiled = anyshape.compile(model, example, dynamic_shapes=dynamic_shapes,
                                dump_ir_dir=f"{out}/ir")
    compiled.save(out)
    errors = []
    for batch, length in SHAPES:
        args = inputs(batch, length)
        with torch.no_grad():
            expected = _tensors(model(*args))
        got = _tensors(compiled(*args))
        errors.append(max(float((g.double() - e.double()).abs().max())
                          for g, e in zip(got, expected)))
    print(json.dumps({"max_error": max(errors)}))


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    main(*sys.argv[1:])
