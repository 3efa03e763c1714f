"""One global for each value the module's initializers compute more than once.

IREE hoists what a function computes from its weights alone (a data-tiling
packing, the concatenated Q, K and V weights of anyshape-data-tiling-forms)
into an initializer of that function's own, which runs once at load and
keeps its result as long as the module lives. A generator's functions (the
step, the verifier, decode at 1, 4 and 8 rows) each compute the same
packings from the same weights. IREE merges those whose dispatch reads
parameters straight, but not those that first build a concatenation in a
new tensor (``flow.tensor.empty`` and ``flow.tensor.update``, which are not
merged as equal values): in bfloat16, where every product is IREE's, the
decode functions' Q, K and V then stay packed apart from the step's
(docs/benchmarks.md, "Compile cost").

``share_identical_initializers`` runs on the flow-phase module
(``workarounds.rewrite_flow``): initializers whose bodies are the same ops,
on the same immutable globals, storing one immutable global each, compute
the same value; every load of a later one's global reads the first one's
instead, and the later initializer and global are erased. Repeated until
none is left, since sharing a concatenation makes the packings of it equal.
Only initializers made of the ops listed here are compared: what they
compute depends on nothing but their operands.
"""

from __future__ import annotations

from anyshape.stages import Workaround

# Ops whose results depend only on their operands and attributes, as IREE
# hoists weight-only computations into initializers.
_PURE_OPS = frozenset({
    "arith.constant", "util.global.load", "util.global.store", "util.return",
    "flow.tensor.empty", "flow.tensor.update", "flow.tensor.slice", "flow.tensor.reshape",
    "flow.tensor.splat", "flow.dispatch",
})


def share_identical_initializers(ir, module) -> int:
    """Erase the initializers (and their globals) that compute what an
    earlier one does, reading the earlier one's global instead. Returns how
    many globals were shared."""
    shared = 0
    keys: dict[str, tuple[str, ...]] = {}  # stored global -> its initializer's key
    while True:
        renamed = _one_round(ir, module, keys)
        if not renamed:
            return shared
        shared += len(renamed)
        # Only the initializers that loaded a global renamed print otherwise now.
        loaded = tuple(f"@{name} " for name in renamed)
        keys = {name: key for name, key in keys.items()
                if name not in renamed and not any(old in key[0] for old in loaded)}


def _one_round(ir, module, keys: dict[str, tuple[str, ...]]) -> dict[str, str]:
    body = module.body
    globals_ = {}
    for op in body.operations:
        if op.operation.name == "util.global":
            globals_[ir.StringAttr(op.operation.attributes["sym_name"]).value] = op.operation
    first_of: dict[tuple[str, ...], str] = {}
    renamed: dict[str, str] = {}
    duplicates = []
    for op in body.operations:
        op = op.operation
        if op.name != "util.initializer":
            continue
        stored = _stored_global(ir, op, globals_)
        if stored is None:
            continue
        name, global_op = stored
        # The bodies, and the globals stored (type and attributes), with the
        # stored global's own name left out. The module was verified when
        # read; verifying each op again to print it looked up every dispatch's
        # executable through the whole module (9 s for 22 layers).
        key = keys.get(name)
        if key is None:
            key = keys[name] = tuple(part.get_asm(use_local_scope=True, assume_verified=True)
                                     .replace(f"@{name} ", "@__stored ")
                                     for part in (op, global_op))
        if key in first_of:
            renamed[name] = first_of[key]
            duplicates.append((op, global_op))
        else:
            first_of[key] = name
    if not renamed:
        return renamed

    def visit(op):
        if op.name == "util.global.load":
            target = ir.FlatSymbolRefAttr(op.attributes["global"]).value
            if target in renamed:
                op.attributes["global"] = ir.FlatSymbolRefAttr.get(renamed[target])
        return ir.WalkResult.ADVANCE

    for initializer, global_op in duplicates:  # erased before the loads are redirected
        initializer.erase()
        global_op.erase()
    module.operation.walk(visit)
    return renamed


def _stored_global(ir, initializer, globals_):
    """(name, op) of the one immutable global ``initializer`` stores, when
    its body is one block of ``_PURE_OPS`` that loads immutable globals
    only; else None."""
    region = initializer.regions[0]
    blocks = list(region.blocks)
    if len(blocks) != 1:
        return None
    stores = []
    for op in blocks[0].operations:
        op = op.operation
        if op.name not in _PURE_OPS or len(op.regions) != 0:
            return None
        if op.name in ("util.global.load", "util.global.store"):
            name = ir.FlatSymbolRefAttr(op.attributes["global"]).value
            global_op = globals_.get(name)
            if global_op is None or "is_mutable" in global_op.attributes:
                return None
            if op.name == "util.global.store":
                stores.append((name, global_op))
    if len(stores) != 1 or "initial_value" in stores[0][1].attributes:
        return None
    return stores[0]


WORKAROUNDS = (Workaround(
    name="identical_initializers_shared", stage="iree-input",
    where="share_identical_initializers, run by iree.workarounds.rewrite_flow",
    upstream="IREE 3.13 hoists a function's weight-only computations into initializers of its "
             "own and does not merge two that build a concatenation in a new tensor "
             "(flow.tensor.empty, flow.tensor.update), nor the packings of those: a generator's "
             "decode functions kept their Q, K and V weights concatenated and packed apart from "
             "the step's (bfloat16, 2 layers of Llama-3-8B's widths: 2222 MiB loaded for 1834 "
             "MiB of packed weights; 1838 MiB with the rewrite).",
    guard=("test/python/iree/test_shared_initializers.py::"
           "test_a_value_computed_twice_is_kept_once_and_read_by_both_functions",
           "test/python/generation/test_preload.py::"
           "test_a_loaded_generator_holds_its_packed_weights_once"),
    remove_when="when a generator's loaded memory stays at one packed copy of its weights with "
                "the rewrite off"),)
