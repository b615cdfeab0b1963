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

	"github.com/agentbus/agentbus/pkg/dlq"
)

const dlqUsage = `agentbus dlq — the dead letters of every role (DEAD_LETTERS): what a role gave up on, why,
and the session it belongs to.

Usage:
  agentbus dlq list [--role R] [--reason X] [--session KEY] [--since D] [--limit N] [--json]
  agentbus dlq show ID [--json]       one letter in full: error, origin, headers, body
  agentbus dlq retry ID               put the original back where it came from (once the cause is
                                      fixed); the letter is removed, a new failure makes a new one
  agentbus dlq discard ID             remove one letter
  agentbus dlq purge [--role R] [--reason X] [--session KEY] [--since D]
                                      remove every letter that matches (all without filters)

Every subcommand takes --nats URL and --data DIR (see agentbus dlq list --help).
`

func cmdDLQ(ctx context.Context, args []string, w io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(w, dlqUsage)
		return errors.New("dlq: a subcommand is required: list, show, retry, discard or purge")
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("dlq "+sub, flag.ContinueOnError)
	bus := addBusFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	var f struct {
		role, reason, session *string
		since                 *time.Duration
		limit                 *int
	}
	switch sub {
	case "list", "purge":
		f.role = fs.String("role", "", "only letters of this `role` (ingest, turn-worker, tool-worker, egress, archiver)")
		f.reason = fs.String("reason", "", "only letters with this `reason` (invalid, poison, max_deliveries, ...)")
		f.session = fs.String("session", "", "only letters of this session `key` (platform:bot:scope:scene)")
		f.since = fs.Duration("since", 0, "only letters of this last `duration` (e.g. 1h)")
		if sub == "list" {
			f.limit = fs.Int("limit", 100, "show at most the newest `n` letters (0: all)")
		}
	case "show", "retry", "discard":
	case "help", "-h", "--help":
		fmt.Fprint(w, dlqUsage)
		return nil
	default:
		fmt.Fprint(w, dlqUsage)
		return fmt.Errorf("dlq: unknown subcommand %q", sub)
	}
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), dlqUsage+"\nFlags of dlq "+sub+":\n")
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), clientEnvHelp)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	id := ""
	switch sub {
	case "show", "retry", "discard":
		if fs.NArg() != 1 {
			return fmt.Errorf("usage: agentbus dlq %s ID (the ID agentbus dlq list prints)", sub)
		}
		id = fs.Arg(0)
	default:
		if fs.NArg() != 0 {
			return fmt.Errorf("dlq %s: unexpected argument %q", sub, fs.Arg(0))
		}
	}
	nc, js, err := connectJS(bus)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	store, err := dlq.Open(ctx, js)
	if err != nil {
		return err
	}
	filter := func() dlq.Filter {
		flt := dlq.Filter{Role: *f.role, Reason: *f.reason, Session: *f.session}
		if *f.since > 0 {
			flt.Since = time.Now().Add(-*f.since)
		}
		if f.limit != nil {
			flt.Limit = *f.limit
		}
		return flt
	}
	switch sub {
	case "list":
		ls, err := store.List(ctx, filter())
		if err != nil {
			return err
		}
		printLetters(w, ls, *asJSON)
	case "show":
		l, err := store.Get(ctx, id)
		if err != nil {
			return err
		}
		if *asJSON {
			b, _ := json.MarshalIndent(l, "", "  ")
			fmt.Fprintln(w, string(b))
			return nil
		}
		printLetter(w, l)
	case "retry":
		r, err := store.Retry(ctx, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "dead letter %s put back on %s (%s seq %d)\n", id, r.Subject, r.Stream, r.Seq)
	case "discard":
		if err := store.Discard(ctx, id); err != nil {
			return err
		}
		fmt.Fprintf(w, "dead letter %s discarded\n", id)
	case "purge":
		n, err := store.Purge(ctx, filter())
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%d dead letters purged\n", n)
	}
	return nil
}

func printLetters(w io.Writer, ls []dlq.Letter, asJSON bool) {
	if asJSON {
		for _, l := range ls {
			b, _ := json.Marshal(l)
			fmt.Fprintln(w, string(b))
		}
		return
	}
	if len(ls) == 0 {
		fmt.Fprintln(w, "no dead letters")
		return
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTIME\tROLE\tREASON\tSESSION\tERROR")
	for _, l := range ls {
		s := l.Session
		if s == "" {
			s = "-"
		}
		e := oneLine(l.Error)
		if r := []rune(e); len(r) > 100 {
			e = string(r[:100]) + "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", l.ID, l.Time.Local().Format(time.DateTime), l.Role, l.Reason, s, e)
	}
	tw.Flush()
}

func printLetter(w io.Writer, l *dlq.Letter) {
	fmt.Fprintf(w, "dead letter %s\n", l.ID)
	fmt.Fprintf(w, "  time:       %s\n", l.Time.Local().Format(time.RFC3339Nano))
	fmt.Fprintf(w, "  role:       %s\n  reason:     %s\n  error:      %s\n", l.Role, l.Reason, l.Error)
	for _, kv := range [][2]string{{"session", l.Session}, {"turn", l.Turn}, {"trace", l.Trace}} {
		if kv[1] != "" {
			fmt.Fprintf(w, "  %-11s %s\n", kv[0]+":", kv[1])
		}
	}
	fmt.Fprintf(w, "  from:       %s", l.Subject)
	if l.Stream != "" {
		fmt.Fprintf(w, " (%s seq %d)", l.Stream, l.Seq)
	}
	fmt.Fprintln(w)
	if l.Deliveries > 0 {
		fmt.Fprintf(w, "  deliveries: %d\n", l.Deliveries)
	}
	if ok, why := l.Retryable(); ok {
		fmt.Fprintf(w, "  retry:      agentbus dlq retry %s\n", l.ID)
	} else {
		fmt.Fprintf(w, "  retry:      not possible: %s\n", why)
	}
	if len(l.Headers) > 0 {
		fmt.Fprintln(w, "  headers:")
		keys := make([]string, 0, len(l.Headers))
		for k := range l.Headers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "    %s: %s\n", k, strings.Join(l.Headers[k], ", "))
		}
	}
	fmt.Fprintf(w, "  body (%d bytes):\n%s\n", len(l.Body), indentBody(l.Body))
}

// indentBody shows a body for a terminal: indented JSON when it is JSON, else the text, cut
// at 4 KiB.
func indentBody(b []byte) string {
	var v any
	if json.Unmarshal(b, &v) == nil {
		if p, err := json.MarshalIndent(v, "    ", "  "); err == nil {
			b = p
		}
	}
	s := string(b)
	if len(s) > 4096 {
		s = s[:4096] + "…"
	}
	return "    " + s
}
