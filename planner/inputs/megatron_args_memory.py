"""Megatron-LM training flags that change what a GPU holds, read into the plan's `[training]`
table by `planner.inputs.megatron_args`: the partial distributed optimizer, the native fused
cross entropy and the RL step's rollout engine (their memory: `planner.model.memory`,
`planner.model.activations.COMPILED_LOSS_EXTRA_BYTES_PER_LOGIT`, `planner.model.rl_inference`)."""

from __future__ import annotations

from typing import Any

from planner.inputs.megatron_line import Line

RL_KV_CACHE_GIB = 40.0
"""--inference-dynamic-batching-buffer-size-gb's default (Megatron-LM d98e8a64 arguments.py)."""


def training_flags(line: Line, parallel: dict[str, Any]) -> dict[str, Any]:
    """`[training]` fields of these flags, where they differ from the defaults."""
    out: dict[str, Any] = {}
    if (n := line.integer("--num-distributed-optimizer-instances") or 1) > 1:
        out["optimizer_instances"] = n
    impl = line.text("--cross-entropy-fusion-impl") or "native"  # te's kernel works in place
    if line.has("--cross-entropy-loss-fusion") and impl == "native":
        out["compiled_loss_fusion"] = True
    out.update(_rl_step(line, parallel))
    return out


def _rl_step(line: Line, parallel: dict[str, Any]) -> dict[str, Any]:
    """train_rl.py's rollout engine: its KV cache and the degrees of a separate inference model
    (Megatron-LM d98e8a64 training.py builds one when any is given or training uses CP; the
    training degrees where one is not given)."""
    if not line.has("--perform-rl-step"):
        return {}
    kv = line.number("--inference-dynamic-batching-buffer-size-gb")
    out: dict[str, Any] = {"rl_kv_cache_gib": RL_KV_CACHE_GIB if kv is None else kv}
    names = ("tensor", "pipeline", "expert", "expert-tensor")
    given = [line.integer(f"--rl-inference-{n}-model-parallel-size") for n in names]
    if any(g is not None for g in given) or parallel.get("cp", 1) > 1:
        tp, pp, ep = (parallel.get(k, 1) for k in ("tp", "pp", "ep"))
        own = (tp, pp, ep, parallel.get("etp") or tp)
        out["rl_inference_parallel"] = [
            o if g is None else g for g, o in zip(given, own, strict=True)
        ]
    return out
