"""Draft distillation without vLLM: the bundled prompt set, how the target's continuations
are asked for, and the command's edges. tests/serving/test_distill_real.py runs it for real."""

import json

import httpx
import pytest
from typer.testing import CliRunner

from app.cli.engine import models_app
from serving.engine import distill
from serving.engine.model_prep import draft_dir, target_dir


def test_the_prompt_set_has_disjoint_train_and_held_out_splits():
    train = distill.load_prompts("train")
    heldout = distill.load_prompts("heldout")

    assert len(train) >= 100
    assert len(heldout) >= 20
    assert len(set(train)) == len(train)
    assert len(set(heldout)) == len(heldout)
    assert not set(train) & set(heldout)
    assert len(distill.prompt_set_digest()) == 64


def _choice(*tokens: int) -> dict[str, object]:
    return {
        "logprobs": {
            "tokens": [f"token_id:{t}" for t in tokens],
            "top_logprobs": [{f"token_id:{t}": -0.1, "token_id:99": -2.5} for t in tokens],
        }
    }


def test_continuations_are_asked_for_as_token_ids_raw_and_in_the_chat_template():
    seen: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append({"path": request.url.path, **body})
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"tokens": [1, 2] if "prompt" in body else [7, 8, 9]})
        if body["temperature"] == 0:
            return httpx.Response(200, json={"choices": [_choice(5, 2)]})
        return httpx.Response(200, json={"choices": [_choice(6, 2), _choice(4)]})

    done = []
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        records = distill.collect_continuations(
            "http://engine",
            "target",
            ["Hi"],
            new_tokens=16,
            samples=2,
            temperature=0.7,
            seed=3,
            concurrency=1,
            on_done=lambda: done.append(1),
            client=client,
        )

    # Raw prompt (greedy, then two samples), then the chat form likewise.
    assert [(r["prompt_ids"], r["greedy"], r["tokens"]) for r in records] == [
        ([1, 2], True, [5, 2]),
        ([1, 2], False, [6, 2]),
        ([1, 2], False, [4]),
        ([7, 8, 9], True, [5, 2]),
        ([7, 8, 9], False, [6, 2]),
        ([7, 8, 9], False, [4]),
    ]
    assert records[0]["top"] == [[[5, -0.1], [99, -2.5]], [[2, -0.1], [99, -2.5]]]
    assert len(done) == 2
    tokenize = [s for s in seen if s["path"] == "/tokenize"]
    assert tokenize[0]["prompt"] == "Hi"
    assert tokenize[1]["messages"] == [{"role": "user", "content": "Hi"}]
    assert tokenize[1]["add_generation_prompt"] is True
    greedy, sampled = [s for s in seen if s["path"] == "/v1/completions"][:2]
    assert greedy["prompt"] == [1, 2]
    assert greedy["temperature"] == 0
    assert greedy["max_tokens"] == 16
    assert greedy["logprobs"] == distill.TEACHER_TOP_K
    assert greedy["return_tokens_as_token_ids"] is True
    assert (sampled["temperature"], sampled["n"], sampled["seed"]) == (0.7, 2, 3)


@pytest.mark.parametrize(
    ("command", "folder"),
    [
        ("distill-draft", lambda cache: distill.distilled_dir(cache, 6)),
        ("medusa-heads", lambda cache: distill.medusa_dir(cache, 3)),
    ],
)
def test_training_commands_are_no_ops_when_the_result_exists(tmp_path, command, folder):
    result_dir = folder(tmp_path.resolve())
    result_dir.mkdir()
    (result_dir / "config.json").write_text("{}")

    result = CliRunner().invoke(
        models_app, [command, "--cache", str(tmp_path), "--vllm-python", "/nonexistent"]
    )

    assert result.exit_code == 0
    assert str(result_dir) in result.output.replace("\n", "")


@pytest.mark.parametrize("command", ["distill-draft", "medusa-heads"])
def test_training_commands_need_the_prepared_models_before_starting_anything(tmp_path, command):
    result = CliRunner().invoke(
        models_app, [command, "--cache", str(tmp_path), "--vllm-python", str(tmp_path / "python")]
    )

    assert result.exit_code == 2
    assert "models prepare" in result.output
    assert not target_dir(tmp_path).exists()
    assert not draft_dir(tmp_path, 6).exists()


@pytest.mark.parametrize(
    ("command", "says"), [("distill-draft", "imitate the target"), ("medusa-heads", "Medusa")]
)
def test_training_commands_explain_themselves(command, says):
    result = CliRunner().invoke(models_app, [command, "--help"])

    assert result.exit_code == 0
    assert says in result.output
