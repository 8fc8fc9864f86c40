"""`kimi-operator validate | render | crd`: output shapes and exit codes."""

import io
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

import kimi_operator
from kimi_operator.cli import main, own_namespace
from tests.support.repo import ROOT
from tests.support.specs import edited

SAMPLES = sorted((ROOT / "crds" / "samples").glob("*.yaml"))
REJECTED = sorted((ROOT / "crds" / "samples" / "rejected").glob("*.yaml"))


def write(tmp_path: Path, name: str, *docs: object) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], list[str]]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err.splitlines()


def test_valid_file_prints_valid_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "k3.yaml", edited({}))
    assert run(capsys, "validate", path) == (0, [f"{path}: valid"], [])


def test_every_problem_is_one_line_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = edited(
        {
            "spec.gpus": "16",
            "spec.decode.cudaGraphMode": "PIECEWISE",
            "spec.kvCache.dtype": "bfloat16",
            "spec.engineArgs": ["--enable-lora", "--tensor-parallel-size", "8"],
        }
    )
    path = write(tmp_path, "bad.yaml", doc)
    code, out, err = run(capsys, "validate", path)
    assert (code, err) == (1, [])
    assert out == [
        f'{path}: spec.gpus: must be an integer, not a string (got "16"; allowed: 8, 16)',
        f'{path}: spec.decode.cudaGraphMode: is not one of the allowed values (got "PIECEWISE"; '
        "allowed: FULL, FULL_DECODE_ONLY, FULL_AND_PIECEWISE)",
        f"{path}: spec.kvCache.dtype: decode.backend latency_specialized reads FP8 e4m3 KV cache "
        'rows only (got "bfloat16"; allowed: fp8, fp8_e4m3; or decode.backend auto)',
        f"{path}: spec.engineArgs: --tensor-parallel-size, -tp may not be set here: the "
        "tensor-parallel size is spec.gpus "
        '(got ["--tensor-parallel-size"]; allowed: other vLLM flags)',
        f"{path}: spec.engineArgs: --enable-lora and other LoRA flags may not be set here: the "
        "latency-specialized decode rejects LoRA "
        '(got ["--enable-lora"]; allowed: other vLLM flags)',
    ]


