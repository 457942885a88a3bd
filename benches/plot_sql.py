#!/usr/bin/env python3
"""Bar chart of the SQL benchmark: gpusort, DataFusion and DuckDB per query (log scale).

    python3 benches/plot_sql.py merged.json docs/sql_benchmark.png ["title"]

The input is the JSON written by benches/sql_duckdb.py --json (matplotlib needed).
"""

import json
import sys


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(sys.argv[1]) as f:
        data = json.load(f)
    queries = data["queries"]
    names = [q["query"] for q in queries]
    series = [
        ("gpusort", "gpusort_s", "#76b900"),
        ("DataFusion (CPU sort)", "datafusion_s", "#4c72b0"),
        (f"DuckDB {data.get('duckdb', {}).get('version', '')}", "duckdb_s", "#dd8452"),
    ]
    width = 0.27
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for i, (label, key, color) in enumerate(series):
        xs = [j + (i - 1) * width for j in range(len(names))]
        ys = [q.get(key) or 0 for q in queries]
        bars = ax.bar(xs, ys, width, label=label, color=color)
        for bar, y in zip(bars, ys):
            if y:
                ax.annotate(f"{y:.2f}", (bar.get_x() + bar.get_width() / 2, y),
                            ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names)
    ax.set_yscale("log")
    ax.set_ylabel("seconds (median of 3, log scale)")
    title = f"SQL benchmark, {data.get('rows', '?'):,} rows"
    if len(sys.argv) == 4:
        title = sys.argv[3]
    ax.set_title(f"{title}, {data.get('device', '')}",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)


if __name__ == "__main__":
    main()
