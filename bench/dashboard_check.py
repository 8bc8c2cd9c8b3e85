"""Checks an `mfsdp dashboard` page: it parses, and every chart holds every series the results call for.

dashboard_check.py DASHBOARD.html RESULT.json [...]
"""
import json
import sys
from html.parser import HTMLParser
from xml.etree import ElementTree


class Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.series = {}   # chart id -> set of series names
        self.points = {}   # (chart, series) -> number of data points
        self.current = None
        self.script = None
        self.data = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "g" and "data-series" in a:
            self.current = (a["data-chart"], a["data-series"])
            self.series.setdefault(a["data-chart"], set()).add(a["data-series"])
            self.points.setdefault(self.current, 0)
        elif tag in ("circle", "rect") and "data-value" in a and self.current:
            float(a["data-value"])
            self.points[self.current] += 1
        elif tag == "script" and a.get("id") == "results":
            self.script = True

    def handle_endtag(self, tag):
        if tag == "g":
            self.current = None
        if tag == "script":
            self.script = None

    def handle_data(self, data):
        if self.script:
            self.data += data


page_path, result_paths = sys.argv[1], sys.argv[2:]
page = open(page_path, encoding="utf-8").read()
ElementTree.fromstring(page.split("\n", 1)[1])  # well-formed XHTML after the doctype line
p = Collect()
p.feed(page)
embedded = json.loads(p.data)
assert len(embedded) == len(result_paths), "the page embeds another number of results"

charts = 0
for f, path in enumerate(result_paths):
    r = json.load(open(path))
    assert r["cases"], f"{path} holds no benchmark cases"
    placements = sorted({c["placement"] for c in r["cases"]})
    for model in sorted({c["model"] for c in r["cases"]}):
        tag = f"{f}-{model}"
        for chart, want in ((f"opt-latency-{tag}", placements), (f"memory-{tag}", placements),
                            (f"bytes-{tag}", ["unshard", "grad_reduce", "optimizer_step"]),
                            (f"imbalance-{tag}", ["round_robin", "greedy_bytes", "greedy_cost", "balanced"])):
            got = p.series.get(chart, set())
            missing = set(want) - got
            assert not missing, f"{chart} lacks series {sorted(missing)}"
            for s in want:
                assert p.points[(chart, s)] > 0, f"{chart}/{s} has no data points"
            charts += 1
        n = sum(1 for c in r["cases"] if c["model"] == model)
        points = sum(p.points[(f"opt-latency-{tag}", s)] for s in placements)
        assert points == n, f"opt-latency-{tag}: {points} points for {n} cases"
    for table in (f"ratios-{f}", f"cases-{f}", f"environment-{f}"):
        assert f'id="{table}"' in page, f"table {table} missing"
print(f"dashboard: parses, {charts} charts hold every series of {len(result_paths)} result file(s)")
