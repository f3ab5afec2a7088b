"""Draft distillation without vLLM: the bundled prompt set, how the target's continuations
are asked for, and the command's edges. tests/serving/test_distill_real.py runs it for real."""

import json

import httpx
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


def test_continuations_are_asked_for_as_token_ids_raw_and_in_the_chat_template():
    seen: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append({"path": request.url.path, **body})
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"tokens": [1, 2] if "prompt" in body else [7, 8, 9]})
        return httpx.Response(
            200,
            json={
                "choices": [
                    {
                        "logprobs": {
                            "tokens": ["token_id:5", "token_id:2"],
                            "top_logprobs": [
                                {"token_id:5": -0.1, "token_id:6": -2.5},
                                {"token_id:2": -0.01, "token_id:3": -4.0},
                            ],
                        }
                    }
                ]
            },
        )

    done = []
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        records = distill.collect_continuations(
            "http://engine",
            "target",
            ["Hi"],
            new_tokens=16,
            concurrency=1,
            on_done=lambda: done.append(1),
            client=client,
        )

    assert [r["prompt_ids"] for r in records] == [[1, 2], [7, 8, 9]]
    assert records[0]["tokens"] == [5, 2]
    assert records[0]["top"] == [[[5, -0.1], [6, -2.5]], [[2, -0.01], [3, -4.0]]]
    assert len(done) == 2
    tokenize = [s for s in seen if s["path"] == "/tokenize"]
    assert tokenize[0]["prompt"] == "Hi"
    assert tokenize[1]["messages"] == [{"role": "user", "content": "Hi"}]
    assert tokenize[1]["add_generation_prompt"] is True
    completion = next(s for s in seen if s["path"] == "/v1/completions")
    assert completion["prompt"] == [1, 2]
    assert completion["temperature"] == 0
    assert completion["max_tokens"] == 16
    assert completion["logprobs"] == distill.TEACHER_TOP_K
    assert completion["return_tokens_as_token_ids"] is True


def test_distill_draft_is_a_no_op_when_the_result_exists(tmp_path):
    result_dir = distill.distilled_dir(tmp_path, 6)
    result_dir.mkdir()
    (result_dir / "config.json").write_text("{}")

    result = CliRunner().invoke(models_app, ["distill-draft", "--cache", str(tmp_path)])

    assert result.exit_code == 0
    assert str(result_dir) in result.output.replace("\n", "")
    assert result_dir.name.endswith("-draft-L6-distilled")


def test_distill_draft_needs_the_prepared_models_before_starting_anything(tmp_path):
    result = CliRunner().invoke(
        models_app,
        ["distill-draft", "--cache", str(tmp_path), "--vllm-python", str(tmp_path / "python")],
    )

    assert result.exit_code == 2
    assert "models prepare" in result.output
    assert not target_dir(tmp_path).exists()
    assert not draft_dir(tmp_path, 6).exists()


def test_distill_draft_explains_itself():
    result = CliRunner().invoke(models_app, ["distill-draft", "--help"])

    assert result.exit_code == 0
    assert "imitate the target" in result.output
