"""Megatron-Bridge's performance recipes as benchmarks/data/bridge_recipes.md lists them: each row
read into a `Recipe` (its layout table, runtime table and environment); `benchmarks.recipe_settings`
reads each recipe's cells into the `Settings` a plan can carry.

Also the data file's fixed mappings: its GPU column to catalog GPUs (`GPUS`), recipe families to
zoo models (`MODELS`) with the vocabularies (`VOCAB`) and MTP depths (`MTP`) some families set
over them, DeepSeek-V3's routing, Bridge's built-in DeepSeek-V3 and Kimi K2 pipeline layouts
(`BUILT_IN_LAYOUTS`), and where each recipe's plan file lives (`Recipe.plan_path`, under
examples/recipes/).
`benchmarks/recipes.py` turns them into plan files and flags and prints the table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "benchmarks" / "data" / "bridge_recipes.md"
PLANS = REPO / "examples" / "recipes"
BRIDGE_COMMIT = "067f987df03b8355b03192d88d70f1709fedf51a"

GPUS = {
    "H100": "h100-sxm-80gb",
    "B200": "b200-sxm-180gb",
    "GB200": "gb200-nvl72",
    "B300": "b300-sxm-270gb",
    "GB300": "gb300-nvl72",
}
"""The data file's GPU column -> catalog GPU."""

MODELS = {
    "llama3_8b": "llama3.1-8b",
    "llama3_70b": "llama3.1-70b",
    "llama31_405b": "llama3.1-405b",
    "qwen3_30b_a3b": "qwen3-30b-a3b",
    "qwen3_235b_a22b": "qwen3-235b-a22b",
    "gpt_oss_120b": "gpt-oss-120b",
    "gpt_oss_20b": "gpt-oss-20b",
    "deepseek_v3": "deepseek-v3",
    "kimi_k2": "kimi-k2",
    "nemotron_3_nano": "nemotron3-nano-30b-a3b",
    "nemotronh_56b": "nemotronh-56b",
    "nemotron_3_super": "nemotron3-super-120b-a12b",
    "nemotron_3_ultra": "nemotron3-ultra-550b-a55b",
    "qwen3_next_80b_a3b": "qwen3-next-80b-a3b",
}
"""Recipe function prefix -> zoo model. Llama 3 8B / 70B (meta-llama/Meta-Llama-3-8B / -70B,
the recipes' HF configs) have exactly the Llama 3.1 shapes (layers, widths, heads, vocabulary
128256); only the RoPE scaling and context length differ, neither of which planner models at
these 8,192-token sequences."""

VOCAB = {"gpt_oss_20b": 128256, "nemotronh_56b": 32000}
"""Vocabularies a recipe family sets over its zoo model's: Bridge's GPT-OSS-20B perf helper sets
vocab 128256 (gpt_oss/common.py:79-123, bridge_recipes.md model table), the Llama 3.1 tokenizer's
size, as MLPerf's gpt-oss-20b pretrain.py does; the zoo keeps gpt-oss's own 201,088. The
Nemotron-H 56B base recipe's NullTokenizer has 32000 (recipes/utils/tokenizer_utils.py,
bridge_recipes.md Nemotron-H 56B note); the zoo keeps the released model's 131072."""

MTP = {"nemotron_3_super": ("*E", 2), "nemotron_3_ultra": ("*E", 2)}
"""(one depth's hybrid pattern, depths) of one repeated MTP layer a hybrid recipe family runs
over its zoo model: the Nemotron 3 Super base recipe sets mtp_num_layers 2 with
mtp_use_repeated_layer (recipes/nemotronh/h100/nemotron_3_super.py, bridge_recipes.md Super
note), the depth an attention and an MoE layer ("*E", as Megatron-LM's own Super release test
spells it); the zoo's Super, from the post-training configuration, has none. The Ultra base
recipe sets the same two repeated depths (recipes/nemotronh/h100/nemotron_3_ultra.py); its depth's
pattern is the HF config's, not read, and is taken as Super's."""

CP_COMM_TYPE = {"gpt_oss_120b": "a2a", "gpt_oss_20b": "a2a"}
"""Context parallelism's exchange a recipe family sets: both GPT-OSS pre-training bases set
cfg.model.cp_comm_type = "a2a" ("When CP>1 is used ..., a2a is required for TE attention backends
with learnable softmax": Megatron-Bridge recipes/gpt_oss/h100/gpt_oss.py, bridge_recipes.md model
table); the perf recipes build on them. Every other family keeps Megatron's p2p."""

DSV3_ROUTING = (8, 4)
"""DeepSeek-V3's group-limited routing, HF n_group / topk_group (bridge_recipes.md: Bridge maps
them to moe_router_num_groups / moe_router_group_topk)."""

DSV3_LAYOUTS: dict[tuple[int, int], list[str]] = {
    (16, 1): ["Etttt", *["tttt"] * 14, "tmL"],
    (8, 2): ["Etttt", *["tttt"] * 14, "tmL"],
    (4, 4): ["Etttt", *["tttt"] * 14, "tmL"],
}
"""Megatron-Bridge's built-in DeepSeek-V3 pipeline layouts by (pp, vpp), the ones the recipes
use: set_deepseek_v3_pipeline_model_parallel_layout's layout_map in
src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py (read at commit 0edb6699, settings
only): the embedding and 4 layers, 14 stages of 4, then 1 layer with MTP and loss. For (8, 2)
bridge_recipes.md's D3 row lists the 8-stage (8, 1) list instead, which vpp 2 cannot hold (16
stages); the 16-stage list of its D9 row and of the source is used."""

