"""What ``verl-split advise`` prints and draws: the measured runs, the model, the ranked candidates, the
recommendation; of the checks every layout passed, the job's rules as the planner read them, the memory rule
and each layout refused with its reason; the plot of the predicted steps.
"""

from __future__ import annotations

import os
import textwrap

from verl_split.dryrun.report import PHASE_COLORS
from verl_split.tools.advise.advice import Advice
from verl_split.tools.advise.candidates import STOCK, Candidate
from verl_split.tools.advise.model import FIT_LINEAR
from verl_split.tools.advise.runs import LANE_MEANING, LANE_POOL, LANES
from verl_split.tools.advise.summary import summary_lines
from verl_split.tools.advise.variants import BOTH_TAG, DEFER_OVERLAP, DEFER_PHASE, DEFER_TAG, SHARED_TAG

WIDTH = 100
#: What ``VERL_SPLIT_LATE_JOIN=on`` on a ``+shared+defer`` row's command asks for, said beside it.
LATE_JOIN_NOTE = (
    "VERL_SPLIT_LATE_JOIN=on: the critic pool joins generation when its update ends, pushed the weights while the "
    "actor pool's vLLM generates, which has not run on GPUs (off there unless asked for);"
)


def _pct(share: float) -> str:
    return f"{100 * share:.0f} %"


def speedup_text(candidate: Candidate) -> str:
    """The speed-up against stock, or n/a where stock does not fit the cluster (no baseline)."""
    return "n/a" if candidate.speedup_vs_stock is None else f"{candidate.speedup_vs_stock:.2f}x"


def _steps(steps: tuple[int, ...]) -> str:
    return f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"


def render_text(advice: Advice, verbose: bool = False) -> str:
    """The console report: the runs, the ranked candidates, the advice, what it rests on and the three-line
    summary last. ``verbose``: each run's lanes, the fitted model, every refusal's reason and every assumption."""
    cluster = advice.cluster
    out = [
        f"verl-split advise: {cluster.describe()}; {len(advice.runs)} run{'s' if len(advice.runs) > 1 else ''}",
        "",
    ]
    out += run_lines(advice) if verbose else short_run_lines(advice)
    if verbose:
        out += job_lines(advice)
        out += model_lines(advice)
    out += table_lines(advice, verbose)
    out += recommendation_lines(advice, verbose)
    if not verbose:
        out.append("(--verbose: each run's lanes, the fitted model, every refusal's reason and assumption)")
    out.append("")
    out += [line for flag in advice.flags for line in _wrap(f"check: {flag}", "", "  ")]
    # Three items, each wrapped under its label: what to use, what it gains and how sure, the run to do next.
    out += [line for item in summary_lines(advice) for line in _wrap(item, "", "    ")]
    return "\n".join(out)


def short_run_lines(advice: Advice) -> list[str]:
    """A line per run: its layout and where it came from, its steps and mean step time."""
    out = []
    for run in advice.runs:
        out += _wrap(
            f"{run.path}: {run.layout}, {_steps(run.steps)}, {run.step.mean:.2f} s a step; layout: {run.layout_source}",
            "",
        )
    out.append("")
    return out


