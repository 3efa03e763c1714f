"""ONNX Runtime's side of bench/generate.py, run by a Python with optimum-onnx.

optimum-onnx pins transformers < 4.58, so it lives in an environment of its
own (bench/README.md). Usage: ``generate_ort_worker.py MODEL_DIR ONNX_DIR
[causal|seq2seq] [float32|int8|int4]``: exports MODEL_DIR (a saved HF causal
LM, or an encoder-decoder) with optimum-onnx's ``text-generation-with-past``
(or ``text2text-generation-with-past``) task, quantizes a causal LM's
export where asked (``quantized``), loads it with
``ORTModelForCausalLM`` (``ORTModelForSeq2SeqLM``), prints ``{"ready": ...}``,
then answers each JSON line ``{"ids", "mask", "new"}`` on stdin with
``{"tokens": [[...]]}`` (the new tokens, greedy; after the decoder start
token for an encoder-decoder).
"""

import json
import os
import sys
import traceback
from pathlib import Path


def gemms_as_matmuls(graph) -> None:
    """Each Gemm of ``graph`` whose B is a weight (an initializer), as
    MatMul and Add: ``MatMulNBitsQuantizer`` quantizes MatMul only, and
    GPT-2's ``Conv1D`` layers export as Gemm (onnxruntime-genai's model
    builder writes them as MatMul, for the same reason)."""
    from onnx import helper, numpy_helper

    weights = {init.name: init for init in graph.initializer}
    uses = {}
    for node in graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    nodes = []
    for node in graph.node:
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if (node.op_type != "Gemm" or node.input[1] not in weights or uses[node.input[1]] > 1
                or attributes.get("transA", 0) or attributes.get("alpha", 1.0) != 1.0
                or attributes.get("beta", 1.0) != 1.0):
            nodes.append(node)
            continue
        if attributes.get("transB", 0):
            weight = weights[node.input[1]]
            transposed = numpy_helper.to_array(weight).T.copy()
            weight.CopyFrom(numpy_helper.from_array(transposed, weight.name))
        product = node.output[0] + "_matmul" if len(node.input) > 2 else node.output[0]
        nodes.append(helper.make_node("MatMul", list(node.input[:2]), [product],
                                      name=node.name + "_matmul"))
        if len(node.input) > 2:
            nodes.append(helper.make_node("Add", [product, node.input[2]], list(node.output),
                                          name=node.name + "_bias"))
    del graph.node[:]
    graph.node.extend(nodes)


def quantized(onnx_dir: str, quantization: str) -> str:
    """The file name of the export's ``model.onnx`` quantized by onnxruntime's
    own quantizers, in the configuration their documentation gives for CPU
    decode (a quarter or an eighth of float32's bytes: one file, under
    protobuf's 2 GB, for the models measured):
    - int8: ``quantize_dynamic``, int8 weights with a scale per output
      channel, activations quantized per call (int8 products);
    - int4: ``MatMulNBitsQuantizer``, symmetric int4 weights in groups of 32
      along k, ``accuracy_level`` 4 (activations quantized to int8 for the
      products, the fastest CPU path). Gather (the embedding) stays float32.
    """
    from onnxruntime.quantization import QuantType, quant_utils, quantize_dynamic
    from onnxruntime.quantization import matmul_nbits_quantizer as nbits

    source = Path(onnx_dir) / "model.onnx"
    name = f"model_{quantization}.onnx"
    if quantization == "int8":
        quantize_dynamic(source, Path(onnx_dir) / name, weight_type=QuantType.QInt8,
                         per_channel=True, op_types_to_quantize=["MatMul", "Gemm"])
    elif quantization == "int4":
        config = nbits.DefaultWeightOnlyQuantConfig(
            block_size=32, is_symmetric=True, accuracy_level=4,
            quant_format=quant_utils.QuantFormat.QOperator, op_types_to_quantize=("MatMul",))
        model = quant_utils.load_model_with_shape_infer(source)
        gemms_as_matmuls(model.graph)
        quantizer = nbits.MatMulNBitsQuantizer(model, algo_config=config)
        quantizer.process()
        quantizer.model.save_model_to_file(str(Path(onnx_dir) / name), False)
    else:
        raise ValueError(f"quantization: expected float32, int8 or int4, got {quantization!r}")
    return name


def main() -> int:
    model_dir, onnx_dir = sys.argv[1], sys.argv[2]
    seq2seq = len(sys.argv) > 3 and sys.argv[3] == "seq2seq"
    quantization = sys.argv[4] if len(sys.argv) > 4 else "float32"
    try:
        import onnxruntime
        import torch
        from optimum.exporters.onnx import main_export
        from optimum.onnxruntime import ORTModelForCausalLM, ORTModelForSeq2SeqLM

        task = "text2text-generation-with-past" if seq2seq else "text-generation-with-past"
        main_export(model_dir, output=onnx_dir, task=task, no_post_process=False)
        file_name = "model.onnx"
        if quantization != "float32":
            if seq2seq:
                raise ValueError(f"{quantization}: only causal LMs' exports are quantized here")
            file_name = quantized(onnx_dir, quantization)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = os.cpu_count() or 1
        kind = ORTModelForSeq2SeqLM if seq2seq else ORTModelForCausalLM
        extra = {} if seq2seq else {"file_name": file_name}
        model = kind.from_pretrained(onnx_dir, session_options=options, use_cache=True, **extra)
    except Exception:  # noqa: BLE001  reported to the benchmark
        print(json.dumps({"error": traceback.format_exc()[-2000:]}), flush=True)
        return 1
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            ids, mask = torch.tensor(request["ids"]), torch.tensor(request["mask"])
            out = model.generate(ids, attention_mask=mask, max_new_tokens=request["new"],
                                 min_new_tokens=request["new"], do_sample=False, pad_token_id=0,
                                 num_beams=request.get("num_beams", 1))
            new = out[:, 1:] if seq2seq else out[:, ids.shape[1]:]
            print(json.dumps({"tokens": new.tolist()}), flush=True)
        except Exception:  # noqa: BLE001
            print(json.dumps({"error": traceback.format_exc()[-2000:]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
