# Everything a fresh machine needs is set up by the targets themselves.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup docker images twins-up twins-down demo bench lint test unit status catalogues catalogue

setup: $(STAMP)

$(STAMP): requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

docker:
	@bash tests/twins/ensure-docker.sh

# The twin images (plain and prepared), built when their inputs changed.
images: setup docker
	$(PY) -m tests.twins images

twins-up: setup docker
	$(PY) -m tests.twins up

twins-down: setup docker
	$(PY) -m tests.twins down

demo: setup docker
	$(PY) -m tests.twins demo

bench: setup docker
	$(PY) -m tests.twins bench

# Lint, format check and type check (configured in pyproject.toml); `make test` runs it first.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Tests run in parallel (pytest-xdist): a whole test class per worker (`loadscope`; tests
# outside a class go by module), so a scenario's twins, made once per class, stay with it and
# the classes of one file spread over the workers; each worker boots its twins in a namespace
# of its own (tests/conftest.py). The scenarios mostly wait on booting twins and deploys, so
# more workers than cores pays.
# First the lint, the twin images and the unit tests side by side: building the images mostly
# waits on the network (debootstrap, apt), and neither the lint nor the unit tests need them.
# Then the scenarios, which wait for no image: the longest first (tests/scenario_seconds.json).
JOBS ?= 4
test: setup docker
	$(MAKE) --no-print-directory -j3 --output-sync=target lint images unit
	$(PY) -m pytest tests/scenarios -n $(JOBS) --dist loadscope --no-loadscope-reorder

# One worker more than the cores: the stand-in tests wait on processes they start (an engine's
# startup, a throttled download), and the extra worker runs meanwhile. On 2 cores, 3 workers
# took 59.7-71.3 s where 2 took 65.8-80.7 s (alternating runs, 2026-11-26).
unit: setup
	$(PY) -m pytest -m "not twins" -n $(shell echo $$(( $$(nproc) + 1 )))

# Read-only status table of the Sparks in $SPARK_INVENTORY (default inventory/sparks.yml).
status: setup
	$(VENV)/bin/pyinfra -y inventory.py status.py

# Flag catalogues of engine releases, read from their PyPI wheels (docs/engines.md):
#   make catalogues ENGINE=sglang VERSIONS="0.5.23 0.5.22" [WHEEL_DIR=dir] [DISCARD_WHEELS=1]
WHEEL_DIR ?= .cache/engine-wheels
catalogues: setup
	@test -n "$(ENGINE)" -a -n "$(VERSIONS)" || { \
		echo 'usage: make catalogues ENGINE=sglang|vllm VERSIONS="0.5.23 0.5.22" [WHEEL_DIR=dir] [DISCARD_WHEELS=1]'; \
		exit 2; }
	$(PY) -m tools.catalogue $(ENGINE) $(VERSIONS) --wheel-dir $(WHEEL_DIR) $(if $(DISCARD_WHEELS),--discard-wheels)

# The flag list of one image, read with docker as spark-fetch reads it on the Spark
# (docs/engines.md): make catalogue IMAGE=repo:tag[@sha256:...] [ENGINE=sglang|vllm]
catalogue: setup
	@test -n "$(IMAGE)" || { echo 'usage: make catalogue IMAGE=image [ENGINE=sglang|vllm]'; exit 2; }
	$(PY) -m tools.catalogue --image $(IMAGE) $(if $(ENGINE),--engine $(ENGINE))