def run_lines(advice: Advice) -> list[str]:
    """Each run as measured: its lanes' mean [min-max], the fixed part, the spread, the work kept apart."""
    out = []
    for run in advice.runs:
        left_out = "" if run.steps[0] == run.first_step else f", step {run.first_step} left out"
        out.append(f"{run.path}: {run.layout}, {_steps(run.steps)}{left_out}; seconds, mean [min-max] over steps")
        out += _wrap(f"read as {run.format}; layout: {run.layout_source}", "  ")
        rows = [(LANE_MEANING[lane], run.lanes[lane]) for lane, _, _ in LANES if lane in run.lanes]
        rows += [("fixed (reward, adv, rest)", run.fixed), ("step", run.step)]
        if run.deferred:
            rows += [("critic update hidden", run.hidden), ("wait at its join", run.join_wait)]
        if run.late_join:  # shared rollout with the deferral: the critic pool joined generation late
            rows += [("critic pool joined (0/1)", run.joined), ("its join, s into gen", run.join_at)]
            rows += [("saved (estimate, unfitted)", run.saved)]
        for label, spread in rows:
            if spread is not None:
                out.append(f"  {label:<26} {spread.mean:8.2f} [{spread.low:.2f}-{spread.high:.2f}]")
        if run.step.n > 1 and run.step.mean > 0:
            out.append(f"  step-to-step spread of the step time: {_pct(run.step.std / run.step.mean)} (std / mean)")
        for work in run.periodic:
            spread = run.periodic_spread(work)
            every = work.every()
            per_step = f", {spread.mean / every:.2f} s a step on average" if every else ""
            out.append(
                f"  {work.what + ', apart':<26} {spread.mean:8.2f} [{spread.low:.2f}-{spread.high:.2f}] on "
                f"{len(work.steps)} step(s){f', every {every}' if every else ''}{per_step}"
            )
        for note in run.notes:
            out += _wrap(f"note: {note}", "  ")
        out.append("")
    return out


def model_lines(advice: Advice) -> list[str]:
    """The cost model as fitted: each lane's serial and parallel part, and where each came from."""
    out = []
    out.append("cost model, each lane on its pool of n GPUs: time(n) = serial + parallel / n")
    out.append(f"  {'lane':<20} {'pool':<7} {'serial':>8} {'parallel':>9}  from")
    for lane, lane_model in advice.model.lanes.items():
        sizes = ", ".join(str(n) for n in lane_model.sizes)
        if hasattr(lane_model, "choose"):  # generation.GenerationLane: not serial + parallel / n
            out.append(f"  {LANE_MEANING[lane]:<20} {LANE_POOL[lane]:<7} {'KV-room model':>18}  fitted to {sizes} GPUs")
            continue
        source = (
            f"linear scaling ASSUMED (measured on {sizes} GPUs only)"
            if lane_model.fit == FIT_LINEAR
            else f"fitted to {sizes} GPUs"
        )
        out.append(
            f"  {LANE_MEANING[lane]:<20} {LANE_POOL[lane]:<7} {lane_model.serial_s:7.2f}s "
            f"{lane_model.parallel_s:8.2f}s  {source}"
        )
    out.append(f"  {'fixed':<20} {'-':<7} {advice.model.fixed_s:7.2f}s")
    out.append("  step: colocated pools add every lane; split pools take max(actor, critic) in preparation and updates")
    out.append("")
    return out


