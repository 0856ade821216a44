"""Getting the bundle into the model store the pods read at /models: the S3 sync init container, the
pvc wait init container and the Job that fills the claim from the bundle image. (The image store needs
nothing here: its image carries the bundle; pipeline/k8s/deploy.py writes its Dockerfile.)"""

from __future__ import annotations

from typing import Any

from pipeline.k8s.containers import pod_security, security
from pipeline.k8s.layout import Ctx
from pipeline.k8s.spec import MODEL_MOUNT
from pipeline.core.versions import TRITON_IMAGE


AWS_CLI_IMAGE = "docker.io/amazon/aws-cli:2.22.35"
"""Init container that copies the model repository from S3 (any S3-compatible store)."""
# A bundle is complete where its manifest.json names it: the fill Job copies that file last.
_HAS_BUNDLE = 'grep -q "\\"inputs_hash\\": \\"$3\\"" "$2/manifest.json" 2>/dev/null'
_SYNC_SH = f"""\
aws s3 sync --only-show-errors --no-progress "$1" "$2"
if ! {_HAS_BUNDLE}; then
  echo "$1 does not hold bundle $3 (upload it with: aws s3 sync <bundle dir> $1 --delete)" >&2
  exit 1
fi
"""
_WAIT_SH = f"""\
until {_HAS_BUNDLE}; do
  echo "waiting for bundle $3 in $2 (the fill Job copies it; see the k8s folder's DEPLOY.md)"
  sleep 10
done
"""
_FILL_SH = f"""\
set -eu
if {_HAS_BUNDLE}; then
  echo "bundle $3 is already in the claim"
  exit 0
fi
rm -f "$2/manifest.json"
find "$2" -mindepth 1 -maxdepth 1 ! -name lost+found -exec rm -rf {{}} +
cd "$1"
find . -mindepth 1 -maxdepth 1 ! -name manifest.json -exec cp -R {{}} "$2/" \\;
cp manifest.json "$2/manifest.json"
echo "bundle $3 copied into the claim"
"""


def _bundle_script(name: str, script: str, source: str, target: str, ctx: Ctx) -> list[str]:
    return ["/bin/sh", "-c", script, name, source, target, ctx.served.bundle_hash]


def fetch_container(ctx: Ctx) -> dict[str, Any]:
    """Init container: sync the bundle from S3 into the pod's models volume; fail unless it is complete."""
    secret = ctx.spec.s3_secret
    env = [{"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": True}}}
           for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL")]
    env.append({"name": "HOME", "value": "/tmp"})
    return {
        "name": "fetch-model-repository",
        "image": AWS_CLI_IMAGE,
        "command": _bundle_script("fetch-model-repository", _SYNC_SH, str(ctx.spec.s3_uri), MODEL_MOUNT, ctx),
        "env": env,
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        "securityContext": security(),
        "volumeMounts": [{"name": "models", "mountPath": MODEL_MOUNT}, {"name": "tmp", "mountPath": "/tmp"}],
    }


def wait_container(ctx: Ctx) -> dict[str, Any]:
    """Init container (pvc): start Triton only once the claim holds the complete bundle."""
    return {
        "name": "wait-for-bundle",
        "image": ctx.spec.image or TRITON_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": _bundle_script("wait-for-bundle", _WAIT_SH, "-", MODEL_MOUNT, ctx),
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": security(),
        "volumeMounts": [{"name": "models", "mountPath": MODEL_MOUNT, "readOnly": True}, {"name": "tmp", "mountPath": "/tmp"}],
    }


def fill_job(ctx: Ctx) -> dict[str, Any]:
    """Job (pvc): copy the bundle from the image built by the generated Dockerfile into the claim.
    Named after the bundle, so a new bundle is a new Job (a Job's pod template cannot change)."""
    claim = ctx.spec.pvc_name or f"{ctx.name}-models"
    meta = ctx.meta(f"{ctx.name}-fill-{ctx.served.bundle_hash[:10]}")
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {
        "backoffLimit": 3, "ttlSecondsAfterFinished": 7 * 24 * 3600,
        # labels of their own: the serving selectors (Deployment, Service, PDB, PodMonitor) must not match it
        "template": {"metadata": {"labels": {**ctx.labels, "app.kubernetes.io/name": "triton-bundle-fill",
                                             "app.kubernetes.io/component": "fill-models"}}, "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": pod_security(),
            "containers": [{
                "name": "fill-models",
                "image": ctx.spec.bundle_image,
                "imagePullPolicy": "IfNotPresent",
                "command": _bundle_script("fill-models", _FILL_SH, MODEL_MOUNT, "/target", ctx),
                "resources": {"requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
                "securityContext": security(),
                "volumeMounts": [{"name": "target", "mountPath": "/target"}, {"name": "tmp", "mountPath": "/tmp"}],
            }],
            "volumes": [{"name": "target", "persistentVolumeClaim": {"claimName": claim}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
        }},
    }}
