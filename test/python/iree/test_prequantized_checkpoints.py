"""Pre-quantized HF checkpoints (``frontend/prequantized.py``, issue 66):
GPTQ int4 and bitsandbytes int8 compile with their own codes.

The oracles are the quantizers' own libraries: a GPTQ checkpoint made by
GPTQModel, with GPTQModel's dequantized weights and HF ``generate`` tokens
recorded beside it (fixtures/make_gptq_checkpoint.py: GPTQModel needs
another torch, so it is no test dependency); and bitsandbytes, which the test
extra installs, run live: its ``Linear8bitLt`` layers and HF ``generate``.
"""

import json
import pathlib

import numpy as np
import pytest
import torch

import anyshape
from anyshape.frontend.prequantized import float_images
from anyshape.iree import quantized_weights as qw

FIXTURES = pathlib.Path(__file__).parents[1] / "fixtures"
GPTQ_PARTS = ("qweight", "qzeros", "scales", "g_idx")


def _llama(**overrides):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, pad_token_id=0,
                  bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(LlamaConfig(**{**config, **overrides})).eval()


# ---------------------------------------------------------------- exact codes

def _int4_image(rng, n, k, group):
    codes = rng.integers(-8, 8, (n, k)).astype(np.int8)
    scales = (rng.uniform(1e-3, 0.2, (n, k // group)) *
              rng.choice([-1, 1], (n, k // group))).astype(np.float16)
    image = codes.reshape(n, -1, group).astype(np.float32) * scales.astype(np.float32)[..., None]
    return image.reshape(n, k), codes, scales


@pytest.mark.parametrize("group", qw.GROUP_SIZES)
def test_an_int4_image_gives_codes_whose_values_are_it_exactly(group):
    """Codes times float16 scales, whichever code is a group's largest (7,
    -8, 1): the codes found give back the very same float32 values, in
    range; a zero group gets codes 0."""
    rng = np.random.default_rng(group)
    image, codes, _ = _int4_image(rng, 33, 4 * group, group)
    image[5, :group] = 0
    image[6, :group] = codes[6, :group].clip(0, 1) * np.float32(0.5)  # largest code 1
    fmt = qw.WeightFormat("int4", group)
    found = qw.exact_codes(image, fmt)
    assert found is not None
    q, scales = found
    assert q.min() >= -8 and q.max() <= 7 and scales.dtype == np.float16
    values = q.reshape(33, -1, group).astype(np.float32) * scales.astype(np.float32)[..., None]
    assert np.array_equal(values.reshape(image.shape), image)
    assert not q[5, :group].any()


def test_a_float_weight_is_no_image_of_codes():
    """Weights never quantized (normal floats), or quantized in groups of
    another size: no codes, in int4 and int8 alike."""
    rng = np.random.default_rng(1)
    floats = rng.standard_normal((16, 128)).astype(np.float32)
    assert qw.exact_codes(floats, qw.WeightFormat("int4", 32)) is None
    assert qw.exact_codes(floats, qw.WeightFormat("int8")) is None
    in_64s, _, _ = _int4_image(rng, 16, 128, 64)
    assert qw.exact_codes(in_64s, qw.WeightFormat("int4", 128)) is None


def test_an_int8_image_gives_its_codes_and_its_scale():
    """int8 codes (a row's largest 127, as bitsandbytes' are) times a float32
    scale: the same codes, the scale within float32 rounding."""
    rng = np.random.default_rng(2)
    codes = rng.integers(-127, 128, (24, 96)).astype(np.int8)
    codes[:, 7] = 127
    scale = rng.uniform(1e-3, 4, 24).astype(np.float32) / 127
    q, found = qw.exact_codes(codes.astype(np.float32) * scale[:, None], qw.WeightFormat("int8"))
    assert np.array_equal(q, codes)
    np.testing.assert_allclose(found, scale, rtol=2 ** -22)


# ---------------------------------------------------------------- GPTQ

class GPTQLayer(torch.nn.Module):
    """A linear layer as GPTQModel's loaded model holds it, from the fixture:
    its packed tensors and the attributes GPTQModel's layers have."""

    def __init__(self, tensors: dict, prefix: str, group_size: int):
        super().__init__()
        for part in GPTQ_PARTS:
            self.register_buffer(part, tensors[f"{prefix}.{part}"].clone())
        self.bits, self.group_size, self.bias = 4, group_size, None


def _gptq_model():
    """The fixture's model: a Llama whose linear layers are GPTQ layers, its
    config GPTQModel's, and the recorded oracle."""
    from safetensors.torch import load_file

    described = json.loads((FIXTURES / "gptq_llama.json").read_text())
    tensors = load_file(FIXTURES / "gptq_llama.safetensors")
    model = _llama(**{k: described["config"][k] for k in ("vocab_size", "hidden_size",
                                                          "intermediate_size")})
    quantization = described["quantization_config"]
    for name, module in list(model.named_modules()):
        for child_name, _ in list(module.named_children()):
            full = f"{name}.{child_name}".lstrip(".")
            if f"{full}.qweight" in tensors:
                setattr(module, child_name, GPTQLayer(tensors, full, quantization["group_size"]))
    plain = {k: v for k, v in tensors.items()
             if not k.startswith("oracle.") and k.rsplit(".", 1)[-1] not in GPTQ_PARTS}
    result = model.load_state_dict(plain, strict=False)
    assert not result.unexpected_keys
    assert all(k.rsplit(".", 1)[-1] in GPTQ_PARTS for k in result.missing_keys)
    model.config.quantization_config = dict(quantization)
    oracle = {k[len("oracle."):]: v for k, v in tensors.items() if k.startswith("oracle.")}
    return model, oracle


def test_gptq_layers_read_as_gptqmodel_dequantizes_them():
    """Each GPTQ layer's float32 image (what the export sees) is GPTQModel's
    own dequantized weight, which it computes in float16: equal within its
    rounding. The layers are put back after."""
    model, oracle = _gptq_model()
    layers = {name: module for name, module in model.named_modules()
              if isinstance(module, GPTQLayer)}
    assert len(layers) == 2 * 7
    with float_images(model) as checkpoint:
        assert (checkpoint.method, checkpoint.weights, checkpoint.group_size) == \
            ("gptq", "int4", 32)
        for name in layers:
            image = model.get_submodule(name)
            assert isinstance(image, torch.nn.Linear) and image.weight.dtype == torch.float32
            theirs = oracle[f"dequantized.{name}"].float().T
            torch.testing.assert_close(image.weight, theirs, rtol=2 ** -10, atol=1e-6)
            assert qw.exact_codes(image.weight.numpy(), qw.WeightFormat("int4", 32)) is not None
    assert all(model.get_submodule(name) is layer for name, layer in layers.items())


@pytest.mark.builds_after_export
def test_a_gptq_checkpoint_generates_as_gptqmodel_does():
    """compile_generator on the GPTQ model, nothing asked: int4 with the
    checkpoint's codes, the LM head and the embeddings (float in the
    checkpoint) kept float32; a left-padded batch of two generates HF's
    tokens with GPTQModel's layers, token for token."""
    model, oracle = _gptq_model()
    said = []
    generator = anyshape.compile_generator(model, progress=said.append)
    out = generator.generate(oracle["ids"], attention_mask=oracle["mask"], max_new_tokens=24,
                             do_sample=False)
    assert torch.equal(torch.as_tensor(out), oracle["generated"])
    assert generator.module.target.weights == "int4"
    assert generator.module.target.weights_from == "gptq"
    report = "\n".join(said)
    assert "kept float32" in report and "the gptq checkpoint kept it in float" in report


# ---------------------------------------------------------------- bitsandbytes

def _bitsandbytes_model(tmp_path):
    pytest.importorskip("bitsandbytes")
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    _llama().save_pretrained(tmp_path)
    return AutoModelForCausalLM.from_pretrained(
        tmp_path, quantization_config=BitsAndBytesConfig(load_in_8bit=True),
        dtype=torch.float32).eval()


def test_bitsandbytes_layers_read_as_their_codes_times_their_scales(tmp_path):
    """Each Linear8bitLt's image is its int8 codes times SCB / 127, which
    exact_codes turns back into those very codes."""
    model = _bitsandbytes_model(tmp_path)
    layers = {name: module for name, module in model.named_modules()
              if type(module).__name__ == "Linear8bitLt"}
    assert len(layers) == 2 * 7
    with float_images(model) as checkpoint:
        assert (checkpoint.method, checkpoint.weights) == ("bitsandbytes", "int8")
        for name, layer in layers.items():
            image = model.get_submodule(name).weight.numpy()
            q, scale = qw.exact_codes(image, qw.WeightFormat("int8"))
            assert np.array_equal(q, layer.weight.data.numpy())
            np.testing.assert_allclose(scale, layer.weight.SCB.numpy() / 127, rtol=2 ** -22)


@pytest.mark.builds_after_export
def test_a_bitsandbytes_int8_checkpoint_generates_as_bitsandbytes_does(tmp_path):
    """compile_generator on a model HF loaded with load_in_8bit: int8 with
    its codes; HF's generate with bitsandbytes' layers gives the same tokens
    on a left-padded batch."""
    model = _bitsandbytes_model(tmp_path)
    ids = torch.tensor([[1, 5, 7, 9, 11, 90, 3], [0, 0, 50, 17, 9, 44, 8]])
    mask = (torch.arange(7) >= torch.tensor([[0], [2]])).long()
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=mask, max_new_tokens=24, do_sample=False)
    generator = anyshape.compile_generator(model)
    out = generator.generate(ids, attention_mask=mask, max_new_tokens=24, do_sample=False)
    assert torch.equal(torch.as_tensor(out), expected)
    assert (generator.module.target.weights, generator.module.target.weights_from) == \
        ("int8", "bitsandbytes")


# ---------------------------------------------------------------- refusals

@pytest.mark.parametrize("quantization, message", [
    ({"quant_method": "awq", "bits": 4, "zero_point": True},
     r"a pre-quantized checkpoint of quant_method 'awq' \(its groups have zero points.*\), "
     r"which anyshape does not read; it reads GPTQ"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
     r"a bitsandbytes 4-bit checkpoint \(nf4\)"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 32, "sym": False},
     r"an asymmetric GPTQ checkpoint \(sym=False"),
    ({"quant_method": "gptq", "bits": 8, "group_size": 32, "sym": True},
     r"a 8-bit GPTQ checkpoint; anyshape reads 4-bit GPTQ"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 16, "sym": True},
     r"a GPTQ checkpoint in groups of 16; anyshape's int4 groups are 32, 64, 128"),
])
def test_a_format_anyshape_does_not_read_is_refused_naming_it(quantization, message):
    """Refused before the export, by compile and compile_generator alike."""
    model = _llama()
    model.config.quantization_config = quantization
    with pytest.raises(NotImplementedError, match=f"model: {message}"):
        anyshape.compile_generator(model)
    with pytest.raises(NotImplementedError, match=f"model: {message}"):
        anyshape.compile(model, (torch.randint(0, 96, (1, 5)),))


def test_act_order_gptq_groups_are_refused_naming_the_layer():
    """g_idx permuted (desc_act): the layer is named."""
    model, _ = _gptq_model()
    layer = model.model.layers[1].mlp.up_proj
    layer.g_idx = layer.g_idx.flip(0)
    model.config.quantization_config["desc_act"] = True
    with pytest.raises(NotImplementedError, match=r"model: model\.layers\.1\.mlp\.up_proj's GPTQ "
                                                  r"groups are permuted \(act-order, desc_act=True"):
        anyshape.compile_generator(model)
    assert model.model.layers[1].mlp.up_proj is layer


def test_another_format_asked_for_a_gptq_checkpoint_is_refused():
    model, _ = _gptq_model()
    with pytest.raises(ValueError, match=r"weights: the model is a gptq checkpoint of int4 "
                                         r"\(groups of 32\) weights, which it compiles with; got "
                                         r"weights='int8'"):
        anyshape.compile_generator(model, backend=anyshape.BackendOptions(weights="int8"))


def test_a_gptq_checkpoint_in_bfloat16_asks_for_float32():
    """GPTQ checkpoints load in half precision by default: the codes are read
    in float32, and the rest must be too, which the error says how to get."""
    model, _ = _gptq_model()
    model.model.norm.to(torch.bfloat16)
    with pytest.raises(ValueError, match=r"dtype: a gptq checkpoint computes in float32 from its "
                                         r"codes, and the model's other weights are "
                                         r"torch.bfloat16 \(LlamaRMSNorm.weight\); pass "
                                         r"dtype=torch.float32"):
        anyshape.compile_generator(model)
    with pytest.raises(ValueError, match=r"dtype: .* expected torch.float32 or None, got "
                                         r"torch.bfloat16"):
        anyshape.compile_generator(model, dtype=torch.bfloat16)
