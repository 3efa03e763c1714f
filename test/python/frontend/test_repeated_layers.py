"""``decomposed_step``: a causal LM's step traced with its first four layers,
the later layers copied from the last traced one in the decomposed graph.

The oracle is the step traced whole (``torch.export`` and the decomposition
over every layer): the copied program must be the same graph node for node
(targets, arguments, shapes, placeholder names and order), with the same
signature, weights and module call graph. Where layers differ, the step is
traced whole, and the model given is left as it was either way.
"""

import re
import warnings

import pytest
import torch
from extent import sweep
from hf_generation import hf_and_ours

from anyshape.frontend import repeated_layers
from anyshape.frontend.export import prepare_program
from anyshape.generation.causal_lm import export_step
from anyshape.generation.step import CausalLMStep, probe_cache

LAYERS = 6
_SMALL = dict(hidden_size=64, n_embd=64, num_hidden_layers=LAYERS, n_layer=LAYERS,
              num_attention_heads=4, n_head=4, num_key_value_heads=2, intermediate_size=128,
              ffn_dim=128, vocab_size=256, head_dim=16, max_position_embeddings=256,
              n_positions=256, word_embed_proj_dim=64)


def _model(model_type: str, **overrides):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(model_type)
    for key, value in {**_SMALL, **overrides}.items():
        if hasattr(config, key) or key in overrides:
            try:
                setattr(config, key, value)
            except AttributeError:
                pass
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoModelForCausalLM.from_config(config).eval()


def _traces(model):
    """(the step's program through ``decomposed_step``, the layer counts it
    traced, the step traced whole)."""
    shapes = probe_cache(model)
    counts = []

    def trace(layers):
        counts.append(layers)
        return prepare_program(export_step(CausalLMStep(model, layers, every_position=True),
                                           shapes[:layers]))

    copied = repeated_layers.decomposed_step(model, len(shapes), trace)
    traced = list(counts)
    return copied, traced, trace(len(shapes))


def _reason_traced_whole(model) -> str:
    """What ``decomposed_step`` reports where it traces ``model`` whole
    without trying the copies (its trace records what it is asked for and
    traces nothing); "" where it does not."""
    counts, reports = [], []
    result = repeated_layers.decomposed_step(
        model, LAYERS, lambda layers: counts.append(layers) or "whole", reports.append)
    return " ".join(reports) if result == "whole" and counts == [LAYERS] else ""


def _form(program, sizes_by_symbol: bool = False) -> list:
    """Each node's op, target, arguments (nodes by position), shape and, for
    placeholders, name; size symbols renamed in order of appearance (the
    traces number them apart). ``sizes_by_symbol``: an input's size read as
    its symbol, not as the input it is read from (of the inputs declared
    with one Dim, torch.export reads it from one it picks per trace)."""
    nodes = list(program.graph.nodes)
    position = {node: number for number, node in enumerate(nodes)}
    symbols: dict = {}

    def shape(value):
        text = str([getattr(v, "shape", v) for v in value]) if isinstance(value, (list, tuple)) \
            else str(getattr(value, "shape", value))
        return re.sub(r"\bs\d+\b", lambda m: symbols.setdefault(m.group(0), f"S{len(symbols)}"),
                      text)

    def argument(value):
        return ("node", position[value]) if isinstance(value, torch.fx.Node) else value

    def arguments(node):
        if sizes_by_symbol and node.target is torch.ops.aten.sym_size.int and \
                node.args[0].op == "placeholder":
            return ("size", shape(node.args[0].meta["val"].shape[node.args[1]]))
        return torch.fx.node.map_aggregate(node.args, argument)

    return [(node.op, str(node.target), arguments(node),
             torch.fx.node.map_aggregate(node.kwargs, argument), shape(node.meta.get("val")),
             node.name if node.op == "placeholder" else "")
            for node in nodes]


def _assert_same_program(copied, whole, sizes_by_symbol: bool = False):
    assert _form(copied, sizes_by_symbol) == _form(whole, sizes_by_symbol)
    if sizes_by_symbol:  # the output's name is numbered by the nodes before it
        assert copied.graph_signature.input_specs == whole.graph_signature.input_specs
        assert [(spec.kind, spec.target) for spec in copied.graph_signature.output_specs] == \
            [(spec.kind, spec.target) for spec in whole.graph_signature.output_specs]
    else:
        assert copied.graph_signature == whole.graph_signature
    assert sorted(copied.state_dict) == sorted(whole.state_dict)
    assert all(copied.state_dict[name] is whole.state_dict[name] for name in whole.state_dict)
    assert sorted(copied.constants) == sorted(whole.constants)
    assert [entry.fqn for entry in copied.module_call_graph] == \
        [entry.fqn for entry in whole.module_call_graph]
    assert copied.module_call_graph[0].signature == whole.module_call_graph[0].signature


