"""sentence-transformers' side of bench/serve_embeddings.py, run by a Python with
sentence-transformers (and optimum-onnx for its ONNX Runtime backend).

Usage: ``serve_embeddings_st_worker.py MODEL_DIR torch|onnx SENTENCES.json
REPEATS``. Loads the checkpoint with ``SentenceTransformer(MODEL_DIR,
backend=...)`` (the ONNX backend exports it through optimum first), encodes the
sentences once to warm up, then ``REPEATS`` times with ``encode``'s own
batching (32 a batch, sorted by length: its best configuration), and prints
``{"sentences_per_s": [...], "embeddings": [first 4 rows]}``.
"""

import json
import sys
import time


def main() -> int:
    model_dir, backend, sentences_path, repeats = sys.argv[1:5]
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(model_dir, device="cpu", backend=backend)
    sentences = json.load(open(sentences_path))
    model.encode(sentences, batch_size=32)
    rates = []
    for _ in range(int(repeats)):
        start = time.perf_counter()
        embeddings = model.encode(sentences, batch_size=32)
        rates.append(len(sentences) / (time.perf_counter() - start))
    print(json.dumps({"sentences_per_s": rates, "embeddings": embeddings[:4].tolist()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
