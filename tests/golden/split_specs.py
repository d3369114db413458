"""Fixture specs for the reference's split-file formats (json, csv, tsv, xsv).

Shared by scripts/gen_golden_xsv.py (run under the reference's venv) and the tests; imports
neither library. Each spec names its writer, the writer's keyword arguments besides ``out``
and ``columns``, a row generator and a seed. Rows are plain python values, so what a reader
returns must equal them exactly (types included).
"""

from __future__ import annotations

import random
from typing import Any

ROWS_COLUMNS = {"id": "int", "name": "str", "score": "float"}
WIDE_COLUMNS = {"zeta": "str", "alpha": "int", "mid": "float", "b_text": "str"}

_WORDS = ["héllo", "日本語", "plain", "x", "", "with space", 'quote"d', "€uro", "a,b"]


def rows(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {"id": i * 13 - 50, "name": f"r{i}_" + "xy" * rng.randrange(6),
         "score": round(rng.uniform(-1e3, 1e3), rng.randrange(1, 9))}
        for i in range(n)
    ]  # fmt: skip


def wide(n: int, seed: int) -> list[dict[str, Any]]:
    """Unicode text and large / negative / tiny numbers (no separator or newline inside)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        out.append(
            {
                "zeta": _WORDS[i % len(_WORDS)].replace(",", ";") * (1 + i % 3),
                "alpha": [0, -1, 2**40, -(2**62), 7][i % 5] + i,
                "mid": [1e-300, -2.5, 1e22, 0.1, 3.0][i % 5] * (1 + rng.randrange(5)),
                "b_text": "".join(rng.choice("abcdéλ日 ") for _ in range(rng.randrange(0, 25))),
            }
        )
    return out


def json_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """JSON may hold anything json encodes: newlines, tabs, commas, quotes inside strings."""
    base = wide(n, seed)
    for i, r in enumerate(base):
        r["zeta"] = ["a\nb", "tab\there", "c,d|e", 'q"uote', "\\back", "日本\n語"][i % 6] * (
            i % 2 + 1
        )
    return base


GENERATORS = {"rows": rows, "wide": wide, "json_rows": json_rows}

# name -> spec. "writer": json | csv | tsv | xsv; "kwargs": the writer's other arguments.
SPECS: dict[str, dict[str, Any]] = {
    "json_plain": dict(writer="json", gen="json_rows", n=25, seed=21, columns=WIDE_COLUMNS,
                       kwargs=dict(compression=None, hashes=["sha1", "xxh64"], size_limit=700)),
    "json_zstd": dict(writer="json", gen="rows", n=40, seed=22, columns=ROWS_COLUMNS,
                      kwargs=dict(compression="zstd:5", hashes=["md5"], size_limit=900)),
    "json_newline": dict(writer="json", gen="rows", n=12, seed=23, columns=ROWS_COLUMNS,
                         kwargs=dict(newline="\r\n", compression=None, hashes=[],
                                     size_limit=None)),
    "csv_hashes": dict(writer="csv", gen="wide", n=30, seed=24, columns=WIDE_COLUMNS,
                       kwargs=dict(compression=None, hashes=["sha256", "xxh3_64"],
                                   size_limit=512)),
    "csv_bz2": dict(writer="csv", gen="rows", n=30, seed=25, columns=ROWS_COLUMNS,
                    kwargs=dict(compression="bz2", hashes=["sha1"], size_limit="1kb")),
    "tsv_br": dict(writer="tsv", gen="wide", n=20, seed=26, columns=WIDE_COLUMNS,
                   kwargs=dict(compression="br:4", hashes=["blake2b"], size_limit=600)),
    "xsv_pipe": dict(writer="xsv", gen="rows", n=30, seed=27, columns=ROWS_COLUMNS,
                     kwargs=dict(separator="|", compression=None, hashes=["xxh128"],
                                 size_limit=400)),
    "xsv_multi_snappy": dict(writer="xsv", gen="wide", n=25, seed=28, columns=WIDE_COLUMNS,
                             kwargs=dict(separator="<>", newline="\n\n", compression="snappy",
                                         hashes=["md5", "sha1"], size_limit=800)),
}  # fmt: skip


def samples_for(name: str) -> list[dict[str, Any]]:
    spec = SPECS[name]
    return GENERATORS[spec["gen"]](spec["n"], spec["seed"])
