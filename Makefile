# amends: developer entry points. `make demo` and `make test` do all set-up themselves.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha256sum pyproject.toml | cut -c1-16)


.PHONY: setup venv postgres kafka chromium dagster up demo test check test-unit test-nightly lint bench fuzz-nightly sim-nightly clean

setup: venv postgres kafka

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@rm -f $(VENV)/.installed-* && touch $@

postgres:
	bash scripts/ensure-postgres.sh

# The real Apache Kafka broker's jars, fetched once with mvn into var/kafka/ (git-ignored).
kafka: venv
	$(VENV)/bin/amends kafka fetch

# Debian's Chromium for the browser test (tests/e2e/test_ui_browser.py); never a downloaded browser.
chromium:
	bash scripts/ensure-chromium.sh

# The Dagster daemon and webserver on this checkout's dagster_home/ (needs AMENDS_KAFKA_BOOTSTRAP).
dagster: setup
	bash scripts/dagster.sh

# The worked example on PostgreSQL, a real broker and the Dagster daemon, with the UI on
# http://127.0.0.1:3000 until Ctrl-C (`make up UP_ARGS=--live` keeps new records coming).
up: setup
	$(VENV)/bin/amends up $(UP_ARGS)

demo: setup
	$(VENV)/bin/amends demo

# Test tiers (docs/testing.md). TEST_WORKERS pytest-xdist workers, each with its own database and
# broker; most of the suite waits on processes, so four workers keep two CPUs busy.
TEST_WORKERS ?= 4
PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal

# Every kind of test (what CI runs, the README's command), the 20 slowest named at the end.
test: setup chromium
	$(PYTEST) --durations=20

# Lint, then the fast tier: unit tests that are not slow (no server, under 3 minutes).
check: lint
	$(PYTEST) -m "unit and not slow" -q

test-unit: venv
	$(PYTEST) -m unit

# The long sizes (hours on 2 CPUs; not part of `make test`): property tests and the ahead soak with
# raised counts, then the atheris and Hypothesis fuzzing and the simulator soak below.
test-nightly: setup
	AMENDS_PROPERTY_EXAMPLES=3000 AMENDS_SIM_RUNS=20000 AMENDS_SIM_AHEAD_RUNS=20000 \
		$(PY) -m pytest -q -p no:cacheprovider --timeout 14400 tests/unit/test_properties.py tests/unit/test_sim_soak.py
	$(MAKE) fuzz-nightly sim-nightly

lint: venv
	$(VENV)/bin/ruff check amends_core amends_pipeline tests benchmarks
	$(VENV)/bin/mypy amends_core amends_pipeline

# Every figure beside the same figure of BENCH_BASELINE measured in the same run; the default is
# the commit before issue 16's throughput work (docs/benchmarks.md's targets table reads it).
BENCH_BASELINE ?= ee4da91
bench: setup
	$(VENV)/bin/amends bench --baseline-ref $(BENCH_BASELINE)

# Long hostile-input run for nightly CI (not part of `make test`): five million inputs under
# atheris (one million per target in tests/fuzz/, escaping inputs kept in var/fuzz/), then the
# Hypothesis fuzz tests with raised example counts (hours on one core).
fuzz-nightly: venv
	$(PY) -m tests.fuzz --runs 1000000 --jobs 2
	AMENDS_FUZZ_EXAMPLES=200000 AMENDS_ORACLE_MANY_EXAMPLES=20000 \
		$(PY) -m pytest tests/unit/test_wire_fuzz.py tests/unit/test_oracle_decode_fuzz.py tests/unit/test_hostile_input_fuzz.py \
		tests/unit/test_oracle_agreement.py tests/unit/test_fuzz_targets.py -q -p no:cacheprovider

# Long simulation soak for nightly CI (about 2.5 hours on 2 cores).
sim-nightly: venv
	$(VENV)/bin/amends sim --seed 1 --runs 200000 --jobs 2

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache
