"""What a rendered serving pod may not do: run a shell over user text, or hold host privileges.

Shared by the builder tests (every sample and case) and the fuzz tests (every accepted random
spec). Each function returns the problems found, as strings naming the container, so that a test
asserts `== []` and a failure shows where.
"""

import re
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.builders.lifecycle import CACHE_MOUNT, CACHE_VOLUME

# Programs that would interpret a string as code: never the first word of a container command.
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ash", "ksh", "busybox", "env", "xargs", "eval"})
INTERPRETERS = frozenset({"python", "python3"})
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC", "hostUsers")


def pod_specs(children: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(`LeaderWorkerSet/name/role`, pod spec) of every pod template the children hold."""
    for child in children:
        if child.get("kind") != "LeaderWorkerSet":
            continue
        template = child["spec"]["leaderWorkerTemplate"]
        for role in ("leaderTemplate", "workerTemplate"):
            if role in template:
                yield f"LeaderWorkerSet/{child['metadata']['name']}/{role}", template[role]["spec"]


def expand(text: str, env: dict[str, str]) -> str:
    """A container arg as the kubelet expands it: `$$` is `$`, `$(NAME)` the value of a defined
    variable (left as written when undefined), any other `$` itself."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and (end := text.find(")", i)) != -1:
            name = text[i + 2 : end]
            out.append(env.get(name, text[i : end + 1]))
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    containers: list[dict[str, Any]] = [*pod.get("initContainers", []), *pod["containers"]]
    return containers


def _str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _user_text(kd: KimiDeployment, *, prefill: bool) -> tuple[list[str], dict[str, str]]:
    """The flags and variables a pod gets from the spec: spec.engineArgs and spec.env, and on a
    prefill group's pods spec.prefill's after them (a variable of both: the prefill value)."""
    args, env = list(kd.spec.engine_args), list(kd.spec.env)
    if prefill and kd.spec.prefill is not None:
        args += kd.spec.prefill.engine_args
        env += kd.spec.prefill.env
    return args, {e.name: e.value for e in env if e.value is not None}


def shell_problems(children: list[dict[str, Any]], kd: KimiDeployment) -> list[str]:
    """User text reaches containers only as whole argv items or env values, never via a shell."""
    problems: list[str] = []
    prefill_group = re.compile(rf"/{re.escape(kd.metadata.name)}-p\d+/")
    for where, pod in pod_specs(children):
        user_args, user_env = _user_text(kd, prefill=bool(prefill_group.search(where)))
        for container in _containers(pod):
            at = f"{where}/{container['name']}"
            command, args = container.get("command"), container.get("args", [])
            if not command or not _str_list(command) or not _str_list(args):
                problems.append(f"{at}: command and args must be lists of strings")
                continue
            program = PurePosixPath(command[0]).name
            if program in SHELLS or "-c" in command + args[:1]:
                problems.append(f"{at}: runs a shell or inline code: {command + args[:1]}")
            if program in INTERPRETERS and command[1:2] != ["-m"]:
                problems.append(f"{at}: an interpreter must run a module (-m), not code")
            # A command line composed as one string is how user text would reach a program
            # unquoted; the builders render single-token words ("python3", "-m", ...), which a
            # short argument such as "y" may well be a substring of.
            composed = [word for word in command if len(word.split()) > 1]
            if any(text and text in word for text in user_args for word in composed):
                problems.append(f"{at}: user engineArgs text inside the command")
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            defined = {name: value or "<from a source>" for name, value in env.items()}
            tail = [expand(arg, defined) for arg in args[len(args) - len(user_args) :]]
            if container["name"] == "vllm" and user_args and tail != user_args:
                problems.append(f"{at}: engineArgs are not the last argv items, unchanged")
            for name, value in user_env.items():
                if container["name"] == "vllm" and env.get(name) != value:
                    problems.append(f"{at}: spec.env {name} does not reach the pod unchanged")
    return problems


def _host_path_problems(where: str, pod: dict[str, Any]) -> list[str]:
    """The one host path a spec may opt into (spec.serving.compileCache.volume HostPath): the
    compile caches' folder, mounted at their one mount point; any other is a problem."""
    problems = []
    for volume in (v for v in pod.get("volumes", []) if "hostPath" in v):
        mounts = {
            m["mountPath"]
            for c in _containers(pod)
            for m in c.get("volumeMounts", [])
            if m["name"] == volume["name"]
        }
        cache = volume["name"] == CACHE_VOLUME and mounts <= {CACHE_MOUNT}
        if not cache or volume["hostPath"].get("type") != "DirectoryOrCreate":
            problems.append(f"{where}: hostPath volume {volume['name']}")
    return problems


def privilege_problems(children: list[dict[str, Any]]) -> list[str]:
    """No host namespaces, host paths, privileged containers, added capabilities or API token."""
    problems: list[str] = []
    for where, pod in pod_specs(children):
        problems += [f"{where}: {key}" for key in HOST_NAMESPACES if pod.get(key) is True]
        if pod.get("automountServiceAccountToken") is not False:
            problems.append(f"{where}: mounts a Kubernetes API token (vLLM needs none)")
        problems += _host_path_problems(where, pod)
        for container in _containers(pod):
            at = f"{where}/{container['name']}"
            context = container.get("securityContext", {})
            if context.get("privileged") or context.get("allowPrivilegeEscalation", True):
                problems.append(f"{at}: privileged or may escalate privileges")
            if context.get("capabilities", {}).get("add"):
                problems.append(f"{at}: adds capabilities {context['capabilities']['add']}")
            if any("hostPort" in port for port in container.get("ports", [])):
                problems.append(f"{at}: binds a host port")
    return problems
