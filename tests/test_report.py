"""`amaris report`: a self-contained HTML page with the plots embedded, and the plots as PNG files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, TEST_CONFIG, invoke, judge_env

pytest.importorskip("matplotlib", reason="matplotlib is the optional [report] extra (installed by make test)")


def test_report_is_self_contained_and_exports_pngs(tmp_path: Path, sim) -> None:
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:2", env=judge_env(sim)).exit_code == 0
    out = tmp_path / "out" / "r.html"
    result = invoke("report", run, "--out", out)
    assert result.exit_code == 0, result.stderr
    page = out.read_text()
    assert len(re.findall(r"<img alt='[^']+' src='data:image/png;base64,", page)) == 4
    assert not re.search(r"(src|href)=['\"]https?://", page), "the report must not need the network"
    for title in ("Reward per step", "Per-criterion pass rate over steps", "Rubric size and changes",
                  "Reward-hacking patterns over steps"):
        assert title in page
    for stem in ("reward", "criteria", "rubric", "hacking"):
        png = out.with_name(f"r-{stem}.png")
        assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert "<td>CORRECTIVE</td>" in page or "<td>MAINTENANCE</td>" in page
