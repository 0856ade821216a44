#!/usr/bin/env bash
# The stand-in for NVIDIA's base image, tagged with the Dockerfile's FROM name so the Dockerfile builds
# unchanged: nvcr.io/nvidia/tritonserver:<release>-trtllm-python-py3. NVIDIA's registry cannot be reached
# here, so the base is made the way their recipe makes their runtime image, with what it has and no more:
#
#   - system python3, python3-pip, python3-wheel, libpython3-dev, curl, git, wget, ca-certificates
#     (server r25.12 build.py:1379-1393 and 1455-1466; tensorrtllm_backend r25.12
#     dockerfile/Dockerfile.triton.trt_llm_backend:138-148). No python3-venv (so no ensurepip), no make,
#     and no setuptools (build.py:1288 uninstalls it); `virtualenv` and numpy<2 installed with pip
#     (build.py:1464-1465); PIP_BREAK_SYSTEM_PACKAGES=1 (build.py:934, Dockerfile.triton.trt_llm_backend:137).
#   - TensorRT-LLM 1.1.0's pinned Python packages system-wide (transformers 4.57.1, nvidia-modelopt 0.37,
#     accelerate; tests/conformance/trtllm-1.1-requirements.txt) with the CPU torch 2.13.0 in place of the CUDA one.
#   - a stand-in tensorrt_llm 1.1.0 distribution (tests/image/standin/tensorrt_llm: its metadata, trtllm-build
#     and trtllm-serve, which do at their interface what the real tools do, with no GPU runtime behind them).
#   - tritonserver from nvidia-pytriton where NVIDIA's is: /opt/tritonserver/{bin,lib,backends,caches}, on PATH
#     (build.py:1307), its libraries registered with ldconfig (build.py:1284), the Python backend's stub for
#     this Python in backends/python/, and a Python-based stand-in for the C++ `tensorrtllm` backend.
#   - a stand-in mpirun on PATH (NVIDIA's image carries OpenMPI).
#
# What it cannot prove: anything that needs a GPU, CUDA, TensorRT or NVIDIA's own binaries (engines,
# the C++ backend, the LLM API), and Ubuntu 24.04's Python 3.12 (Debian bookworm's is 3.11, the Python
# the CPU torch on this machine is built for).
#
#   tests/image/make_base.sh WORKDIR     (as root; buildah and debootstrap installed; STORAGE_DRIVER=vfs)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="${1:?usage: make_base.sh WORKDIR}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
release="$(python3 -c "import re;print(re.search(r'TRITON_RELEASE = \"(.+?)\"', open('$root/pipeline/core/versions.py').read())[1])")"
base="nvcr.io/nvidia/tritonserver:${release}-trtllm-python-py3"
mkdir -p "$work"

step() { printf '\n== %s (%s)\n' "$*" "$(date +%T)"; }

# the same inputs again: nothing to do (the base's label records their hash)
inputs=$(cat "$0" "$root/tests/conformance/trtllm-1.1-requirements.txt" $(find "$here/standin" -type f | sort) | sha256sum | cut -c1-16)
if [ "$(buildah inspect --type image --format '{{index .OCIv1.Config.Labels "com.example.stand-in.inputs"}}' "$base" 2> /dev/null)" = "$inputs" ]; then
    echo "$base: up to date (inputs $inputs)"
    exit 0
fi

if [ ! -f "$work/rootfs/.debootstrap-done" ]; then
    step "debootstrap bookworm"
    rm -rf "$work/rootfs"
    debootstrap --variant=minbase \
        --include=python3,python3-pip,python3-wheel,libpython3-dev,ca-certificates,curl,git,wget \
        bookworm "$work/rootfs" "$mirror" > "$work/debootstrap.log" 2>&1 \
        || { tail -20 "$work/debootstrap.log"; exit 1; }
    touch "$work/rootfs/.debootstrap-done"
fi

step "tritonserver from nvidia-pytriton"
wheels="$work/wheels"
mkdir -p "$wheels"
python3 -m pip download -q --no-deps --only-binary :all: -d "$wheels" 'nvidia-pytriton>=0.7,<0.8'
wheel="$(ls "$wheels"/nvidia_pytriton-*.whl | head -n 1)"
rm -rf "$work/pytriton" && mkdir -p "$work/pytriton"
python3 -m zipfile -e "$wheel" "$work/pytriton"
pyver="$(chroot "$work/rootfs" python3 -c 'import sys;print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"

