"""Stand-in for Triton's C++ `tensorrtllm` backend (/opt/tritonserver/backends/tensorrtllm in NVIDIA's
image), as a Python-based backend so that a rendered engine repository loads in the image test.

It checks what the real backend needs before it can start (the engine folder named by gpt_model_path,
with config.json and one rank<N>.engine per rank) and answers every request with an error: engines run
only on an NVIDIA GPU under the real backend.
"""

import json
import os

import triton_python_backend_utils as pb_utils

REFUSAL = "stand-in tensorrtllm backend: TensorRT engines run only on an NVIDIA GPU under NVIDIA's backend"


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        engine = parameters.get("gpt_model_path", "")
        with open(os.path.join(engine, "config.json"), encoding="utf-8") as f:
            built = json.load(f)
        world = int(built["pretrained_config"].get("mapping", {}).get("world_size", 1))
        missing = [f"rank{r}.engine" for r in range(world) if not os.path.isfile(os.path.join(engine, f"rank{r}.engine"))]
        if missing:
            raise pb_utils.TritonModelException(f"{engine} has no {', '.join(missing)}")
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        pb_utils.Logger.log_info(f"tensorrtllm backend (stand-in): engine {engine}, TensorRT-LLM {built.get('version')}, "
                                 f"{world} rank(s)")

    def execute(self, requests):
        error = pb_utils.TritonError(REFUSAL)
        if not self.decoupled:
            return [pb_utils.InferenceResponse(error=error) for _ in requests]
        for request in requests:
            request.get_response_sender().send(pb_utils.InferenceResponse(error=error),
                                               flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
