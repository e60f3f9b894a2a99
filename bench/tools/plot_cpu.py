"""plot_cpu.py - client CPU per operation by workload and runtime, from a bench/run.

    /usr/bin/python3 bench/tools/plot_cpu.py CELLS.tsv -o bench/RESULTS-cpu.png [--title TEXT]

Reads the tab-separated cells that bench/bench.lua writes next to its report (workload, runtime,
median, min, max, ref: 1 when the raw value is the reference run the workload's row names rather
than the same workload) and draws one group of horizontal bars per workload, one bar per runtime,
on a log scale (the JVM and Python clients spend 5-20 times what zklock does), with the min-max
of the rounds as a whisker and the median written at the bar's end. Raw reference bars are
hatched. Needs Debian's python3-matplotlib.
"""
import argparse
import csv

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)

RUNTIMES = [  # drawing order (top to bottom within a group) and colour
    ("zklock 5.4", "#1f77b4"),
    ("zklock LuaJIT", "#17becf"),
    ("raw C", "#7f7f7f"),
    ("Curator 5.4", "#d62728"),
    ("Kazoo 2.8", "#2ca02c"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsv")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--title", default="Client CPU per operation (user + system of the client process; lower is better)")
    a = ap.parse_args()
    workloads, cells = [], {}
    with open(a.tsv, newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            w = row["workload"]
            if w not in cells:
                workloads.append(w)
                cells[w] = {}
            cells[w][row["runtime"]] = (float(row["median"]), float(row["min"]), float(row["max"]), row["ref"] == "1")
    if not workloads:
        raise SystemExit("plot_cpu.py: no cells in " + a.tsv)
    present = [(name, colour) for name, colour in RUNTIMES if any(name in cells[w] for w in workloads)]
    bar = 0.8 / len(present)
    fig, ax = plt.subplots(figsize=(11, 1.2 + len(workloads) * (0.12 * len(present) + 0.14)))
    lo, hi = float("inf"), 0.0
    for k, (name, colour) in enumerate(present):
        ys, xs, errs, hatches = [], [], [[], []], []
        for i, w in enumerate(workloads):
            c = cells[w].get(name)
            if not c:
                continue
            med, mn, mx, ref = c
            ys.append(i + (k - (len(present) - 1) / 2) * bar)
            xs.append(med)
            errs[0].append(med - mn)
            errs[1].append(mx - med)
            hatches.append("//" if ref else "")
            lo, hi = min(lo, mn), max(hi, mx)
        bars = ax.barh(ys, xs, height=bar * 0.92, color=colour, label=name, xerr=errs,
                       error_kw={"elinewidth": 0.8, "capsize": 1.5, "ecolor": "#333333"})
        for b, h in zip(bars, hatches):
            if h:
                b.set_hatch(h)
                b.set_edgecolor("white")
        for y, x, e in zip(ys, xs, errs[1]):
            ax.annotate("%.3g" % x if x < 100 else "%.0f" % x, (x + e, y), textcoords="offset points",
                        xytext=(3, -2.5), fontsize=6.5, color="#222222")
    ax.set_xscale("log")
    ax.set_xlim(max(lo / 2, 0.1), hi * 1.7)  # room for the last label
    ax.set_yticks(range(len(workloads)))
    ax.set_yticklabels(workloads, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("client CPU, µs per operation (log scale; whiskers: min-max of the rounds)")
    ax.set_title(a.title, fontsize=10)
    ax.grid(axis="x", which="both", alpha=0.25)
    handles, labels = ax.get_legend_handles_labels()
    if any(c.get("raw C", (0, 0, 0, False))[3] for c in cells.values()):
        from matplotlib.patches import Patch
        handles.append(Patch(facecolor="#7f7f7f", hatch="//", edgecolor="white"))
        labels.append("raw C reference (create+delete, or pipelined)")
    ax.legend(handles, labels, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.045 * 14 / len(workloads) - 0.02),
              ncol=3, frameon=False)
    fig.savefig(a.output, dpi=110, bbox_inches="tight")


if __name__ == "__main__":
    main()
