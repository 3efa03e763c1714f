"""ONNX Runtime's side of bench/generate.py, run by a Python with optimum-onnx.

optimum-onnx pins transformers < 4.58, so it lives in an environment of its
own (bench/README.md). Usage: ``generate_ort_worker.py MODEL_DIR ONNX_DIR``:
exports MODEL_DIR (a saved HF causal LM) with optimum-onnx's
``text-generation-with-past`` task, loads it with ``ORTModelForCausalLM``,
prints ``{"ready": ...}``, then answers each JSON line ``{"ids", "mask",
"new"}`` on stdin with ``{"tokens": [[...]]}`` (the new tokens, greedy).
"""

import json
import os
import sys
import traceback


def main() -> int:
    model_dir, onnx_dir = sys.argv[1], sys.argv[2]
    try:
        import onnxruntime
        import torch
        from optimum.exporters.onnx import main_export
        from optimum.onnxruntime import ORTModelForCausalLM

        main_export(model_dir, output=onnx_dir, task="text-generation-with-past",
                    no_post_process=False)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = os.cpu_count() or 1
        model = ORTModelForCausalLM.from_pretrained(onnx_dir, session_options=options,
                                                    use_cache=True)
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
            print(json.dumps({"tokens": out[:, ids.shape[1]:].tolist()}), flush=True)
        except Exception:  # noqa: BLE001
            print(json.dumps({"error": traceback.format_exc()[-2000:]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
