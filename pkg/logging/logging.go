// Package logging builds agentbus's slog loggers: log.format (text or json) and log.level from
// the config, every line with unique keys, and attributes carried by a context.
//
// # Unique keys
//
// slog's handlers write every attribute they are given, so a logger made with
// With("role", "ingest") that a package extends with With("role", "ingest") again writes
// "role" twice, and an attribute called "msg" sits next to the message's own "msg": JSON
// readers keep one of them, whichever they like. The handler New returns keeps each key once:
// a later attribute replaces an earlier one with the same key (the record's own attributes come
// last), and an attribute named like a built-in key (time, level, msg, source) is written as
// "attr_<key>".
//
// # Context attributes
//
// With(ctx, attrs...) returns a context whose attributes every line logged with that context
// (InfoContext, LogAttrs, ...) carries, unless the line already has the key. The turn worker
// puts the session and turn there, the model-call wrapper the provider and model, so a
// library that logs with only the context it was given (pkg/llm's retry warnings) names the
// session, turn and provider without importing the application.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// New returns a logger writing to w in format ("text", the default, or "json") at level
// ("debug", "info", the default, "warn" or "error").
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	switch strings.ToLower(level) {
	case "", "info":
		lv = slog.LevelInfo
	case "debug":
		lv = slog.LevelDebug
	case "warn", "warning":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	default:
		return nil, fmt.Errorf("logging: log.level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler
	switch strings.ToLower(format) {
	case "", "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("logging: log.format %q: want text or json", format)
	}
	return slog.New(Unique(h)), nil
}

// Unique wraps h so that every line it writes has each key once (see the package doc) and
// carries the context's attributes (With). h must have no attributes or groups of its own.
func Unique(h slog.Handler) slog.Handler {
	if u, ok := h.(*uniqueHandler); ok {
		return u
	}
	return &uniqueHandler{inner: h}
}

type uniqueHandler struct {
	inner slog.Handler
	attrs []slog.Attr // the With attributes, keys unique, in order
	// grouped: WithGroup was called; keys below a group are qualified by it, so the handler
	// passes everything on as it is from there.
	grouped bool
}

func (h *uniqueHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *uniqueHandler) WithAttrs(as []slog.Attr) slog.Handler {
	if h.grouped {
		return &uniqueHandler{inner: h.inner.WithAttrs(as), grouped: true}
	}
	n := &uniqueHandler{inner: h.inner, attrs: make([]slog.Attr, len(h.attrs), len(h.attrs)+len(as))}
	copy(n.attrs, h.attrs)
	for _, a := range as {
		n.attrs = put(n.attrs, a)
	}
	return n
}

func (h *uniqueHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &uniqueHandler{inner: h.inner.WithAttrs(h.attrs).WithGroup(name), grouped: true}
}

func (h *uniqueHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.grouped {
		return h.inner.Handle(ctx, r)
	}
	all := make([]slog.Attr, len(h.attrs), len(h.attrs)+r.NumAttrs()+4)
	copy(all, h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		all = put(all, a)
		return true
	})
	if ca, ok := ctx.Value(ctxKey{}).([]slog.Attr); ok {
		for _, a := range ca {
			if !has(all, safeKey(a.Key)) {
				all = append(all, slog.Attr{Key: safeKey(a.Key), Value: a.Value})
			}
		}
	}
	n := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	n.AddAttrs(all...)
	return h.inner.Handle(ctx, n)
}

// put sets a in as, replacing an attribute with the same key; built-in keys are renamed.
func put(as []slog.Attr, a slog.Attr) []slog.Attr {
	if a.Equal(slog.Attr{}) {
		return as
	}
	a.Key = safeKey(a.Key)
	for i := range as {
		if as[i].Key == a.Key {
			as[i] = a
			return as
		}
	}
	return append(as, a)
}

func has(as []slog.Attr, key string) bool {
	for i := range as {
		if as[i].Key == key {
			return true
		}
	}
	return false
}

// safeKey renames an attribute that would collide with a key the handler writes itself.
func safeKey(k string) string {
	switch k {
	case slog.TimeKey, slog.LevelKey, slog.MessageKey, slog.SourceKey:
		return "attr_" + k
	}
	return k
}

type ctxKey struct{}

// With returns ctx carrying args (slog's key-value pairs or slog.Attrs) for every line logged
// with it; a key set again replaces the earlier value.
func With(ctx context.Context, args ...any) context.Context {
	prev, _ := ctx.Value(ctxKey{}).([]slog.Attr)
	as := make([]slog.Attr, len(prev), len(prev)+len(args)/2+1)
	copy(as, prev)
	var r slog.Record
	r.Add(args...)
	r.Attrs(func(a slog.Attr) bool {
		as = put(as, a)
		return true
	})
	return context.WithValue(ctx, ctxKey{}, as)
}

// Attrs returns the attributes With put on ctx (nil when none).
func Attrs(ctx context.Context) []slog.Attr {
	as, _ := ctx.Value(ctxKey{}).([]slog.Attr)
	return as
}
