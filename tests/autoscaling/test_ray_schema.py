"""The YAML the advisor writes, read back and validated by Ray's own config classes
(``ray[serve]`` is a test dependency; the app never imports ray): Serve's
``ServeDeploySchema`` for ``serveConfigV2`` and ``AutoscalingConfig`` for each deployment's
``autoscaling_config``. Advice broken on purpose is refused by the same classes."""

import copy
import warnings
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from pydantic.warnings import PydanticDeprecatedSince20

with warnings.catch_warnings():
    # Ray 2.60 still passes extra keywords to pydantic's Field (update_type=...).
    warnings.simplefilter("ignore", PydanticDeprecatedSince20)
    from ray.serve.config import AutoscalingConfig
    from ray.serve.schema import ServeDeploySchema

from app.autoscaling.render import advice_yaml, serve_config_yaml
from app.autoscaling.rules import advise_ray, serve_config
from tests.autoscaling.test_ray_autoscaling import advice_input
from tests.slurm.test_partition_schedule import linear_tpot, week_curve


def _manifest(load: list[float]) -> dict[str, Any]:
    advice = advise_ray(advice_input(load), tpot_s=linear_tpot)
    manifest = yaml.safe_load(advice_yaml(advice, name="chat-llm"))
    assert isinstance(manifest, dict)
    return manifest


def _validate(serve: dict[str, Any]) -> ServeDeploySchema:
    schema = ServeDeploySchema.model_validate(serve)
    for application in serve["applications"]:
        for deployment in application["deployments"]:
            autoscaling = deployment["autoscaling_config"]
            AutoscalingConfig.model_validate(autoscaling)
            # Ray 2.60 drops keys it does not know without a word; a misspelt one is ours.
            unknown = set(autoscaling) - set(AutoscalingConfig.model_fields)
            if unknown:
                raise ValueError(f"not AutoscalingConfig fields: {sorted(unknown)}")
    return schema


def test_the_rayservice_fragment_validates_with_rays_own_classes() -> None:
    manifest = _manifest(week_curve())
    assert (manifest["apiVersion"], manifest["kind"]) == ("ray.io/v1", "RayService")
    serve = yaml.safe_load(manifest["spec"]["serveConfigV2"])

    schema = _validate(serve)

    (deployment,) = schema.applications[0].deployments
    assert deployment.name == "llama"
    assert deployment.max_ongoing_requests == 38
    autoscaling = AutoscalingConfig.model_validate(deployment.autoscaling_config)
    assert (autoscaling.min_replicas, autoscaling.max_replicas) == (1, 16)
    assert autoscaling.target_ongoing_requests == 30
    assert (autoscaling.upscale_delay_s, autoscaling.downscale_delay_s) == (30, 600)
    cluster = manifest["spec"]["rayClusterConfig"]
    assert cluster["enableInTreeAutoscaling"] is True
    assert cluster["autoscalerOptions"] == {"upscalingMode": "Default", "idleTimeoutSeconds": 60}
    (group,) = cluster["workerGroupSpecs"]
    assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"] == 8
    (container,) = group["template"]["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8"}


def test_the_summary_rides_along_as_comments() -> None:
    advice = advise_ray(advice_input(week_curve()), tpot_s=linear_tpot)
    text = advice_yaml(advice)
    assert text.startswith("# Ray Serve advice for deployment llama")
    assert '"num_speculative_tokens_per_batch_size": [[1, 11, 4], [12, 38, 0]]' in text
    assert yaml.safe_load(serve_config_yaml(advice)) == serve_config(advice)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("autoscaling_config", "min_replicas"), 17, "must be greater than or equal to min"),
        (("autoscaling_config", "target_ongoing_requests"), 0, "greater than 0"),
        (("autoscaling_config", "max_replicas"), 0, "greater than 0"),
        (("autoscaling_config", "upscale_delay_s"), -1, "greater than or equal to 0"),
        (("autoscaling_config", "initial_replicas"), 40, "initial_replicas"),
        (("max_ongoing_requests",), 0, "greater than 0"),
        (("num_replicas",), 3, "num_replicas is not allowed when autoscaling_config"),
    ],
)
def test_rays_classes_refuse_broken_advice(
    path: tuple[str, ...], value: object, message: str
) -> None:
    serve = yaml.safe_load(_manifest(week_curve())["spec"]["serveConfigV2"])
    _validate(serve)  # the advice as written is valid
    broken = copy.deepcopy(serve)
    target = broken["applications"][0]["deployments"][0]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ValidationError, match=message):
        _validate(broken)


def test_a_key_ray_does_not_know_is_caught_here_not_by_ray() -> None:
    serve = yaml.safe_load(_manifest(week_curve())["spec"]["serveConfigV2"])
    serve["applications"][0]["deployments"][0]["autoscaling_config"]["target_ongoing"] = 3
    ServeDeploySchema.model_validate(serve)  # Ray ignores it
    with pytest.raises(ValueError, match="target_ongoing"):
        _validate(serve)


@settings(max_examples=30, deadline=None)
@given(
    load=st.lists(
        st.floats(min_value=0, max_value=600, allow_nan=False), min_size=168, max_size=168
    )
)
def test_any_advice_validates(load: list[float]) -> None:
    serve = yaml.safe_load(_manifest(load)["spec"]["serveConfigV2"])
    _validate(serve)
