"""Draws the operator's Grafana dashboard to a PNG from a Prometheus' data, so that a person can
look at what the dashboard shows without a Grafana (hack/dashboard-png.sh runs it in its venv).

It reads the dashboard's JSON model (the `etcd-operator.json` of `etcd-operator manifests
--monitoring`, or the chart's files/grafana-dashboard.json), fills in the template variables
($namespace, $cluster, $__rate_interval) as Grafana would for one cluster, runs every panel's
queries as range queries through the Prometheus HTTP API (/api/v1/query_range), and lays the
panels out on their gridPos, each with its title, unit and legend (legendFormat). A panel whose
queries return no series says "No data", as Grafana does: the picture shows gaps honestly.

Usage: render.py --prometheus URL --dashboard FILE --namespace NS --cluster NAME
                 [--minutes 15] [--step 15] --out PNG
"""

import argparse
import datetime as dt
import json
import re
import sys
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

UNITS = {"bytes": "bytes", "s": "seconds", "reqps": "requests/s", "short": ""}


def query_range(base, expr, start, end, step):
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{base}/api/v1/query_range?{q}", timeout=30) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus refused `{expr}`: {body.get('error')}")
    return body["data"]["result"]


def legend(fmt, labels):
    if not fmt:
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)


def fill(expr, namespace, cluster):
    return expr.replace("$namespace", namespace).replace("$cluster", cluster).replace("$__rate_interval", "2m")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--dashboard", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--minutes", type=float, default=15)
    ap.add_argument("--step", type=float, default=15)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    with open(a.dashboard) as f:
        board = json.load(f)
    panels = board["panels"]
    end = dt.datetime.now(dt.timezone.utc).timestamp()
    start = end - a.minutes * 60

    rows = max(p["gridPos"]["y"] // 8 for p in panels) + 1
    fig, axes = plt.subplots(rows, 2, figsize=(16, 3.2 * rows), squeeze=False)
    for ax in axes.flat:
        ax.set_visible(False)
    empty = []
    for p in panels:
        ax = axes[p["gridPos"]["y"] // 8][p["gridPos"]["x"] // 12]
        ax.set_visible(True)
        ax.set_title(p["title"], fontsize=10, loc="left")
        series = 0
        for t in p.get("targets", []):
            for r in query_range(a.prometheus, fill(t["expr"], a.namespace, a.cluster), start, end, a.step):
                xs = [dt.datetime.fromtimestamp(float(v[0]), dt.timezone.utc) for v in r["values"]]
                ys = [float(v[1]) for v in r["values"]]
                # A series of one point (a counter born a scrape ago) is a dot, not an invisible line.
                ax.plot(xs, ys, linewidth=1.2, marker="." if len(xs) == 1 else None,
                        label=legend(t.get("legendFormat", ""), r["metric"]))
                series += 1
        unit = UNITS.get(p.get("fieldConfig", {}).get("defaults", {}).get("unit", ""), "")
        ax.set_ylabel(unit, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_formatter(matplotlib.dates.DateFormatter("%H:%M"))
        ax.grid(alpha=0.3)
        if series:
            ax.legend(fontsize=6, loc="upper left", ncol=2)
        else:
            empty.append(p["title"])
            ax.text(0.5, 0.5, "No data", ha="center", va="center", transform=ax.transAxes, color="grey")
    when = dt.datetime.fromtimestamp(end, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    fig.suptitle(
        f"{board.get('title', 'dashboard')}: {a.namespace}/{a.cluster}, the last {a.minutes:g} minutes to {when}",
        fontsize=12,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(a.out, dpi=80)
    print(f"{a.out}: {len(panels)} panels, {len(empty)} without data{': ' + ', '.join(empty) if empty else ''}")


if __name__ == "__main__":
    sys.exit(main())
