package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/dlq"
	"github.com/agentbus/agentbus/pkg/presence"
)

// Status is what `agentbus status` reads from the bus (and prints with --json).
type Status struct {
	Replicas    []presence.Record `json:"replicas"`
	Consumers   []ConsumerLag     `json:"consumers"`
	DeadLetters []DeadLetterCount `json:"deadLetters"` // of the last hour, by role and reason
	Problems    []string          `json:"problems,omitempty"`
}

// ConsumerLag is one durable consumer's backlog.
type ConsumerLag struct {
	Stream      string `json:"stream"`
	Consumer    string `json:"consumer"`
	Pending     uint64 `json:"pending"`     // stored, not yet delivered
	AckPending  int    `json:"ackPending"`  // delivered, not yet acknowledged
	Redelivered int    `json:"redelivered"` // delivered more than once, not yet acknowledged
}

// DeadLetterCount is how many letters one role gave up on for one reason.
type DeadLetterCount struct {
	Role   string `json:"role"`
	Reason string `json:"reason"`
	Count  int    `json:"count"`
}

func cmdStatus(ctx context.Context, args []string, w io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	bus := addBusFlags(fs)
	asJSON := fs.Bool("json", false, "print the status as one JSON object")
	window := fs.Duration("dead-letters-since", time.Hour, "count the dead letters of this last `duration`")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `agentbus status — what runs on the bus now, read from the bus alone (any deployment):
each live role replica (KV presence) with its host, pid, version and uptime, the sessions
each turn worker owns, the IM adapters' connection state, the backlog of every durable
consumer, and the dead letters of the last hour. Exit status 1 when an adapter is not
connected or nothing runs.

Usage:
  agentbus status [flags]

Flags:
`)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), clientEnvHelp)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	nc, js, err := connectJS(bus)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := readStatus(ctx, js, *window)
	if err != nil {
		return err
	}
	if *asJSON {
		b, _ := json.MarshalIndent(st, "", "  ")
		fmt.Fprintln(w, string(b))
	} else {
		printStatus(w, st, *window)
	}
	if len(st.Problems) > 0 {
		return errSilent
	}
	return nil
}

// errSilent makes the command exit 1 after it has printed why.
var errSilent = errors.New("")

func readStatus(ctx context.Context, js jetstream.JetStream, window time.Duration) (*Status, error) {
	st := &Status{}
	recs, err := presence.List(ctx, js)
	if err != nil {
		return nil, err
	}
	st.Replicas = recs
	if len(recs) == 0 {
		st.Problems = append(st.Problems, "no role replica is announced in KV presence (nothing runs, or it runs a version without presence)")
	}
	for _, r := range recs {
		for _, a := range r.Adapters {
			if !a.Healthy() {
				st.Problems = append(st.Problems, fmt.Sprintf("adapter %s/%s on %s (%s): %s %s", a.Platform, a.Bot, r.Host, r.ID, a.State, a.Error))
			}
		}
	}
	for s := range js.ListStreams(ctx).Info() {
		stream, err := js.Stream(ctx, s.Config.Name)
		if err != nil {
			continue
		}
		for c := range stream.ListConsumers(ctx).Info() {
			if c.Config.Durable == "" {
				continue // ordered readers (replay, status, the console): not a backlog
			}
			st.Consumers = append(st.Consumers, ConsumerLag{Stream: s.Config.Name, Consumer: c.Name, Pending: c.NumPending,
				AckPending: c.NumAckPending, Redelivered: c.NumRedelivered})
		}
	}
	sort.Slice(st.Consumers, func(i, j int) bool {
		a, b := st.Consumers[i], st.Consumers[j]
		if a.Stream != b.Stream {
			return a.Stream < b.Stream
		}
		return a.Consumer < b.Consumer
	})
	store, err := dlq.Open(ctx, js)
	if err != nil {
		return nil, err
	}
	letters, err := store.List(ctx, dlq.Filter{Since: time.Now().Add(-window)})
	if err != nil {
		return nil, err
	}
	counts := map[[2]string]int{}
	for _, l := range letters {
		counts[[2]string{l.Role, l.Reason}]++
	}
	for k, n := range counts {
		st.DeadLetters = append(st.DeadLetters, DeadLetterCount{Role: k[0], Reason: k[1], Count: n})
	}
	sort.Slice(st.DeadLetters, func(i, j int) bool {
		a, b := st.DeadLetters[i], st.DeadLetters[j]
		return a.Role+"."+a.Reason < b.Role+"."+b.Reason
	})
	return st, nil
}

func printStatus(w io.Writer, st *Status, window time.Duration) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tID\tHOST\tPID\tVERSION\tUPTIME\tSESSIONS")
	for _, r := range st.Replicas {
		sessions := "-"
		if r.Sessions >= 0 && r.Role == "turn-worker" {
			sessions = fmt.Sprint(r.Sessions)
		}
		version := r.Version
		if r.Revision != "" {
			version += " (" + r.Revision + ")"
		}
		// Uptime as of now (the record may be a refresh interval old); the writer's clock.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.Role, r.ID, r.Host, r.PID, version, time.Since(r.Started).Round(time.Second), sessions)
	}
	tw.Flush()
	if len(st.Replicas) == 0 {
		fmt.Fprintln(w, "(no replica announced)")
	}
	var adapters []string
	for _, r := range st.Replicas {
		for _, a := range r.Adapters {
			line := fmt.Sprintf("  %s/%s on %s (%s): %s since %s", a.Platform, a.Bot, r.Host, r.ID, a.State, a.Since.Local().Format(time.DateTime))
			if a.Error != "" {
				line += ": " + oneLine(a.Error)
			}
			adapters = append(adapters, line)
		}
	}
	if len(adapters) > 0 {
		fmt.Fprintln(w, "\nAdapters:")
		fmt.Fprintln(w, strings.Join(adapters, "\n"))
	}
	fmt.Fprintln(w, "\nConsumers (backlog per stream; --json lists every consumer):")
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  STREAM\tCONSUMER\tPENDING\tACK PENDING\tREDELIVERED")
	idle := 0
	for _, c := range st.Consumers {
		// The role's main consumers always; the per-tool ones only with a backlog (one per tool).
		if c.Stream == "TOOL_CALLS" && c.Pending == 0 && c.AckPending == 0 {
			idle++
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%d\n", c.Stream, c.Consumer, c.Pending, c.AckPending, c.Redelivered)
	}
	tw.Flush()
	if idle > 0 {
		fmt.Fprintf(w, "  (%d tool consumers on TOOL_CALLS with nothing pending)\n", idle)
	}
	total := 0
	for _, d := range st.DeadLetters {
		total += d.Count
	}
	fmt.Fprintf(w, "\nDead letters in the last %s: %d", strings.TrimSuffix(window.String(), "0m0s"), total)
	if total > 0 {
		fmt.Fprint(w, " (agentbus dlq list)")
	}
	fmt.Fprintln(w)
	for _, d := range st.DeadLetters {
		fmt.Fprintf(w, "  %s/%s: %d\n", d.Role, d.Reason, d.Count)
	}
	for _, p := range st.Problems {
		fmt.Fprintln(w, "\nPROBLEM:", p)
	}
}
