"""The report of ``bench/store_scale.py``: one table per collection size, a JSON copy and a
plot of p50 latency against collection size, one line per store (issue 28 item 8).

A report is a JSON-ready dict::

    {"command": str, "sizes": [int], "queries": int, "budget_s": float, "embedder": str,
     "caps": {store: int}, "load_average": {"start": [1, 5, 15 min], "end": [...]},
     "stores": {store: {size: {"rate": memories/s, "load_s": s, "total_s": s,
                               "rows": {kind: [p50 ms, p95 ms, calls, load]},
                               "after": {figure: value}}}}}

``load`` (optional) is the 1-minute load average when the kind's calls ended; ``after``
(optional) holds figures taken once per size: ``index build s``, ``size MB``, ``peak RSS
MB``…

A store capped below a size (``--cap``) has no entry for it; the table says so in words
and the plot's line stops at the cap.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["load_report", "parse_caps", "plot_report", "print_report", "save_report"]

WIDTH = 32
LABEL = 22


def parse_caps(text: str) -> dict[str, int]:
    """``milvus=10000,qdrant=20000`` as ``{"milvus": 10000, "qdrant": 20000}``."""
    caps: dict[str, int] = {}
    for pair in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = pair.partition("=")
        if not sep or not value.isdigit():
            raise SystemExit(f"--cap: {pair!r} is not STORE=SIZE")
        caps[name] = int(value)
    return caps


def save_report(report: dict[str, Any], path: str) -> None:
    """Write ``report`` as JSON to ``path``."""
    Path(path).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


def load_report(path: str) -> dict[str, Any]:
    """A report saved by :func:`save_report` (sizes back to ints)."""
    report: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    report["stores"] = {
        store: {int(size): figures for size, figures in per_size.items()}
        for store, per_size in report["stores"].items()
    }
    return report


def _cell(row: Any, full: int) -> str:
    p50, p95, calls = row[:3]
    note = "" if calls >= full else f" ({calls})"
    load = f" @{row[3]:.1f}" if len(row) > 3 else ""
    return f"{p50:.2f} / {p95:.2f}{note}{load}".rjust(WIDTH)


def print_report(report: dict[str, Any]) -> None:
    """One table per size: WRITE memories/s, the ``after`` figures, then p50 / p95 ms per
    query kind; a p50 over fewer calls than ``--queries`` (the time budget) shows the count
    in brackets, and ``@x`` the 1-minute load average when its calls ended."""
    stores: dict[str, dict[int, Any]] = report["stores"]
    load = report.get("load_average", {})
    print(f"\n{report.get('command', '')}")
    print(
        f"embedder {report['embedder']}; {report['queries']} calls per query kind"
        + (f" (at most {report['budget_s']:g} s each)" if report.get("budget_s") else "")
        + "; load average (1/5/15 min) at start "
        + "/".join(f"{x:.2f}" for x in load.get("start", []))
        + ", at end "
        + "/".join(f"{x:.2f}" for x in load.get("end", []))
    )
    for size in report["sizes"]:
        names = [name for name in stores if size in stores[name]]
        print(f"\n{size:,} memories; latency p50 / p95 ms")
        print(f"{'':<{LABEL}}" + "".join(f"{name:>{WIDTH}}" for name in names))
        rate = "".join(f"{stores[n][size]['rate']:>{WIDTH},.0f}" for n in names)
        print(f"{'WRITE mem/s':<{LABEL}}{rate}")
        every = list(dict.fromkeys(key for n in names for key in stores[n][size].get("after", {})))
        for key in every:
            values = (stores[n][size].get("after", {}).get(key) for n in names)
            cells = "".join("-".rjust(WIDTH) if v is None else f"{v:>{WIDTH},.1f}" for v in values)
            print(f"{key:<{LABEL}}{cells}")
        every = list(dict.fromkeys(row for n in names for row in stores[n][size]["rows"]))
        for row in every:
            cells = "".join(
                _cell(stores[n][size]["rows"][row], report["queries"])
                if row in stores[n][size]["rows"]
                else f"{'-':>{WIDTH}}"
                for n in names
            )
            print(f"{row:<{LABEL}}{cells}")
        spent = "".join(f"{stores[n][size]['total_s']:>{WIDTH}.1f}" for n in names)
        print(f"{'time s':<{LABEL}}{spent}")
        for name in stores:
            if size not in stores[name]:
                cap = report["caps"].get(name.split("/")[0])
                print(f"NOT MEASURED at {size:,}: {name} is capped at {cap:,} memories (--cap)")
        _ratios(stores, size)


def _ratios(stores: dict[str, dict[int, Any]], size: int) -> None:
    """p50 of each ``+qf`` store (``--query-fields``) over the same store's without."""
    for declared in [n for n in stores if n.endswith("+qf") and size in stores[n]]:
        plain = stores.get(declared.removesuffix("+qf"), {}).get(size)
        if plain is None:
            continue
        rows = stores[declared][size]["rows"]
        cells = ", ".join(
            f"{row.removeprefix('QUERY ')} {rows[row][0] / plain['rows'][row][0]:.3f}x"
            for row in rows
            if row.startswith("QUERY") and row in plain["rows"] and plain["rows"][row][0]
        )
        print(f"p50 {declared} / without: {cells}")


def plot_report(report: dict[str, Any], path: str) -> None:
    """A PNG at ``path``: one panel per query kind, p50 ms (log) against collection size
    (log), one line per store; a capped store's line ends at its cap (named in the
    legend)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    stores: dict[str, dict[int, Any]] = report["stores"]
    kinds = list(
        dict.fromkeys(
            row for per_size in stores.values() for fig in per_size.values() for row in fig["rows"]
        )
    )
    columns = 4
    rows = -(-len(kinds) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4 * columns, 3.4 * rows), squeeze=False)
    colours = {name: f"C{index}" for index, name in enumerate(stores)}  # one per store
    labels: dict[str, Any] = {}
    for axis, kind in zip(axes.flat, kinds, strict=False):
        for name, per_size in stores.items():
            points = sorted(
                (size, fig["rows"][kind][0])
                for size, fig in per_size.items()
                if kind in fig["rows"]
            )
            if not points:
                continue
            cap = report["caps"].get(name.split("/")[0])
            capped = cap is not None and any(size > cap for size in report["sizes"])
            label = f"{name} (capped at {cap:,})" if capped else name
            (line,) = axis.plot(
                [p[0] for p in points], [p[1] for p in points], marker="o", color=colours[name]
            )
            labels.setdefault(label, line)
        axis.set_title(kind)
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("memories in the store")
        axis.set_ylabel("p50 ms")
        axis.grid(True, which="both", alpha=0.3)
    for axis in list(axes.flat)[len(kinds) :]:
        axis.set_visible(False)
    figure.legend(
        list(labels.values()), list(labels), loc="lower center", ncol=min(5, len(labels) or 1)
    )
    figure.suptitle(f"bench/store_scale.py: p50 vs collection size ({report['embedder']} embedder)")
    figure.tight_layout(rect=(0, 0.06, 1, 0.96))
    figure.savefig(path, dpi=100)
    plt.close(figure)
