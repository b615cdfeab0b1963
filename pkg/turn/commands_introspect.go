package turn

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/command"
	"github.com/agentbus/agentbus/pkg/presence"
)

// The seed's introspection commands /cmd and /endpoints, and the paging all introspection
// lists share (seed: "/cmd · /endpoints · /bindings · /tools · /mcp（支持 [filter] [page]）").

// listPageSize is how many entries one page of an introspection list shows.
const listPageSize = 20

// filterPage splits "[filter] [page]": a last word that is a positive number is the page
// (default 1); the rest, trimmed, is the filter.
func filterPage(raw string) (filter string, page int) {
	f := strings.Fields(raw)
	page = 1
	if n := len(f); n > 0 {
		if p, err := strconv.Atoi(f[n-1]); err == nil && p > 0 {
			page, f = p, f[:n-1]
		}
	}
	return strings.Join(f, " "), page
}

// pageOf renders one page of entries under head: "head (page p/n):" and the entries, with a
// hint naming the command for the next page. An out-of-range page shows the last one.
func pageOf(head, command, filter string, entries []string, page int) string {
	if len(entries) == 0 {
		return head + "."
	}
	pages := (len(entries) + listPageSize - 1) / listPageSize
	page = min(max(page, 1), pages)
	var b strings.Builder
	b.WriteString(head)
	if pages > 1 {
		fmt.Fprintf(&b, " (page %d/%d)", page, pages)
	}
	b.WriteByte(':')
	for _, e := range entries[(page-1)*listPageSize : min(page*listPageSize, len(entries))] {
		b.WriteString("\n- ")
		b.WriteString(e)
	}
	if page < pages {
		next := "/" + command
		if filter != "" {
			next += " " + filter
		}
		fmt.Fprintf(&b, "\nMore: %s %d", next, page+1)
	}
	return b.String()
}

// cmdReport is /cmd [filter] [page]: the chat commands, one per line of /help, filtered by
// a word of the line.
func cmdReport(raw string) string {
	filter, page := filterPage(raw)
	var entries []string
	for _, line := range command.HelpLines() {
		if filter == "" || strings.Contains(strings.ToLower(line), strings.ToLower(filter)) {
			entries = append(entries, line)
		}
	}
	head := count(len(entries), "command")
	if filter != "" {
		head += fmt.Sprintf(" matching %q", filter)
	}
	return pageOf(head, "cmd", filter, entries, page)
}

// endpointsReport is /endpoints [filter] [page]: the IM endpoints (platform and bot) the
// running processes serve, with each adapter's state, from KV presence (what `agentbus
// status` reads). filter keeps entries whose platform, bot or state contains it.
func (cs commands) endpointsReport(ctx context.Context, raw string) string {
	w := cs.a.w
	filter, page := filterPage(raw)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	recs, err := presence.List(ctx, w.js)
	if err != nil {
		return "Endpoints cannot be read right now: " + scrubForUser(err.Error())
	}
	type ep struct{ platform, bot string }
	states := map[ep][]string{}
	for _, r := range recs {
		for _, a := range r.Adapters {
			s := a.State
			if a.Part != "" {
				s = a.Part + " " + s
			}
			s += " on " + r.Host
			if a.Error != "" && !a.Healthy() {
				s += " (" + scrubForUser(a.Error) + ")"
			}
			k := ep{a.Platform, a.Bot}
			states[k] = append(states[k], s)
		}
	}
	for _, e := range w.opts.Endpoints {
		platform, bot, _ := strings.Cut(e, "/")
		if k := (ep{platform, bot}); len(states[k]) == 0 {
			states[k] = []string{"webhook (the platform calls ingest; no connection)"}
		}
	}
	var entries []string
	for k, s := range states {
		sort.Strings(s)
		line := fmt.Sprintf("%s/%s: %s", k.platform, k.bot, strings.Join(s, "; "))
		if filter == "" || strings.Contains(line, filter) {
			entries = append(entries, line)
		}
	}
	sort.Strings(entries)
	head := count(len(entries), "endpoint")
	if filter != "" {
		head += fmt.Sprintf(" matching %q", filter)
	}
	return pageOf(head, "endpoints", filter, entries, page)
}
