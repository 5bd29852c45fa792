"""The search: which layouts Megatron-LM accepts and which of them is fastest.

- `rules` Megatron-LM's validation rules as predicates over (job, layout); `check_plan` applies
  them to a plan file's layout
- `space` the search space (degrees, micro-batch, vpp, pipeline split, ZeRO, recompute); a new
  search dimension goes here
- `solver` CP-SAT for the integer sub-problems (the only module that imports ortools)
- `bound` the lower bounds on step time the search prunes on (per structure, per base layout)
- `top_k` exact scoring and the certified top K
- `advice` single changes that make a layout fit (`advice_pipeline` its vpp and pp changes,
  `advice_offload` its offloaded shares);
  `suggest` contradictory requests, ranking by cost or goodput, why nothing fits; `scaling` the
  best layout at each GPU count

May import `planner.ops`, `planner.model` and `planner.inputs`; nothing here prints or reads
options.
"""
