"""The documentation site builds with MkDocs, Material and mkdocstrings with warnings as errors
(a broken link, a missing page or anchor, a docstring that cannot be rendered fails it), shows
its pictures, and the screenshot of ``fuze demo`` is the demo's current output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_documentation_site_builds_strictly_with_the_api_and_pictures(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(Path(sys.executable).parent)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert "Guard a tool function against loops" in api  # guard()'s docstring, rendered
    assert "A snapshot of a run&#39;s usage" in api or "A snapshot of a run's usage" in api
    index = (site / "index.html").read_text(encoding="utf-8")
    for picture in ("images/fuze-demo.svg", "images/call-layers-actions.svg"):
        assert picture in index and (site / picture).is_file()


def test_the_demo_screenshot_is_up_to_date() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_demo_screenshot.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (
        "docs/images/fuze-demo.svg is out of date: run `python scripts/gen_demo_screenshot.py`\n"
        + done.stderr[-2000:]
    )
    svg = (ROOT / "docs" / "images" / "fuze-demo.svg").read_text(encoding="utf-8")
    assert "run&#160;killed&#160;by&#160;the" in svg or "run killed by the" in svg
