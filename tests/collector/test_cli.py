import pytest
import typer
from typer.testing import CliRunner

from app.cli import app
from app.cli.collect import parse_replica
from serving.collector.timeline import ReplicaInfo


def test_parse_replica_reads_identity_and_options():
    assert parse_replica("vllm-0,deployment=chat,name=r0,gpus=8,model=llama,spec=ngram,k=4") == (
        "vllm-0",
        ReplicaInfo(deployment="chat", replica="r0", gpus=8, model="llama", spec_method="ngram",
                    spec_k=4),
    )  # fmt: skip
    assert parse_replica("vllm-1") == ("vllm-1", ReplicaInfo(deployment="vllm-1", replica="vllm-1"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("vllm-0,colour=red", "'colour=red' in 'vllm-0,colour=red': expected one of"),
        ("vllm-0,gpus=two", "gpus and k are integers"),
        ("vllm-0,gpus=0", "gpus must be at least 1"),
        ("gpus=2", "the first item must be the replica's identity"),
    ],
)
def test_parse_replica_names_the_bad_item(text, message):
    with pytest.raises(typer.BadParameter, match=message):
        parse_replica(text)


def test_collect_help_says_what_it_trusts():
    result = CliRunner().invoke(app, ["collect", "--help"], terminal_width=200)
    assert result.exit_code == 0
    assert "--trust-callers" in result.output
    assert "trust their own callers" in result.output
