// Package node is the calico-node app: the urfave/cli commands (run, ctl,
// status, version) and `calico-node run`, the one oklog/run group that
// replaces felix, BIRD + confd, install-cni and kube-controllers.
//
// Design: run builds every actor first, so that a configuration error stops
// the process before anything has started, then adds each to the group
// under its name. The first actor to return stops the others.
//
// Beside it: startup (node registration, default pools), autodetect (the
// node's IP), health (/liveness, /readiness, /metrics) and embedetcd (the
// single-node default datastore).
package node
