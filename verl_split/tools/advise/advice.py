"""From run files to advice: read the runs, fit the model, rank the candidates, recommend one."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from verl_split.placement import Cluster
from verl_split.tools.advise.candidates import STOCK, Candidate, rank
from verl_split.tools.advise.generation import generation_lane
from verl_split.tools.advise.model import FIT_LINEAR, OVERLAPS, CostModel, build_model, predict
from verl_split.tools.advise.pool_memory import MemoryRule, memory_rule
from verl_split.tools.advise.reasons import Choice, caveat, choose, reason
from verl_split.tools.advise.requirements import JobRequirements, job_requirements
from verl_split.tools.advise.run_checks import assumed_cluster_flags, different_jobs, unknown_jobs
from verl_split.tools.advise.runs import LANE_MEANING, AdviseError, Run, read_run
from verl_split.tools.advise.stock_fit import StockFit, stock_fit
from verl_split.tools.advise.variants import (
    BOTH_TAG,
    DEFER_PHASE,
    DEFER_TAG,
    SHARED_TAG,
    DeferralCosts,
    SharedRolloutCosts,
    break_even_push,
    deferral_costs,
    shared_rollout_costs,
)


@dataclass(frozen=True)
class Advice:
    cluster: Cluster
    runs: tuple[Run, ...]
    model: CostModel
    candidates: tuple[Candidate, ...]  # ranked, fastest first
    rejected: tuple[tuple[str, str], ...]
    reason: str
    caveat: str | None
    assumptions: tuple[str, ...]
    next_run: str | None
    step_cv: float
    #: Shared rollout's costs, when the cluster has a split to share; its variants whose push is not known.
    shared: SharedRolloutCosts | None = None
    unranked: tuple[Candidate, ...] = ()
    #: The deferred critic update's weight sync, when the cluster has a split to defer on; deferral or shared.
    deferral: DeferralCosts | None = None
    choice: Choice | None = None
    #: What every candidate had to satisfy, and where it was read from; the memory rule per pool.
    job: JobRequirements | None = None
    memory: MemoryRule | None = None
    #: Stock does not fit the cluster with the job's batch: why, and the nearest values that would.
    stock_fit: StockFit | None = None
    #: What the advice rests on that it could not check, one line each (runs of different jobs, a cluster assumed).
    flags: tuple[str, ...] = ()

    @property
    def recommended(self) -> Candidate:
        return self.candidates[0]

    def break_even_push_s(self, candidate: Candidate) -> float:
        """The weight push under which an unranked shared-rollout variant would beat the recommendation
        (<= 0: not even free). With both switches on the push is off the step's path until the critic pool
        joins, so it is not simply added: :func:`variants.break_even_push`."""
        target = self.recommended.prediction.step_s
        late = candidate.prediction.late
        return break_even_push(late, target) if late is not None else target - candidate.prediction.step_s

    def rollout_tp(self, candidate: Candidate) -> int | None:
        """The generation lane's TP for this layout; None when generation is not the KV-room model."""
        gen = self.model.lanes.get("gen")
        if gen is None or not hasattr(gen, "choose"):
            return None
        p = candidate.prediction
        chosen = gen.choose(p.actor_gpus, p.colocated)
        return None if chosen is None else chosen[0]

    def _memory_json(self) -> dict[str, Any]:
        rule = self.memory
        assert rule is not None
        return {
            "gpu_gb": rule.gpu_gb,
            "gpu_source": rule.gpu_source,
            "runs_reserved_gb": rule.runs_reserved_gb,
            "params": {"actor": rule.actor_params, "critic": rule.critic_params, "source": rule.params_source},
            "per_candidate": {
                c.name: [
                    {
                        "pool": n.pool,
                        "gpus": n.gpus,
                        "need_gb": n.need_gb,
                        "at": n.moment,
                        "generation_state_gb": n.generation_gb,
                        "max_gpu_memory_utilization": None if rule.gpu_gb is None else n.vllm_room(rule.gpu_gb),
                    }
                    for n in rule.needs(c.prediction.actor_gpus, c.prediction.critic_gpus, c.prediction.colocated)
                ]
                for c in self.candidates
            },
        }

    def to_json(self) -> dict[str, Any]:
        best = self.recommended
        return {
            "cluster": {"nnodes": self.cluster.nnodes, "n_gpus_per_node": self.cluster.n_gpus_per_node},
            "runs": [run.to_json() for run in self.runs],
            "model": self.model.to_json(),
            "assumptions": list(self.assumptions),
            "next_run": self.next_run,
            "candidates": [{**c.to_json(), "rollout_tp": self.rollout_tp(c)} for c in self.candidates],
            "rejected": [{"placement": name, "why": why} for name, why in self.rejected],
            "job": None if self.job is None else self.job.to_json(),
            "memory": None if self.memory is None else self._memory_json(),
            "shared_rollout": None
            if self.shared is None
            else {
                **self.shared.to_json(),
                "unranked": [
                    {
                        **c.to_json(),
                        "predicted_step_s_is": "a lower bound",
                        "wins_if_push_under_s": self.break_even_push_s(c),
                    }
                    for c in self.unranked
                ],
            },
            "deferral": None
            if self.deferral is None
            else {**self.deferral.to_json(), "choice": None if self.choice is None else self.choice.to_json()},
            "stock_fit": None if self.stock_fit is None else self.stock_fit.to_json(),
            "flags": list(self.flags),
            "recommended": {
                "placement": best.placement,
                "shared_rollout": best.shared_rollout,
                "deferred_critic": best.deferred,
                "late_join": best.both,
                "environment": best.environment(),
                "command": best.command(),
                "predicted_step_s": best.prediction.step_s,
                "speedup_vs_stock": best.speedup_vs_stock,
                "reason": self.reason,
                "caveat": self.caveat,
            },
        }


