"""Emitters: a checked plan -> the text of one launch file, as pure functions.

`megatron` (Megatron-LM `pretrain_gpt.py` arguments; `megatron_model` the model's),
`torchrun` (a bash script), `slurm` (an sbatch script), `k8s` (a Kubeflow PyTorchJob) each
expose `render(plan, job_name)`;
`torchtitan` (its job TOML; `torchtitan_run` the torchrun / sbatch scripts that run it) and
`bridge` (a Megatron-Bridge ConfigContainer override) write the other training codes' files;
`prediction` the header with the prediction they all start with, `common` the rest they share
(environment, nodes); `launch` picks the target and writes the file. A new launch target is a
module with a `render` and an entry in `launch.TARGETS`.

May import `planner.calibration` (none does yet: a header's prediction is the process's, with
whatever profile the command applied), `planner.search` (its rules), `planner.ops`,
`planner.model` and `planner.inputs`.
"""
