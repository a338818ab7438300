"""contrib/grafana/kiln.json: every query names series that kiln's /metrics exports."""

import json
import re

import requests

from kiln_harness import ROOT

DASHBOARD = ROOT / "contrib" / "grafana" / "kiln.json"
SUFFIXES = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "gauge": [""]}


def exported_series(text):
    """The sample names /metrics can have, from its `# TYPE` lines."""
    names = set()
    for family, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        names |= {family + suffix for suffix in SUFFIXES.get(kind, [""])}
    return names


def test_every_dashboard_query_names_an_exported_metric(kiln):
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_series(requests.get(kiln.console + "/metrics", timeout=10).text)
    assert "kiln_invocations_total" in exported and "kiln_invocation_duration_seconds_bucket" in exported
    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(queries) == len(dashboard["panels"]) >= 10
    for query in queries:
        named = set(re.findall(r"\bkiln_[a-z_]+", query))
        assert named, query
        assert named <= exported, f"{query}: {named - exported} not exported"
    # Each panel reads the dashboard's Prometheus, chosen when it is imported.
    assert {p["datasource"]["uid"] for p in dashboard["panels"]} == {"${datasource}"}
