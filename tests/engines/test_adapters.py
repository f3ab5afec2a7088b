"""The engine adapters: argv against each engine's documented CLI, TensorRT-LLM's options
file, method names, and the vLLM adapter unchanged behind the boundary."""

import json
from pathlib import Path

import pytest
import typer
import yaml
from pydantic import ValidationError

from app.cli.proxy import parse_replica
from app.domain.speculation_methods import EngineKind, has_draft_model, is_model_free
from serving.engine import launcher
from serving.engine.config import (
    BatchSizeBand,
    DraftModelSpeculation,
    Eagle3Speculation,
    EngineConfig,
    LookaheadSpeculation,
    MedusaSpeculation,
    MtpSpeculation,
    NgramSpeculation,
    TritonOptions,
    TrtllmOptions,
)
from serving.engines import SpecSource, adapter_for
from serving.engines.base import UnsupportedEngineConfig
from serving.engines.trtllm import llm_api_options
from serving.proxy.config import ReplicaSpec
from tests.conftest import FIXTURES

ENGINES = FIXTURES / "engines"
MODEL = "/models/Llama-3.1-8B-Instruct"
CONFIG_DIR = Path("/state")


def _documented(name: str) -> set[str]:
    lines = (ENGINES / name).read_text(encoding="utf-8").splitlines()
    return {line for line in lines if line.startswith("--")}


def _flags(argv: list[str]) -> set[str]:
    return {item for item in argv if item.startswith("--")}


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def _trtllm(**fields: object) -> EngineConfig:
    return EngineConfig.model_validate(
        {"engine": "trtllm", "model": MODEL, "device": "cuda", "port": 8000, **fields}
    )


def test_the_engine_is_vllm_unless_the_config_says_otherwise() -> None:
    config = EngineConfig(model=MODEL)
    assert config.engine == "vllm"
    assert ReplicaSpec(url="http://x:1").engine is EngineKind.vllm
    assert launcher.build_argv(config) == adapter_for("vllm").build_argv(
        config, config_dir=CONFIG_DIR
    )
    assert adapter_for("vllm").spec_source is SpecSource.response


def test_trtllm_serve_argv_uses_only_documented_flags() -> None:
    config = _trtllm(
        speculation=Eagle3Speculation(draft_model="/models/eagle3", k=4),
        trtllm=TrtllmOptions(
            tokenizer=MODEL, tp_size=4, max_batch_size=64, kv_cache_free_gpu_memory_fraction=0.9
        ),
    )

    argv = launcher.build_argv(config, state_dir=CONFIG_DIR)

    assert argv[:2] == ["trtllm-serve", MODEL]
    assert _flags(argv) <= _documented("trtllm_serve_flags.txt")
    assert _flag(argv, "--backend") == "pytorch"
    assert _flag(argv, "--tp_size") == "4"
    assert _flag(argv, "--max_batch_size") == "64"
    assert _flag(argv, "--kv_cache_free_gpu_memory_fraction") == "0.9"
    assert _flag(argv, "--port") == "8000"
    assert _flag(argv, "--extra_llm_api_options") == "/state/default.llm_api_options.yaml"


