"""The three lines ``verl-split advise`` ends on: what to use, what it should gain and how sure that is, the run to
do next. The details above them say why; this is what a user acts on.

Confidence, from what the prediction rests on:

* **low**: a lane's scaling is assumed (measured on one pool size), or the runs are of different jobs;
* **medium**: fitted, but on a pool size the flags gave (the run's log does not say its GPUs), or the runner-up is
  within the runs' step-to-step spread, or the recommendation is a switch not measured on GPUs (``+defer``,
  ``+shared``), or stock has no baseline on this cluster;
* **high**: fitted to two or more pool sizes, a clear margin, nothing assumed of the runs.
"""

from __future__ import annotations

from verl_split.tools.advise.advice import Advice
from verl_split.tools.advise.candidates import STOCK

LOW, MEDIUM, HIGH = "low", "medium", "high"


def confidence(advice: Advice) -> tuple[str, str]:
    """(level, why in a few words)."""
    best = advice.recommended
    low = []
    if advice.model.assumed():
        low.append("scaling assumed from one pool size")
    if any(flag.startswith("the runs are of different jobs") for flag in advice.flags):
        low.append("runs of different jobs")
    if low:
        return LOW, ", ".join(low)
    medium = []
    if any("the scaling rests on that assumption" in flag for flag in advice.flags):
        medium.append("a run's GPUs taken from the flags")
    if advice.caveat:
        medium.append("the runner-up is within the runs' spread")
    if best.deferred or best.shared_rollout:
        medium.append("its switches are predicted, not measured on GPUs")
    if advice.stock_fit is not None:
        medium.append("stock has no baseline here")
    if medium:
        return MEDIUM, ", ".join(medium)
    return HIGH, "fitted to two or more pool sizes, with a clear margin"


def summary_lines(advice: Advice) -> list[str]:
    """Recommendation; expected speed-up with its confidence; the run to do next."""
    best = advice.recommended
    unfit = advice.stock_fit
    level, why = confidence(advice)
    step = best.prediction.step_s
    stock_micro = unfit.predicted_step_s if unfit is not None and unfit.micro else None
    overrides = unfit.overrides() if unfit is not None else ""
    if stock_micro is not None and stock_micro < step:
        # Stock with smaller micro-batches is the same optimisation and beats every split that fits as the job is.
        use = f"stock verl with {overrides} (VERL_SPLIT unset), not the best split, {best.name}"
        gain = f"{step / stock_micro:.2f}x against {best.name} ({stock_micro:.2f} s a step vs {step:.2f} s)"
        after = f"a few steps of stock with {overrides} on {advice.cluster.describe()}"
        return [f"recommendation: {use}", f"expected: {gain}; confidence {level} ({why})", f"next run: {after}"]
    use = "stock verl (VERL_SPLIT unset): no split beats it here" if best.placement == STOCK else best.command()
    if best.speedup_vs_stock is not None:
        gain = f"{best.speedup_vs_stock:.2f}x against stock ({step:.2f} s a step)"
    elif stock_micro is not None:
        gain = (
            f"n/a against stock as configured (it does not fit); {stock_micro / step:.2f}x against stock with "
            f"{overrides} ({step:.2f} s vs {stock_micro:.2f} s)"
        )
    else:
        gain = f"n/a against stock, which does not fit this cluster ({step:.2f} s a step)"
    return [f"recommendation: {use}", f"expected: {gain}; confidence {level} ({why})", f"next run: {next_run(advice)}"]


def next_run(advice: Advice) -> str:
    """The run that would most improve the advice: the one that replaces an assumption, else one that checks it."""
    if advice.next_run:
        return advice.next_run
    best = advice.recommended
    if best.placement == STOCK:
        return "none needed; a split run with VERL_SPLIT_OVERLAP=off would test the prediction"
    return (
        f"a few steps of the command above on {advice.cluster.describe()}, then advise again with its log beside "
        "these to check the prediction"
    )
