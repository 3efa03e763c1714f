"""The lit cases of anyshape-hoist-slices are grouped under ``/// [Pattern: ...]``
headers (checked for every pass by test_pattern_headers.py); here, the rules
the hoisting patterns dispatch to: a rule no header names fails, and so do
attention operand positions that disagree with torch-mlir's op class."""
import re
from pathlib import Path

import anyshape.passes.hoist_slices as hoist_slices

ROOT = Path(__file__).resolve().parents[3]


def _named_in_headers() -> set[str]:
    names = set()
    for path in sorted((ROOT / "test" / "passes").glob("hoist-slices-*.mlir")):
        for header in re.findall(r"^/// \[Pattern: (.*)\]$", path.read_text(), re.M):
            names |= {part.split("(")[0].strip() for part in header.split(",")}
    return names


def test_every_rule_is_exercised_under_a_header():
    rules = {rule.__name__ for rule in hoist_slices._RULES.values()}
    assert rules - _named_in_headers() == set()


def test_attention_positions_match_the_generated_class():
    """through_attention reads scaled_dot_product_attention's operands by name and
    names them by position in its Plan: the two must agree."""
    from anyshape.mlir import parse_module
    from anyshape.dialects import new_context
    from anyshape.passes.torch_ir.values import typed

    t = "!torch.vtensor<[2,3,4],f32>"
    text = f"""func.func @f(%q: {t}, %k: {t}, %v: {t}, %m: {t}) -> {t} {{
      %p = torch.constant.float 0.000000e+00
      %false = torch.constant.bool false
      %none = torch.constant.none
      %0 = torch.aten.scaled_dot_product_attention %q, %k, %v, %m, %p, %false, %none, %false :
        {t}, {t}, {t}, {t}, !torch.float, !torch.bool, !torch.none, !torch.bool -> {t}
      return %0 : {t}
    }}"""
    module = parse_module(text, new_context())
    func = module.body.operations[0]
    sdpa = next(op for op in func.regions[0].blocks[0].operations
                if op.operation.name == "torch.aten.scaled_dot_product_attention")
    view, operands = typed(sdpa), list(sdpa.operation.operands)
    for name, position in (("query", hoist_slices._QUERY), ("key", hoist_slices._KEY),
                           ("value", hoist_slices._VALUE), ("attn_mask", hoist_slices._MASK)):
        assert getattr(view, name) == operands[position], name
