"""The import stage as lit sees it (test/frontend): a model exported and
imported by anyshape (its graph fixes applied), printed under a
``// CASE: <name>`` line for CHECK-LABEL; a refused one prints its error."""

import sys

import anyshape


def show(name: str, model, args, dynamic_shapes=None) -> None:
    print(f"// CASE: {name}")
    try:
        print(anyshape.import_torch(model.eval(), args, dynamic_shapes=dynamic_shapes))
    except anyshape.CompileError as error:
        print(f"// ERROR: {error}")
    sys.stdout.flush()
