"""`kimi-operator admission` over HTTP, as kube-apiserver calls it: the verdict and the lines of
`kimi-operator validate` on the whole corpus, warnings, updates that leave the spec alone, TLS
with certificates that change under it; and all of it with no cluster to reach."""

import shutil
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kimi_operator.admission.handler import REFUSED
from tests.fuzz.harness import run_cli
from tests.support.admission import (
    Webhook,
    admission_review,
    post_review,
    running_webhook,
    self_signed,
)
from tests.support.corpus import CORPUS, DRAFT, PARSER_ONLY
from tests.support.specs import edited

CASES = [(name, edits, valid) for name, edits, valid in CORPUS] + [
    (name, {"spec.engineArgs": args}, False) for name, args in PARSER_ONLY
]
WARNED = {"spec.decode.maxNumSeqs": 16, "spec.speculative": {**DRAFT, "numSpeculativeTokens": 7}}
BAD_ARGS = {"spec.engineArgs": ["--max-num-batched-tokens", "abc"]}


@pytest.fixture(scope="module")
def webhook() -> Iterator[Webhook]:
    with running_webhook("--insecure") as process:
        yield process


def validate_lines(doc: dict[str, Any]) -> tuple[int, list[str], list[str]]:
    """`kimi-operator validate -` on `doc`: (exit code, problem lines, warning lines), the
    `<stdin>: ` label taken off."""
    code, out, _ = run_cli(["validate", "-"], yaml.safe_dump(doc, sort_keys=False).encode())
    lines = [line.removeprefix("<stdin>: ") for line in out.splitlines()]
    warnings = [line.removeprefix("warning: ") for line in lines if line.startswith("warning: ")]
    problems = [line for line in lines if line != "valid" and not line.startswith("warning: ")]
    return code, problems, warnings


def test_it_serves_without_a_cluster(webhook: Webhook) -> None:
    assert webhook.url.startswith("http://127.0.0.1:")
    response = post_review(webhook.url, admission_review(edited({})))
    assert response["allowed"] is True


@pytest.mark.parametrize(("edits", "valid"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_corpus_gets_validates_verdict_and_lines(
    webhook: Webhook, edits: dict[str, Any], valid: bool
) -> None:
    doc = edited(edits)
    code, problems, warnings = validate_lines(doc)
    response = post_review(webhook.url, admission_review(doc))
    assert response["allowed"] is valid
    assert (code == 0) is valid
    assert response.get("warnings", []) == warnings
    if valid:
        assert "status" not in response
    else:
        assert response["status"]["code"] == REFUSED
        assert response["status"]["message"].split("\n") == problems


def test_a_refusal_names_every_field_one_line_each(webhook: Webhook) -> None:
    doc = edited({**BAD_ARGS, "spec.gpus": 12, "spec.replicas": -1})
    response = post_review(webhook.url, admission_review(doc))
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    lines = response["status"]["message"].split("\n")
    assert [line.split(":")[0] for line in lines] == [
        "spec.gpus",
        "spec.replicas",
        "spec.engineArgs",
    ]
    assert "--max-num-batched-tokens abc: not a valid integer" in lines[2]


def test_the_fast_path_warning_comes_back_as_an_admission_warning(webhook: Webhook) -> None:
    response = post_review(webhook.url, admission_review(edited(WARNED)))
    assert response["allowed"] is True
    assert len(response["warnings"]) == 1
    assert response["warnings"][0].startswith("spec.decode.maxNumSeqs: decode batches of up to 16")


def test_an_update_that_leaves_the_spec_alone_is_allowed_on_an_invalid_object(
    webhook: Webhook,
) -> None:
    stored = edited(BAD_ARGS)
    labelled = edited({"metadata.labels": {"team": "a"}}, stored)
    deleting = edited(
        {"metadata.finalizers": [], "metadata.deletionTimestamp": "2026-01-01T00:00:00Z"}, stored
    )
    for new in (labelled, deleting):
        response = post_review(webhook.url, admission_review(new, old=stored))
        assert response["allowed"] is True, response
        assert "warnings" not in response
    changed = edited({"spec.replicas": 2}, stored)
    refused = post_review(webhook.url, admission_review(changed, old=stored))
    assert refused["allowed"] is False
    assert refused["status"]["message"].startswith("spec.engineArgs: ")


def test_an_update_into_an_invalid_spec_is_refused(webhook: Webhook) -> None:
    old = edited({})
    response = post_review(webhook.url, admission_review(edited(BAD_ARGS), old=old))
    assert response["allowed"] is False
    assert response["status"]["code"] == REFUSED


def test_an_unreadable_object_is_refused_with_the_reason(webhook: Webhook) -> None:
    doc = edited({"apiVersion": "kimi-operator.io/v2"})
    response = post_review(webhook.url, admission_review(doc))
    assert response["allowed"] is False
    assert response["status"]["message"].startswith("not a KimiDeployment: apiVersion")


def test_tls_and_certificates_read_again_when_they_change(tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    first = self_signed(tmp_path, "first")
    second = self_signed(tmp_path, "second")
    shutil.copy(first[0], cert)
    shutil.copy(first[1], key)
    args = ["--address", "127.0.0.1", "--cert-file", str(cert), "--key-file", str(key)]
    with running_webhook(*args, "--cert-check-interval", "0.1") as webhook:
        assert webhook.url.startswith("https://127.0.0.1:")
        trust_first = ssl.create_default_context(cafile=first[0])
        trust_second = ssl.create_default_context(cafile=second[0])
        assert post_review(webhook.url, admission_review(edited({})), context=trust_first)[
            "allowed"
        ]
        with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):
            post_review(webhook.url, admission_review(edited({})), context=trust_second)
        shutil.copy(second[1], key)
        shutil.copy(second[0], cert)
        webhook.next_url()  # restarted with the renewed files
        response = post_review(
            webhook.url, admission_review(edited(BAD_ARGS)), context=trust_second
        )
        assert response["allowed"] is False


def test_tls_without_certificates_is_refused_naming_the_flags() -> None:
    code, _, err = run_cli(["admission", "--port", "0"], b"")
    assert code == 1
    assert "--cert-file and --key-file" in err
    assert "--insecure" in err


def test_a_missing_certificate_file_is_refused_naming_the_flag(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path, "only")
    missing = str(tmp_path / "none.key")
    code, _, err = run_cli(["admission", "--cert-file", str(cert), "--key-file", missing], b"")
    assert code == 1
    assert f"--key-file: {missing}: no such file" in err


def test_a_port_out_of_range_is_refused() -> None:
    code, _, err = run_cli(["admission", "--port", "70000", "--insecure"], b"")
    assert code == 1
    assert "--port: 70000 is not a port" in err
