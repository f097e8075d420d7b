package embedetcd

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"

	"go.uber.org/zap/zapcore"
)

// quiet reports whether msg is something etcd always logs for our setup
// that says nothing an operator can act on; those go to debug instead.
// closing is true once we have asked etcd to stop: its servers then report
// their own (expected) shutdown as errors.
func quiet(msg string, closing bool) bool {
	switch msg {
	case "Running http and grpc server on single port. This is not recommended for production.":
		// We serve HTTP and gRPC on one loopback port on purpose.
		return true
	case "simple token is not cryptographically signed":
		// Auth is off; the token provider is never used.
		return true
	case "setting up serving from embedded etcd failed.",
		"stopping insecure grpc server due to error",
		"stopped insecure grpc server due to error",
		"failed to update cluster version":
		return closing
	}
	return false
}

// slogCore is a zapcore.Core that hands etcd's log entries to a slog.Logger,
// so the embedded server logs through the agent's logger instead of writing
// its own JSON to stderr.
type slogCore struct {
	log     *slog.Logger
	min     zapcore.Level
	fields  []zapcore.Field
	closing *atomic.Bool // shared by every core derived through With
}

func newSlogCore(log *slog.Logger, min zapcore.Level, closing *atomic.Bool) *slogCore {
	return &slogCore{log: log, min: min, closing: closing}
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= c.min }

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, min: c.min, fields: append(slices.Clip(c.fields), fields...), closing: c.closing}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	level := slogLevel(e.Level)
	if quiet(e.Message, c.closing.Load()) {
		level = slog.LevelDebug
	}
	ctx := context.Background()
	if !c.log.Enabled(ctx, level) {
		return nil
	}
	// zap's map encoder renders every field type (errors, durations,
	// stringers, arrays) into plain values slog can print.
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	attrs := make([]slog.Attr, 0, len(keys)+1)
	if e.LoggerName != "" {
		attrs = append(attrs, slog.String("etcdLogger", e.LoggerName))
	}
	for _, k := range keys {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	c.log.LogAttrs(ctx, level, e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}
