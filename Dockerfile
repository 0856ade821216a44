# syntax=docker/dockerfile:1
# The pipeline inside the pinned NGC Triton + TensorRT-LLM image: engines are built and served by the
# same TensorRT / TensorRT-LLM they will run under (pipeline/versions.py pins the pairing).
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

# The pipeline's own environment. --system-site-packages reuses the image's CUDA torch; packages the
# pipeline pins differently (transformers, nvidia-modelopt) shadow the image's only inside this venv,
# while trtllm-build keeps running under the image's own python3 and its own packages.
ENV VIRTUAL_ENV=/opt/pipeline \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN python3 -m venv --system-site-packages "${VIRTUAL_ENV}"

WORKDIR /workspace/pipeline
COPY pyproject.toml README.md ./
COPY pipeline ./pipeline
COPY model_repo_templates ./model_repo_templates
COPY Makefile ./
RUN "${VIRTUAL_ENV}/bin/pip" install --no-cache-dir . \
 && "${VIRTUAL_ENV}/bin/pipeline" --help > /dev/null \
 && touch /workspace/pipeline/.image-installed

RUN groupadd --gid 10001 pipeline \
 && useradd --uid 10001 --gid 10001 --create-home --shell /bin/bash pipeline \
 && mkdir -p /workspace/build \
 && chown -R pipeline:pipeline /workspace

# tritonserver and trtllm-build stay on the image's PATH; the pipeline's venv comes first.
ENV PATH="${VIRTUAL_ENV}/bin:${PATH}" \
    PIPELINE_BUILD_DIR=/workspace/build \
    HF_HOME=/workspace/.cache/huggingface

USER 10001:10001
# make's targets call the installed pipeline instead of creating a .venv (command-line overrides via MAKEFLAGS).
ENV MAKEFLAGS="PIPE=pipeline STAMP=/workspace/pipeline/.image-installed"
VOLUME ["/workspace/build"]
CMD ["pipeline", "doctor"]
