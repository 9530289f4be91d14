"""What ``verl-split advise`` prints of the checks every layout passed: the job's rules as the planner read them,
the memory rule, and each layout refused with its reason. Below ``render``."""

from __future__ import annotations

import textwrap

from verl_split.tools.advise.advice import Advice

WIDTH = 100


def _wrap(text: str, indent: str, more: str | None = None) -> list[str]:
    return textwrap.wrap(text, width=WIDTH, initial_indent=indent, subsequent_indent=more or indent + "  ")


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
