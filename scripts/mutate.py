"""Mutation testing of the modules that hold astream's invariants (mutmut 3).

    bash scripts/mutate.sh astream/core/eviction.py [more modules]   # one or more modules
    bash scripts/mutate.sh --all                                     # every module in TARGETS
    bash scripts/mutate.sh --report                                  # re-summarise only
    bash scripts/mutate.sh --resume astream/core/refplans.py         # finish a stopped run

For each module, a scratch copy of the tree (``.mutate/``, ignored by git) gets a
``[tool.mutmut]`` section naming that module and the tests that guard it (``TARGETS``), and
``mutmut run`` mutates it there. The verdict of every mutant is written to
``mutation/<module>.txt``; ``mutation/equivalent.txt`` lists the mutants that no test can kill
because they do not change behaviour, each with its reason. ``mutation/README.md`` gets the
table: per module, mutants, killed, equivalent, survived, and the score
``killed / (mutants - equivalent)``. A surviving mutant that is not in the equivalent list is
a missing test.

The tests chosen per module run in-process: mutmut switches mutants inside the pytest
process, so a test whose astream code runs in a child (DataLoader workers, torchrun) cannot
see a mutant and is left out of the selection.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "mutation"
WORK = ROOT / ".mutate"

# module -> the in-process tests that guard it
TARGETS: dict[str, list[str]] = {
    "astream/core/eviction.py": [
        "tests/plan/test_future_props.py",
        "tests/plan/test_simulate.py",
        "tests/engine/test_cache_victims.py",
        "tests/plan/test_validation.py",
    ],
    "astream/core/partition.py": ["tests/order"],
    "astream/core/order.py": ["tests/order"],
    "astream/core/dealing.py": ["tests/order"],
    "astream/core/refplans.py": ["tests/order"],
    "astream/core/refshuffle.py": ["tests/order"],
    "astream/core/refbatching.py": ["tests/order"],
    "astream/core/state.py": ["tests/order", "tests/engine/test_resume.py"],
    "astream/core/shard.py": ["tests/core", "tests/writer/test_mds_writer.py"],
    "astream/writer/mds.py": [
        "tests/writer/test_mds_writer.py",
        "tests/writer/test_xsv_writer.py",
        "tests/writer/test_modes_and_disk.py",
        "tests/writer/test_remote_safety.py",
        "tests/storage/test_remote_writer.py",
        "tests/engine/test_param_bounds.py",
        "tests/golden/test_golden.py",
        "tests/golden/test_exact_limit.py",
        "tests/writer/test_mutants_mds.py",
    ],
    "astream/runtime/cache.py": [
        "tests/engine/test_cache_space.py",
        "tests/engine/test_cache_victims.py",
        "tests/storage/test_fetch_stream.py",
        "tests/plan/test_interleave.py",
        "tests/engine/test_mutants_cache.py",
    ],
    "astream/runtime/binding.py": [
        "tests/engine/test_cache_dirs.py",
        "tests/reliability/test_shared_cache.py",
        "tests/engine/test_offline.py",
        "tests/cli/test_cache_bench.py",
        "tests/engine/test_mutants_binding.py",
    ],
    "astream/parquet/io_index.py": [
        "tests/parquet/test_local.py",
        "tests/parquet/test_decode.py",
        "tests/parquet/test_compact.py",
        "tests/parquet/test_index_scale.py",
        "tests/parquet/test_published.py",
        "tests/parquet/test_mutants_index.py",
        "tests/parquet/test_mutants_index_s3.py",
    ],
}

STATUS_RE = re.compile(r"^\s*(\S+): (.+)$")


def _checkout_files(*under: str) -> list[str]:
    """The working tree's tracked and untracked-not-ignored files (under ``under``)."""
    listing = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z", *under],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return [rel for rel in listing.split("\0") if rel]


def _copy_tree(dst: Path, rev: str | None) -> None:
    """The checkout's files copied to ``dst``: the tracked and untracked-not-ignored files of
    the working tree, or the tree of commit ``rev``."""
    if dst.exists():
        shutil.rmtree(dst)
    if rev is not None:
        dst.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(dst)], input=archive.stdout, check=True)
        return
    for rel in _checkout_files():
        src = ROOT / rel
        if not src.is_file():
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst / rel)


