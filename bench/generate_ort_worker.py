"""ONNX Runtime's side of bench/generate.py, run by a Python with optimum-onnx.

optimum-onnx pins transformers < 4.58, so it lives in an environment of its
own (bench/README.md). Usage: ``generate_ort_worker.py MODEL_DIR ONNX_DIR
[causal|seq2seq]``: exports MODEL_DIR (a saved HF causal LM, or an
encoder-decoder) with optimum-onnx's ``text-generation-with-past`` (or
``text2text-generation-with-past``) task, loads it with
``ORTModelForCausalLM`` (``ORTModelForSeq2SeqLM``), prints ``{"ready": ...}``,
then answers each JSON line ``{"ids", "mask", "new"}`` on stdin with
``{"tokens": [[...]]}`` (the new tokens, greedy; after the decoder start
token for an encoder-decoder).
"""

import json
import os
import sys
import traceback


def main() -> int:
    model_dir, onnx_dir = sys.argv[1], sys.argv[2]
    seq2seq = len(sys.argv) > 3 and sys.argv[3] == "seq2seq"
    try:
        import onnxruntime
        import torch
        from optimum.exporters.onnx import main_export
        from optimum.onnxruntime import ORTModelForCausalLM, ORTModelForSeq2SeqLM

        task = "text2text-generation-with-past" if seq2seq else "text-generation-with-past"
        main_export(model_dir, output=onnx_dir, task=task, no_post_process=False)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = os.cpu_count() or 1
        kind = ORTModelForSeq2SeqLM if seq2seq else ORTModelForCausalLM
        model = kind.from_pretrained(onnx_dir, session_options=options, use_cache=True)
    except Exception:  # noqa: BLE001  reported to the benchmark
        print(json.dumps({"error": traceback.format_exc()[-2000:]}), flush=True)
        return 1
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            ids, mask = torch.tensor(request["ids"]), torch.tensor(request["mask"])
            out = model.generate(ids, attention_mask=mask, max_new_tokens=request["new"],
                                 min_new_tokens=request["new"], do_sample=False, pad_token_id=0)
            new = out[:, 1:] if seq2seq else out[:, ids.shape[1]:]
            print(json.dumps({"tokens": new.tolist()}), flush=True)
        except Exception:  # noqa: BLE001
            print(json.dumps({"error": traceback.format_exc()[-2000:]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
