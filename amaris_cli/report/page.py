"""The report as one self-contained HTML file: inline CSS and JS, the run's data embedded as
gzip+base64 blocks (decoded by the browser's DecompressionStream), and a Content-Security-Policy that
lets only this page's own script and style run and forbids every network request.

The data never meets an HTML parser: base64 cannot close a tag, and the script builds the page with
textContent only. The run path in <title> is escaped here.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
from pathlib import Path
from typing import Any

import orjson

from amaris_cli.report.collect import Overview

ASSETS = Path(__file__).parent / "assets"
DATA_TYPE = "application/x-amaris-gzip-base64"  # not a script type: the browser never executes it


def packed(obj: Any) -> str:
    """gzip (fixed mtime, so the same run gives the same file) + base64."""
    return base64.b64encode(gzip.compress(orjson.dumps(obj), compresslevel=6, mtime=0)).decode("ascii")


def _hash(source: str) -> str:
    return base64.b64encode(hashlib.sha256(source.encode()).digest()).decode()


def render_page(overview: Overview, blocks: dict[int, dict[str, Any]]) -> bytes:
    css = (ASSETS / "report.css").read_text(encoding="utf-8")
    js = (ASSETS / "report.js").read_text(encoding="utf-8")
    assert "</script" not in js.lower() and "</style" not in css.lower()
    csp = (f"default-src 'none'; script-src 'sha256-{_hash(js)}'; style-src 'sha256-{_hash(css)}'; "
           "img-src data:; base-uri 'none'; form-action 'none'")
    title = html.escape(f"amaris report: {overview.run}")
    steps = "\n".join(f'<script type="{DATA_TYPE}" class="amaris-step" data-step="{step}">{packed(block)}</script>'
                      for step, block in sorted(blocks.items()))
    hackbench_link = '<a href="#/hackbench">Hack benchmark</a>' if overview.hackbench is not None else ""
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{css}</style></head>
<body>
<header><h1>amaris report: <span class="mono">{html.escape(overview.run)}</span></h1>
<div class="facts" id="facts"></div>
<nav><a href="#/">Overview</a><a href="#/rubrics">Rubrics</a><a href="#/updates">Updates</a>{hackbench_link}</nav></header>
<main id="main"><noscript>This report draws its pages with JavaScript; the data is in the run directory.</noscript>
<p class="note">Decoding the report…</p></main>
<script type="{DATA_TYPE}" id="amaris-overview">{packed(overview.model_dump(mode="json"))}</script>
{steps}
<script>{js}</script>
</body></html>
"""
    return page.encode("utf-8")
