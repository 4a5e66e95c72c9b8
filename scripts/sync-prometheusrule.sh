#!/usr/bin/env bash
# Writes deploy/kubernetes/prometheusrule.yaml from deploy/prometheus/rules.yml: the same
# groups, comments and all, under a PrometheusRule's spec. Run it after every change to
# rules.yml (tests/deploy/test_deploy_files.py fails until the two agree).
# --stdout prints it instead of writing the file.
set -euo pipefail
cd "$(dirname "$0")/.."
render() {
  cat <<'HEAD'
# queuebot's alerting rules for the Prometheus Operator: the groups of
# deploy/prometheus/rules.yml, the same rules word for word. Do not edit: change rules.yml
# and run scripts/sync-prometheusrule.sh. Give it the labels your Prometheus's
# ruleSelector selects, if it selects any.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: queuebot
  labels:
    app.kubernetes.io/name: queuebot
spec:
HEAD
  # rules.yml from its `groups:` line on, two spaces in; blank lines stay blank.
  sed -n '/^groups:/,$p' deploy/prometheus/rules.yml | sed -E 's/^(.+)$/  \1/'
}
if [ "${1:-}" = "--stdout" ]; then
  render
else
  render > deploy/kubernetes/prometheusrule.yaml
fi