KIMI_LAYOUTS: dict[tuple[int, int], list[str]] = {
    (16, 1): ["Etttt", *["tttt"] * 14, "tL"],
    (4, 4): ["Etttt", *["tttt"] * 14, "tL"],
}
"""Megatron-Bridge's built-in Kimi K2 pipeline layouts by (pp, vpp), the ones the recipes use:
`_get_kimi_k2_pipeline_layout` in src/megatron/bridge/recipes/kimi/h100/kimi_k2.py (commit
067f987d, settings only): DeepSeek-V3's 16 stages without the MTP layer (Kimi K2 has none)."""

BUILT_IN_LAYOUTS = {"deepseek_v3": DSV3_LAYOUTS, "kimi_k2": KIMI_LAYOUTS}
"""A family's built-in layouts, for the split cells that say "built-in (pp,vpp) list"."""


# --- the data file


@dataclass
class Recipe:
    """One row of bridge_recipes.md: its layout table, its runtime table and its environment."""

    id: str
    function: str
    source: str
    gpu: str
    n: int
    precision: str
    tp: int
    pp: int
    vpp: int | None
    cp: int
    ep: int
    etp: int | None
    sp: bool
    mbs: int
    gbs: int
    seq: int
    split: str
    runtime: dict[str, str] = field(default_factory=dict)
    env: str = ""
    legacy: str | None = None  # the legacy preset modelled in place of the flat code, if any
    flat: Recipe | None = None  # then: the row as the flat recipe codes it

    @property
    def family(self) -> str:
        return next(p for p in MODELS if self.function.startswith(p))

    @property
    def model(self) -> str:
        return MODELS[self.family]

    @property
    def is_moe(self) -> bool:
        return self.id[0] in "QGDKNSUX"

    @property
    def stem(self) -> str:
        """The plan file's name: the function without `_config`, hyphenated."""
        return self.function.removesuffix("_config").replace("_", "-")

    @property
    def plan_path(self) -> Path:
        return PLANS / f"{self.stem}.toml"

    @property
    def skip(self) -> str | None:
        """Why this recipe has no plan file (None: it has one)."""
        if "INFEASIBLE" in self.runtime.get("notes", ""):
            note = self.runtime["notes"]
            return "cannot run at its advertised size: " + note[note.index("INFEASIBLE") :]
        return None


RUNTIME = (
    "recompute",
    "offload",
    "dispatcher",
    "dropping",
    "mtp",
    "tp_overlap",
    "ep_overlap",
    "optimizer",
    "graphs",
    "notes",
)
"""The runtime table's columns after the id."""


def _cells(line: str) -> list[str]:
    """A markdown table row's cells ("\\|" inside a cell is a literal bar)."""
    parts = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [p.strip().replace("\\|", "|") for p in parts]


def _opt_int(cell: str) -> int | None:
    return None if cell == "-" else int(cell)


def load_recipes(path: Path = DATA) -> list[Recipe]:
    """Every recipe of the data file's three tables per family, in file order. A row of a later
    "legacy presets" table replaces the recipe's earlier row of the same kind: its layout row
    names the legacy preset (`Recipe.legacy`) and keeps the flat row as `Recipe.flat`."""
    by_id: dict[str, Recipe] = {}
    section = ""
    for line in path.read_text().splitlines():
        if line.startswith("### "):
            section = line
            continue
        if not re.match(r"\|\s*[LQGDKNMSUX]\d+\s*\|", line):
            continue
        c = _cells(line)
        if section.endswith("parallel layout"):
            m = re.match(r"`(\w+)` \((.+)\)", c[1])
            if not m:
                raise ValueError(f"{path}: {c[0]}: cannot read the recipe cell {c[1]!r}")
            flat = by_id.get(c[0])
            legacy = re.fullmatch(r"legacy (\w+) of (.+)", m.group(2))
            if (flat is None) == (legacy is not None):
                raise ValueError(f"{path}: {c[0]}: a legacy preset row replaces a flat row")
            by_id[c[0]] = Recipe(
                id=c[0],
                function=m.group(1),
                source=flat.source if flat else m.group(2),
                gpu=c[2],
                n=int(c[3]),
                precision=c[4],
                tp=int(c[5]),
                pp=int(c[6]),
                vpp=_opt_int(c[7]),
                cp=int(c[8]),
                ep=int(c[9]),
                etp=_opt_int(c[10]),
                sp=c[11] == "yes",
                mbs=int(c[12]),
                gbs=int(c[13]),
                seq=int(c[14]),
                split=c[16].strip("`"),
                runtime=flat.runtime if flat else {},
                env=flat.env if flat else "",
                legacy=f"{legacy.group(1)} ({legacy.group(2)})" if legacy else None,
                flat=flat,
            )
        elif section.endswith("runtime settings"):
            by_id[c[0]].runtime = dict(zip(RUNTIME, c[1:], strict=True))
        elif section.startswith("### Environment"):
            by_id[c[0]].env = c[1]
    return list(by_id.values())