def advise(
    paths: Sequence[str | os.PathLike[str]],
    cluster: Cluster,
    rollout_tp: int | None = None,
    overlaps: frozenset[str] = OVERLAPS,
    push_s: float | None = None,
    model_params: float | None = None,
    critic_offload_s: float | None = None,
    gpu_gb: float | None = None,
    critic_params: float | None = None,
    allow_different_jobs: bool = False,
) -> Advice:
    """Read the runs, fit the cost model and rank every placement the planner accepts on the cluster.

    ``rollout_tp``: ``--rollout-tp``, over what the logs say (their printed config or echoed command).
    ``gpu_gb``, ``model_params`` (the actor's), ``critic_params``: the memory rule's GPU and model sizes.
    ``push_s``, ``model_params``, ``critic_offload_s``: shared rollout's costs where the runs do not measure them.
    ``allow_different_jobs``: fit runs whose logs say they ran different jobs (flagged) instead of refusing them.
    """
    if not paths:
        raise AdviseError(
            "no run given: pass one or more logs of the job's runs (verl's console output, its file logger's "
            "JSONL, or a CSV export)."
        )
    runs = tuple(read_run(path, cluster) for path in paths)
    flags = _run_flags(runs, allow_different_jobs)
    model = build_model(runs)
    shared = shared_rollout_costs(runs, push_s, model_params, critic_offload_s)
    deferral = deferral_costs(runs)
    job = job_requirements(runs, model.has_critic, rollout_tp)
    reserved = max((run.max_reserved_gb for run in runs if run.max_reserved_gb is not None), default=None)
    memory = memory_rule(job.view, gpu_gb, model_params, critic_params, reserved)
    ran = frozenset((run.colocated, run.actor_gpus, run.critic_gpus) for run in runs)
    gen, gen_note = generation_lane(runs, job.view, memory, job.rollout_gpus, cluster.n_gpus_per_node)
    if gen is not None:
        model = dataclasses.replace(model, lanes={**model.lanes, "gen": gen})  # type: ignore[dict-item]
    everything, rejected = rank(
        model,
        cluster,
        overlaps=overlaps,
        shared=shared,
        deferral=deferral,
        requirements=job.requirements,
        memory=memory,
        ran=ran,
    )
    candidates = [c for c in everything if c.ranked]
    unranked = tuple(c for c in everything if not c.ranked)
    has_shared = any(c.shared_rollout for c in everything)
    has_deferral = model.has_critic and any(c.is_split for c in everything)
    if not candidates:
        why = "; ".join(f"{name}: {text}" for name, text in rejected[:2])
        raise AdviseError(f"no placement fits the cluster {cluster.describe()}: {why}")
    step_cv = max((run.step.std / run.step.mean for run in runs if run.step.mean > 0), default=0.0)
    unfit = stock_fit(cluster, job.requirements)
    if unfit is not None:
        # Stock with the smaller micro-batches, predicted where its one pool holds the models.
        if unfit.micro and (memory is None or memory.refusal(cluster.n_gpus, cluster.n_gpus, True) is None):
            step = predict(model, cluster.n_gpus, cluster.n_gpus, colocated=True, overlaps=overlaps).step_s
            unfit = dataclasses.replace(unfit, predicted_step_s=step if step != float("inf") else None)
        flags.append(unfit.headline())
    return Advice(
        cluster=cluster,
        runs=runs,
        model=model,
        candidates=tuple(candidates),
        rejected=tuple(rejected),
        reason=reason(candidates, model),
        caveat=caveat(candidates, step_cv),
        assumptions=(
            gen_note,
            *_assumptions(model, shared if has_shared else None, job.rollout_gpus, deferral if has_deferral else None),
        ),
        next_run=_next_run(runs, model, cluster),
        step_cv=step_cv,
        shared=shared if has_shared else None,
        unranked=unranked,
        deferral=deferral if has_deferral else None,
        choice=choose(everything) if has_deferral else None,
        job=job,
        memory=memory,
        stock_fit=unfit,
        flags=tuple(flags),
    )


