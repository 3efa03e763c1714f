"""llama.cpp's side of bench/generate.py, run by a Python with llama-cpp-python.

Usage: ``generate_llama_worker.py MODEL_DIR OUT_DIR q8_0|q4_0``. Converts
MODEL_DIR (a saved HF causal LM) to a float32 GGUF with llama.cpp's own
converter (``convert_hf_to_gguf.py`` from the llama-cpp-python sdist's
``vendor/llama.cpp``, found at ``$LLAMA_CPP_DIR``, by default
``<sys.prefix>/llama.cpp``: ``make bench-llama`` puts it there), quantizes it
with llama.cpp's ``llama_model_quantize``, loads it with ``llama_cpp.Llama``,
prints ``{"ready": ...}``, then answers each JSON line ``{"ids", "mask",
"new"}`` with ``{"tokens": [[...]]}`` (greedy; rows one after another, as
llama-cpp-python takes one sequence at a time).

The benchmark's tokenizer is a word-level one ("t<i>" is token i), whose
pre-tokenizer llama.cpp's converter does not know: it is declared GPT-2's,
with a merge llama.cpp asks for. Token ids go in and come out as they are,
so no text is ever tokenized.
"""

import json
import os
import sys
import traceback
from pathlib import Path

QUANT_TYPES = {"q8_0": 7, "q4_0": 2}  # llama.cpp's LLAMA_FTYPE_MOSTLY_Q8_0, _Q4_0


def convert(model_dir: str, out: Path) -> Path:
    converter_dir = Path(os.environ.get("LLAMA_CPP_DIR", Path(sys.prefix) / "llama.cpp"))
    if not (converter_dir / "convert_hf_to_gguf.py").is_file():
        raise FileNotFoundError(f"no convert_hf_to_gguf.py in {converter_dir} (set LLAMA_CPP_DIR "
                                f"to the sdist's vendor/llama.cpp)")
    sys.path.insert(0, str(converter_dir))
    import convert_hf_to_gguf
    from conversion.base import TextModel

    TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
    # llama.cpp refuses a GPT-2-style vocabulary without merges, and a
    # word-level tokenizer has none: one is added (never used, no text is
    # tokenized).
    set_vocab_gpt2 = TextModel._set_vocab_gpt2

    def with_a_merge(self):
        set_vocab_gpt2(self)
        self.gguf_writer.add_token_merges(["t 0"])

    TextModel._set_vocab_gpt2 = with_a_merge
    # The converter reads GPT-2's context length as n_ctx, which transformers
    # 5's GPT2Config no longer writes (it is n_positions).
    config_path = Path(model_dir) / "config.json"
    config = json.loads(config_path.read_text())
    if "n_positions" in config and "n_ctx" not in config:
        config["n_ctx"] = config["n_positions"]
        config_path.write_text(json.dumps(config))
    f32 = out / "model-f32.gguf"
    sys.argv = ["convert_hf_to_gguf.py", model_dir, "--outtype", "f32", "--outfile", str(f32)]
    convert_hf_to_gguf.main()
    return f32


def main() -> int:
    model_dir, out, quantization = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    try:
        import llama_cpp

        out.mkdir(parents=True, exist_ok=True)
        f32 = convert(model_dir, out)
        quantized = out / f"model-{quantization}.gguf"
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = QUANT_TYPES[quantization]
        params.nthread = os.cpu_count() or 1
        if llama_cpp.llama_model_quantize(str(f32).encode(), str(quantized).encode(),
                                          params) != 0:
            raise RuntimeError(f"llama_model_quantize to {quantization} failed")
        threads = os.cpu_count() or 1
        model = llama_cpp.Llama(str(quantized), n_ctx=1024, n_batch=512, n_threads=threads,
                                n_threads_batch=threads, verbose=bool(os.environ.get("LLAMA_VERBOSE")))
    except Exception:  # noqa: BLE001  reported to the benchmark
        print(json.dumps({"error": traceback.format_exc()[-2000:]}), flush=True)
        return 1
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            rows = []
            for ids, mask in zip(request["ids"], request["mask"]):
                prompt = [t for t, m in zip(ids, mask) if m]
                model.reset()
                new = []
                for token in model.generate(prompt, top_k=1, temp=0.0, reset=True):
                    new.append(int(token))
                    if len(new) == request["new"]:
                        break
                rows.append(new)
            print(json.dumps({"tokens": rows}), flush=True)
        except Exception:  # noqa: BLE001
            print(json.dumps({"error": traceback.format_exc()[-2000:]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
