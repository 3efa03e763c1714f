# The README's two commands: `make demo` and `make test`. Each builds .venv from
# nothing when it is missing (or when pyproject.toml changed).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.anyshape-installed

.PHONY: test lit pytest demo bench bench-hoist-slices clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

test: lit pytest

lit: $(STAMP)
	$(VENV)/bin/lit -sv test

pytest: $(STAMP)
	$(PY) -m pytest -q test/python

demo: $(STAMP)
	$(PY) examples/roberta_demo.py

clean:
	rm -rf $(VENV) build *.egg-info test/*/Output

# Not a test: latency with and without anyshape-hoist-slices (several minutes).
bench-hoist-slices: $(STAMP)
	$(PY) bench/hoist_slices.py --runs 10
