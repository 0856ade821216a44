"""Build profiles: everything that decides an engine, with a content-hash id and a readable name."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.artifacts import short_hash
from pipeline.versions import TRTLLM_VERSION

Goal = Literal["latency", "throughput"]
Runtime = Literal["tensorrtllm", "reference"]


class BuildProfile(BaseModel):
    """Frozen and validated once; passed whole between build, render and k8s."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(description="model folder name under build/")
    model_revision: str = Field(description="hash of the source checkpoint (its manifest's inputs or files)")
    runtime: Runtime
    gpu: str = Field(description="GPU table key, or 'cpu' for the reference runtime")
    compute_capability: str | None = None
    quant: str = "fp16"
    kv_cache: str = "auto"
    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    goal: Goal = "latency"
    max_input_len: int = Field(1024, ge=1)
    max_seq_len: int = Field(2048, ge=2)
    max_batch_size: int = Field(8, ge=1)
    max_num_tokens: int = Field(8192, ge=1)
    trtllm_version: str = TRTLLM_VERSION

    @property
    def world_size(self) -> int:
        return self.tp * self.pp

    @property
    def id(self) -> str:
        return short_hash(self.model_dump(mode="json"), 12)

    @property
    def name(self) -> str:
        prefix = "trtllm" if self.runtime == "tensorrtllm" else "ref"
        kv = "" if self.kv_cache == "auto" else f"-kv{self.kv_cache}"
        pp = "" if self.pp == 1 else f"-pp{self.pp}"
        return f"{prefix}-{self.gpu}-{self.quant}{kv}-tp{self.tp}{pp}-{self.goal}"
