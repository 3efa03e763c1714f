# The README's two commands: `make demo` and `make test`. Each builds .venv from
# nothing when it is missing (or when pyproject.toml or constraints.txt changed),
# every package at the version constraints.txt pins.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.anyshape-installed
BENCH_STAMP := $(VENV)/.anyshape-bench-installed
BENCH_ARGS ?=
# pytest-xdist workers for make test and make check: one per core, at most 4
# (each IREE build is itself threaded; more would only compete for memory).
# Modules stay whole on one worker (--dist loadscope), with their fixtures.
PYTEST_WORKERS ?= auto
XDIST := -n $(PYTEST_WORKERS) --maxprocesses=4 --dist loadscope

.PHONY: test test-full check check-pytest check-fuzz lit pytest docs demo gpu-check bench bench-quantized bench-kernels bench-sweep bench-steps bench-served bench-continuous-batching bench-serve bench-serve-embeddings bench-hoist-slices bench-generate zoo family-sweep fuzz coverage opt-compat clean

# PIP_CONSTRAINT, not only -c: it also pins what pip installs to build anyshape
# itself (setuptools, in pip's isolated build environment).
PIP_INSTALL := PIP_CONSTRAINT=$(CURDIR)/constraints.txt $(PY) -m pip install --quiet

$(STAMP): pyproject.toml setup.py constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --upgrade pip
	$(PIP_INSTALL) -e '.[test]'
	touch $(STAMP)

# The bench extra on top of the test one (rebuilt whenever $(STAMP) is).
$(BENCH_STAMP): $(STAMP)
	$(PIP_INSTALL) -e '.[test,bench]'
	touch $(BENCH_STAMP)

test: lit pytest

# make test with every case of each sweep (test/python/extent.py): more random
# program bundles, fuzz seeds and OpInfos, more families of a behaviour make test
# already covers (docs/testing.md, "The quick and the full extent").
test-full:
	ANYSHAPE_TEST_EXTENT=full $(MAKE) test

# The loop to run while editing (docs/testing.md): lit, every pytest that needs
# no IREE build (ANYSHAPE_NO_BUILD=1 skips a test where it would first build, and
# those marked builds_in_subprocess), and two fuzz seeds with their builds.
check: lit check-pytest check-fuzz

check-pytest: $(STAMP)
	ANYSHAPE_NO_BUILD=1 $(PY) -m pytest -q $(XDIST) test/python --ignore=test/python/test_fuzz.py --durations=10

check-fuzz: $(STAMP)
	ANYSHAPE_FUZZ_COUNT=2 $(PY) -m pytest -q test/python/test_fuzz.py -k keeps_program_exact

lit: $(STAMP)
	$(VENV)/bin/lit -sv test

pytest: $(STAMP)
	$(PY) -m pytest -q $(XDIST) test/python --durations=20

demo: $(STAMP)
	$(PY) examples/roberta_demo.py

# docs/passes.md from the passes' docstrings and docs/workarounds.md from the
# modules' WORKAROUNDS (test_docs.py fails when either is stale).
docs: $(STAMP)
	$(PY) tools/dev/gen_pass_docs.py
	$(PY) tools/dev/gen_workarounds_doc.py

