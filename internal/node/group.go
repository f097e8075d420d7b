package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/oklog/run"
)

// group is the one run.Group of `calico-node run`, each actor under its
// name. The first actor to return stops all the others.
type group struct {
	g      run.Group
	parent context.Context
	log    *slog.Logger
}

func newGroup(parent context.Context, logger *slog.Logger) *group {
	return &group{parent: parent, log: logger}
}

// errSignalled is how the signal handler stops the group: a requested
// stop, which run reports as success.
var errSignalled = errors.New("stop requested by signal")

// add runs fn as the actor name. Its ctx ends when the group stops; the
// actor must then return. An actor that returns nil before that has
// stopped on its own, which stops the agent with an error saying so: the
// process must not exit 0 (a DaemonSet pod "Completed") because a part of
// it ended.
func (g *group) add(name string, fn func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(g.parent)
	g.g.Add(func() error {
		err := fn(ctx)
		if err == nil && ctx.Err() == nil {
			err = fmt.Errorf("%s stopped unexpectedly", name)
		}
		if err != nil {
			g.log.Info(name+" stopped", "err", err)
		} else {
			g.log.Info(name + " stopped")
		}
		return err
	}, func(error) {
		g.log.Info("stopping " + name)
		cancel()
	})
}

// run runs every actor and returns the first one's result once all have
// returned; nil when a signal stopped it.
func (g *group) run() error {
	if err := g.g.Run(); !errors.Is(err, errSignalled) {
		return err
	}
	return nil
}

// after is fn started only once ready is closed: the order between actors
// that matters, written where the actor is added. A group stopped before
// that ends it with nil.
func after(ready <-chan struct{}, fn func(ctx context.Context) error) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		select {
		case <-ready:
		case <-ctx.Done():
			return nil
		}
		return fn(ctx)
	}
}

// closed is a channel that is ready at once: the dependency an absent
// actor would have been.
func closed() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// waitForSignal is the signal handler actor: SIGINT or SIGTERM stop the
// group, with success.
func waitForSignal(logger *slog.Logger) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		defer signal.Stop(sig)
		select {
		case s := <-sig:
			logger.Info("received signal, stopping", "signal", s.String())
			return errSignalled
		case <-ctx.Done():
		}
		return nil
	}
}