# Two traces of a 6-layer model each, 10 to 16 s: `make test`'s, not `make check`'s.
@pytest.mark.slow_without_build
@pytest.mark.parametrize("model_type", sweep(["llama", "gpt2"], ["qwen2", "gpt_neox", "opt"]))
def test_the_copied_layers_are_the_whole_trace(model_type):
    model = _model(model_type)
    copied, counts, whole = _traces(model)
    assert counts == [repeated_layers.TRACED_LAYERS]  # copied, not traced whole
    _assert_same_program(copied, whole)
    stack = model.get_submodule(repeated_layers.layer_stack(model, LAYERS))
    assert len(stack) == LAYERS and model.config.num_hidden_layers == LAYERS


@pytest.mark.slow_without_build
def test_weights_read_through_a_cast_are_copied_per_layer(tmp_path):
    """A bfloat16 checkpoint compiled with quantized weights reads each linear
    layer's weight through a parametrization (frontend/checkpoint.py): each
    copied layer reads its own stored weight."""
    from anyshape.frontend.checkpoint import load_checkpoint

    _model("llama").to(torch.bfloat16).save_pretrained(tmp_path)
    model = load_checkpoint(tmp_path, torch.float32, quantized=True)
    copied, counts, whole = _traces(model)
    assert counts == [repeated_layers.TRACED_LAYERS]
    assert any("parametrizations" in spec.target for spec in copied.graph_signature.input_specs
               if spec.target)
    _assert_same_program(copied, whole)


def test_negative_layers_that_differ_are_traced_whole():
    """/// One layer's attention scaled otherwise: copying the traced layer
    would compute it with the others' scale."""
    model = _model("llama")
    model.model.layers[5].self_attn.scaling = 0.5
    with pytest.raises(repeated_layers.LayersDiffer, match="layer 5"):
        repeated_layers.layer_stack(model, LAYERS)
    assert "differs" in _reason_traced_whole(model)


def test_negative_a_hook_on_a_later_layer_is_traced_whole():
    """/// A forward hook on layer 5 (steering, debugging) changes its output:
    the traced layers do not have it."""
    model = _model("llama")
    model.model.layers[5].register_forward_hook(lambda module, args, output: output * 2)
    with pytest.raises(repeated_layers.LayersDiffer, match="hook"):
        repeated_layers.layer_stack(model, LAYERS)
    assert "hook" in _reason_traced_whole(model)


def test_negative_a_weight_shared_by_two_layers_is_traced_whole():
    """/// Layers 1 and 5 share a weight: one input of the whole trace, which
    copies would read as two."""
    model = _model("llama")
    model.model.layers[5].mlp.down_proj.weight = model.model.layers[1].mlp.down_proj.weight
    with pytest.raises(repeated_layers.LayersDiffer, match="layers.5.mlp.down_proj.weight"):
        repeated_layers.layer_stack(model, LAYERS)
    assert "layers.1.mlp.down_proj.weight" in _reason_traced_whole(model)


@pytest.mark.slow_without_build
def test_negative_layers_traced_apart_are_traced_whole(monkeypatch):
    """/// Layers alike as modules but computing apart (a forward that reads its
    own index): the two traced layers' graphs differ, and the step is traced whole."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    forward = LlamaDecoderLayer.forward

    def odd_layers_doubled(self, *args, **kwargs):
        output = forward(self, *args, **kwargs)
        return output * 2 if self.self_attn.layer_idx % 2 else output

    monkeypatch.setattr(LlamaDecoderLayer, "forward", odd_layers_doubled)
    model = _model("llama")
    repeated_layers.layer_stack(model, LAYERS)  # alike as modules
    copied, counts, whole = _traces(model)
    assert counts == [repeated_layers.TRACED_LAYERS, LAYERS]  # compared, then traced whole
    assert _form(copied) == _form(whole)


def test_negative_sliding_and_full_layers_are_traced_whole():
    """/// Gemma2 alternates sliding and full attention: no one layer stands for the rest."""
    assert "sliding_attention" in _reason_traced_whole(_model("gemma2", attn_implementation="sdpa"))