clean:
	rm -rf $(VENV) build *.egg-info test/*/Output

# Not a test: the product kernel's object, as modules link it, timed on
# roberta-base's products at rows 1..192, 2 threads then 1 (bench/kernels/; a
# few minutes). E.g. make bench-kernels KERNEL_BENCH_ARGS='--isa avx2 --rows 16 17'
KERNEL_BENCH_ARGS ?=
bench-kernels: $(STAMP)
	$(PY) bench/kernels/run.py $(KERNEL_BENCH_ARGS)

# Not a test: latency with and without anyshape-hoist-slices (several minutes).
bench-hoist-slices: $(STAMP)
	$(PY) bench/hoist_slices.py --runs 10

# Not a test: anyshape against IREE static, eager, inductor and onnxruntime, both
# models, batch 1 and 8, L 16..512 (long: hours on 2 cores). Results in
# bench/results/compare.{md,json,png}. Then, on the CPU (not with --target cuda),
# the length sweep and the served workload below. A smoke test of the script:
#   make bench BENCH_ARGS='--tiny --lengths 16 32 --batches 1 --out /tmp/compare-tiny'
# Generation against its peers (bench/generate.py). ONNX Runtime runs on
# optimum-onnx's with-past export, and optimum-onnx pins transformers < 4.58:
# it gets an environment of its own, driven by bench/generate_ort_worker.py.
ORT_VENV := .venv-ort
ORT_STAMP := $(ORT_VENV)/.installed
$(ORT_STAMP):
	test -x $(ORT_VENV)/bin/python || $(PYTHON) -m venv $(ORT_VENV)
	$(ORT_VENV)/bin/pip install --quiet torch==2.13.0 transformers==4.57.6 optimum==2.1.0 \
		optimum-onnx==0.1.0 onnxruntime==1.32.0 onnx==1.23.2 onnx-ir==1.1.0 \
		sentence-transformers==5.1.2 huggingface-hub==0.36.2 tokenizers==0.22.2
	touch $(ORT_STAMP)

bench-generate: $(BENCH_STAMP) $(ORT_STAMP)
	$(PY) bench/generate.py --ort-python $(ORT_VENV)/bin/python $(BENCH_ARGS)

# llama.cpp for the quantized generation benchmark (docs/quantized-weights.md):
# llama-cpp-python built from its PyPI source for this CPU (about 15 minutes
# on 2 cores), and the converter its source vendors (convert_hf_to_gguf.py,
# beside which bench/generate_llama_worker.py looks for it).
LLAMA_VENV := .venv-llama
LLAMA_STAMP := $(LLAMA_VENV)/.installed
LLAMA_CPP_PYTHON := 0.3.36
$(LLAMA_STAMP):
	test -x $(LLAMA_VENV)/bin/python || $(PYTHON) -m venv $(LLAMA_VENV)
	$(LLAMA_VENV)/bin/pip download --quiet --no-deps --no-binary :all: \
		llama-cpp-python==$(LLAMA_CPP_PYTHON) -d $(LLAMA_VENV)/sdist
	CMAKE_ARGS="-DGGML_NATIVE=ON" $(LLAMA_VENV)/bin/pip install --quiet \
		$(LLAMA_VENV)/sdist/llama_cpp_python-$(LLAMA_CPP_PYTHON).tar.gz torch==2.13.0 \
		transformers==5.23.0 sentencepiece numpy
	rm -rf $(LLAMA_VENV)/llama.cpp && mkdir -p $(LLAMA_VENV)/llama.cpp
	tar xzf $(LLAMA_VENV)/sdist/llama_cpp_python-$(LLAMA_CPP_PYTHON).tar.gz \
		-C $(LLAMA_VENV)/llama.cpp --strip-components=3 \
		llama_cpp_python-$(LLAMA_CPP_PYTHON)/vendor/llama.cpp/convert_hf_to_gguf.py \
		llama_cpp_python-$(LLAMA_CPP_PYTHON)/vendor/llama.cpp/conversion \
		llama_cpp_python-$(LLAMA_CPP_PYTHON)/vendor/llama.cpp/gguf-py
	touch $(LLAMA_STAMP)

# anyshape's int8 and int4 weights against CTranslate2's, ONNX Runtime's and
# llama.cpp's, and their accuracy (bench/quantized_accuracy.py).
QUANTIZED_SYSTEMS := anyshape,anyshape-int8,anyshape-int8-i16,anyshape-int4,anyshape-int4-i8,ct2-int8,ct2-int8_float32,ort-int8,ort-int4,llama.cpp-q8_0,llama.cpp-q4_0,eager
bench-quantized: $(BENCH_STAMP) $(LLAMA_STAMP) $(ORT_STAMP)
	$(PY) bench/generate.py --models gpt2,qwen2 --systems $(QUANTIZED_SYSTEMS) --interleave \
		--llama-python $(LLAMA_VENV)/bin/python --ort-python $(ORT_VENV)/bin/python \
		--out bench/results/quantized $(BENCH_ARGS)
	$(PY) bench/quantized_accuracy.py --out bench/results/quantized

bench: $(BENCH_STAMP)
	$(PY) bench/compare.py $(BENCH_ARGS)
	$(if $(findstring --target,$(BENCH_ARGS)),,$(MAKE) bench-sweep bench-served)

# Not a test: what the GPU check (bench/gpu_check.sh) carries to a GPU machine, built
# here without one (a few minutes): gpu/artifacts (roberta-base and GPT-2 small in
# float32 and float16, GPT-2's generator; for sm_90, weights left out), gpu/wheels
# (iree-base-runtime for the GPU machine's Python, GPU_PYTHON) and gpu/run.sh. There,
# from the repository root with gpu/ carried: bash gpu/run.sh (bench/README.md).
GPU_DIR := gpu
GPU_PYTHON ?= 3.12
GPU_ARCH ?= sm_90
gpu-check: $(BENCH_STAMP)
	rm -rf $(GPU_DIR) && mkdir -p $(GPU_DIR)
	$(PY) bench/cuda.py compile --out $(GPU_DIR)/artifacts --models roberta gpt2 \
		--dtypes float32 float16 --cuda-arch $(GPU_ARCH) --generator
	$(PY) -m pip download --quiet --no-deps --only-binary=:all: --python-version $(GPU_PYTHON) \
		--implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
		--platform manylinux2014_x86_64 -d $(GPU_DIR)/wheels \
		iree-base-runtime==$$(grep '^iree-base-runtime==' constraints.txt | cut -d= -f3)
	cp bench/gpu_check.sh $(GPU_DIR)/run.sh
	du -sh $(GPU_DIR)

# Not a test: roberta-base at every L from 1 to 160 and by 32 to 512, batch 1 and 8,
# anyshape against onnxruntime, eager, inductor and IREE static at a few L (about
# an hour and a half on 2 cores). Writes bench/results/sweep.{md,json,png}.
#   make bench-sweep SWEEP_ARGS='--tiny --lengths 1 2 17 --static-lengths 17 --out /tmp/sweep-tiny'
SWEEP_ARGS ?=
bench-sweep: $(BENCH_STAMP)
	$(PY) bench/sweep.py $(SWEEP_ARGS)

# Not a test: the step from L to L + 1, each pair of lengths timed in alternation,
# anyshape against onnxruntime (L 1 to 40 by default, about 4 minutes). Writes
# bench/results/steps/steps.{md,json}.
#   make bench-steps STEPS_ARGS='--tiny --lengths 1 12 --rounds 6 --out /tmp/steps-tiny'
STEPS_ARGS ?=
bench-steps: $(BENCH_STAMP)
	$(PY) bench/steps.py $(STEPS_ARGS)

# Not a test: 300 requests of long-tailed lengths, one at a time and in padded
# groups of 8, requests/s per system (about 10 minutes). Writes bench/results/served.{md,json}.
SERVED_ARGS ?=
bench-served: $(BENCH_STAMP)
	$(PY) bench/served.py $(SERVED_ARGS)

# Not a test: generation requests arriving in real time (Poisson, 1, 2 and 4 per second)
# on GPT-2 small, served by anyshape.Scheduler, by static batches of 8 and one at a time:
# tokens/s, time to first token, time between tokens (about 10 minutes).
# Writes bench/results/continuous-batching/.
CONTINUOUS_ARGS ?=
bench-continuous-batching: $(STAMP)
	$(PY) bench/continuous_batching.py $(CONTINUOUS_ARGS)

# llama.cpp's own server (llama-server: parallel slots, continuous batching) for
# bench/serve.py, built from the same sdist's llama.cpp (about 10 minutes on 2 cores).
LLAMA_SERVER := $(LLAMA_VENV)/llama-server-build/bin/llama-server
$(LLAMA_SERVER): $(LLAMA_STAMP)
	rm -rf $(LLAMA_VENV)/llama-server-src && mkdir -p $(LLAMA_VENV)/llama-server-src
	tar xzf $(LLAMA_VENV)/sdist/llama_cpp_python-$(LLAMA_CPP_PYTHON).tar.gz \
		-C $(LLAMA_VENV)/llama-server-src --strip-components=3 \
		llama_cpp_python-$(LLAMA_CPP_PYTHON)/vendor/llama.cpp
	cmake -S $(LLAMA_VENV)/llama-server-src -B $(LLAMA_VENV)/llama-server-build \
		-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
		-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON
	cmake --build $(LLAMA_VENV)/llama-server-build --target llama-server -j2

# Not a test: completions over HTTP on 127.0.0.1, requests arriving in real time
# (Poisson, 1, 2 and 4 per second) on GPT-2 small: anyshape-serve, static batches of 8
# (anyshape's and HF eager's) and one at a time behind the same front, and llama.cpp's
# server (about 25 minutes). Writes bench/results/serve/.
SERVE_ARGS ?=
bench-serve: $(STAMP) $(LLAMA_STAMP) $(LLAMA_SERVER)
	$(PY) bench/serve.py --llama-server $(LLAMA_SERVER) --llama-python $(LLAMA_VENV)/bin/python \
		$(SERVE_ARGS)

# Not a test: all-MiniLM-L6-v2's sentence embeddings over HTTP (anyshape-serve), requests
# of 1 and 8 real sentences from 16 clients, against sentence-transformers' encode with its
# torch and ONNX Runtime backends (about 10 minutes). Writes bench/results/serve-embeddings/.
bench-serve-embeddings: $(STAMP) $(ORT_STAMP)
	$(PY) bench/serve_embeddings.py --st-python $(ORT_VENV)/bin/python $(SERVE_ARGS)

# Not a test: every HuggingFace family at its default size, compiled once (dynamic
# batch and sequence), max error and latency against eager at L = 128 (tens of
# minutes on 2 cores). Writes bench/results/zoo.md.
zoo: $(STAMP)
	$(PY) bench/zoo.py

# Not a test: every causal-LM and encoder family transformers builds from a small
# config, each in a fresh process, compiled once (unbounded dynamic batch and
# sequence) and checked against eager float32 (and float64 where they disagree)
# at odd lengths, batch > 1 and padding (about an hour on 2 cores). Writes
# bench/results/family_sweep.{md,json}.
#   make family-sweep FAMILY_SWEEP_ARGS='--families bloom llama bert --out /tmp/sweep'
FAMILY_SWEEP_ARGS ?=
family-sweep: $(STAMP)
	$(PY) bench/family_sweep.py $(FAMILY_SWEEP_ARGS)

# Not a test: torch-mlir's own lit tests (test/ of a torch-mlir checkout outside this
# repository) with torch-mlir-opt, then with anyshape-opt in its place; fails when a
# test that passes with the reference does not with anyshape-opt (a few minutes).
#   git clone https://github.com/llvm/torch-mlir /tmp/torch-mlir
#   make opt-compat TORCH_MLIR_SRC=/tmp/torch-mlir
TORCH_MLIR_SRC ?=
opt-compat: $(STAMP)
	@test -n "$(TORCH_MLIR_SRC)" || { echo "usage: make opt-compat TORCH_MLIR_SRC=<a torch-mlir checkout>"; exit 2; }
	$(PY) tools/dev/opt-compat/run.py $(TORCH_MLIR_SRC)

# Random torch programs (shape queries, aranges, broadcasts, slices) through the
# default passes and anyshape.check: 500 of them (about half an hour on 2
# cores); `make test` runs the first 100.
fuzz: $(STAMP)
	ANYSHAPE_FUZZ_COUNT=500 $(PY) -m pytest -q test/python/test_fuzz.py

# Not a test: the floor on PyTorch's whole OpInfo database (every OpInfo, float32
# and int64, two samples each: 2,128 cases, about 30 minutes on 2 cores) through
# anyshape and the plain stack (torch.export + torch-mlir's importer + IREE with
# anyshape's flags, no anyshape passes). Writes bench/results/opinfo.{jsonl,md}.
# Smaller: make coverage COVERAGE_ARGS='--ops "nn.functional.*" --max-samples-per-op 1'
COVERAGE_ARGS ?=
coverage: $(STAMP)
	$(PY) bench/coverage.py --out bench/results/opinfo.jsonl --summary bench/results/opinfo.md $(COVERAGE_ARGS)
