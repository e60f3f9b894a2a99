"""plot_handoff.py - handoff rate and bytes per handoff against queue length, one line per contender.

    /usr/bin/python3 bench/tools/plot_handoff.py RESULTS.tsv [MORE.tsv ...] -o bench/handoff.png [--title TEXT]

Reads the tab-separated cells that bench/drivers/handoff_drain.lua --tsv writes (contender,
waiters, handoffs/s, bytes received per handoff, ...) and draws two panels side by side, both
against the number of waiters (log scale): the drain's handoffs per second, and the bytes the
waiters' processes received per handoff (log scale). Needs Debian's python3-matplotlib.
"""
import argparse
import csv
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)

STYLE = {  # contender name prefix -> colour and marker
    "zklock": ("#1f77b4", "o"),
    "Curator": ("#d62728", "s"),
    "Kazoo": ("#2ca02c", "^"),
}


def style(name):
    for prefix, st in STYLE.items():
        if name.startswith(prefix):
            return st
    return ("#7f7f7f", "x")


def number(s):
    try:
        v = float(s)
    except ValueError:
        return None
    return None if math.isnan(v) else v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsv", nargs="+")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--title", default="Mutex queue drain across 4 processes (one ZooKeeper, forceSync=yes)")
    a = ap.parse_args()
    series = {}  # contender -> {waiters: (rate, bytes)}
    for path in a.tsv:
        with open(path, newline="") as f:
            for row in csv.DictReader(f, delimiter="\t"):
                n = int(row["waiters"])
                series.setdefault(row["contender"], {})[n] = (number(row["handoffs_per_s"]),
                                                              number(row["bytes_per_handoff"]))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, cells in series.items():
        colour, marker = style(name)
        xs = sorted(cells)
        rates = [cells[x][0] for x in xs]
        nbytes = [cells[x][1] for x in xs]
        left.plot(xs, rates, marker=marker, color=colour, label=name)
        right.plot([x for x, b in zip(xs, nbytes) if b is not None], [b for b in nbytes if b is not None],
                   marker=marker, color=colour, label=name)
        for x, r in zip(xs, rates):
            if r is not None:
                left.annotate("%.0f" % r, (x, r), textcoords="offset points", xytext=(4, 4), fontsize=7, color=colour)
        for x, b in zip(xs, nbytes):
            if b is not None:
                right.annotate("%.0f" % b, (x, b), textcoords="offset points", xytext=(4, 4), fontsize=7,
                               color=colour)
    left.set_xscale("log")
    left.set_xlabel("waiters queued")
    left.set_ylabel("handoffs per second (higher is better)")
    left.set_ylim(bottom=0)
    left.set_title("drain rate")
    right.set_xscale("log")
    right.set_yscale("log")
    lo, hi = right.get_ylim()
    right.set_ylim(lo, hi * 1.8)  # room for the labels of the top points
    right.set_xlabel("waiters queued")
    right.set_ylabel("bytes received per handoff (lower is better)")
    right.set_title("bytes per handoff")
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(a.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)


main()
