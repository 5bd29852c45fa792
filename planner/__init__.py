"""planner: a parallelism auto-planner for Megatron-style large-model training."""

__version__ = "0.1.0"
