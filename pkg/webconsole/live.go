package webconsole

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
)

// sessionEvents streams Server-Sent Events while the session changes: one "change" event per
// turn record (AGENT_EVENTS) or context commit (AGENT_CTX) stored after the sequences ?evt=
// and ?ctx= (the last ones the page was rendered from; without them, from now on). It reads with
// ordered consumers of its own (ephemeral, in memory, deleted when the page goes away), never
// through a turn worker. The page answers each event by fetching the turn list again.
func (s *Server) sessionEvents(w http.ResponseWriter, r *http.Request, d *pageData) {
	sk, err := events.ParseSessionKey(r.PathValue("key"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ctx := r.Context()
	ctxFilter := strings.TrimSuffix(events.AgentCtxSubject(events.SessionID{Key: sk, Epoch: 1}), ".1") + ".*"
	changes := make(chan string, 64)
	for _, src := range []struct{ stream, filter, after string }{
		{events.StreamAgentEvents, events.AgentEvtSessionFilter(sk), r.URL.Query().Get("evt")},
		{events.StreamAgentCtx, ctxFilter, r.URL.Query().Get("ctx")},
	} {
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{src.filter}, DeliverPolicy: jetstream.DeliverNewPolicy, HeadersOnly: true}
		if after, err := strconv.ParseUint(src.after, 10, 64); err == nil {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
		}
		cons, err := s.o.JS.OrderedConsumer(ctx, src.stream, cfg)
		if err != nil {
			s.fail(w, r, fmt.Errorf("watch %s: %w", src.stream, err))
			return
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			select {
			case changes <- m.Subject():
			default: // the page refetches everything anyway
			}
		})
		if err != nil {
			s.fail(w, r, fmt.Errorf("watch %s: %w", src.stream, err))
			return
		}
		defer cc.Stop()
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": connected\n\n")
	fl.Flush()
	ping := time.NewTicker(15 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case subj := <-changes:
			kind := subj[strings.LastIndexByte(subj, '.')+1:]
			fmt.Fprintf(w, "event: change\ndata: %s\n\n", kind)
			fl.Flush()
		case <-ping.C:
			fmt.Fprint(w, ": ping\n\n")
			fl.Flush()
		}
	}
}
