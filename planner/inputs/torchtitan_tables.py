"""A read torchtitan configuration's fields (`planner.inputs.torchtitan_module`) as the tables of a
torchtitan TOML (`planner.inputs.torchtitan_config`): the micro-batch, batches and validator
(`planner.inputs.torchtitan_batches`), the float8 converter, the MoE dispatcher, activation
checkpointing, compile, the loss's chunks; what torchtitan would refuse, or planner does not model,
exits 2 naming the field."""

from __future__ import annotations

from typing import Any

from planner.inputs import torchtitan_refusals as refusals
from planner.inputs.errors import InputError, spelled
from planner.inputs.torchtitan import COMPILE_LOSS_KEY, MOE_MODELS, ROUTER_GATE, check_reduce_dtype
from planner.inputs.torchtitan_baselines import (
    DEFAULTS,
    SECTION_FIELDS,
    UNMODELLED,
    Fields,
    Record,
    Unread,
    lookup,
)
from planner.inputs.torchtitan_batches import batch_tables
from planner.inputs.torchtitan_float8 import (
    DEEPEP_GROUPED,
    EXPERT_FQNS,
    FLOAT8,
    GROUPED_FLOAT8,
    gate_note,
)


class Document:
    """The TOML tables (`planner.inputs.torchtitan_config`'s) a read function's fields make."""

    def __init__(self, where: str, values: Fields, model: str | None) -> None:
        self.where, self.values, self.model = where, values, model
        self.notes: list[tuple[str, str]] = []
        """(field, message): what is read otherwise than the configuration says."""

    def need(self, path: tuple[str, ...], kind: type | tuple[type, ...]) -> Any:
        """The field's value (`lookup`), of the kind given, else exit 2 naming the field."""
        return self._checked(lookup(self.values, path), "config." + ".".join(path), kind)

    def kwarg(
        self, rec: Record, key: str, default: Any, name: str, kind: type | tuple[type, ...] = object
    ) -> Any:
        """A record's keyword argument (`default` where not given), a value the reader read
        (`_checked`; of any kind unless `kind` says: the caller says what it expects); `name`
        the field."""
        return self._checked(rec.kwargs.get(key, default), name, kind)

    def _checked(self, v: Any, name: str, kind: type | tuple[type, ...]) -> Any:
        """The seam every value of the configuration passes before it reaches a table or a
        message: one not read (`Unread`, or a call where a plain value is expected: `int('8')`,
        `2**3`), in it or in a list it holds, exits 2 naming its line and text as written, never
        planner's records; a value of another kind exits 2 naming the field."""
        kinds = kind if isinstance(kind, tuple) else (kind,)
        bad = _not_read(v, Record in kinds)
        if bad is not None:
            at = f":{bad.line}" if bad.line else ""
            text = bad.text or f"{getattr(bad, 'callee', '')}(...)"
            raise InputError(f"{self.where}{at}: {name}: planner does not evaluate {text}")
        if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
            raise InputError(f"{self.where}: {name}: expected {_kinds(kind)} (got {spelled(v)})")
        return v

    def _known_fields(self) -> None:
        """Every field set in a section the reader reads is one torchtitan has
        (`SECTION_FIELDS`), and each it has but planner does not model is at its default
        (`UNMODELLED`, `DEFAULTS`)."""
        for path, value in self.values.items():
            names = SECTION_FIELDS.get(path[0])
            if names is None:
                continue
            given = path[1:2] if len(path) > 1 else []
            if len(path) == 1 and isinstance(value, Record):
                given = list(value.kwargs)
            for name in given:
                if name not in names:
                    raise InputError(
                        f"{self.where}: config.{path[0]}.{name}: torchtitan b5bcd76c has no "
                        f"such field (configs.py)"
                    )
        for path in sorted(UNMODELLED):
            v, default = lookup(self.values, path), DEFAULTS[path]
            if v != default:
                shown = self.need(path, (bool, int, str, type(None)))
                raise InputError(
                    f"{self.where}: config.{'.'.join(path)}: {spelled(shown)}: planner models "
                    f"torchtitan at its default here ({spelled(default)})"
                )

    def tables(self) -> dict[str, Any]:
        self._known_fields()
        spec = self.need(("model_spec",), Record)
        flavor = self._checked(
            spec.args[0] if spec.args else spec.kwargs.get("flavor"), "config.model_spec", object
        )
        if spec.callee != "model_registry" or not isinstance(flavor, str) or self.model is None:
            raise InputError(
                f"{self.where}: config.model_spec: expected torchtitan.models.<model>'s "
                f"model_registry(flavor, ...) (got {spelled(spec.callee)})"
            )
        if self.model not in refusals.MODEL_REGISTRY:  # llama4: a TOML flavor (e347b1e5) only
            gone = " (deleted in d92336fe)" if self.model == "llama4" else ""
            raise InputError(
                f"{self.where}: config.model_spec: torchtitan b5bcd76c has no "
                f"torchtitan.models.{self.model}{gone}; planner reads the model_registry of "
                f"{', '.join(refusals.MODEL_REGISTRY)}"
            )
        model: dict[str, Any] = {"name": self.model, "flavor": flavor}
        par = {k: self.need(("parallelism", k), int) for k in _DEGREES}
        text_keys = ("fsdp_reshard_after_forward", "pipeline_parallel_schedule")
        par.update({k: self.need(("parallelism", k), str) for k in text_keys})
        balancer = self.need(("parallelism", "context_parallel_load_balancer"), (str, type(None)))
        if balancer == "":
            raise InputError(
                f'{self.where}: config.parallelism.context_parallel_load_balancer: "": torchtitan '
                "raises 'cannot be an empty string' (configs.py:265-269); None turns it off"
            )
        if balancer is None:
            par["context_parallel_load_balancer"] = None
        if lookup(self.values, ("training", "mixed_precision_reduce")) is not None:
            reduce = self.need(("training", "mixed_precision_reduce"), object)
            check_reduce_dtype(reduce, self.where, "config.training.mixed_precision_reduce")
        tables: dict[str, Any] = {"model": model, "parallelism": par}
        self._converters(spec, tables)
        attn = self._model_spec(spec, par)
        mtp = spec.kwargs.get("num_mtp_layers", 0)  # a non-negative int: refusals.model_spec
        if mtp:
            model["num_mtp_layers"] = mtp
        tables.update(batch_tables(self.where, self.need, par))
        self._checkpointing(tables)
        enable = self.need(("compile", "enable"), bool)
        components = self.need(("compile", "components"), list)
        fuses = self.need(("compile", "backend"), str) == refusals.FUSING_BACKEND
        loss = enable and "loss" in components and fuses  # b5bcd76c loss.py:245-252
        tables["compile"] = {"enable": enable and "model" in components, COMPILE_LOSS_KEY: loss}
        async_tp = self.need(("compile", "enable_async_tensor_parallel"), bool)
        if async_tp and not tables["compile"]["enable"]:
            raise InputError(
                f"{self.where}: config.compile.enable_async_tensor_parallel: True without "
                f"compile.enable and 'model' in compile.components (enable {enable}, components "
                f"{spelled(components)}): torchtitan raises 'Async TP requires ...' "
                "(CompileConfig.__post_init__, configs.py:306-312)"
            )
        par["enable_async_tensor_parallel"] = async_tp
        if tables["compile"]["enable"]:
            backend = self.need(("compile", "backend"), str)
            field = "config.compile.backend"
            said = refusals.compile_backend(self.where, field, backend, attn.startswith("flex"))
            if said is not None:  # nothing fused: as compile off, async TP (inductor's) too
                tables["compile"]["enable"] = par["enable_async_tensor_parallel"] = False
                self.notes.append((field, said))
        implementation = self.need(("optimizer", "implementation"), str)
        optimizer = self.need(("optimizer",), (Record, type(None)))
        states = refusals.optimizer_states(self.where, implementation, optimizer)
        tables["optimizer"] = {"state_dtype": states}
        tables["debug"] = {
            "deterministic": self.need(("debug", "deterministic"), bool),
            "moe_force_load_balance": self.need(("debug", "moe_force_load_balance"), bool),
        }
        if self.need(("debug", "batch_invariant"), bool):
            raise InputError(
                f"{self.where}: config.debug.batch_invariant: True: torchtitan raises "
                "'Batch-invariant mode is not supported in pre-training' (trainer.py:119-122)"
            )
        loss = self.need(("loss",), Record)
        tables["loss"] = refusals.loss_table(self.where, loss, mtp, self.kwarg)
        self._graphs(par)
        return tables

    def _model_spec(self, spec: Record, par: dict[str, Any]) -> str:
        """model_registry's keyword arguments and the degrees torchtitan checks them against
        (`torchtitan_refusals`); the attention backend it builds. A flavor planner does not know
        is refused first (`torchtitan_config`), its keywords not read."""
        assert self.model is not None
        if (
            self.model,
            spec.args[0] if spec.args else spec.kwargs.get("flavor"),
        ) not in refusals.FLAVORS:
            return "flex"
        given = {
            k: self.kwarg(spec, k, None, f"config.model_spec: {k}")
            for k in spec.kwargs
            if k != "converters"
        }
        attn = refusals.attention(self.where, self.model, {**given, "converters": None})
        degrees = {
            "cp": par["context_parallel_degree"],
            "pp": par["pipeline_parallel_degree"],
            "ep": par["expert_parallel_degree"],
            "spmd_backend": self.need(("parallelism", "spmd_backend"), str),
        }
        refusals.model_spec(self.where, {**given, "attn_backend": attn}, degrees)
        symm = self.need(("parallelism", "enable_fsdp_symm_mem"), bool)
        par["enable_fsdp_symm_mem"] = symm
        return attn

    def _graphs(self, par: dict[str, Any]) -> None:
        """torchtitan b5bcd76c captures the step in CUDA graphs unless told not to
        (training.disable_cuda_graphs, default False, configs.py:75-85), and its Trainer.Config
        refuses them with pipelining (trainer.py:172-176) and with expert parallelism over the
        standard or DeepEP dispatcher (trainer.py:178-199): such a configuration does not run."""
        if self.need(("training", "disable_cuda_graphs"), bool):
            return
        pp, ep = par["pipeline_parallel_degree"], par["expert_parallel_degree"]
        what = f"pipeline parallelism ({pp})" if pp > 1 else ""
        if not what and ep > 1:  # the backend is standard or deepep (the others exit before)
            what = f"expert parallelism ({ep}) over {par['expert_parallel_comm_backend']}"
        if what:
            raise InputError(
                f"{self.where}: config.training.disable_cuda_graphs: False (the default) with "
                f"{what}: torchtitan refuses CUDA graphs there (trainer.py:172-199 at "
                "b5bcd76c); set it True"
            )

    def _converters(self, spec: Record, tables: dict[str, Any]) -> None:
        """The float8 converters as the TOML's float8 tables (Float8LinearConverter's, and
        Float8GroupedExpertsConverter's as the grouped converter of the routed experts,
        `[torchtitan] float8_experts`, read beside the linear one only); the MoE dispatcher.
        The grouped converter with DeepEP raises at b5bcd76c (components/quantization/
        utils.py:33-64: `torchtitan_float8.DEEPEP_GROUPED`)."""
        field = "config.model_spec.converters"
        converters = self.kwarg(spec, "converters", [], field, (list, type(None), Record)) or []
        if not isinstance(converters, list):  # a call's record: what it builds is not read
            raise InputError(
                f"{self.where}:{spec.line}: {field}: planner does not evaluate {converters.text}"
            )
        names: list[str] = []
        for conv in converters:
            name = conv.callee if isinstance(conv, Record) else spelled(conv)
            if isinstance(conv, Record) and name.endswith("Float8GroupedExpertsConverter.Config"):
                names.append(GROUPED_FLOAT8)
                quantize = tables.setdefault("quantize", {})
                quantize["grouped_mm"] = {"float8": {"fqns": list(EXPERT_FQNS)}}
                continue
            if not (isinstance(conv, Record) and name.endswith("Float8LinearConverter.Config")):
                raise InputError(
                    f"{self.where}: config.model_spec: converters: planner reads torchtitan's "
                    f"Float8LinearConverter and Float8GroupedExpertsConverter (got {name})"
                )
            names.append(FLOAT8)
            recipe = self.kwarg(conv, "recipe_name", "rowwise", f"{field}: recipe_name")
            emulate = self.kwarg(conv, "emulate", False, f"{field}: emulate")
            refusals.float8_emulate(self.where, f"{field}: emulate", emulate)
            tables.setdefault("quantize", {})["linear"] = {"float8": {"recipe_name": recipe}}
            self._float8_filter(conv)
        if names:
            tables["model"]["converters"] = names
        backend = self.kwarg(spec, "moe_comm_backend", None, "config.model_spec.moe_comm_backend")
        backend = backend or "standard"
        if backend not in ("standard", "deepep"):
            raise InputError(
                f"{self.where}: config.model_spec: moe_comm_backend: planner models torchtitan's "
                f"standard and deepep (got {spelled(backend)})"
            )
        if backend == "deepep" and GROUPED_FLOAT8 in names:
            raise InputError(f"{self.where}: config.model_spec: converters: {DEEPEP_GROUPED}")
        tables["parallelism"]["expert_parallel_comm_backend"] = backend

    def _float8_filter(self, conv: Record) -> None:
        """Float8LinearConverter.Config's filter_fqns (default [], float8.py:61 at b5bcd76c; a
        module stays bf16 where an entry is a substring of its name, components/quantization/
        utils.py:16-30): planner's torchtitan float8 keeps the output layer (`lm_head`) in bf16,
        as llama3_405b's ["lm_head"] (config_registry.py:314) does; without it the output layer
        is float8 too, which planner times in bf16 (said). In an MoE model it keeps the router's
        gate ("router.gate", deepseek_v3's config_registry.py:262) in bf16 as planner times it;
        without it the gate (a Linear.Config, models/common/moe.py:195, dims multiples of 16) is
        float8 (said). Any other entry is refused (which decoder linears it keeps in bf16 is not
        read)."""
        field = "config.model_spec: converters: filter_fqns"
        fqns = self.kwarg(conv, "filter_fqns", [], field)
        if not isinstance(fqns, list) or not all(isinstance(f, str) for f in fqns):
            raise InputError(
                f"{self.where}:{conv.line}: {field}: expected a list of module names (got "
                f"{spelled(fqns)})"
            )
        other = [f for f in fqns if f not in ("lm_head", "router.gate")]
        if other:
            raise InputError(
                f"{self.where}:{conv.line}: {field}: {spelled(other[0])}: planner reads "
                '"lm_head" (the output layer) and "router.gate" only: float8 on some of the '
                "decoder's linear layers and not others is not modelled"
            )
        if "lm_head" not in fqns:
            self.notes.append(
                (
                    "config.model_spec.converters.filter_fqns",
                    f"{spelled(fqns)} leaves the output layer (lm_head) to float8, which planner "
                    "times in bf16",
                )
            )
        if self.model in MOE_MODELS and ROUTER_GATE not in fqns:
            self.notes.append(("config.model_spec.converters.filter_fqns", gate_note(fqns)))

    def _checkpointing(self, tables: dict[str, Any]) -> None:
        """The policy's class is the mode. Of its fields (their names checked as they are set,
        `torchtitan_module.Reader._known_field`), those that move time or what is saved in a
        way planner does not model are taken at their defaults only (`AC_UNMODELLED`); the
        others (preserve_rng_state, determinism_check) change no memory or time the plan
        holds."""
        ac = self.need(("activation_checkpoint",), (Record, type(None)))
        modes = {"SelectiveAC.Config": "selective", "FullAC.Config": "full"}
        mode = "none" if ac is None else None
        if ac is not None:
            mode = next((m for c, m in modes.items() if ac.callee.endswith(c)), None)
        if mode is None:
            raise InputError(
                f"{self.where}: config.activation_checkpoint: planner models None, "
                f"SelectiveAC.Config() and FullAC.Config() (got {ac.callee if ac else ac})"
            )
        for key, default in AC_UNMODELLED.items():
            name = f"config.activation_checkpoint.{key}"
            given = self.kwarg(ac, key, default, name) if ac is not None else default
            if given != default:
                raise InputError(
                    f"{self.where}: {name}: {spelled(given)}: planner models torchtitan at its "
                    f"default here ({spelled(default)})"
                )
        tables["activation_checkpoint"] = {"mode": mode, "selective_ac_option": "op"}


