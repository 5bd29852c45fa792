"""Jobs on two pools from a plan document, for the pooled-search tests (pytest puts tests/ on
sys.path)."""

from __future__ import annotations

from planner.inputs.plan import Job, parse_plan


def pool_job(model: str = "llama3.1-8b", twins: bool = False) -> Job:
    """`model` on 16 A100 ("a") + 16 H100 ("h"), sequences of 4096, 64 per step;
    `twins`: H100 ("a") + H100 ("b") joined by 5 GB/s per GPU at 500 us."""
    if twins:
        pools = [("a", "h100-sxm-80gb"), ("b", "h100-sxm-80gb")]
    else:
        pools = [("a", "a100-sxm-80gb"), ("h", "h100-sxm-80gb")]
    cluster: dict[str, object] = {
        "pools": [{"name": n, "gpu": g, "num_gpus": 16} for n, g in pools]
    }
    if twins:
        cluster["between_pools"] = {"bandwidth_gb_per_s_per_gpu": 5.0, "latency_us": 500.0}
    doc = {
        "model": {"name": model},
        "cluster": cluster,
        "training": {"seq_length": 4096, "global_batch_size": 64},
    }
    return parse_plan(doc).job


def data_job(bandwidth: float = 5.0, latency_us: float = 500.0) -> Job:
    """Llama 3.1 8B on twin pools of 16 H100 joined by `bandwidth` GB/s per GPU at
    `latency_us`, data parallelism across them allowed (issue 25)."""
    doc = {
        "model": {"name": "llama3.1-8b"},
        "cluster": {
            "pools": [{"name": n, "gpu": "h100-sxm-80gb", "num_gpus": 16} for n in "ab"],
            "between_pools": {
                "bandwidth_gb_per_s_per_gpu": bandwidth,
                "latency_us": latency_us,
                "allow_data_parallel": True,
            },
        },
        "training": {"seq_length": 4096, "global_batch_size": 64},
    }
    return parse_plan(doc).job
