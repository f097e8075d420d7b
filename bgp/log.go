package bgp

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
)

// levelTrace is below slog's Debug: gobgp's own debug lines (one per
// message and timer) are only for whoever asks for them explicitly.
const levelTrace = slog.LevelDebug - 4

// gobgpLogger adapts gobgp's logger interface to slog and records each
// peer's last connection problem for the status table: gobgp reports
// connect failures and notifications only through its log.
//
// gobgp's informational chatter ("Add a peer configuration", ...) goes to
// Debug; session up/down stays at Info.
type gobgpLogger struct {
	log  *slog.Logger
	book *statusBook
}

var _ gobgplog.Logger = (*gobgpLogger)(nil)

func (l *gobgpLogger) emit(level slog.Level, msg string, fields gobgplog.Fields) {
	l.record(msg, fields)
	if !l.log.Enabled(context.Background(), level) {
		return
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	attrs := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		if k == gobgplog.FieldFacility {
			continue
		}
		attrs = append(attrs, k, fields[k])
	}
	l.log.Log(context.Background(), level, msg, attrs...)
}

// record keeps the last error per peer (the "Key" field of gobgp's "Peer"
// topic).
func (l *gobgpLogger) record(msg string, f gobgplog.Fields) {
	if l.book == nil {
		return
	}
	var text string
	switch msg {
	case "failed to connect":
		text = fmt.Sprintf("Socket: %v", f["Error"])
	case "received notification":
		text = "Received: " + notificationText(f)
	case "sent notification":
		text = "Sent: " + notificationText(f)
	case "failed to set md5":
		text = fmt.Sprintf("TCP MD5: %v", f["Err"])
	case "hold timer expired":
		text = "Error: Hold timer expired"
	case "Peer Down":
		if r, ok := f["Reason"].(string); ok && r != "" {
			text = "Down: " + r
		}
	}
	if text == "" || f["Topic"] != "Peer" {
		return
	}
	key, _ := f["Key"].(string)
	addr, err := netip.ParseAddr(key)
	if err != nil {
		return
	}
	l.book.setError(addr.Unmap(), text)
}

func notificationText(f gobgplog.Fields) string {
	code, ok1 := f["Code"].(uint8)
	sub, ok2 := f["Subcode"].(uint8)
	if ok1 && ok2 {
		s := bgp.NewNotificationErrorCode(code, sub).String()
		if r, ok := f["Communicated-Reason"].(string); ok && r != "" {
			s += " (" + r + ")"
		}
		return s
	}
	return fmt.Sprint(f["Data"])
}

// Panic and Fatal must not end the process from inside a library: they are
// logged as errors and gobgp carries on as well as it can.
func (l *gobgpLogger) Panic(msg string, f gobgplog.Fields) { l.emit(slog.LevelError, msg, f) }
func (l *gobgpLogger) Fatal(msg string, f gobgplog.Fields) { l.emit(slog.LevelError, msg, f) }
func (l *gobgpLogger) Error(msg string, f gobgplog.Fields) { l.emit(slog.LevelError, msg, f) }
func (l *gobgpLogger) Warn(msg string, f gobgplog.Fields)  { l.emit(slog.LevelWarn, msg, f) }
func (l *gobgpLogger) Info(msg string, f gobgplog.Fields) {
	lvl := slog.LevelDebug
	if msg == "Peer Up" || msg == "Peer Down" {
		lvl = slog.LevelInfo
	}
	l.emit(lvl, msg, f)
}
func (l *gobgpLogger) Debug(msg string, f gobgplog.Fields) { l.emit(levelTrace, msg, f) }

// SetLevel is ignored: the slog handler decides what is printed.
func (l *gobgpLogger) SetLevel(gobgplog.LogLevel) {}

// GetLevel says Debug so that gobgp reports connection failures (which it
// only logs at debug level) to record; emit drops what slog would not print.
func (l *gobgpLogger) GetLevel() gobgplog.LogLevel { return gobgplog.DebugLevel }
