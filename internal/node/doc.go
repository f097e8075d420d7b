// Package node is the calico-node app: the urfave/cli commands (run, plan,
// cleanup, ctl, status, version) and `calico-node run`, the one oklog/run group that
// replaces felix, BIRD + confd, install-cni and kube-controllers.
//
// Design: run reads its flags and environment (run.go, run_k8s.go), builds
// every actor (build.go, dataplane.go), so that a configuration error
// stops the process before anything has started, installs the CNI plugin
// once, then adds each actor to the group under its name (group.go). The
// first actor to return stops the others. Order between actors is written
// where they are added: an actor that must wait for another is added
// behind the channel that says it is done (the embedded etcd's Ready,
// confwatch's Synced, the datastore future's Ready). The datastore
// connection does not exist while the actors are built: they get a future
// (future.go) that the startup actor resolves once the node is registered.
//
// `calico-node plan` (plan.go) reads run's configuration, computes each
// dataplane part's desired state with the actors' own functions and asks
// each programmer what it would write, without writing.
//
// Beside it: startup (node registration, default pools), autodetect (the
// node's IP), health (/liveness, /readiness, /metrics), embedetcd (the
// single-node default datastore), cleanup (`calico-node cleanup`) and
// agentlock (the lock run holds for its life, so that cleanup refuses
// while an agent runs).
package node
