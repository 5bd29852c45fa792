"""torchtitan's multi-token prediction (`[torchtitan] num_mtp_layers`): what pytorch/torchtitan
b5bcd76c raises on. Its MTPDecoder (models/deepseek_v3/mtp.py:164-275) is DeepSeek-V3's alone
(model_registry takes num_mtp_layers only there, models/deepseek_v3/__init__.py:616-628), runs
at pipeline and context parallel degree 1 (mtp.py:196-206) and on the whole logits: the chunked
loss skips the LM head, which the MTP forward refuses (mtp.py:268-272). A rule on the degrees
alone (pp, cp) and the job: the search keeps a torchtitan model's MTP layers at pp 1, cp 1. The
job's own part (`mtp_job`: the model family, the chunked loss) refuses every layout, so it is one
of the rules on the job alone (`rules.JOB_RULES`)."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.torchtitan import mtp_family
from planner.search.rules.base import Violation

FIELD = "torchtitan.num_mtp_layers"


def mtp(job: Job, lay: Layout) -> Violation | None:
    """The MTP depths of a torchtitan plan where torchtitan raises on them."""
    return mtp_job(job, lay) or mtp_degrees(job, lay)


def mtp_job(job: Job, lay: Layout) -> Violation | None:
    """Where torchtitan raises on the MTP depths whatever the layout: a model family without
    MTP layers, or a chunked loss."""
    if job.framework != "torchtitan" or not (depths := job.titan.num_mtp_layers):
        return None
    family = mtp_family(job.arch)
    if family is not None:
        return Violation(
            "tt_mtp",
            FIELD,
            f"{depths}: torchtitan's {family} model_registry takes no num_mtp_layers (TypeError;"
            " only deepseek_v3's builds MTP layers, models/deepseek_v3/__init__.py:616-628 at "
            "b5bcd76c)",
        )
    if job.titan.loss_chunks > 1:
        return Violation(
            "tt_mtp",
            FIELD,
            f"{depths} with loss_chunks {job.titan.loss_chunks}: torchtitan raises 'skip_lm_head"
            " is not supported with MTP decoder until ChunkedLoss supports MTP outputs.' "
            "(models/deepseek_v3/mtp.py:268-272 at b5bcd76c); MTPLoss takes the whole logits: "
            "loss_chunks = 1",
        )
    return None


def mtp_degrees(job: Job, lay: Layout) -> Violation | None:
    """Where torchtitan raises on the MTP depths at the layout's pipeline or context degree."""
    if job.framework != "torchtitan" or not (depths := job.titan.num_mtp_layers):
        return None
    for what, degree in (("pipeline", lay.pp), ("context", lay.cp)):
        if degree > 1:
            return Violation(
                "tt_mtp",
                FIELD,
                f"{depths} with {what} parallel degree {degree}: torchtitan raises 'MTP does "
                f"not support {what} parallelism yet.' (models/deepseek_v3/mtp.py:196-206 at "
                "b5bcd76c); MTP runs at pp 1 and cp 1",
            )
    return None
