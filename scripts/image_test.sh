#!/usr/bin/env bash
# `make image-test`: build the Dockerfile for real, as users build it, on a stand-in for NVIDIA's base
# (tests/image/make_base.sh says what it is and what it cannot prove), then run tests/image/checks.sh
# inside the image as uid 10001. Needs root, buildah and debootstrap (`.ci/run` installs them with apt);
# no Docker daemon: buildah with the vfs storage driver and chroot isolation.
#
#   scripts/image_test.sh [build|check|all] [WORKDIR]   (default all, /var/tmp/trtllm-pipeline-image-test: outside
#                                                        the build context; keeps the root filesystem)
#
# `build` is the base and the image (mostly downloads and copies); `check` runs the checks inside it.
#
# IMAGE_TEST_PRUNE=1 (what .ci/run sets): keep only what `check` needs. The vfs driver stores every layer as a
# whole copy of the filesystem, so the image is squashed into one layer and the base image, its root filesystem
# and the wheels are deleted once it is built (~3 GB freed before `make test` runs; the next run makes the
# base again, minutes).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
phase=all
case "${1:-}" in build|check|all) phase=$1; shift ;; esac
work="$(mkdir -p "${1:-/var/tmp/trtllm-pipeline-image-test}" && cd "${1:-/var/tmp/trtllm-pipeline-image-test}" && pwd)"
export STORAGE_DRIVER="${STORAGE_DRIVER:-vfs}"
export BUILDAH_ISOLATION=chroot
started=$(date +%s)

missing=""
[ "$(id -u)" = 0 ] || missing="root "
for tool in buildah debootstrap; do command -v "$tool" > /dev/null || missing="$missing$tool "; done
if [ -n "$missing" ]; then
    echo "image-test needs: $missing(apt-get install buildah debootstrap, as root)" >&2
    exit 3
fi

release="$(python3 -c "import re;print(re.search(r'TRITON_RELEASE = \"(.+?)\"', open('$root/pipeline/core/versions.py').read())[1])")"
trtllm="$(python3 -c "import re;print(re.search(r'TRTLLM_VERSION = \"(.+?)\"', open('$root/pipeline/core/versions.py').read())[1])")"
image="trtllm-pipeline:$release"
base="nvcr.io/nvidia/tritonserver:${release}-trtllm-python-py3"  # the Dockerfile's FROM (tests/image/make_base.sh tags it)
prune="${IMAGE_TEST_PRUNE:-0}"

if [ "$phase" != check ]; then
    "$root/tests/image/make_base.sh" "$work"

    # Every build re-tags $image and leaves the previous one dangling: 2.7 GB a run under vfs, which filled a
    # CI machine's disk after ~25 runs. Drop the earlier builds (tagged or dangling) before building again.
    earlier="$(buildah images -q --filter "label=org.opencontainers.image.title=trtllm-pipeline" 2> /dev/null | sort -u)"
    if [ -n "$earlier" ]; then
        printf '\n== dropping %s earlier trtllm-pipeline image(s)\n' "$(echo "$earlier" | wc -l)"
        buildah rmi -f $earlier > /dev/null
    fi

    printf '\n== buildah bud (%s)\n' "$(date +%T)"
    squash=()
    if [ "$prune" = 1 ]; then squash=(--squash); fi
    buildah bud --format docker --isolation chroot --layers=false --pull=never -q "${squash[@]}" \
        --build-arg "TRITON_RELEASE=$release" --build-arg "TRTLLM_VERSION=$trtllm" \
        -f "$root/Dockerfile" -t "$image" "$root" > "$work/bud.log" 2>&1 \
        || { tail -n 40 "$work/bud.log"; [ "$prune" = 1 ] && buildah rmi "$base" > /dev/null 2>&1; exit 1; }
    if [ "$prune" = 1 ]; then
        buildah rmi "$base" > /dev/null
        rm -rf "$work/rootfs" "$work/pytriton" "$work/wheels"
    fi
fi
[ "$phase" = build ] && { echo "image-test build: $image in $(($(date +%s) - started)) s"; exit 0; }

printf '\n== checks inside %s (%s)\n' "$image" "$(date +%T)"
check="$work/check"
rm -rf "$check" && mkdir -p "$check/out"
cp "$root/tests/image/checks.sh" "$root/tests/image/make_tiny_model.py" "$check/"
install -m 0755 "$root/tests/image/standin/bin/nvidia-smi" "$check/nvidia-smi"
chown -R 10001:10001 "$check/out"
buildah rm image-test > /dev/null 2>&1 || true
buildah from -q --pull=never --name image-test "$image" > /dev/null
status=0
buildah run --isolation chroot --user 10001:10001 \
    -v "$check:/check" -v "$check/nvidia-smi:/usr/bin/nvidia-smi:ro" \
    image-test -- bash /check/checks.sh || status=$?
buildah rm image-test > /dev/null
echo "image-test: $((($(date +%s) - started) / 60)) min $((($(date +%s) - started) % 60)) s; logs in $check/out"
exit $status
