"""benchmarks/bench_client.py runs end to end (small; the speed figures come from a full run)."""

import json
import subprocess
import sys
from pathlib import Path

from tests.support.repo import ROOT

SCRIPT = ROOT / "benchmarks" / "bench_client.py"


def test_bench_client_script_joins_client_and_server_times(tmp_path: Path) -> None:
    output = tmp_path / "figures.json"
    args = [
        "--repeat",
        "2",
        "--concurrency",
        "4",
        "--requests",
        "4",
        "--tokens",
        "30",
        "--step-ms",
        "5",
        "--ttft-ms",
        "10",
        "--output",
        str(output),
    ]
    # -P: benchmarks/ holds other scripts (e.g. one named operator.py) that must not shadow the
    # standard library, so the script's folder stays off the import path.
    run = subprocess.run(
        [sys.executable, "-P", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "streamed tokens/s (client)" in run.stdout
    figures = json.loads(output.read_text())
    assert figures["requests_ok"] == 4
    assert figures["runs"] == 2
    assert figures["itl_chunk_server_sent_s"]["p99"] == min(
        figures["server_sent_itl_p99_s_of_each_run"]
    )
    assert figures["chunks_joined"] == 4 * 29  # every gap matched with the server's send times
    assert figures["config"]["scheduled_tokens_per_s"] == 800
    assert 0 < figures["itl_chunk_measured_s"]["mean"] < 0.05
