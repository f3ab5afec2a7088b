"""The README documents every setting (datasette's test_docs idea)."""

from app.settings import Settings
from tests.conftest import ROOT


def test_every_setting_is_in_the_readme_table() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in Settings.model_fields:
        assert f"| `SPECLEDGER_{name.upper()}` |" in readme, name


def test_readme_quick_start_has_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme
    assert "make test" in readme


def test_the_readme_prototype_engine_config_is_valid() -> None:
    import json
    import re

    from serving.engine import launcher
    from serving.engine.config import EngineConfig

    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```json\n(.*?)```", readme[readme.index("prototype") :], re.S)
    assert block is not None
    config = EngineConfig.model_validate(json.loads(block.group(1)))
    argv = launcher.build_argv(config)
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert (config.device, config.model) == ("cuda", "meta-llama/Llama-3.1-8B-Instruct")
    assert spec["model"] == "meta-llama/Llama-3.2-1B-Instruct"