def test_every_problem_in_one_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Type errors do not hide the rules on what can still be read: list rules run on the
    items without errors, a rule on a mistyped enum field runs for each of its allowed values."""
    doc = edited(
        {
            "spec.gpus": "16",
            "spec.replica": 2,
            "spec.gpusPerNode": 8,  # fine with gpus 8: not reported while gpus is unreadable
            "spec.decode": {"contextParallelSize": 2},  # wrong with gpus 8 and with 16
            "spec.kvCache": {"gpuMemoryUtilizationPercent": 0.9},
            "spec.engineArgs": ["--port 9000", 8, "--max-num-batch-tokens", "8192"],
            "spec.env": [{"name": "X", "value": 1}, {"name": "KIMI_METRICS_PORT", "value": "1"}],
        }
    )
    code, out, _ = run(capsys, "validate", write(tmp_path, "bad.yaml", doc))
    assert code == 1
    said = [line.split(": ", 2)[1] for line in out]
    assert sorted(said) == sorted(
        [
            "spec.gpus",
            "spec.replica",
            "spec.decode.contextParallelSize",
            "spec.kvCache.gpuMemoryUtilizationPercent",
            "spec.engineArgs[1]",
            "spec.engineArgs",
            "spec.engineArgs",
            "spec.env[0].value",
            "spec.env",
        ]
    )
    assert any("spec.replica: is not a field here; did you mean replicas?" in x for x in out)
    assert any("one flag or value per list item" in line for line in out)
    assert any("did you mean --max-num-batched-tokens?" in line for line in out)


def test_other_objects_in_a_file_are_skipped_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "inference"}}
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    path = write(tmp_path, "all.yaml", namespace, edited({}), config)
    assert run(capsys, "validate", path) == (
        0,
        [
            f'{path}[1]: skipped (apiVersion "v1", kind "Namespace", name "inference"): not a '
            "KimiDeployment",
            f"{path}[2]: valid",
            f'{path}[3]: skipped (apiVersion "v1", kind "ConfigMap", name "c"): not a '
            "KimiDeployment",
        ],
        [],
    )
    code, out, err = run(capsys, "render", path)
    assert code == 0
    assert len(err) == 2
    assert "kind: LeaderWorkerSet" in out


def test_a_file_without_a_kimi_deployment_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "deploy.yaml", {"apiVersion": "apps/v1", "kind": "Deployment"})
    code, out, err = run(capsys, "validate", path)
    assert (code, err) == (2, [f"error: {path}: no KimiDeployment in it"])
    skipped = 'skipped (apiVersion "apps/v1", kind "Deployment"): not a KimiDeployment'
    assert out == [f"{path}: {skipped}"]


def test_missing_and_unknown_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = edited({"spec.gpus": None, "spec.tensorParallelSize": 16})
    path = write(tmp_path, "bad.yaml", doc)
    code, out, _ = run(capsys, "validate", path)
    assert code == 1
    assert f"{path}: spec.gpus: is required (allowed: 8, 16)" in out
    assert any(
        line.startswith(
            f"{path}: spec.tensorParallelSize: is not a field here (got 16; allowed: model, "
        )
        for line in out
    )


def test_warning_keeps_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    draft = {"draftSource": {"pvc": {"claimName": "w"}}, "numSpeculativeTokens": 7}
    path = write(
        tmp_path, "big.yaml", edited({"spec.speculative": draft, "spec.decode.maxNumSeqs": 16})
    )
    code, out, _ = run(capsys, "validate", path)
    assert code == 0
    assert out[0].startswith(
        f"{path}: warning: spec.decode.maxNumSeqs: decode batches of up to 16 x (1 + 7) = 128"
    )
    assert out[1] == f"{path}: valid"


def test_several_documents_and_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    multi = write(tmp_path, "multi.yaml", edited({}), edited({"spec.gpus": 12}))
    single = write(tmp_path, "one.yaml", edited({}))
    code, out, _ = run(capsys, "validate", multi, single)
    assert code == 1
    assert out[0] == f"{multi}[1]: valid"
    assert out[1].startswith(f"{multi}[2]: spec.gpus: ")
    assert out[2] == f"{single}: valid"


def test_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(yaml.safe_dump(edited({}))))
    assert run(capsys, "validate", "-") == (0, ["<stdin>: valid"], [])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("spec: [unclosed", "not valid YAML at line 2, column 1: did not find expected"),
        ("", "no YAML documents"),
        ("- a list\n", "expected a mapping, got list"),
        (
            "apiVersion: kimi-operator.io/v1\nkind: KimiDeployment\n",
            "expected apiVersion kimi-operator.io/v1alpha1",
        ),
        ("a: b\na: c\n\x00", "not valid YAML"),
    ],
    ids=["malformed", "empty", "list", "wrong-version", "binary"],
)
def test_unreadable_input_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(content)
    code, out, err = run(capsys, "validate", str(path))
    assert (code, out, len(err)) == (2, [], 1)
    assert err[0].startswith(f"error: {path}")
    assert message in err[0]


def test_missing_file_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run(capsys, "validate", str(tmp_path / "nope.yaml"))
    assert (code, out) == (2, [])
    assert err == [f"error: {tmp_path / 'nope.yaml'}: cannot read: No such file or directory"]


def test_unreadable_wins_over_invalid_and_valid_files_are_still_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write(tmp_path, "good.yaml", edited({}))
    bad = write(tmp_path, "bad.yaml", edited({"spec.gpus": 12}))
    code, out, _ = run(capsys, "validate", bad, str(tmp_path / "missing.yaml"), good)
    assert code == 2
    assert out[-1] == f"{good}: valid"


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_good_samples_are_valid(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "validate", str(sample))[0] == 0


@pytest.mark.parametrize("sample", REJECTED, ids=lambda p: p.name)
def test_rejected_samples_report_several_problems(
    sample: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "validate", str(sample))
    assert code == 1
    assert len(out) >= 4
    assert all(line.startswith(f"{sample}: spec.") for line in out)


def test_crd_output_is_the_committed_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run(capsys, "crd")
    main(["crd"])
    committed = (ROOT / "crds" / "kimi-operator.io_kimideployments.yaml").read_text()
    assert code == 0
    assert capsys.readouterr().out == committed, "stale CRD: run `make crd` and commit the result"


def test_render_prints_children_of_a_valid_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "k3.yaml", edited({"spec.replicas": 2}))
    code = main(["render", path, "--image", "registry.local/vllm:1"])
    children = list(yaml.safe_load_all(capsys.readouterr().out))
    assert code == 0
    assert [c["kind"] for c in children] == [
        "PersistentVolumeClaim",  # the namespace's compile-cache claim
        "ComputeDomain", "LeaderWorkerSet", "ComputeDomain", "LeaderWorkerSet",
        "Service", "PodDisruptionBudget", "PodMonitor",
    ]  # fmt: skip
    lws = children[2]["spec"]["leaderWorkerTemplate"]
    assert lws["leaderTemplate"]["spec"]["containers"][0]["image"] == "registry.local/vllm:1"


def test_render_refuses_an_invalid_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "bad.yaml", edited({"spec.gpus": 12}))
    code, out, err = run(capsys, "render", path)
    assert (code, out) == (1, [])
    assert err[0].startswith(f"{path}: spec.gpus: ")


def test_validate_never_imports_the_kubernetes_client_or_an_http_stack(tmp_path: Path) -> None:
    path = write(tmp_path, "k3.yaml", edited({"spec.gpus": 12}))
    probe = (
        "import sys; from kimi_operator.cli import main; code = main(['validate', sys.argv[1]]); "
        "heavy = ('kubernetes', 'urllib3', 'kmock', 'aiohttp'); "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in heavy); "
        "print(bad); sys.exit(code)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, path], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1] == "[]"
    assert "Traceback" not in result.stderr


def test_console_script_never_prints_a_traceback(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("kimi-operator")
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"\xff\xfe not utf-8")
    result = subprocess.run(
        [str(exe), "validate", str(bad)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: {bad}: cannot read")


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == "kimi-operator 0.1.0\n"


def test_demo_without_the_embedded_server_says_what_to_install(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """As from the wheel, which leaves embedded/ out (or without the demo extra): one line naming
    `make demo`, exit 2."""
    for missing in ("kimi_operator.embedded", "kmock"):
        with monkeypatch.context() as patch:
            for name in [n for n in sys.modules if n.startswith("kimi_operator.embedded")]:
                patch.delitem(sys.modules, name)
            if missing == "kmock":
                patch.setitem(sys.modules, missing, None)  # its import fails
            else:  # a kimi_operator without embedded/, as the wheel installs it
                patch.setattr(kimi_operator, "__path__", [str(tmp_path)])
            code, out, err = run(capsys, "demo")
        assert (code, out) == (2, []), missing
        assert len(err) == 1
        assert err[0].startswith("error: the demo runs from a clone of the repository with the ")
        assert "`make demo`" in err[0]
        assert missing in err[0]


@pytest.mark.parametrize("broken", [ModuleType("kimi_operator.embedded.demo"), None])
def test_an_import_error_in_the_demo_is_reported_as_itself(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, broken: ModuleType | None
) -> None:
    """A bug (a name the demo lacks; a module of ours missing) is not a missing extra: it comes
    out as the error it is, not as advice to install."""
    monkeypatch.setitem(sys.modules, "kimi_operator.embedded.demo", broken)
    with pytest.raises(ImportError) as raised:
        run(capsys, "demo")
    assert "kimi_operator.embedded.demo" in str(raised.value)
    assert "clone" not in capsys.readouterr().err


def test_run_refuses_leader_election_durations_out_of_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(capsys, "run", "--leader-elect", "--leader-elect-renew-deadline", "20")
    assert code == 1
    assert err == [
        "error: --leader-elect-*: leader election needs retry period < renew deadline < lease "
        "duration, got 2.0 s, 20.0 s, 15.0 s"
    ]


@pytest.mark.parametrize("flags", [["--kube-api-qps", "0"], ["--kube-api-burst", "0"]])
def test_run_refuses_a_rate_limit_that_lets_nothing_through(
    capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    code, _, err = run(capsys, "run", *flags)
    assert code == 1
    assert len(err) == 1
    assert err[0].startswith("error: --kube-api-qps must be > 0 and --kube-api-burst >= 1, got ")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--evacuate-taints", "nvidia.com/gpu-xid-error,=true:NoSchedule"], "is not a taint key"),
        (["--evacuate-taints", "a,,b"], "a taint key must not be empty"),
        (["--evacuate-conditions", "GPU Xid"], "is not a node condition type"),
        (["--evacuate-conditions", "Ready"], "is True on a healthy node"),
    ],
)
def test_run_refuses_bad_evacuation_settings_at_start(
    capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        run(capsys, "run", *flags)
    assert exited.value.code == 2  # argparse's: before anything starts
    assert message in capsys.readouterr().err


def test_run_refuses_a_critical_condition_not_evacuated_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(
        capsys,
        "run",
        "--evacuate-conditions",
        "GpuXidWatch",
        "--critical-conditions",
        "GpuPcieWatch",
    )
    assert code == 1
    assert err == [
        "error: --critical-conditions GpuPcieWatch: not in --evacuate-conditions (a critical "
        "condition must make the node unfit first)"
    ]


def test_the_lease_s_namespace_is_the_pod_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "kimi-system")
    assert own_namespace() == "kimi-system"
    monkeypatch.delenv("POD_NAMESPACE")
    assert own_namespace() == "default"  # no ServiceAccount mounted here
