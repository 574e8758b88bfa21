# sonic-hep: two commands set everything up on a fresh machine (see README.md)
#   make demo   install, generate sample events, run the MiniAOD workflow direct and through a local Triton server
#   make test   install everything the tests need (pip, and Slurm, g++, XRootD, h2load, Prometheus, HAProxy from apt when missing) and run the test suite
#   make docs   build the documentation site into build/site (mkdocs, strict: a broken link fails)
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# torch is only needed to retrain models: installed when this machine has a local CPU wheel (never a CUDA download)
TORCH_WHEEL = $(wildcard /opt/wheels/torch-2.13.0+cpu-*.whl)

.PHONY: demo test install install-test system-deps bench docs clean

# `sonic bench NAME` writes to build/bench-NAME (git-ignored), never beside the sources; docs/benchmarks.md
# holds the curated results

$(BIN)/python:
	@echo "== [1/2] creating the virtual environment $(VENV)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip

# not quiet: the first install downloads and builds for minutes, pip's lines show it is moving
install: $(BIN)/python
	@echo "== [2/2] installing sonic-hep and its generators extra into $(VENV) (a few minutes the first time)"
	$(BIN)/python -m pip install -e '.[generators]'

install-test: $(BIN)/python system-deps $(VENV)-numpy2/bin/python $(VENV)-tf/bin/python
	$(BIN)/python -m pip install -q -e '.[all]'
ifneq ($(TORCH_WHEEL),)
	$(BIN)/python -m pip install -q 'torch==2.13.0'
endif

# a server python with numpy 2 (as many machines now have), for the test that serves models from one
$(VENV)-numpy2/bin/python: $(BIN)/python
	$(BIN)/python -m venv $(VENV)-numpy2
	$(VENV)-numpy2/bin/python -m pip install -q 'numpy>=2,<3' onnxruntime

# a server python with tensorflow, for the test that serves tensorflow_* models (tensorflow-cpu 2.18 wants
# protobuf < 6, tritonclient protobuf 6: it cannot share $(VENV))
$(VENV)-tf/bin/python: $(BIN)/python
	$(BIN)/python -m venv $(VENV)-tf
	$(VENV)-tf/bin/python -m pip install -q 'tensorflow-cpu==2.18.*' 'numpy<2'

system-deps:
	./.ci/system-deps

demo: install
	@echo "== installed; running the demo"
	$(BIN)/sonic demo

test: install-test
	$(BIN)/python -m pytest -q -ra --durations=25

# the site goes to build/site (git-ignored); `$(BIN)/mkdocs serve` shows it while you edit
docs: $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
	@echo "== the site is in build/site (open build/site/index.html)"

bench: install
	$(BIN)/sonic bench framework --out build/bench-framework
	@echo "== results in build/bench-framework"

clean:
	rm -rf $(VENV) $(VENV)-numpy2 $(VENV)-tf *.egg-info .pytest_cache