AC_UNMODELLED: dict[str, Any] = {
    "debug": False,
    "force_recompute_mm_shapes_by_fqns": ["moe.router.gate"],
}
"""Activation checkpointing's fields planner takes at b5bcd76c's defaults only
(distributed/activation_checkpoint.py): `debug` captures debug information ("Will be slower",
:136-140), SelectiveAC's `force_recompute_mm_shapes_by_fqns` recomputes every matmul of the
shapes it names (:196-207), where planner's per-op policy keeps every second one
(`planner.model.gemm_shapes`)."""


_DEGREES = (
    "data_parallel_replicate_degree",
    "data_parallel_shard_degree",
    "tensor_parallel_degree",
    "pipeline_parallel_degree",
    "context_parallel_degree",
    "expert_parallel_degree",
)


def _not_read(v: Any, records: bool) -> Unread | Record | None:
    """The first part of `v` the reader did not evaluate: an Unread, a Record unless records
    are expected (`records`: a list of them, the converters), in `v` or in a list it holds."""
    if isinstance(v, Unread) or (isinstance(v, Record) and not records):
        return v
    if isinstance(v, list):
        return next((b for b in (_not_read(e, records) for e in v) if b is not None), None)
    return None


def _kinds(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("None" if k is type(None) else k.__name__ for k in kinds)
