"""``verl-split doctor``: what is installed, whether it is supported, and what is patched.

Each feature (``preflight.FEATURES``) is listed as available or not on the installed verl, with the
preflight's reason: the same check a run makes before Ray starts (``seam_catalogue.activate``), read from
verl's source. ``supported`` means the run this environment asks for would start: a verl at or above
the minimum, and every switched-on feature available (with verl-split off: split placement).

With ``--ray`` the same report is made inside a Ray worker process, which is where the
training actually runs: a plugin that is on in the shell but off in the workers is the
failure this command exists to catch.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Any

from verl_split import __version__
from verl_split.core import compat, settings
from verl_split.core.errors import ActivationFailed, VerlSplitError
from verl_split.plugin import source_patches


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument("--ray", action="store_true", help="also report from inside a Ray worker process")


def collect_report() -> dict[str, Any]:
    """Import verl as a run would (which activates the plugin if asked) and describe this process."""
    report: dict[str, Any] = {
        "pid": os.getpid(),
        "verl_split_version": __version__,
        "verl_version": compat.installed_version("verl"),
        "ray_version": compat.installed_version("ray"),
        "supported_verl": compat.supported_range_text(),
        "supported": False,
        "active": False,
        "features": [],
        "patches": [],
        "pending_patches": [],
        "verl_patches": {},  # patches/ in this verl: name -> built in / patched / yes / no
        "loaded_by": None,  # who imported verl-split's bootstrap in this process
        "optional_targets": {},  # patched modules this environment cannot import: module -> the package missing
        "problems": [],
    }
    accepted = False
    try:
        compat.check_supported()
        accepted = True
    except VerlSplitError as exc:
        report["problems"].append(str(exc))
    try:
        wanted = settings.read()
        shown = ("enabled", "placement", "overlap", "shared_rollout", "cpu", "trace_path")
        report["settings"] = {k: getattr(wanted, k) for k in shown}
    except VerlSplitError as exc:
        report["problems"].append(str(exc))
        return report
    if accepted:
        report["tested"] = compat.is_tested()
        report["default_trainer"] = _default_trainer()
        report["preflight"] = preflight_features(wanted)
        blocking = [f["reason"] for f in report["preflight"].values() if f["on"] and not f["available"]]
        report["problems"] += blocking
        report["supported"] = not blocking and all(
            f["available"] for k, f in report["preflight"].items() if k == "placement" or f["on"]
        )
    if report["verl_version"] is None:
        return report
    try:
        import verl  # noqa: F401  (verl loads our entry point, which activates us if asked)

        from verl_split import seam_catalogue
        from verl_split.plugin import activation

        # Import every patched module now, as a training run would, so that a seam that
        # cannot be applied to this verl shows up here instead of in the middle of a run. A module
        # that needs a package verl itself does not (0.7's megatron_workers: megatron-core) is
        # imported by verl only in runs that use it; without that package it stays pending, said below.
        for seam in seam_catalogue.SEAMS:
            if seam.name in activation.pending_patches():
                try:
                    importlib.import_module(seam.target)
                except ModuleNotFoundError as exc:
                    missing = OPTIONAL_TARGETS.get(seam.target)
                    if missing is None or not (exc.name or "").startswith(missing):
                        raise
                    report["optional_targets"][seam.target] = missing
        report["active"] = activation.is_active()
        report["features"] = activation.active_features()
        report["patches"] = activation.applied_patches()
        report["pending_patches"] = activation.pending_patches()
        report["loaded_by"] = source_patches.loaded_by()
        report["verl_patches"] = source_patches.report()
    except ActivationFailed as exc:
        message = str(exc.code)
        if not any(p in message for p in report["problems"]):  # the preflight's line is listed already
            report["problems"].append(message)
        return report
    except Exception as exc:  # verl itself does not import: its dependencies do not fit together
        report["problems"].append(verl_import_problem(report["verl_version"], exc))
        return report
    if wanted.any_active and not report["active"] and not report["problems"]:
        report["problems"].append(
            "VERL_SPLIT is set but verl did not load verl-split's entry point: check that verl-split is "
            "installed in this environment and that VERL_USE_EXTERNAL_PLUGINS does not exclude it."
        )
    return report


def preflight_features(wanted: settings.Settings) -> dict[str, dict[str, Any]]:
    """Each feature this verl has seams for: available or not (the preflight's reason), and on or off."""
    from verl_split import seam_catalogue
    from verl_split.plugin import activation

    seam_catalogue.install()  # with verl-split off nothing has installed it in this process
    report = activation.run_preflight()
    switches = frozenset(s for s, on in (("split", wanted.enabled), ("cpu", wanted.cpu)) if on)
    on = activation.features_on(switches, wanted)
    features = report.features()
    for key, feature in features.items():
        feature["on"] = key in on
    return features


def verl_import_problem(version: str, exc: BaseException) -> str:
    """One line for a verl that is installed but does not import, with the way out."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return (
        f"verl {version} is installed but `import verl` fails ({type(exc).__name__}: {first}). "
        "Its dependencies do not fit together: `python -m pip check` names the conflict; install versions "
        "verl accepts (the known case, verl 0.7/0.8 pin numpy<2 and pyarrow 26 needs numpy 2: "
        "`pip install 'pyarrow<26'`)."
    )


def _report_in_ray_worker() -> dict[str, Any]:
    """The report from a worker of the running Ray cluster, joined as is, or of a one-CPU local Ray.

    ``ray.init()`` joins the cluster of ``RAY_ADDRESS`` or of this node's last ``ray start``, and
    then refuses ``num_cpus`` and the like (``init`` in ``ray/_private/worker.py``, Ray 2.60: "When
    connecting to an existing cluster, num_cpus and num_gpus must not be provided"). So the address
    is looked up first, the way ``ray.init`` does (``services.canonicalize_bootstrap_address``), and a
    running cluster is joined without asking it for any resource; only without one a local Ray with
    one CPU is started, and shut down again. Where the worker ran is in ``ray_cluster``, and said.
    """
    import ray

    # Forward VERL_SPLIT* exactly as the plugin does for verl's own runs.
    runtime_env = {"env_vars": settings.forwarded_env_vars()}
    started_here = not ray.is_initialized()
    if not started_here:
        where = "the Ray this process had already joined"
    else:
        try:
            from ray._private.services import canonicalize_bootstrap_address

            address = canonicalize_bootstrap_address(None)
        except Exception:  # Ray's lookup moved or failed: start a local Ray, as before
            address = None
        if address:
            # No address argument: ray.init finds the same one, and turns Ray's token auth on for a cluster it
            # found on this node (init's ``maybe_enable_token_auth_if_token_available`` in Ray 2.60's
            # ray/_private/worker.py), as it would for verl's own run.
            ray.init(runtime_env=runtime_env, log_to_driver=False)
            where = f"the running Ray cluster at {address}, joined without asking it for resources"
        else:
            ray.init(num_cpus=1, runtime_env=runtime_env, include_dashboard=False, log_to_driver=False)
            where = "a local Ray with 1 CPU started for this check (no running cluster found)"
    print(f"verl-split doctor: Ray worker in {where}", file=sys.stderr)
    try:
        remote_report = ray.remote(num_cpus=0)(collect_report)
        report = ray.get(remote_report.remote())
        report["ray_cluster"] = where
        return report
    finally:
        if started_here:
            ray.shutdown()


_PATCH_NOTES = {
    (source_patches.PLUGIN_LOADER, "built in"): "verl 0.9+ loads verl.plugins entry points",
    (source_patches.PLUGIN_LOADER, "patched"): "this verl loads verl.plugins entry points: no start-up file needed",
    (source_patches.PLUGIN_LOADER, "no"): "verl-split loads through its start-up file",
    # The two check patches are optional: without them verl-split makes the same checks itself before Ray starts,
    # so "no" is no problem, and the line says so (it sits just above "healthy").
    (source_patches.PER_NODE_FIT, "no"): "optional, for source builds: verl-split checks this itself",
    (source_patches.BATCH_PER_POOL, "no"): "optional, for source builds: verl-split checks this itself",
}


#: Patched verl modules that import a package verl does not require, which verl imports only in runs that use it:
#: module -> the top-level package it needs.
OPTIONAL_TARGETS = {"verl.workers.megatron_workers": "megatron"}


def _default_trainer() -> str:
    """verl's default trainer here, as verl-split's features meet it: from verl's own config where it says
    (verl's neo branch is a 0.9.0.dev whose default is RayPPOTrainer again, ``trainer.use_v1=true`` refused)."""
    if compat.has_v1_trainer() and compat.v1_trainer_is_default() is not False:
        return "v1 PPOTrainer (trainer.use_v1=false: RayPPOTrainer)"
    if compat.has_v1_trainer():
        return "RayPPOTrainer (this verl's config: trainer.use_v1 false; its main_ppo refuses the v1 trainer)"
    return "RayPPOTrainer"


def print_text(report: dict[str, Any], where: str) -> None:
    yes_no = {True: "yes", False: "no"}
    print(f"[{where}, pid {report['pid']}]")
    print(f"  verl-split        {report['verl_split_version']}")
    tested = {True: "tested", False: "untested: newer than the tested releases", None: ""}[report.get("tested")]
    version = report["verl_version"] or "not installed"
    print(f"  verl              {version}  (supported: {report['supported_verl']}{'; ' + tested if tested else ''})")
    print(f"  ray               {report['ray_version'] or 'not installed'}")
    print(f"  supported         {yes_no[report['supported']]}")
    if report.get("default_trainer"):
        print(f"  trainer           {report['default_trainer']}")
    for index, feature in enumerate(report.get("preflight", {}).values()):
        label = "features" if index == 0 else ""
        state = "available" if feature["available"] else "NOT available"
        print(f"  {label:<17} {feature['label']:<23} {state}, {'on' if feature['on'] else 'off'}")
        if not feature["available"]:
            print(f"  {'':<17}   {feature['reason']}")
    features = ", ".join(report["features"])
    hint = ""
    if not report["active"] and not report.get("settings", {}).get("enabled"):
        hint = " (off: verl runs stock; set VERL_SPLIT=1 to switch verl-split on)"
    print(f"  active            {yes_no[report['active']]}" + (f" ({features})" if features else hint))
    print(f"  patches applied   {', '.join(report['patches']) or '-'}")
    if report["pending_patches"]:
        print(f"  patches pending   {', '.join(report['pending_patches'])}")
    for module, missing in report.get("optional_targets", {}).items():
        print(f"  {'':<17} {module}: not importable here ({missing} missing); patched if a run imports it")
    if report["loaded_by"]:
        print(f"  loaded by         {report['loaded_by']}")
    # The source patches of patches/ (patches/README.md), as this verl's code shows them.
    for index, (name, state) in enumerate(report.get("verl_patches", {}).items()):
        note = _PATCH_NOTES.get((name, state), "")
        label = "verl patches" if index == 0 else ""
        print(f"  {label:<17} {name}: {state}" + (f" ({note})" if note else ""))
    for problem in report["problems"]:
        print(f"  problem           {problem}")


def run(args: argparse.Namespace) -> int:
    report = collect_report()
    if args.ray:
        try:
            report["ray_worker"] = _report_in_ray_worker()
        except Exception as exc:  # a broken Ray set-up is exactly what doctor reports
            report["problems"].append(f"could not run a Ray worker: {type(exc).__name__}: {exc}")
        else:
            worker = report["ray_worker"]
            report["problems"] += [f"in the Ray worker: {p}" for p in worker["problems"]]
            if worker["active"] != report["active"]:
                report["problems"].append(
                    f"verl-split is {'on' if report['active'] else 'off'} here but "
                    f"{'on' if worker['active'] else 'off'} in the Ray worker."
                )
    healthy = not report["problems"]
    report["healthy"] = healthy
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print_text(report, "this process")
        if "ray_worker" in report:
            print_text(report["ray_worker"], "Ray worker")
        print(
            "healthy" if healthy else "NOT healthy: " + "; ".join(report["problems"]),
            file=sys.stderr if not healthy else sys.stdout,
        )
    return 0 if healthy else 1
