"""The model of the world: what a layout costs in memory and time, as pure functions of
(`Job`, `Layout`), every formula derived in its module's docstring and its constants documented
where they are defined.

- `params` parameter counts; `flops` FLOPs (Megatron's counting); `gemm_shapes` a layer's
  linear GEMM shapes on one GPU
- `activations` activation bytes per layer (Korthikanti et al. 2022, generalised);
  `stage_activations` what a pipeline rank holds at its peak (in-flight micro-batches, recompute,
  offloading); `cpu_offload` Transformer Engine's schedule of whole-layer CPU offloading (its
  peak window, its exposed copies); `buffers` FP8 copies, FSDP / communication buffers,
  workspaces; `memory` memory per pipeline stage (ZeRO 0-3, fragmentation); `fsdp2`
  torchtitan's FSDP2 model states (with and without pipelining)
- `comms` collectives on the link tier each group spans (a new collective goes here);
  `dispatch` the MoE token dispatchers (NCCL all-to-all, DeepEP / HybridEP, all-gather);
  `shared_link` a GPU without NVLink, whose every transfer shares its one PCIe link
- `gemm` GEMMs on the roofline (grouped-GEMM padding, FP8 quantisation bytes); `linear_time` a
  layer's linear GEMMs on it; `layer_time` one layer's compute and TP / CP / EP traffic per
  micro-batch; `attention` the flash kernels' rate;
  `host` the host's floor under a small layer's time (`host_floor` applies it);
  `recompute_time` what selective recompute re-runs; `stage_time` each pipeline stage's layers,
  memoised layer times and exposed EP / offload traffic; `schedule` pipeline bubbles and
  Megatron's 1F1B / interleaved order; `stage_sync` a stage's DP sync and optimizer step
  (`rank_sync` puts them together, remembering what reads no window);
  `cost` the step time, its breakdown, MFU (`weight_hash` the share of Megatron's weight-hash
  check in it); `job_memo` what the search's hot path remembers per job; `calibratable` the
  constants a cluster's logs may refit (`planner calibrate`) and the one way to change them

May import `planner.inputs` only; nothing here searches, prints or reads files.
"""
