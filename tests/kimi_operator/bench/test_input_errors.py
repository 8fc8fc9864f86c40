"""Bad input and unreachable servers: one clear line on stderr, a non-zero exit, no traceback."""

import io
import json
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp import web

from kimi_operator.bench.cli import _guard
from kimi_operator.bench.stub import Schedule, serve_app_in_thread, serve_in_thread
from tests.support.bench import Cli, bench_argv


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    ("endpoint", "says"),
    [
        ("localhost:8000", "expected an http(s) URL"),
        ("ftp://127.0.0.1/v1", "expected an http(s) URL"),
        ("http://", "expected an http(s) URL"),
        ("http://127.0.0.1:99999/v1", "Port out of range"),
        ("http://127.0.0.1:port/v1", "expected an http(s) URL"),
        ("http://127.0.0.1:8000/v1?x=1", "no query"),
        ("http://127.0.0.1:8000/ v1", "no query, fragment or spaces"),
    ],
)
def test_malformed_endpoints(cli: Cli, tmp_path: Path, endpoint: str, says: str) -> None:
    run = cli("bench", "--endpoint", endpoint, "--output", str(tmp_path))
    assert run.code == 2
    assert says in one_error_line(run.err)
    assert not (tmp_path / "results.json").exists()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_unreachable_server(cli: Cli, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    run = cli("bench", "--endpoint", url, "--output", str(tmp_path))
    assert run.code == 2
    assert one_error_line(run.err) == f"error: cannot reach {url}: Connection refused"


def test_bare_host_port_gets_v1(cli: Cli, tmp_path: Path) -> None:
    with serve_in_thread(Schedule(ttft_s=0.001, step_s=0.001)) as (url, _):
        root = url.removesuffix("/v1")
        run = cli(
            "bench",
            "--endpoint",
            root + "/",
            "--requests",
            "1",
            "--output-tokens",
            "2",
            "--warmup",
            "0",
            "--output",
            str(tmp_path),
        )
    assert run.code == 0, run.err
    assert f"{root}/v1" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize(
    ("status", "body", "says"),
    [
        (401, "{}", "HTTP 401: pass an API key with --api-key"),
        (500, "{}", "/models: HTTP 500"),
        (200, "<html>", "the answer is not JSON; is this an OpenAI API?"),
        (200, '{"models": []}', "no model list in the answer"),
    ],
)
def test_server_that_is_not_an_openai_api(
    cli: Cli, tmp_path: Path, status: int, body: str, says: str
) -> None:
    async def models(_: web.Request) -> web.Response:
        return web.Response(status=status, text=body)

    app = web.Application()
    app.router.add_get("/v1/models", models)
    with serve_app_in_thread(app) as root:
        run = cli("bench", "--endpoint", root, "--output", str(tmp_path))
    assert run.code == 2
    assert says in one_error_line(run.err)


def test_model_not_served(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, _ = stub()
    run = cli("bench", "--endpoint", url, "--model", "other/model", "--output", str(tmp_path))
    assert run.code == 2
    assert one_error_line(run.err) == (
        f"error: {url} does not serve 'other/model' (it serves: moonshotai/Kimi-K3)"
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "bench needs --endpoint URL or --deployment NAMESPACE/NAME"),
        (["--endpoint", "http://127.0.0.1:1/v1"], "bench needs --output DIR"),
        (
            ["--endpoint", "http://127.0.0.1:1/v1", "--trace", "t.jsonl"],
            "--trace and --replay go with",
        ),
        (
            ["--endpoint", "http://127.0.0.1:1/v1", "--replay", "open"],
            "--trace and --replay go with",
        ),
        (
            ["--endpoint", "http://127.0.0.1:1/v1", "--profile", "agentic", "--output-tokens", "5"],
            "do not apply to --profile agentic",
        ),
        (
            ["--endpoint", "http://127.0.0.1:1/v1", "--gpu-hour-price", "3", "--output", "{tmp}"],
            "--gpu-hour-price needs --gpus",
        ),
        (["--deployment", "Inference/k3", "--output", "{tmp}"], "expected NAMESPACE/NAME"),
        (
            [
                "--endpoint",
                "http://127.0.0.1:1/v1",
                "--metrics-url",
                "127.0.0.1:1/metrics",
                "--output",
                "{tmp}",
            ],
            "--metrics-url '127.0.0.1:1/metrics': expected an http(s) URL",
        ),
        (["--deployment", "k3", "--output", "{tmp}"], "expected NAMESPACE/NAME"),
    ],
)
def test_inconsistent_options(cli: Cli, tmp_path: Path, args: list[str], says: str) -> None:
    run = cli("bench", *[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert run.code == 2
    assert says in one_error_line(run.err)


@pytest.mark.parametrize(
    "args",
    [
        ["--requests", "0"],
        ["--concurrency", "-1"],
        ["--gpu-hour-price", "nan"],
        ["--profile", "fast"],
        ["--endpoint", "http://x/v1", "--deployment", "a/b"],
    ],
)
def test_argument_errors_are_argparse_usage_errors(cli: Cli, args: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli("bench", *args)
    assert exit_info.value.code == 2


def test_existing_results_are_not_overwritten_without_force(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, _ = stub(ttft_s=0.001, step_s=0.001)
    (tmp_path / "results.json").write_text("{}")
    run = cli("bench", "--endpoint", url, "--output", str(tmp_path))
    assert run.code == 2
    assert "results.json exists" in one_error_line(run.err)
    assert (tmp_path / "results.json").read_text() == "{}"


def test_unwritable_output_fails_before_the_run(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, app = stub(ttft_s=0.001, step_s=0.001)
    blocker = tmp_path / "file"
    blocker.write_text("")
    run = cli("bench", "--endpoint", url, "--output", str(blocker / "sub"))
    assert run.code == 2
    assert "cannot write to" in one_error_line(run.err)
    assert app.state.bodies == []  # type: ignore[attr-defined]


def _turn(name: str, session: str, after: str | None) -> str:
    dependency = f', "after": "{after}"' if after else ""
    return (
        f'{{"start_s": 0, "prompt_tokens": 1, "output_tokens": 5, "id": "{name}",'
        f' "session": "{session}"{dependency}}}\n'
    )


TURN = _turn("a", "s", None)  # a session's first turn, id "a"


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("", "the trace has no entries"),
        ("{not json\n", "line 1: not JSON"),
        ("[1, 2]\n", "line 1: expected a JSON object"),
        ('{"start_s": 0, "prompt_tokens": 10}\n', "line 1: output_tokens: Field required"),
        (
            '{"start_s": 0, "prompt_tokens": 10, "output_tokens": 5}\n'
            '{"start_s": -1, "prompt_tokens": 10, "output_tokens": 5}\n',
            "line 2: start_s: Input should be greater than or equal to 0",
        ),
        (
            '{"start_s": 0, "prompt_tokens": 10, "output_tokens": 5, "shared_prefix_tokens": 4}\n',
            "line 1: shared_prefix_tokens needs a prefix_group",
        ),
        (
            '{"start_s": 0, "prompt_tokens": 10, "output_tokens": 5, "prefix_group": "a",'
            ' "shared_prefix_tokens": 11}\n',
            "line 1: shared_prefix_tokens exceeds prompt_tokens",
        ),
        ('{"start_s": 0, "prompt_tokens": 1.5, "output_tokens": 5}\n', "line 1: prompt_tokens"),
        ('{"start_s": 0, "prompt_tokens": 1, "output_tokens": 5, "fan_out": 2}\n', "fan_out"),
        ('{"start_s": 0, "prompt_tokens": 1, "output_tokens": 5, "fanout": 0}\n', "fanout"),
        (TURN + _turn("b", "s", after="x"), "line 2: after: no request has id 'x'"),
        (
            _turn("a", "s", "b") + _turn("b", "s", after="a"),
            "line 1: after: the requests wait for each other in a cycle: 'a' (line 1) -> 'b' "
            "(line 2) -> 'a' (line 1)",
        ),
        (_turn("a", "s", "a"), "line 1: after: the requests wait for"),
        (
            TURN + _turn("b", "t", after="a"),
            "line 2: after: 'a' (line 1) is in session 's', not 't': a request waits only within "
            "its task",
        ),
        (TURN + _turn("a", "s", None), "line 2: id: 'a' is already the id of line 1"),
        (
            '{"start_s": 0, "prompt_tokens": 1, "output_tokens": 5, "after": "a"}\n',
            "line 1: after needs a session",
        ),
        (
            '{"start_s": 0, "prompt_tokens": 1, "output_tokens": 5, "think_s": 1}\n',
            "line 1: think_s needs an after",
        ),
    ],
)
def test_invalid_traces(cli: Cli, tmp_path: Path, content: str, says: str) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text(content)
    run = cli(
        "bench",
        "--endpoint",
        "http://127.0.0.1:1/v1",
        "--profile",
        "agentic",
        "--trace",
        str(trace),
        "--output",
        str(tmp_path / "out"),
    )
    assert run.code == 2
    line = one_error_line(run.err)
    assert line.startswith(f"error: {trace}")
    assert says in line


def test_missing_trace_file(cli: Cli, tmp_path: Path) -> None:
    run = cli(
        "bench",
        "--endpoint",
        "http://127.0.0.1:1/v1",
        "--profile",
        "agentic",
        "--trace",
        str(tmp_path / "none.jsonl"),
        "--output",
        str(tmp_path),
    )
    assert run.code == 2
    assert "cannot read the trace: No such file or directory" in one_error_line(run.err)


def test_interrupt_stops_with_one_line(tmp_path: Path) -> None:
    import signal  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    import time  # noqa: PLC0415

    with serve_in_thread(Schedule(ttft_s=0.01, step_s=0.01)) as (url, app):
        command = [
            sys.executable,
            "-m",
            "kimi_operator.cli",
            "bench",
            "--endpoint",
            url,
            "--output-tokens",
            "1000",
            "--warmup",
            "0",
            "--output",
            str(tmp_path),
        ]
        # Ctrl-C reaches a terminal's foreground job; a runner started in the background (`cmd &`
        # in a script: CI's was) ignores SIGINT, and its children inherit that across exec, so
        # bench would ignore it too, as it should. A handler here is reset to the default in
        # the child instead.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        finally:
            signal.signal(signal.SIGINT, previous)
        deadline = time.monotonic() + 30
        while not app.state.bodies and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 130
    assert err.strip() == "error: interrupted: no results written"
    assert not (tmp_path / "results.json").exists()


def test_without_the_bench_extra_it_says_which_extra_to_install(tmp_path: Path) -> None:
    """The operator image has no aiohttp (the bench extra's streaming client): `bench` names the
    extra instead of a traceback. A fresh interpreter where aiohttp cannot be imported."""
    argv = ["bench", "--endpoint", "http://127.0.0.1:9/v1", "--output", str(tmp_path)]
    script = (
        "import sys; sys.modules['aiohttp'] = None; "  # importing it raises ModuleNotFoundError
        f"from kimi_operator.cli import main; sys.exit(main({argv!r}))"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 1, run.stderr
    line = one_error_line(run.stderr)
    assert "no module 'aiohttp'" in line
    assert "pip install 'kimi-operator[bench]'" in line


def test_without_matplotlib_a_finished_run_is_written_without_plots(
    stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    """aiohttp there (the kubernetes client brings it), matplotlib not: results.json and report.md
    are written, the plots skipped with one line, exit 0; `bench compare` likewise."""
    url, _ = stub(ttft_s=0.01, step_s=0.002)
    run_dir, compare_dir = tmp_path / "run", tmp_path / "compare"
    commands = [
        bench_argv(url, run_dir, "--no-progress", requests=2, output_tokens=8),
        ["bench", "compare", str(run_dir), str(run_dir), "--output", str(compare_dir)],
    ]
    script = (
        "import sys; sys.modules['matplotlib'] = None; "  # importing it raises ModuleNotFoundError
        "from kimi_operator.cli import main; "
        f"sys.exit(max(main(argv) for argv in {commands!r}))"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr
    skipped = (
        "note: plots skipped: matplotlib is not installed (pip install 'kimi-operator[bench]')"
    )
    assert run.stderr.splitlines() == [skipped, skipped]
    assert json.loads((run_dir / "results.json").read_text())["summary"]["requests_ok"] == 2
    assert "## Plots" not in (run_dir / "report.md").read_text()
    assert "![" not in (compare_dir / "compare.md").read_text()
    assert not list(tmp_path.rglob("*.png"))


def test_a_missing_plotting_module_names_the_extra_and_any_other_is_a_bug() -> None:
    def missing(name: str) -> Callable[[], int]:
        def action() -> int:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

        return action

    err = io.StringIO()
    assert _guard(err, missing("matplotlib.pyplot")) == 1
    assert "kimi-operator[bench]" in one_error_line(err.getvalue())
    with pytest.raises(ModuleNotFoundError):
        _guard(io.StringIO(), missing("yaml"))