def _configure(work: Path, module: str, tests: list[str]) -> None:
    toml = work / "pyproject.toml"
    text = toml.read_text()
    text += (
        "\n[tool.mutmut]\n"
        'source_paths = ["astream"]\n'
        'also_copy = ["scripts", "benchmarks"]\n'
        f"only_mutate = [{json.dumps(module)}]\n"
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-p", "no:randomly"]\n'
        "use_git_change_detection = false\n"
        "timeout_multiplier = 10.0\n"
        "timeout_constant = 5.0\n"
    )
    toml.write_text(text)


def _resume_tree(work: Path, module: str) -> int:
    """Prepare a stopped run in ``work`` to go on: its ``killed`` verdicts stand, every other
    verdict (survived, timed out, not run) is judged again, by the checkout's current tests.

    A killed verdict stays true when tests are only added, so this is refused unless every
    file of the package in ``work`` is byte-identical to the checkout's (the tests run the
    mutant beside the rest of the package). Returns the number of verdicts kept."""
    meta = work / "mutants" / (module + ".meta")
    if not meta.exists():
        raise SystemExit(f"mutate: --resume: no stopped run of {module} in {work}")
    ours = {p for p in _checkout_files("astream") if p.endswith(".py")}
    theirs = {str(p.relative_to(work)) for p in (work / "astream").rglob("*.py")}
    changed = sorted(
        p
        for p in ours | theirs
        if p not in ours or p not in theirs or (work / p).read_bytes() != (ROOT / p).read_bytes()
    )
    if changed:
        raise SystemExit(
            f"mutate: --resume: {', '.join(changed)} changed since the run in {work} began;"
            " run it afresh"
        )
    for rel in _checkout_files("tests"):
        src = ROOT / rel
        if not src.is_file():
            continue
        for dst in (work / rel, work / "mutants" / rel):
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    data = json.loads(meta.read_text())
    codes = data["exit_code_by_key"]
    kept = 0
    for key, code in codes.items():
        if code == 1:  # pytest exit 1: a test failed, the mutant was killed
            kept += 1
        else:
            codes[key] = None
    meta.write_text(json.dumps(data))
    return kept