step "the base container"
buildah rm base-standin > /dev/null 2>&1 || true
ctr="$(buildah from --name base-standin scratch)"
mnt="$(buildah mount "$ctr")"
cp -a "$work/rootfs/." "$mnt/"
rm -f "$mnt/.debootstrap-done"
# the network here re-signs TLS: the base trusts this machine's CA bundle, as pip in the build must
cp /etc/ssl/certs/ca-certificates.crt "$mnt/etc/ssl/certs/ca-certificates.crt"
printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > "$mnt/etc/pip.conf"
cp /etc/resolv.conf "$mnt/etc/resolv.conf"

triton="$mnt/opt/tritonserver"
mkdir -p "$triton/bin" "$triton/lib" "$triton/backends"
cp -a "$work/pytriton/pytriton/tritonserver/bin/tritonserver" "$triton/bin/"
cp -a "$work/pytriton/pytriton/tritonserver/backends/." "$triton/backends/"
cp -a "$work/pytriton/pytriton/tritonserver/caches" "$triton/"
cp -a "$work/pytriton/nvidia_pytriton.libs/." "$triton/lib/"
cp "$work/pytriton/pytriton/tritonserver/python_backend_stubs/$pyver/triton_python_backend_stub" "$triton/backends/python/"
mkdir -p "$triton/backends/tensorrtllm"
cp "$here/standin/tensorrtllm_backend/model.py" "$triton/backends/tensorrtllm/model.py"
chmod -R a+rX "$triton"
chmod a+x "$triton/bin/tritonserver" "$triton/backends/python/triton_python_backend_stub"
echo /opt/tritonserver/lib > "$mnt/etc/ld.so.conf.d/triton.conf"
mkdir -p "$mnt/opt/hpcx/ompi/bin"
install -m 0755 "$here/standin/bin/mpirun" "$mnt/opt/hpcx/ompi/bin/mpirun"
mkdir -p "$mnt/tmp/standin"
cp -a "$here/standin/tensorrt_llm" "$mnt/tmp/standin/"
buildah umount "$ctr" > /dev/null

buildah config \
    --env PATH=/opt/tritonserver/bin:/opt/hpcx/ompi/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env PIP_BREAK_SYSTEM_PACKAGES=1 \
    --env DEBIAN_FRONTEND=noninteractive \
    --env LD_LIBRARY_PATH=/opt/tritonserver/lib \
    --label com.example.stand-in="Debian bookworm made like ${base}; see tests/image/make_base.sh" \
    --label com.example.stand-in.inputs="$inputs" \
    "$ctr"

step "TensorRT-LLM 1.1.0's Python packages, system-wide"
pins=$(grep -v '^#' "$root/tests/conformance/trtllm-1.1-requirements.txt" | tr '\n' ' ')
buildah run --isolation chroot -v /opt/wheels:/opt/wheels:ro "$ctr" -- bash -euc "
    ldconfig
    pip3 install -q --no-cache-dir --find-links /opt/wheels torch==2.13.0
    pip3 install -q --no-cache-dir $pins 'numpy<2' virtualenv
    pip3 install -q --no-cache-dir /tmp/standin/tensorrt_llm
    rm -rf /tmp/standin /root/.cache
    pip3 uninstall -q -y setuptools 2> /dev/null || true
    # its files only: dpkg keeps python3-pip's dependency met, so apt still installs packages in the image
    rm -rf /usr/lib/python3/dist-packages/setuptools /usr/lib/python3/dist-packages/setuptools-*  \
           /usr/lib/python3/dist-packages/_distutils_hack /usr/lib/python3/dist-packages/distutils-precedence.pth
    python3 -c 'import setuptools' 2> /dev/null && { echo 'setuptools is still importable'; exit 1; } || true
    python3 -m venv /tmp/v > /dev/null 2>&1 && { echo 'python3 -m venv works: the base has ensurepip'; exit 1; } || true
    command -v make && { echo 'the base has make'; exit 1; } || true
    rm -rf /tmp/v
"
buildah commit -q --rm "$ctr" "$base" > /dev/null
echo "tagged $base"