def table_lines(advice: Advice, verbose: bool) -> list[str]:
    """The ranked candidates, what their tags mean, the unranked variants and the refused layouts."""
    out = []
    out.append("predicted step time per placement, fastest first (splits with VERL_SPLIT_OVERLAP=updates,prep)")
    header = (
        f"  {'#':>2} {'placement':<22} {'actor':>5} {'critic':>6} {'gen':>7} {'prep':>7} {'updates':>7} "
        f"{'step':>8} {'vs stock':>8} {'actor idle':>10} {'critic idle':>11}"
    )
    out.append(header)
    for i, cand in enumerate(advice.candidates, start=1):
        p = cand.prediction
        if p.colocated:
            pools = f"{p.actor_gpus:>5} {'shared':>6}"
            idle = f"{_pct(p.idle_share['global']):>10} {'(one pool)':>11}"
        else:
            pools = f"{p.actor_gpus:>5} {p.critic_gpus:>6}"
            idle = f"{_pct(p.idle_share['actor']):>10} {_pct(p.idle_share['critic']):>11}"
        name = cand.name if len(cand.name) <= 22 else cand.name[:21] + "~"
        out.append(
            f"  {i:>2} {name:<22} {pools} {p.phases['gen']:6.2f}s {p.phases['prep']:6.2f}s "
            f"{p.phases['updates']:6.2f}s {p.step_s:7.2f}s {speedup_text(cand):>8} {idle}"
        )
    for cand in advice.candidates:
        if len(cand.name) > 22 or cand.same_prediction_as:
            same = f" (same prediction: {', '.join(cand.same_prediction_as)})" if cand.same_prediction_as else ""
            out.append(f"     {cand.name}{same}")
    if advice.deferral is not None:
        rows = any(c.deferred for c in (*advice.candidates, *advice.unranked))
        out += _wrap(
            f"{DEFER_TAG}: the same split with the critic's update deferred into the next step "
            f"(VERL_SPLIT_OVERLAP={DEFER_OVERLAP}): the update phase is the actor's update"
            + ("" if rows else "; no such row: no split's critic update outlasts its actor update"),
            "  ",
            "    ",
        )
    if any(c.both for c in (*advice.candidates, *advice.unranked)):
        out += _wrap(
            f"{BOTH_TAG}: both switches on, and VERL_SPLIT_LATE_JOIN=on (off on GPUs unless asked for; not run on "
            "GPUs): the actor pool generates at once, the critic pool joins when the critic's update and the push "
            "are done (see assumed: below)",
            "  ",
            "    ",
        )
    if verbose:
        out += _shared_rows(advice)
        out += refused_rows(advice)
    else:
        if advice.unranked:
            out += _wrap(f"{len(advice.unranked)} {SHARED_TAG} row(s) not ranked: the weight push is not known", "  ")
        if advice.rejected:
            names = ", ".join(name for name, _ in advice.rejected)
            out += _wrap(f"refused (the planner's rules, the memory rule): {names}", "  ", "    ")
    out.append("")
    return out


def recommendation_lines(advice: Advice, verbose: bool) -> list[str]:
    """The recommendation, why, how close the runner-up is and its command; with ``verbose`` all it assumed."""
    out = []
    best = advice.recommended
    shared = " with split_placement.shared_rollout=true" if best.shared_rollout else ""
    shared += (
        (" and" if best.shared_rollout else " with") + f" {DEFER_PHASE} in VERL_SPLIT_OVERLAP" if best.deferred else ""
    )
    out.append(f"recommended: split_placement.placement={best.placement}{shared}")
    out += textwrap.wrap(f"because {advice.reason}", width=WIDTH, initial_indent="  ", subsequent_indent="  ")
    if advice.caveat:
        out += textwrap.wrap(f"but {advice.caveat}", width=WIDTH, initial_indent="  ", subsequent_indent="  ")
    if best.placement == STOCK:
        out.append("  use it: run without VERL_SPLIT (stock verl)")
    else:
        out += _wrap(f"use it: {best.command()}", "  ", "    ")
    if best.both:
        out += _wrap(
            f"{LATE_JOIN_NOTE} the row assumes it: without it the critic pool sits out every step whose critic "
            "update runs past the weight sync.",
            "  ",
            "    ",
        )
    unfit = advice.stock_fit
    if unfit is not None and unfit.predicted_step_s is not None and unfit.predicted_step_s < best.prediction.step_s:
        out += _wrap(
            f"but stock verl with {unfit.overrides()} (the same optimisation in smaller micro-batches) is predicted "
            f"at {unfit.predicted_step_s:.2f} s a step, faster than every split that fits: see the summary below",
            "  ",
            "    ",
        )
    out += rollout_tp_line(advice)
    if not verbose:
        return out
    out += memory_lines(advice)
    if advice.choice is not None:
        choice = advice.choice
        out += _wrap(
            f"deferral, shared rollout or both: {choice.use}, because {choice.reason}.",
            "  ",
            "    ",
        )
    for line in advice.assumptions:
        out += textwrap.wrap(f"assumed: {line}", width=WIDTH, subsequent_indent="  ")
    if advice.next_run:
        out += textwrap.wrap(f"to fit instead of assume: {advice.next_run}", width=WIDTH, subsequent_indent="  ")
    return out


def _wrap(text: str, indent: str, more: str | None = None) -> list[str]:
    return textwrap.wrap(text, width=WIDTH, initial_indent=indent, subsequent_indent=more or indent + "  ")