def run_module(module: str, rev: str | None, children: int, resume: bool = False) -> dict[str, str]:
    if module not in TARGETS:
        raise SystemExit(
            f"mutate: {module!r} is not in TARGETS (scripts/mutate.py): {sorted(TARGETS)}"
        )
    work = WORK / module.replace("/", "_")
    kept = None
    if resume:
        if rev is not None:
            raise SystemExit("mutate: --resume goes on with the working tree; drop --rev")
        kept = _resume_tree(work, module)
    else:
        _copy_tree(work, rev)
        _configure(work, module, TARGETS[module])
    mutmut = Path(sys.executable).parent / "mutmut"
    t0 = time.monotonic()
    tools = str(ROOT / ".tools" / "node_modules" / ".bin")  # Azurite (setup.sh --emulators)
    env = dict(
        os.environ, PYTHONDONTWRITEBYTECODE="1", PATH=tools + os.pathsep + os.environ["PATH"]
    )
    r = subprocess.run([str(mutmut), "run", "--max-children", str(children)], cwd=work, env=env)
    if r.returncode != 0:
        raise SystemExit(f"mutate: mutmut run failed for {module} (exit {r.returncode})")
    listing = subprocess.run(
        [str(mutmut), "results", "--all", "true"],
        cwd=work,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    verdicts: dict[str, str] = {}
    for line in listing.splitlines():
        m = STATUS_RE.match(line)
        if m:
            verdicts[m.group(1)] = m.group(2)
    diffs = []
    for name, status in sorted(verdicts.items()):
        if status != "killed":
            shown = subprocess.run(
                [str(mutmut), "show", name], cwd=work, env=env, capture_output=True, text=True
            ).stdout
            diffs.append(shown.rstrip())
    OUT.mkdir(exist_ok=True)
    name = module.replace("/", ".").removesuffix(".py")
    what = "the working tree"
    if rev:
        sha = subprocess.run(
            ["git", "rev-parse", rev], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout.strip()
        what = f"commit {sha}"
    lines = [
        f"# {module} ({what}): mutmut 3 over {' '.join(TARGETS[module])}",
        f"# ran in {time.monotonic() - t0:.0f} s",
    ]
    if kept is not None:
        lines.append(
            f"# resumed: {kept} killed verdicts kept from the stopped run (same source);"
            " every other mutant judged by the current tests"
        )
    lines += [
        "",
    ]
    lines += [f"{k}: {v}" for k, v in sorted(verdicts.items())]
    (OUT / f"{name}.txt").write_text("\n".join(lines) + "\n")
    (OUT / f"{name}.survivors.diff").write_text("\n\n".join(diffs) + ("\n" if diffs else ""))
    return verdicts


def _equivalent() -> dict[str, str]:
    path = OUT / "equivalent.txt"
    out: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                name, _, why = line.partition(" ")
                out[name] = why.strip()
    return out


def report() -> list[tuple[str, int, int, int, int, float]]:
    eq = _equivalent()
    rows = []
    for txt in sorted(OUT.glob("astream.*.txt")):
        verdicts = dict(
            STATUS_RE.match(line).groups()  # type: ignore[union-attr]
            for line in txt.read_text().splitlines()
            if line and not line.startswith("#")
        )
        total = len(verdicts)
        killed = sum(v in ("killed", "timeout") for v in verdicts.values())
        equiv = sum(1 for k, v in verdicts.items() if k in eq and v not in ("killed", "timeout"))
        survived = total - killed - equiv
        score = killed / (total - equiv) if total > equiv else 1.0
        rows.append((txt.stem, total, killed, equiv, survived, score))
    return rows


def write_readme(rows: list[tuple[str, int, int, int, int, float]]) -> None:
    lines = [
        "# Mutation testing",
        "",
        "Each module that holds an invariant of the order, the checkpoints, the cache or the",
        "format is mutated by mutmut 3 and run against the in-process tests that guard it",
        "(`TARGETS` in `scripts/mutate.py`). Rerun one module, or all of them:",
        "",
        "```text",
        "bash scripts/mutate.sh astream/core/eviction.py",
        "bash scripts/mutate.sh --all",
        "bash scripts/mutate.sh --resume astream/core/refplans.py   # finish a stopped run",
        "```",
        "",
        "`--resume` keeps a stopped run's killed verdicts (refused if the module's source",
        "changed since) and judges every other mutant with the current tests.",
        "",
        "`<module>.txt` holds every mutant's verdict and the commit and tests it ran with;",
        "`<module>.survivors.diff` shows each mutant that was not killed. A survivor is either",
        "killed by a new test or listed in [equivalent.txt](equivalent.txt) with the reason it",
        "cannot change behaviour. Score: killed / (mutants - equivalent).",
        "",
        "Each row was measured at the commit named in its file; tests added after that commit",
        "are not counted until the module is run again.",
        "",
        "| module | commit | mutants | killed | equivalent | survived | score |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, total, killed, equiv, survived, score in rows:
        head = (OUT / f"{name}.txt").read_text().split("\n", 1)[0]
        found = re.search(r"commit ([0-9a-f]{7})", head)
        sha = found.group(1) if found else "working tree"
        lines.append(
            f"| `{name}` | {sha} | {total} | {killed} | {equiv} | {survived} | {score:.1%} |"
        )
    (OUT / "README.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("modules", nargs="*", help="paths such as astream/core/eviction.py")
    ap.add_argument("--all", action="store_true", help="every module in TARGETS")
    ap.add_argument("--report", action="store_true", help="only print the table")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="go on with a stopped run in .mutate/: keep its killed verdicts, judge the rest",
    )
    ap.add_argument("--rev", help="mutate the tree of this commit (default: the working tree)")
    ap.add_argument(
        "--children",
        type=int,
        default=os.cpu_count() or 2,
        help="test processes at once (default: one per core; 1 beside other work)",
    )
    a = ap.parse_args()
    if a.children < 1:
        ap.error(f"--children must be at least 1, got {a.children}")
    modules = sorted(TARGETS) if a.all else a.modules
    if not modules and not a.report:
        ap.error("name at least one module, or --all / --report")
    for module in modules:
        run_module(module, a.rev, a.children, a.resume)
    rows = report()
    write_readme(rows)
    print(f"{'module':40} {'mutants':>8} {'killed':>7} {'equiv':>6} {'survived':>9} {'score':>6}")
    for name, total, killed, equiv, survived, score in rows:
        print(f"{name:40} {total:8} {killed:7} {equiv:6} {survived:9} {score:6.1%}")


if __name__ == "__main__":
    main()