def _run_flags(runs: Sequence[Run], allow_different_jobs: bool) -> list[str]:
    """Runs of different jobs: refused, or flagged when allowed; a cluster assumed, or a job not said: flagged."""
    flags = []
    differences = different_jobs(runs)
    if differences:
        text = "; ".join(differences)
        if not allow_different_jobs:
            raise AdviseError(
                f"the runs are of different jobs ({text}): the fit would read that difference as scaling. Advise "
                "from runs of one job, or pass --different-jobs to fit them anyway."
            )
        flags.append(f"the runs are of different jobs ({text}), fitted together as --different-jobs asks")
    unknown = unknown_jobs(runs)
    if unknown:
        flags.append(
            f"{', '.join(unknown)}: "
            + ("the logs say" if len(unknown) > 1 else "the log says")
            + " nothing of the job (model, lengths, batch), so the runs are not checked to be of one job"
        )
    return flags + assumed_cluster_flags(runs)


def _assumptions(
    model: CostModel,
    shared: SharedRolloutCosts | None = None,
    rollout_tp: int = 1,
    deferral: DeferralCosts | None = None,
) -> list[str]:
    lines = []
    by_size: dict[int, list[str]] = {}
    for lane, lane_model in model.lanes.items():
        if lane_model.fit == FIT_LINEAR:
            by_size.setdefault(lane_model.sizes[0], []).append(LANE_MEANING[lane])
    for n, lanes in by_size.items():
        lines.append(
            f"linear scaling of {', '.join(lanes)}: measured on {n} GPUs only, so time(m) = time({n}) x {n}/m; "
            "real scaling is usually worse, which favours a split"
        )
    lines.append(
        "reward, advantages, weight sync and the rest of the step are held at their measured time on every layout"
    )
    if shared is not None:
        gen = model.lanes.get("gen")
        bound = (
            "generation's scaling is assumed linear, so the rows take the whole bound: an upper limit"
            if gen is not None and gen.fit == FIT_LINEAR
            else "the fitted serial part, the long tail, does not shrink"
        )
        where = f"where the critic pool holds whole rollout replicas of {rollout_tp} GPU(s) per node"
        lines.append(
            f"shared rollout ({SHARED_TAG} rows, {where}): generation on all A + C GPUs by the generation lane's "
            f"model, so it saves at most gen(A) x C/(A+C) against the same split ({bound}); plus the weight push "
            f"to the critic pool's replicas, {_seconds(shared.push_s)} per step ({shared.push_source}), and the "
            f"critic's offload and reload, {_seconds(shared.offload_s)} ({shared.offload_source}), both on the "
            "step's critical path. Predicted only: shared rollout has not been measured on GPUs by us"
        )
    if deferral is not None:
        lines.append(
            f"deferred critic update ({DEFER_TAG} rows, {DEFER_PHASE}): the update phase is the "
            "actor's update; the critic's update hides behind the actor's update, the weight sync "
            f"({deferral.sync_s:.2f} s: {deferral.sync_source}) and the next generation, and what exceeds them is "
            "waited for before values: prep = max(old_log_prob + ref, excess + values). Other work before values "
            "(reward, balancing) is not counted as cover. Predicted only: not measured on GPUs by us"
        )
    if shared is not None and deferral is not None:
        lines.append(
            f"both ({BOTH_TAG} rows, where the critic's update outlasts the actor's): the actor pool generates "
            "at once; the critic pool joins when the rest of its update and the push are done, j = max(0, "
            "critic_update - actor_update - weight sync) + push into generation, and generates the rest at the "
            "shared-rollout model's rate: gen = gen(A) if gen(A) <= j (it never joins; what is left of its update "
            "is waited for before values), else j + (1 - j/gen(A)) x gen(A+C); the push is off the step's path, "
            "the offload counted when it joins. The actor pool's caps while it waits and the push's load on the "
            "actor pool's GPUs are not modelled. Predicted only: run on CPU only, never on GPUs"
        )
    return lines


def _seconds(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.2f} s"


def _next_run(runs: Sequence[Run], model: CostModel, cluster: Cluster) -> str | None:
    """The run that would replace the linear-scaling assumption with a fit, or None if nothing is assumed."""
    if not model.assumed():
        return None
    if all(run.colocated for run in runs):
        return (
            "a split run of the same job with the overlaps off, e.g. VERL_SPLIT=1 VERL_SPLIT_PLACEMENT=halves "
            "VERL_SPLIT_OVERLAP=off python -m verl.trainer.main_ppo <the same overrides>, "
            "measures every lane at a second pool size"
        )
    if all(not run.colocated for run in runs):
        return (
            f"a stock run of the same job on all {cluster.n_gpus} GPUs (VERL_SPLIT unset, or "
            f"placement {STOCK}) measures every lane at a second pool size"
        )
    lanes = ", ".join(LANE_MEANING[lane] for lane in model.assumed())
    return f"a run with these lanes on another pool size ({lanes}), e.g. another A:C ratio"
