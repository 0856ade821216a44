"""pipeline.planner.recommend: the trtllm-build limits recommended per goal."""

from __future__ import annotations

from pipeline import planner as P


def test_recommend_build(llama8b: P.ModelSpec) -> None:
    throughput = P.recommend_build(P.Scenario(llama8b, "h100", "fp8", "fp8", 1, 1024, 1024), "throughput")
    latency = P.recommend_build(P.Scenario(llama8b, "h100", "fp8", "fp8", 1, 1024, 1024), "latency")
    keys = {"max_batch_size", "max_num_tokens", "max_input_len", "max_seq_len", "kv_cache_free_gpu_mem_fraction"}
    assert set(throughput) == set(latency) == keys
    assert throughput["max_seq_len"] == 2048 and throughput["max_input_len"] == 1024
    assert throughput["max_batch_size"] > latency["max_batch_size"]
    capacity = P.memory_plan(P.Scenario(llama8b, "h100", "fp8", "fp8", 1, 1024, 1024), kv_fraction=0.95)
    assert capacity.max_sequences <= throughput["max_batch_size"] <= 1.2 * capacity.max_sequences + 32
    assert latency["max_num_tokens"] >= 1024 + latency["max_batch_size"]  # a whole prompt in one chunk
    assert all(isinstance(throughput[k], int) for k in keys - {"kv_cache_free_gpu_mem_fraction"})
