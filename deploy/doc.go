// Package deploy holds the files an operator copies to run leaselog: a
// systemd unit (leaselog.service), Prometheus alert rules (alerts.yaml) and
// a Grafana dashboard (grafana.json). It has no code; its tests check the
// files, and that every metric they name is one the daemon serves.
package deploy