def _shared_rows(advice: Advice) -> list[str]:
    """What the +shared rows are, and the variants not ranked for want of a weight push."""
    shared = advice.shared
    if shared is None:
        return []
    out = textwrap.wrap(
        f"{SHARED_TAG}: the same split with rollout replicas on the critic pool too (VERL_SPLIT_SHARED_ROLLOUT=1), "
        "generation on every GPU; predicted only, not measured on GPUs by us (see assumed: below)",
        width=WIDTH,
        initial_indent="  ",
        subsequent_indent="    ",
    )
    if advice.unranked:
        best = advice.recommended.name
        could = [c for c in advice.unranked if advice.break_even_push_s(c) > 0]
        tags = f"{SHARED_TAG} and {BOTH_TAG}" if any(c.both for c in advice.unranked) else SHARED_TAG
        out += textwrap.wrap(
            f"{tags} not ranked: the weight push is {shared.push_source}. "
            + (f"Would beat {best} if the push took under:" if could else f"None would beat {best}, even free."),
            width=WIDTH,
            initial_indent="  ",
            subsequent_indent="    ",
        )
        for cand in could:
            p = cand.prediction
            step = f"{p.step_s:.2f}s with a free push" if cand.both else f"{p.step_s:.2f}s + push"
            out.append(
                f"     {cand.name:<22} {p.actor_gpus:>5} {p.critic_gpus:>6} {p.phases['gen']:6.2f}s gen, "
                f"{step}: under {advice.break_even_push_s(cand):.2f} s"
            )
        if could and len(could) < len(advice.unranked):
            out.append(f"    the other {len(advice.unranked) - len(could)} would not, even free (--json lists them)")
    return out


# -- the checks every layout passed: the job's rules, the memory rule, the refusals ----------------
def job_lines(advice: Advice) -> list[str]:
    """The rules every placement was planned with, where they came from, and notes on them."""
    job = advice.job
    if job is None:
        return []
    out = []
    batch = job.requirements.batch
    rules = [f"whole rollout replicas of {job.rollout_gpus} GPU(s) per node ({job.rollout_source})"]
    if batch is not None:
        rules.append(f"the batch split over each pool (verl {batch.family}'s {batch.rules} rules)")
    if job.requirements.megatron:
        rules.append("Megatron meshes of " + ", ".join(mesh.role for mesh in job.requirements.megatron))
    out += _wrap("every placement is planned with the job's " + "; ".join(rules), "")
    for note in job.notes:
        out += _wrap(f"note: {note}", "  ")
    out.append("")
    return out


def memory_lines(advice: Advice) -> list[str]:
    """The recommended layout's memory per GPU at each pool's peak, or why it is not checked."""
    rule = advice.memory
    if rule is None:
        return []
    p = advice.recommended.prediction
    needs = rule.needs(p.actor_gpus, p.critic_gpus, p.colocated)
    known = [f"{n.pool} {n.need_gb:.1f} GiB at {n.moment}" for n in needs if n.need_gb is not None]
    if not known:
        return _wrap(f"memory: not estimated: {needs[0].parts}", "  ", "    ")
    against = (
        f"against {rule.gpu_gb:g} GiB ({rule.gpu_source})"
        if rule.gpu_gb is not None
        else "not checked: pass --gpu-memory"
        + (
            f" (the runs reserved up to {rule.runs_reserved_gb:.1f} GiB per GPU, a floor of its size)"
            if rule.runs_reserved_gb is not None
            else ""
        )
    )
    text = f"memory per GPU: {'; '.join(known)} (activations not counted; {rule.params_source}), {against}"
    out = _wrap(text, "  ", "    ")
    for need in needs:
        room = None if rule.gpu_gb is None else need.vllm_room(rule.gpu_gb)
        if room is not None and need.vllm_share is not None and room < need.vllm_share:
            out += _wrap(
                f"at generation the {need.pool} keeps {need.generation_gb:.1f} GiB of training state per GPU: set "
                f"actor_rollout_ref.rollout.gpu_memory_utilization to at most {room:.2f} there (the job has "
                f"{need.vllm_share:g}), or offload",
                "  ",
                "    ",
            )
    return out