@pytest.mark.parametrize(
    ("speculation", "expected"),
    [
        (
            Eagle3Speculation(draft_model="/models/eagle3", k=3),
            {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": "/models/eagle3"},
        ),
        (
            NgramSpeculation(k=3, prompt_lookup_max=4),
            {"decoding_type": "NGram", "max_draft_len": 3, "max_matching_ngram_size": 4},
        ),
        (
            DraftModelSpeculation(draft_model="/models/1b", k=5),
            {"decoding_type": "DraftTarget", "max_draft_len": 5, "speculative_model": "/models/1b"},
        ),
        (
            MtpSpeculation(k=1),
            {"decoding_type": "MTP", "max_draft_len": 1, "num_nextn_predict_layers": 1},
        ),
    ],
)
def test_the_options_file_names_methods_as_tensorrt_llm_does(
    speculation: object, expected: dict[str, object], tmp_path: Path
) -> None:
    config = _trtllm(speculation=speculation)
    files = adapter_for("trtllm").launch_files(config, config_dir=tmp_path)

    (text,) = files.values()
    document = yaml.safe_load(text)
    assert document == {"enable_iter_perf_stats": True, "speculative_config": expected}
    assert list(files) == [tmp_path / "default.llm_api_options.yaml"]


def test_lookahead_carries_its_window_ngram_and_verification_set() -> None:
    config = _trtllm(
        speculation=LookaheadSpeculation(window=7, ngram=5, verification_set=3),
        trtllm=TrtllmOptions(backend="tensorrt", llm_api_options={"max_batch_size": 8}),
    )
    assert llm_api_options(config) == {
        "enable_iter_perf_stats": True,
        "speculative_config": {
            "decoding_type": "Lookahead",
            "max_window_size": 7,
            "max_ngram_size": 5,
            "max_verification_set_size": 3,
        },
        "max_batch_size": 8,
    }
    assert adapter_for("trtllm").spec_method(config) == ("Lookahead", 4)
    replica = ReplicaSpec.from_engine(config)
    assert (replica.engine, replica.spec_method, replica.spec_k) == ("trtllm", "Lookahead", 4)


def test_settings_the_engines_refuse_are_refused_up_front() -> None:
    with pytest.raises(ValidationError, match="TensorRT backend only"):
        _trtllm(speculation=LookaheadSpeculation())
    with pytest.raises(ValidationError, match="vLLM has no such method"):
        EngineConfig(model=MODEL, speculation=LookaheadSpeculation())
    with pytest.raises(ValidationError, match="Medusa is not among"):
        _trtllm(speculation=MedusaSpeculation(heads="/h", k=3))
    with pytest.raises(ValidationError, match="cannot change or disable speculation"):
        _trtllm(
            speculation=NgramSpeculation(k=4),
            batch_size_schedule=(BatchSizeBand(start=1, end=4, k=4),),
        )
    with pytest.raises(ValidationError, match="needs triton options"):
        EngineConfig(engine="triton", model=MODEL)
    with pytest.raises(UnsupportedEngineConfig, match="CUDA"):
        launcher.check_supported(_trtllm(device="cpu"))


def test_a_missing_trtllm_serve_is_reported_before_anything_starts(tmp_path: Path) -> None:
    config = _trtllm(trtllm=TrtllmOptions(executable=str(tmp_path / "no-trtllm-serve")))
    with pytest.raises(launcher.EngineStartError, match="no-trtllm-serve not found"):
        launcher.start(config, tmp_path / "log", state_dir=tmp_path)
    assert not (tmp_path / "default.llm_api_options.yaml").exists()


def test_triton_openai_frontend_argv_uses_only_documented_flags() -> None:
    config = EngineConfig(
        engine="triton",
        model="tensorrt_llm_bls",
        python="/usr/bin/python3",
        device="cuda",
        port=9000,
        speculation=Eagle3Speculation(draft_model="(built into the engine)", k=4),
        triton=TritonOptions(model_repository="/models/repo", tokenizer=MODEL),
    )
    adapter = adapter_for("triton")

    argv = launcher.build_argv(config)

    assert argv[:2] == ["/usr/bin/python3", "openai_frontend/main.py"]
    assert _flags(argv) <= _documented("triton_openai_frontend_flags.txt")
    assert _flag(argv, "--model-repository") == "/models/repo"
    assert _flag(argv, "--backend") == "tensorrtllm"
    assert _flag(argv, "--openai-port") == "9000"
    assert adapter.health_path == "/health/ready"
    assert adapter.spec_source is SpecSource.unavailable
    assert adapter.spec_method(config) == ("Eagle3", 4)


def test_vllm_speaks_the_new_methods_in_its_own_names() -> None:
    eagle = EngineConfig(model=MODEL, speculation=Eagle3Speculation(draft_model="/e", k=2))
    argv = launcher.build_argv(eagle)
    assert json.loads(_flag(argv, "--speculative-config")) == {
        "method": "eagle3",
        "model": "/e",
        "num_speculative_tokens": 2,
    }
    mtp = EngineConfig(model=MODEL, speculation=MtpSpeculation(k=1))
    assert launcher.speculative_config(mtp) == {"method": "mtp", "num_speculative_tokens": 1}


@pytest.mark.parametrize(
    ("method", "drafts_with_a_model"),
    [
        ("Lookahead", False),
        ("lookahead", False),
        ("NGram", False),
        ("ngram", False),
        ("suffix", False),
        ("SA", False),
        ("none", False),
        ("Eagle3", True),
        ("eagle3", True),
        ("MTP", True),
        ("DraftTarget", True),
        ("draft_model", True),
        ("medusa", True),
    ],
)
def test_only_methods_with_drafter_weights_have_a_draft_model(
    method: str, drafts_with_a_model: bool
) -> None:
    assert has_draft_model(method) is drafts_with_a_model
    assert is_model_free(method) is (not drafts_with_a_model and method != "none")


def test_the_proxy_cli_takes_the_engine_of_a_replica() -> None:
    replica = parse_replica("http://trtllm:8000,engine=trtllm,spec=Lookahead,k=3,gpus=4")
    assert (replica.engine, replica.spec_method, replica.spec_k) == ("trtllm", "Lookahead", 3)
    assert parse_replica("http://v:8100").engine is EngineKind.vllm
    with pytest.raises(typer.BadParameter, match="engine"):
        parse_replica("http://x:1,engine=sglang")
