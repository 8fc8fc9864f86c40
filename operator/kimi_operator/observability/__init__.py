"""Operator-side observability artifacts: Prometheus rules and Grafana dashboards, as code.

`python -m kimi_operator.observability` regenerates the committed files under
charts/kimi-operator/ (rules/kimi-k3.rules.yaml, dashboards/*.json); a test fails when they drift.
"""