def refused_rows(advice: Advice) -> list[str]:
    """Each layout the planner refused, with the first line of its reason (``--json`` has the whole)."""
    out = []
    if advice.rejected:
        out.append("  refused (the planner's rules, the memory rule; verl would not run them; --json has each whole):")
    for name, why in advice.rejected:
        out += _wrap(f"{name}: {short_reason(name, why)}", "    ", "      ")
    return out


def short_reason(name: str, why: str) -> str:
    """The planner's reason in a sentence: without the placement's own name, its first sentence or bullet."""
    lines = [line.strip() for line in why.strip().splitlines() if line.strip()]
    text = lines[0] if lines else why
    if text.endswith(":") and len(lines) > 1:  # a list of problems follows: the first says enough
        text = f"{text} {lines[1].lstrip('- ')}"
    head = text.split(": ", 1)
    if len(head) == 2 and head[0].endswith(f"{name.split()[0]!r}"):
        text = head[1]
    sentence = text.split(". ", 1)[0]
    return sentence if sentence.endswith(".") else sentence + "."


def rollout_tp_line(advice: Advice) -> list[str]:
    """The rollout TP the generation lane chose for the recommendation, when it differs from the job's."""
    gen = advice.model.lanes.get("gen")
    if gen is None or not hasattr(gen, "choose") or advice.job is None:
        return []
    p = advice.recommended.prediction
    chosen = gen.choose(p.actor_gpus, p.colocated)
    if chosen is None or chosen[0] == advice.job.rollout_gpus:
        return []
    return _wrap(
        f"with actor_rollout_ref.rollout.tensor_model_parallel_size={chosen[0]} (the job has "
        f"{advice.job.rollout_gpus}): the generation model finds it faster on this pool ({chosen[1]:.2f} s)",
        "  ",
        "    ",
    )


def plot_candidates(advice: Advice, path: str | os.PathLike[str]) -> None:
    """A PNG: one bar per candidate, its predicted step stacked by phase, fastest first."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    phases = (
        ("gen", f"generation (actor pool; {SHARED_TAG}: every GPU)"),
        ("prep", "old_log_prob + ref, values"),
        ("updates", "actor and critic updates"),
        ("other", f"fixed: reward, advantages, weight sync, the rest ({SHARED_TAG}: and the push, the offload)"),
    )
    candidates = advice.candidates
    fig, ax = plt.subplots(figsize=(min(max(8.0, 4.0 + 0.9 * len(candidates)), 20.0), 6.0))
    for x, cand in enumerate(candidates):
        bottom = 0.0
        for phase, _ in phases:
            value = cand.prediction.phases[phase]
            ax.bar(x, value, 0.7, bottom=bottom, color=PHASE_COLORS[phase])
            bottom += value
        ax.text(
            x,
            bottom,
            f"{cand.prediction.step_s:.1f}s\n{speedup_text(cand)}",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    labels = [c.placement if len(c.placement) <= 14 else c.placement.replace(";", ";\n") for c in candidates]
    labels = [
        f"{label}\n{c.name[len(c.placement) + 1 :]}" if c.name != c.placement else label
        for label, c in zip(labels, candidates, strict=True)
    ]
    labels = [f"{label}\n(stock)" if label == STOCK else label for label in labels]
    ax.set_xticks(range(len(candidates)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("predicted seconds per step")
    title = f"predicted step time per placement\n{advice.cluster.describe()}"
    if advice.stock_fit is not None:
        title += "\nstock does not fit with the job's batch: no speed-up (n/a)"
    ax.set_title(title, fontsize=10)
    handles = [Patch(color=PHASE_COLORS[p], label=label) for p, label in reversed(phases)]
    # Below the bars, so that they keep the figure's width.
    ax.legend(handles=handles, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2)
    ax.margins(y=0.15)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the legend below the axes too
    plt.close(fig)
