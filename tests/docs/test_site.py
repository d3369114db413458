"""The documentation site: it builds with ``mkdocs build --strict``, every page is in the nav,
every relative link of README.md and docs/ names a file that exists, guide pages carry no
measurement history, and every folder of committed results is cited and described.

The strict build checks links between pages and their anchors (``validation`` in mkdocs.yml);
links to repository files outside docs/ (raw results) go through ``scripts/mkdocs_hooks.py``,
which checks that they exist.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
DOCS_DIR = ROOT / "docs"
RESULTS = ROOT / "benchmarks" / "results"
LINK = re.compile(r"(?<!!)\[[^\]\n]+\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
# A commit hash has letters and digits; a date is YYYY-MM-DD; an issue is "issue N".
HISTORY = re.compile(
    r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b|\b20\d\d-\d\d-\d\d\b|\bissues? \d+",
    re.IGNORECASE,
)


def _nav() -> dict[str, Any]:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    return {"nav": config["nav"]}


def _pages(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in _pages(item)]
    if isinstance(node, dict):
        return [p for value in node.values() for p in _pages(value)]
    return []


def _section(title: str) -> list[str]:
    for item in _nav()["nav"]:
        if isinstance(item, dict) and title in item:
            return _pages(item[title])
    raise AssertionError(f"mkdocs.yml has no nav section {title!r}")


def _prose(path: Path) -> list[tuple[int, str]]:
    """(line number, line) of the lines outside code fences."""
    out, fenced = [], False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, line))
    return out


def _load_hook() -> Any:
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts/mkdocs_hooks.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_strict_build(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install 'astream[test]')")
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (site / "index.html").is_file()
    assert (site / "results" / "batches" / "index.html").is_file()


def test_every_page_is_in_the_nav() -> None:
    in_nav = set(_pages(_nav()["nav"]))
    on_disk = {p.relative_to(DOCS_DIR).as_posix() for p in DOCS_DIR.rglob("*.md")}
    assert on_disk - in_nav == set(), "pages missing from mkdocs.yml's nav"
    assert in_nav - on_disk == set(), "nav entries without a page"
    assert {"Guide", "Design notes", "Results"} <= {
        k for item in _nav()["nav"] if isinstance(item, dict) for k in item
    }


@pytest.mark.parametrize(
    "doc",
    [ROOT / "README.md", *sorted(DOCS_DIR.rglob("*.md"))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_relative_links_name_existing_files(doc: Path) -> None:
    broken = []
    for n, line in _prose(doc):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            path = (doc.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                broken.append(f"{doc.relative_to(ROOT)}:{n}: {target}")
    assert broken == []


@pytest.mark.parametrize("page", _section("Guide"))
def test_guide_pages_carry_no_history(page: str) -> None:
    hits = [
        f"{page}:{n}: {m.group(0)!r}"
        for n, line in _prose(DOCS_DIR / page)
        for m in HISTORY.finditer(line)
    ]
    assert hits == [], "commit hashes, dates and issue numbers belong in results pages"


def test_history_pattern() -> None:
    found = [
        m.group(0)
        for m in HISTORY.finditer(
            "at fcb29a8 on 2026-12-02 (issue 14); 3f1c0a9e ids, 1048576 and deadbeef stay"
        )
    ]
    assert found == ["fcb29a8", "2026-12-02", "issue 14", "3f1c0a9e"]


def test_every_results_folder_is_cited_and_described() -> None:
    cited_in = [ROOT / "README.md", *DOCS_DIR.rglob("*.md"), *(ROOT / "mutation").rglob("*.md")]
    for code in ("astream", "tests", "benchmarks", "scripts"):
        cited_in += [p for p in (ROOT / code).rglob("*.py") if RESULTS not in p.parents]
    text = "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in cited_in)
    for folder in sorted(p for p in RESULTS.iterdir() if p.is_dir()):
        assert folder.name in text, f"benchmarks/results/{folder.name} is cited nowhere"
        readme = folder / "README.md"
        assert readme.is_file(), f"{folder.name} has no README.md"
        assert "python" in readme.read_text(encoding="utf-8"), f"{readme}: names no command"


def test_hook_checks_and_rewrites_outside_links(tmp_path: Path) -> None:
    hook = _load_hook()
    docs = tmp_path / "docs"
    (docs / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "run1").mkdir(parents=True)
    (tmp_path / "benchmarks" / "run1" / "README.md").write_text("x")
    page = docs / "results" / "x.md"
    md = (
        "See [the run](../../benchmarks/run1/README.md), [gone](../../benchmarks/run2/a.json),\n"
        "[a page](../index.md#top) and [the web](https://example.com).\n"
        "```text\n[kept](../../nowhere.md)\n```"
    )
    out, missing = hook.rewrite(md, page, docs, tmp_path)
    assert missing == ["../../benchmarks/run2/a.json"]
    assert out.splitlines()[0] == (
        "See the run (`benchmarks/run1/README.md`), gone (`benchmarks/run2/a.json`),"
    )
    assert out.splitlines()[1:] == md.splitlines()[1:]


def test_every_cited_results_folder_exists() -> None:
    cited = re.compile(r"benchmarks/results/(20\d\d-\d\d-\d\d-[\w-]+?)(?=[/`'\")\s.,;:]|$)")
    sources = [ROOT / "README.md", *DOCS_DIR.rglob("*.md"), *(ROOT / "mutation").rglob("*.md")]
    for code in ("astream", "tests", "benchmarks", "scripts"):
        sources += [p for p in (ROOT / code).rglob("*.py") if RESULTS not in p.parents]
    missing = sorted(
        f"{src.relative_to(ROOT)}: {name}"
        for src in sources
        for name in cited.findall(src.read_text(encoding="utf-8", errors="replace"))
        if not (RESULTS / name).is_dir()
    )
    assert missing == [], "these cite results folders that are not in benchmarks/results/"
