"""What `pipeline k8s render` is asked for (K8sSpec, validated once) and the names every manifest shares:
ports, probe paths, the /models mount, labels and API versions."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pipeline.core.errors import InvalidInputError
from pipeline.core.gpus import GpuSpec
from pipeline.core.versions import TRITON_IMAGE


HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
PORTS = {"http": HTTP_PORT, "grpc": GRPC_PORT, "metrics": METRICS_PORT}
READY_PATH, LIVE_PATH = "/v2/health/ready", "/v2/health/live"
MODEL_MOUNT = "/models"
RUN_AS = 1000  # the NGC Triton images' `triton-server` user
DRAIN_SECONDS = 15
ROLE_LABEL = "trtllm-pipeline/role"
PROFILE_LABEL = "trtllm-pipeline/profile-id"
LWS_API = "leaderworkerset.x-k8s.io/v1"
MONITORING_API = "monitoring.coreos.com/v1"
ModelStore = Literal["pvc", "image", "s3"]
Api = Literal["triton", "openai"]
Serving = Literal["ensemble", "llmapi", "openai"]  # what the pod runs: Triton on an engine, Triton LLM-API, trtllm-serve


class K8sSpec(BaseModel):
    """Everything `render_k8s` needs, validated once. Exactly one of profile_id / engine_dir."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    profile_id: str | None = None
    engine_dir: Path | None = None
    api: Api = Field("triton", description="triton, or openai (trtllm-serve; PyTorch-backend deployables only)")
    name: str | None = Field(None, description="resource name (default: triton-<model>-<id[:8]>, trtllm-serve-... for openai)")
    namespace: str = "default"
    replicas: int = Field(1, ge=1)
    min_replicas: int | None = Field(None, ge=1)
    max_replicas: int | None = Field(None, ge=1)
    model_store: ModelStore = "pvc"
    pvc_name: str | None = None
    s3_uri: str | None = None
    s3_secret: str = "model-store-s3"
    image: str | None = None
    bundle: Path | None = Field(None, description="a bundle rendered with --model-root /models (default: render one)")
    bundle_image: str | None = Field(None, description="pvc: the image built from the generated Dockerfile; a Job copies it into the claim")
    base_image: str | None = Field(None, description="FROM of the generated Dockerfile (default: the pinned Triton image)")
    hf_token_secret: str = "hf-token"
    gpus_per_node: int | None = Field(None, ge=1, le=64, description="GPUs per node (default: the GPU's, node_sized)")
    queue_ratio_target: float = Field(1.0, gt=0, description="HPA target of trtllm-serve (--api openai): queue time per unit of compute time")
    exit_timeout_s: int = Field(60, ge=1, description="tritonserver --exit-timeout-secs")
    startup_timeout_s: int | None = Field(None, ge=60)
    out: Path | None = None
    force: bool = False

    @model_validator(mode="after")
    def _check(self) -> "K8sSpec":
        if (self.profile_id is None) == (self.engine_dir is None):
            raise InvalidInputError("Give exactly one of --profile ID or --engine DIR.",
                                    hint="`pipeline k8s render --profile <id>` or `--engine build/<model>/engines/<id>`.")
        for what, value in (("--namespace", self.namespace), ("--name", self.name), ("--pvc-name", self.pvc_name),
                            ("--hf-token-secret", self.hf_token_secret), ("--s3-secret", self.s3_secret)):
            if value is not None and not _DNS_LABEL.match(value):
                raise InvalidInputError(f"{what} {value!r} is not a valid Kubernetes name.",
                                        hint="Use lowercase letters, digits and '-', starting with a letter, at most 63 characters.")
        if self.model_store == "s3":
            if not self.s3_uri or not re.match(r"^s3://[a-z0-9][a-z0-9.-]{1,62}(/\S*)?$", self.s3_uri):
                raise InvalidInputError(f"--model-store s3 needs --s3-uri s3://BUCKET/PREFIX (got {self.s3_uri!r}).",
                                        hint="Upload the rendered Triton repository and pass its S3 prefix.")
        elif self.s3_uri:
            raise InvalidInputError("--s3-uri is only used with --model-store s3.", hint="Add --model-store s3 or drop --s3-uri.")
        if self.model_store == "image" and not self.image:
            raise InvalidInputError("--model-store image needs --image: an image with the model repository at /models.",
                                    hint=f"Build FROM {TRITON_IMAGE} and COPY the rendered repository to /models.")
        if self.pvc_name and self.model_store != "pvc":
            raise InvalidInputError("--pvc-name is only used with --model-store pvc.", hint="Drop --pvc-name or use --model-store pvc.")
        if self.bundle_image and self.model_store != "pvc":
            raise InvalidInputError("--bundle-image is only used with --model-store pvc (the Job that fills the claim).",
                                    hint="With --model-store image, --image is the image built from the generated Dockerfile.")
        for what, value in (("--image", self.image), ("--bundle-image", self.bundle_image), ("--base-image", self.base_image)):
            if value is not None and not _IMAGE_REF.match(value):
                raise InvalidInputError(f"{what} {value!r} is not an image reference.",
                                        hint="e.g. registry.example.com/team/llm-models:2026-12-01")
        low, high = self.hpa_bounds
        if not low <= self.replicas <= high:
            raise InvalidInputError(
                f"--replicas {self.replicas} is outside the autoscaler's range {low}..{high}.",
                hint="Pick --min-replicas <= --replicas <= --max-replicas.")
        return self

    @property
    def hpa_bounds(self) -> tuple[int, int]:
        low = self.min_replicas if self.min_replicas is not None else self.replicas
        high = self.max_replicas if self.max_replicas is not None else max(low, self.replicas, 4)
        if low > high:
            raise InvalidInputError(f"--min-replicas {low} is larger than --max-replicas {high}.",
                                    hint="Swap them or raise --max-replicas.")
        return low, high

    def node_sized(self, gpu: GpuSpec) -> "K8sSpec":
        """This spec with --gpus-per-node filled in from the GPU's node where the user gave none."""
        return self if self.gpus_per_node else self.model_copy(update={"gpus_per_node": gpu.gpus_per_node})


_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_IMAGE_REF = re.compile(r"^[a-z0-9][a-z0-9._/:@-]*[a-zA-Z0-9_]$")
