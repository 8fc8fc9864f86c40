"""A group's life in its pods (builders/lifecycle.py): every vLLM container finds its compile, JIT
and autotune caches on one volume, in a folder only pods of the same image and weights share;
vLLM reads the weights as spec.serving says; a leaving leader drains inside its grace."""

import typing
from typing import Any

import pytest

from kimi_operator.api.validation import check_document
from kimi_operator.builders import OperatorDefaults, build_caches, build_children, preview_weights
from tests.support.corpus import CACHE_VARIABLES
from tests.support.pods import pod_specs, privilege_problems
from tests.support.specs import edited

MOUNT = "/var/cache/vllm-kimi"


def _children(doc: dict[str, Any], defaults: OperatorDefaults | None = None) -> list[Any]:
    report = check_document(doc)
    assert report.deployment is not None, [str(p) for p in report.problems]
    kd = report.deployment
    chosen = defaults or OperatorDefaults()
    return build_children(kd, chosen) + build_caches(kd, chosen, preview_weights(kd))


def _containers(children: list[Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, vllm container) of every pod template."""
    return [
        (pod, c) for _, pod in pod_specs(children) for c in pod["containers"] if c["name"] == "vllm"
    ]


def _cache_mount(pod: dict[str, Any], container: dict[str, Any]) -> tuple[Any, Any]:
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == MOUNT]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    return volume, mount


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container["env"]}


def _claims(children: list[Any]) -> list[str]:
    return [c["metadata"]["name"] for c in children if c["kind"] == "PersistentVolumeClaim"]


def test_a_default_render_mounts_a_shared_claim_with_every_cache_under_it() -> None:
    children = _children(edited({"spec.replicas": 2}))
    containers = _containers(children)
    assert len(containers) == 4  # two groups, leader and worker each
    for pod, container in containers:
        volume, _mount = _cache_mount(pod, container)
        assert volume["persistentVolumeClaim"] == {"claimName": "kimi-compile-cache"}
        env = _env(container)
        assert env.keys() >= CACHE_VARIABLES
        for name in CACHE_VARIABLES:
            assert env[name].startswith(MOUNT + "/"), name
        assert len({env[name] for name in CACHE_VARIABLES}) == len(CACHE_VARIABLES)
        assert env["VLLM_ENABLE_STARTUP_PLAN"] == "1"
    # One folder for all of them: the same image and weights.
    assert len({_cache_mount(p, c)[1]["subPath"] for p, c in containers}) == 1
    (claim,) = [c for c in children if c["kind"] == "PersistentVolumeClaim"]
    assert claim["metadata"]["name"] == "kimi-compile-cache"
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert "app.kubernetes.io/instance" not in claim["metadata"]["labels"]  # shared


def _folder(doc: dict[str, Any], defaults: OperatorDefaults | None = None) -> str:
    pod, container = _containers(_children(doc, defaults))[0]
    folder: str = _cache_mount(pod, container)[1]["subPath"]
    return folder


def test_only_pods_of_the_same_image_and_weights_share_a_folder() -> None:
    base = _folder(edited({}))
    # Another deployment of the same image and weights, other settings: the same folder (vLLM's
    # own hash keeps their compiled graphs apart inside it).
    assert _folder(edited({"metadata.name": "other", "spec.decode.maxNumSeqs": 4})) == base
    assert _folder(edited({"spec.serving.startupTimeoutMinutes": 120})) == base
    assert _folder(edited({"spec.image": "registry.example.com/vllm-kimi:0.33.1"})) != base
    assert _folder(edited({}), OperatorDefaults(serving_image="example.com/vllm:2")) != base
    other_weights = {"pvc": {"claimName": "weights", "subPath": "Kimi-K3-0905"}}
    assert _folder(edited({"spec.model.source": other_weights})) != base
    hub = {"huggingface": {"repo": "moonshotai/Kimi-K3", "revision": "a" * 40}}
    newer = {"huggingface": {"repo": "moonshotai/Kimi-K3", "revision": "b" * 40}}
    assert _folder(edited({"spec.model.source": hub})) != _folder(
        edited({"spec.model.source": newer})
    )


def test_a_named_claim_is_mounted_and_none_is_created() -> None:
    children = _children(edited({"spec.serving.compileCache": {"claimName": "my-rwx"}}))
    for pod, container in _containers(children):
        volume, _ = _cache_mount(pod, container)
        assert volume["persistentVolumeClaim"] == {"claimName": "my-rwx"}
    assert _claims(children) == []


def test_host_path_is_a_folder_per_key_on_the_node() -> None:
    cache = {"volume": "HostPath", "hostPath": "/mnt/nvme/cache/"}
    children = _children(edited({"spec.serving.compileCache": cache}))
    paths = set()
    for pod, container in _containers(children):
        volume, mount = _cache_mount(pod, container)
        assert "subPath" not in mount
        assert volume["hostPath"]["type"] == "DirectoryOrCreate"
        paths.add(volume["hostPath"]["path"])
        assert _env(container)["VLLM_ENABLE_STARTUP_PLAN"] == "1"
    (path,) = paths
    assert path.startswith("/mnt/nvme/cache/")
    assert "//" not in path
    assert path.rsplit("/", 1)[1] == _folder(edited({}))  # the key, as the claim's subPath
    assert _claims(children) == []
    assert privilege_problems(children) == []  # the one host path a person may opt into
    for _, container in _containers(children):  # the folder mounted anywhere else is not it
        container["volumeMounts"].append({"name": "compile-cache", "mountPath": "/etc"})
    assert len(privilege_problems(children)) == len(_containers(children))


def test_disabled_renders_no_volume_variables_or_claim() -> None:
    children = _children(edited({"spec.serving.compileCache": {"volume": "Disabled"}}))
    for _pod, container in _containers(children):
        assert not [m for m in container["volumeMounts"] if m["mountPath"] == MOUNT]
        assert not CACHE_VARIABLES & _env(container).keys()
        assert "VLLM_ENABLE_STARTUP_PLAN" not in _env(container)
    assert _claims(children) == []


@pytest.mark.parametrize(
    ("serving", "flags"),
    [
        ({}, []),
        ({"loadFormat": "fastsafetensors"}, ["--load-format", "fastsafetensors"]),
        (
            {"loadFormat": "safetensors", "safetensorsLoadStrategy": "prefetch"},
            ["--load-format", "safetensors", "--safetensors-load-strategy", "prefetch"],
        ),
        ({"safetensorsLoadStrategy": "eager"}, ["--safetensors-load-strategy", "eager"]),
    ],
)
def test_load_format_reaches_leader_and_workers(serving: dict[str, Any], flags: list[str]) -> None:
    doc = edited({f"spec.serving.{key}": value for key, value in serving.items()})
    for _, container in _containers(_children(doc)):
        args = container["args"]
        got = [
            word
            for i, word in enumerate(args)
            for flag in ("--load-format", "--safetensors-load-strategy")
            if word == flag or (i and args[i - 1] == flag)
        ]
        assert got == flags


def test_a_strategy_with_fastsafetensors_is_refused_naming_the_field() -> None:
    serving = {"loadFormat": "fastsafetensors", "safetensorsLoadStrategy": "prefetch"}
    doc = edited({f"spec.serving.{key}": value for key, value in serving.items()})
    problems = [str(p) for p in check_document(doc).problems]
    assert len(problems) == 1, problems
    assert "spec.serving.safetensorsLoadStrategy" in problems[0]


@pytest.mark.parametrize(
    "arg", ["--load-format=fastsafetensors", "--shutdown-timeout", "--safetensors-load-strategy"]
)
def test_engine_args_may_not_set_what_spec_serving_owns(arg: str) -> None:
    problems = [str(p) for p in check_document(edited({"spec.engineArgs": [arg]})).problems]
    assert problems
    assert all("spec.engineArgs" in p for p in problems), problems
    assert any("spec.serving" in p for p in problems), problems


@pytest.mark.parametrize("name", sorted(CACHE_VARIABLES))
def test_spec_env_may_not_move_a_cache(name: str) -> None:
    doc = edited({"spec.env": [{"name": name, "value": "/tmp/elsewhere"}]})
    problems = [str(p) for p in check_document(doc).problems]
    assert len(problems) == 1, problems
    assert "spec.env" in problems[0]
    assert "compileCache" in problems[0]


@pytest.mark.parametrize("drain", [0, 45, 3600])
def test_pods_drain_inside_their_termination_grace(drain: int) -> None:
    children = _children(edited({"spec.serving.drainSeconds": drain}))
    for pod, container in _containers(children):
        args = container["args"]
        assert args[args.index("--shutdown-timeout") + 1] == str(drain)
        grace = pod["terminationGracePeriodSeconds"]
        sleep = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
        # The sleep out of routing and vLLM's whole drain end before the kubelet kills.
        assert grace > sleep + drain
    leaders = [c for _, c in _containers(children) if "startupProbe" in c]
    assert leaders
    assert all(c["lifecycle"]["preStop"]["sleep"]["seconds"] > 0 for c in leaders)


def test_drain_seconds_is_bounded_naming_the_field() -> None:
    problems = [
        str(p) for p in check_document(edited({"spec.serving.drainSeconds": 7200})).problems
    ]
    assert len(problems) == 1, problems
    assert "spec.serving.drainSeconds" in problems[0]


def test_the_load_choices_are_vllms() -> None:
    """The spec's choices, as vLLM 0.33.0 declares them (the gate runs each through its parser
    and config: tests/gate, corpus cases serving-load-*)."""
    pytest.importorskip("vllm", reason="vLLM 0.33.0 is installed by `make setup`")
    from vllm.config.load import SafetensorsLoadStrategy  # noqa: PLC0415
    from vllm.model_executor.model_loader import LoadFormats  # noqa: PLC0415

    from kimi_operator.api.lifecycle import LifecycleFields  # noqa: PLC0415

    fields = LifecycleFields.model_fields
    formats = typing.get_args(fields["load_format"].annotation)
    strategies = typing.get_args(typing.get_args(fields["safetensors_load_strategy"].annotation)[0])
    assert set(formats) <= set(typing.get_args(LoadFormats))
    assert set(strategies) <= set(typing.get_args(SafetensorsLoadStrategy))