def test_the_model_is_put_back_and_traced_whole_when_the_short_trace_fails():
    """/// A model cut short may fail where it whole does not: then it is traced whole."""
    model = _model("llama")
    counts = []

    def trace(layers):
        counts.append(layers)
        assert len(model.model.layers) == layers == model.config.num_hidden_layers
        if layers == repeated_layers.TRACED_LAYERS:
            raise RuntimeError("trace failed")
        return "whole"

    assert repeated_layers.decomposed_step(model, LAYERS, trace) == "whole"
    assert counts == [repeated_layers.TRACED_LAYERS, LAYERS]
    assert len(model.model.layers) == LAYERS and model.config.num_hidden_layers == LAYERS
    assert [type(layer).__name__ for layer in model.model.layers] == ["LlamaDecoderLayer"] * 6


def _generator_with_copies(model, layers: int, monkeypatch):
    """``compile_generator(model)``, asserting that it copied layers up to ``layers``."""
    import anyshape

    copied = []
    program = repeated_layers._Copier.program
    monkeypatch.setattr(repeated_layers._Copier, "program",
                        lambda self: copied.append(self.layers) or program(self))
    generator = anyshape.compile_generator(model, cache=False)  # a patched compile: no cache
    assert copied == [layers]
    return generator


@pytest.mark.builds_after_export
def test_a_generator_with_copied_layers_generates_as_hf(monkeypatch):
    """The copied program compiled and run: greedy tokens equal HF's ``generate``
    on a left-padded batch of odd lengths (GPT-2: a tied head, ``Conv1D``
    weights), with the copies made, not a whole trace."""
    model = _model("gpt2", n_layer=5, num_hidden_layers=5)
    generator = _generator_with_copies(model, 5, monkeypatch)
    generator_ids = torch.Generator().manual_seed(7)
    lengths = [1, 7, 17]
    ids = torch.randint(3, 256, (3, max(lengths)), generator=generator_ids)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        mask[row, max(lengths) - length:] = 1
        ids[row, :max(lengths) - length] = 0
    expected, ours = hf_and_ours(model, generator, ids, mask, max_new_tokens=24, do_sample=False,
                                 pad_token_id=0)
    assert torch.equal(ours, expected)


def _encoder_decoder(model_type: str, **overrides):
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    config = AutoConfig.for_model(model_type)
    for key, value in {**dict(d_model=64, encoder_layers=2, decoder_layers=LAYERS,
                              encoder_attention_heads=4, decoder_attention_heads=4,
                              encoder_ffn_dim=128, decoder_ffn_dim=128, d_kv=16, d_ff=128,
                              num_layers=LAYERS, num_decoder_layers=LAYERS, num_heads=4,
                              vocab_size=256), **overrides}.items():
        if hasattr(config, key):
            setattr(config, key, value)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoModelForSeq2SeqLM.from_config(config).eval()


# Two traces of a 6-layer decoder each, about 20 s: `make test`'s, not `make check`'s.
@pytest.mark.slow_without_build
@pytest.mark.parametrize("model_type", sweep(["t5"], ["bart"]))
def test_an_encoder_decoders_copied_decoder_layers_are_its_whole_trace(model_type):
    """The decoder step's own and cross-attention caches, two runs of inputs
    per layer; T5's first layer holds the position table the others read,
    and its weights' names are lowercased in their inputs' names."""
    from anyshape.generation import seq2seq

    model = _encoder_decoder(model_type)
    own, cross = seq2seq.probe_caches(model)
    _, states = seq2seq.export_encode(model)
    counts = []

    def trace(layers):
        counts.append(layers)
        return prepare_program(seq2seq.export_verify(model, own[:layers], cross[:layers], states))

    copied = repeated_layers.decomposed_step(model, LAYERS, trace,
                                             within=seq2seq.decoder_name(model),
                                             leading_inputs=4, cache_groups=2)
    assert counts == [repeated_layers.TRACED_LAYERS]  # copied, not traced whole
    _assert_same_program(copied, trace(LAYERS), sizes_by_symbol=True)


@pytest.mark.builds_after_export
def test_an_encoder_decoder_with_copied_layers_generates_as_hf(monkeypatch):
    """The copied decoder step compiled and run: greedy tokens equal HF's
    ``generate`` on a right-padded batch of odd source lengths (BART with 5
    decoder layers, its fifth copied), float64 deciding a near tie."""
    model = _encoder_decoder("bart", decoder_layers=5, init_std=0.5)
    generator = _generator_with_copies(model, 5, monkeypatch)
    lengths = [1, 7, 33]
    ids = torch.randint(3, 256, (len(lengths), max(lengths)),
                        generator=torch.Generator().manual_seed(5))
    mask = torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
        ids[row, length:] = model.config.pad_token_id
    expected, ours = hf_and_ours(model, generator, ids, mask, max_new_tokens=24, do_sample=False)
    assert torch.equal(ours, expected)
    assert len({tuple(row) for row in expected[:, 1:].tolist()}) == len(lengths), expected
