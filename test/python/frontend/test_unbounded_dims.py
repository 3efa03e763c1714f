"""The dims a user writes first: ``Dim("seq")`` with no bounds, ``Dim.AUTO``,
``Dim.DYNAMIC``. Every compile used to crash on them (sympy's ``int()`` of
torch's ``int_oo`` upper bound), and no test gave a Dim without a max."""

import pytest
import torch
from models import roberta_inputs, small_gpt2_last_token, small_roberta
from torch.export import Dim

import anyshape

# Every test here builds with IREE: `make check` skips the module before exporting.
pytestmark = pytest.mark.builds_after_export


class TokenMix(torch.nn.Module):
    """Token-wise and across-token work on [batch, seq, hidden]."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        h = self.norm(torch.relu(self.proj(x)))
        scores = (h @ h.transpose(1, 2)).softmax(-1)
        return scores @ h + x.mean(1, keepdim=True)


@pytest.mark.parametrize("dims", ["Dim(name)", "Dim.AUTO", "Dim.DYNAMIC"])
def test_unbounded_dims_compile_and_run_at_odd_sizes(dims):
    torch.manual_seed(0)
    model = TokenMix().eval()
    make = {"Dim(name)": lambda name: Dim(name), "Dim.AUTO": lambda name: Dim.AUTO,
            "Dim.DYNAMIC": lambda name: Dim.DYNAMIC}[dims]
    compiled = anyshape.compile(model, (torch.randn(2, 5, 8),),
                                dynamic_shapes={"x": {0: make("batch"), 1: make("seq")}})
    assert len(compiled.signature.symbols) == 2
    assert all(symbol.max is None for symbol in compiled.signature.symbols.values())
    smallest = 1 if dims == "Dim(name)" else 2  # torch.export's 0/1 specialization
    if smallest == 2:
        with pytest.raises(ValueError, match=r"expected a size with s\d+ in \[2, inf\], got 1; "
                                             r"torch.export gives Dim.AUTO and Dim.DYNAMIC dims "
                                             r"a minimum of 2"):
            compiled(torch.randn(1, 7, 8))
    for batch in (smallest, 4):
        for length in (smallest, 7, 17, 33, 65, 333):
            x = torch.randn(batch, length, 8)
            torch.testing.assert_close(compiled(x), model(x), atol=2e-5, rtol=1e-5,
                                       msg=lambda m: f"batch {batch}, length {length}: {m}")


@pytest.fixture(scope="module")
def unbounded_roberta():
    """130 positions: 128 tokens after RoBERTa's padding offset."""
    model = small_roberta(max_positions=130)
    ids, mask = roberta_inputs(2, 8)
    batch, seq = Dim("batch"), Dim("seq")
    compiled = anyshape.compile(model, (ids,), {"attention_mask": mask},
                                dynamic_shapes={"input_ids": {0: batch, 1: seq},
                                                "attention_mask": {0: batch, 1: seq}})
    return model, compiled


def test_roberta_with_unbounded_batch_and_length(unbounded_roberta):
    model, compiled = unbounded_roberta
    for b, length in [(1, 1), (1, 17), (3, 33), (2, 65), (1, 127)]:
        ids, mask = roberta_inputs(b, length, pad_from=max(1, length // 2), seed=length)
        with torch.no_grad():
            expected = model(ids, attention_mask=mask).logits
        torch.testing.assert_close(compiled(ids, attention_mask=mask).logits, expected,
                                   atol=1e-4, rtol=0)


def test_roberta_past_its_positions_is_refused(unbounded_roberta):
    """/// RoBERTa counts its positions from the ids inside the module: at most
    /// padding_idx + seq, a bound on the sizes the runtime checks before the
    /// call (IREE read NaN past the table, where eager raises)."""
    model, compiled = unbounded_roberta
    ids, mask = roberta_inputs(1, 129)
    with pytest.raises(RuntimeError, match="index 130 is out of bounds"):
        model(ids, attention_mask=mask)
    with pytest.raises(ValueError, match=r"expected sizes with seq <= 128 \(indices into .*"
                                         r"roberta.embeddings .*computed in the model from "
                                         r"the inputs' values"):
        compiled(ids, attention_mask=mask)
    ids, mask = roberta_inputs(2, 128, pad_from=100, seed=1)  # the longest it takes
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(compiled(ids, attention_mask=mask).logits, expected,
                               atol=1e-4, rtol=0)


@pytest.fixture(scope="module")
def unbounded_gpt2():
    torch.manual_seed(0)
    model = small_gpt2_last_token().eval()
    ids = torch.randint(0, 500, (2, 6))
    batch, seq = Dim("batch"), Dim("seq")
    compiled = anyshape.compile(model, (ids, torch.ones_like(ids)),
                                dynamic_shapes={"input_ids": {0: batch, 1: seq},
                                                "attention_mask": {0: batch, 1: seq}})
    return model, compiled


def test_gpt2_last_token_with_unbounded_batch_and_length(unbounded_gpt2):
    model, compiled = unbounded_gpt2
    for b, length in [(1, 1), (3, 7), (2, 33), (1, 63), (1, 64)]:
        ids = torch.randint(0, 500, (b, length))
        mask = torch.ones_like(ids)
        with torch.no_grad():
            expected = model(ids, mask)
        torch.testing.assert_close(compiled(ids, mask), expected, atol=1e-4, rtol=0)


def test_gpt2_past_its_positions_names_the_length(unbounded_gpt2):
    """/// GPT-2's positions are arange(seq): past its 64 the runtime refuses
    /// the length before the call (IREE read past the table: NaN)."""
    model, compiled = unbounded_gpt2
    ids = torch.randint(0, 500, (1, 65))
    with pytest.raises(IndexError, match="index out of range"):
        model(ids, torch.ones_like(ids))
    with pytest.raises(ValueError, match=r"expected sizes with seq <= 64 \(indices into "
                       r"model\.transformer\.wpe \(64 rows\).*got argument 'input_ids' dim 1 = 65"):
        compiled(ids, torch.ones_like(ids))


def test_gpt2_token_id_past_its_vocabulary_names_the_argument(unbounded_gpt2):
    model, compiled = unbounded_gpt2
    for bad in (500, -1, 10**9):
        ids = torch.randint(0, 500, (2, 7))
        ids[1, 3] = bad
        with pytest.raises(IndexError, match="index out of range"):
            model(ids, torch.ones_like(ids))
        with pytest.raises(ValueError, match=rf"argument 'input_ids': expected values in "
                           rf"\[0, 500\) \(indices into model\.transformer\.wte \(500 rows\); "
                           rf"eager raises IndexError\), got values from {ids.min()} to "
                           rf"{ids.max()}$"):
            compiled(ids, torch.ones_like(ids))


