// Package deploy holds gatekeeper's deployment files: compose.yaml (two
// replicas and Redis), kubernetes/ (plain manifests with a
// kustomization.yaml) and prometheus/ (alert rules, their unit tests and a
// Grafana dashboard), with config.yaml, the config both deployments run.
// It has no code; its tests check the files against gatekeeper itself: the
// config passes gatekeeper's own validation, the probes and grace periods
// agree with it, and every metric the rules and the dashboard query is
// served at /metrics.
package deploy
