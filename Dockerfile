# syntax=docker/dockerfile:1
# The pipeline inside the pinned NGC Triton + TensorRT-LLM image: engines are built and served by the
# same TensorRT / TensorRT-LLM they will run under (pipeline/core/versions.py pins the pairing).
#
#   docker build -t trtllm-pipeline:25.12 .                       (make image)
#   docker run --gpus all -e HF_TOKEN -v "$PWD/build:/workspace/build" trtllm-pipeline:25.12 \
#       make engine GPU=h100 MODEL=hf:meta-llama/Llama-3.1-8B-Instruct QUANT=fp8 GOAL=throughput
#   docker run -v "$PWD/build:/workspace/build" trtllm-pipeline:25.12 make bundle    (build/bundle: for /models)
#
# Artifacts land in /workspace/build (PIPELINE_BUILD_DIR below, which the Makefile honours; the VOLUME),
# so with the mount above in ./build on the host, which must be writable by uid 10001.
# No secret is baked in: HF_TOKEN (gated models) is passed at run time only.

ARG TRITON_RELEASE=25.12
FROM nvcr.io/nvidia/tritonserver:${TRITON_RELEASE}-trtllm-python-py3

ARG TRITON_RELEASE=25.12
ARG TRTLLM_VERSION=1.1.0

LABEL org.opencontainers.image.title="trtllm-pipeline" \
      org.opencontainers.image.description="HF checkpoint -> TensorRT-LLM engine -> Triton model repository -> smoke and latency gates" \
      com.nvidia.tritonserver.release="${TRITON_RELEASE}" \
      com.nvidia.tensorrt-llm.version="${TRTLLM_VERSION}"

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Refuse an image whose TensorRT-LLM is not the pinned one: engines only load under the version that built them.
RUN python3 -c "import importlib.metadata as m, sys; v = m.version('tensorrt_llm'); sys.exit(0 if v == '${TRTLLM_VERSION}' else f'tensorrt_llm {v} != pinned ${TRTLLM_VERSION}')" \
 && command -v trtllm-build && command -v tritonserver

# make: NVIDIA's runtime image has none (server r25.12 build.py:1379-1393 installs clang, curl, git, wget
# and python3-pip), and `docker run <image> make engine ...` is how this image is used. Not pinned: the
# version is whatever the base image's distribution carries.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends make \
 && rm -rf /var/lib/apt/lists/*

# The pipeline's own environment (transformers 5, ModelOpt 0.47). NVIDIA's image has no python3-venv
# (ensurepip), but it has virtualenv (build.py:1455-1466). --system-site-packages reuses the image's CUDA
# torch; the packages the pipeline pins differently shadow the image's only inside /opt/pipeline.
# The venv is NOT put on PATH: `python3` stays the image's, so every NVIDIA process (trtllm-build,
# trtllm-serve, mpirun, and the Python-backend stubs, which pick their interpreter from PATH) keeps
# TensorRT-LLM's own transformers 4.57.1; the pipeline strips its venv from what it starts
# (pipeline/core/tool_env.py) and adds it back only for the CPU reference runtime.
ENV PIPELINE_VENV=/opt/pipeline \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN python3 -m virtualenv --quiet --system-site-packages "${PIPELINE_VENV}"

WORKDIR /workspace/pipeline
COPY pyproject.toml README.md ./
COPY pipeline ./pipeline
COPY model_repo_templates ./model_repo_templates
COPY Makefile ./
RUN "${PIPELINE_VENV}/bin/pip" install --no-cache-dir . \
 && ln -s "${PIPELINE_VENV}/bin/pipeline" /usr/local/bin/pipeline \
 && pipeline --help > /dev/null \
 && touch /workspace/pipeline/.image-installed

RUN groupadd --gid 10001 pipeline \
 && useradd --uid 10001 --gid 10001 --create-home --shell /bin/bash pipeline \
 && mkdir -p /workspace/build \
 && chown -R pipeline:pipeline /workspace

ENV PIPELINE_BUILD_DIR=/workspace/build \
    HF_HOME=/workspace/.cache/huggingface

USER 10001:10001
# make's targets call the installed pipeline instead of creating a .venv (command-line overrides via MAKEFLAGS).
ENV MAKEFLAGS="PIPE=pipeline STAMP=/workspace/pipeline/.image-installed"
VOLUME ["/workspace/build"]
CMD ["pipeline", "doctor"]
