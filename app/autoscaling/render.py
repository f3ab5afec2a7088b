"""The advice as a user applies it (a RayService YAML fragment), reads it (a summary) and
processes it (JSON). The YAML is plain data written with PyYAML; ray is never imported."""

import json
from typing import Any

import yaml

from app.autoscaling.rules import (
    RayAdvice,
    ray_advice_as_dict,
    ray_service_manifest,
    serve_config,
)
from app.domain.money import format_micros
from app.slurm.rules.partition_schedule import hour_label

__all__ = ["advice_json", "advice_text", "advice_yaml", "serve_config_yaml"]

DEFAULT_IMAGE = "rayproject/ray:2.60.0-gpu"


class _Block(str):
    """A string PyYAML writes as a literal block (``|``), as KubeRay's samples write
    ``serveConfigV2``."""


def _block(dumper: yaml.SafeDumper, text: _Block) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(text), style="|")


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Block, _block)


def _dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def serve_config_yaml(advice: RayAdvice) -> str:
    """The Serve config alone (``serve deploy`` takes it as it is)."""
    return _dump(serve_config(advice))


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _money(micros: int, currency: str) -> str:
    return f"{format_micros(micros)} {currency}"


def _speculation_lines(advice: RayAdvice) -> list[str]:
    inp = advice.input
    if inp.k == 0:
        return ["the deployment does not speculate (its fitted config has k = 0)"]
    lines = []
    for band in advice.speculation_bands:
        mode = f"speculation on ({inp.speculation})" if band.k else "speculation off"
        lines.append(f"{band.start}-{band.end} requests per replica: {mode}")
    schedule = json.dumps([list(band) for band in advice.speculation_bands])
    lines.append(f'vLLM: "num_speculative_tokens_per_batch_size": {schedule}')
    return lines


def advice_text(advice: RayAdvice) -> str:
    """A summary for a person: the settings, why, the speculation schedule and the cost."""
    inp = advice.input
    cur = inp.currency
    lines = [
        f"Ray Serve advice for deployment {inp.deployment} (application {inp.application})",
        f"TPOT p90 target {_ms(inp.tpot_target_s)}: a replica meets it up to "
        f"{advice.target_ongoing_requests} sessions (target_ongoing_requests); "
        f"max_ongoing_requests {advice.max_ongoing_requests}.",
        f"Replicas {advice.min_replicas}-{advice.max_replicas} "
        f"({advice.replicas_per_node} per node of {inp.gpus_per_node} GPUs); "
        f"KubeRay worker group {inp.worker_group}: minReplicas {advice.floor_nodes}, "
        f"maxReplicas {advice.peak_nodes} (of {inp.max_nodes} nodes today).",
        f"upscale_delay_s {inp.upscale_delay_s}, downscale_delay_s {inp.downscale_delay_s}, "
        f"idleTimeoutSeconds {inp.idle_timeout_s}.",
        "Speculation by requests per replica:",
        *(f"  {line}" for line in _speculation_lines(advice)),
        "Hours of the week (UTC), sized for the p90 of concurrent sessions:",
    ]
    for band in advice.bands:
        span = (
            "all week" if band.hours == 168 else f"{hour_label(band.start)}-{hour_label(band.end)}"
        )
        verdict = "" if band.meets_target else " TARGET NOT MET even on all nodes"
        lines.append(
            f"  {span} ({band.hours} h): {band.nodes} node(s), peak load {band.peak_load:g}, "
            f"speculation {'on' if band.speculate else 'off'}, TPOT p90 <= "
            f"{_ms(band.worst_tpot_s)}{verdict}"
        )
    lines += [
        f"Node-hour {_money(inp.node_hour_micros, cur)} (the ledger's). Per month "
        f"({inp.hours_per_month} h):",
        f"  with the advice        {_money(advice.monthly_cost_micros, cur)}",
        f"  static {inp.max_nodes} node(s)        {_money(advice.static_monthly_cost_micros, cur)}"
        f"  (saves {_money(advice.saved_monthly_micros, cur)})",
        f"  static at the peak ({advice.peak_nodes}) "
        f"{_money(advice.peak_static_monthly_cost_micros, cur)}",
    ]
    if advice.unmet_hours:
        lines.append(f"{len(advice.unmet_hours)} hour(s) of the week miss the target on all nodes.")
    return "\n".join(lines) + "\n"


def advice_yaml(advice: RayAdvice, *, name: str | None = None, image: str = DEFAULT_IMAGE) -> str:
    """A ``ray.io/v1`` RayService fragment to merge into the user's RayService, with the
    summary as comments above it."""
    manifest = ray_service_manifest(
        advice,
        name=name or advice.input.deployment,
        image=image,
        serve_config_text=_Block(serve_config_yaml(advice)),
    )
    header = [f"# {line}" if line else "#" for line in advice_text(advice).splitlines()]
    header.append(
        "# A fragment: merge into your RayService (headGroupSpec and the worker template's "
        "other fields are yours)."
    )
    return "\n".join(header) + "\n" + _dump(manifest)


def advice_json(advice: RayAdvice) -> str:
    return json.dumps(ray_advice_as_dict(advice), indent=2)
