"""Weights outside the ``.vmfb``, in an IREE parameter archive (``params="external"``).

The importer keeps each weight once, as a ``dense_resource`` blob named for its
place in the model's state (``roberta.encoder.layer.0.output.dense.weight``),
however many ops read it (tied embeddings included), and hands over the arrays
behind the blobs. Here, in IREE's bindings (torch-mlir's have no ``util``
dialect), each such literal becomes a load of an immutable ``util.global``
whose value is the parameter of that name in scope ``model``, and the arrays
go into an ``.irpa`` archive (IREE's runtime writes it) that the runtime
opens beside the ``.vmfb`` (``runtime.load``).

IREE cannot evaluate at compile time what it computes from a parameter (the
packed copies of data tiling, transposed linear weights): it does that once
when the module loads. The archive holds each weight once, as the model does
(an inline build too, since compile-time evaluation is off: ``flags.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from anyshape.dialects import builtin_tensor_text
from anyshape.iree.constant_values import resource_key
from anyshape.mlir import iree_bindings, operations_in, write_bytecode
from anyshape.runtime.compiled_module import PARAMETER_SCOPE, PARAMETERS, write_archive

SCOPE = PARAMETER_SCOPE
_GLOBAL_PREFIX = "param."
ARCHIVE = PARAMETERS



def externalize_weights(in_file: Path, out_file: Path, weights: dict[str, np.ndarray],
                       archive: Path, text_file: Path | None = None,
                       write: Callable[[Path, dict[str, np.ndarray]], None] = write_archive
                       ) -> list[str]:
    """Rewrite ``in_file`` (the IREE input, bytecode or text) into ``out_file``
    (bytecode; ``text_file`` as text when given): every ``dense_resource``
    literal whose blob is one of ``weights`` reads a parameter of that name
    instead, and ``archive`` gets those arrays (``write(archive, arrays)``:
    now, by default; the compile defers it to overlap ``iree-compile``,
    which never reads the archive). Blobs a pass made (not in ``weights``)
    stay inline. Returns the parameters' names."""
    iree_ir = iree_bindings()
    with iree_ir.Context(), iree_ir.Location.unknown():
        try:
            module = iree_ir.Module.parseFile(str(in_file))  # mapped, not copied
        except iree_ir.MLIRError as error:
            raise ValueError(f"IREE's bindings cannot read {in_file}: {error}") from None
        literals = []
        for op in operations_in(module.operation):
            if op.name == "torch.vtensor.literal":
                key = resource_key(op)
                if key is not None and key in weights:
                    literals.append((op, key))
        globals_: dict[str, object] = {}
        first = module.body.operations[0]
        for literal, key in literals:
            # The builtin type torch_c bridges the literal's to: signless
            # integers (an int8 weight's blob is typed si8, its tensor i8).
            tensor_type = iree_ir.Type.parse(builtin_tensor_text(literal.results[0].type))
            symbol = f"{_GLOBAL_PREFIX}{key}"  # never a function's name (@main)
            if key not in globals_:
                with iree_ir.InsertionPoint(first):
                    globals_[key] = iree_ir.Operation.create("util.global", attributes={
                        "sym_name": iree_ir.StringAttr.get(symbol),
                        "sym_visibility": iree_ir.StringAttr.get("private"),
                        "type": iree_ir.TypeAttr.get(tensor_type),
                        "initial_value": iree_ir.Attribute.parse(
                            f'#flow.parameter.named<"{SCOPE}"::"{key}"> : {tensor_type}'),
                    })
            with iree_ir.InsertionPoint(literal), literal.location:
                load = iree_ir.Operation.create(
                    "util.global.load", results=[tensor_type], attributes={
                        "global": iree_ir.FlatSymbolRefAttr.get(symbol),
                        "is_immutable": iree_ir.UnitAttr.get()})
                torch_value = iree_ir.Operation.create(
                    "torch_c.from_builtin_tensor", results=[literal.results[0].type],
                    operands=[load.result])
            literal.results[0].replace_all_uses_with(torch_value.result)
            literal.erase()
        write_bytecode(module, out_file)
        if text_file is not None:
            with open(text_file, "w") as f:
                module.operation.print(file=f)
    write(archive, {key: weights[key] for key in globals_})
    return list(globals_)


