package llmbus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/llm/providertest"
	"github.com/agentbus/agentbus/pkg/llmbus"
)

// handWritten is a provider service written from docs/providers.md alone, with nothing of
// this package but plain NATS and map-shaped JSON, as a service in another language would be:
// it reads the request, answers with a tool call streamed in pieces, and obeys a cancel.
func handWritten(t *testing.T, nc *nats.Conn, subject string, cancelled chan<- string) {
	t.Helper()
	_, err := nc.Subscribe(subject, func(m *nats.Msg) {
		var req map[string]any
		if err := json.Unmarshal(m.Data, &req); err != nil || req["v"] != float64(1) {
			t.Errorf("request: %v %s", err, m.Data)
			return
		}
		ctx := req["context"].(map[string]any)
		msgs := ctx["messages"].([]any)
		last := msgs[len(msgs)-1].(map[string]any)["content"].([]any)[0].(map[string]any)["text"].(string)
		ctrl := subject + ".ctl." + nats.NewInbox()[len("_INBOX."):]
		stop := make(chan struct{})
		sub, _ := nc.Subscribe(ctrl, func(c *nats.Msg) {
			var cm map[string]any
			if json.Unmarshal(c.Data, &cm) == nil && cm["type"] == "cancel" {
				cancelled <- last
				close(stop)
			}
		})
		seq := 0
		send := func(ev string) {
			seq++
			_ = nc.PublishMsg(&nats.Msg{Subject: m.Reply, Reply: ctrl, Data: fmt.Appendf(nil, `{"v":1,"seq":%d,%s}`, seq, ev)})
		}
		go func() {
			defer func() { _ = sub.Unsubscribe() }()
			send(`"type":"heartbeat"`)
			send(`"type":"start"`)
			send(`"type":"text_start"`)
			send(fmt.Sprintf(`"type":"text_delta","delta":%q`, "looking up "+last))
			send(`"type":"text_end"`)
			if last == "hang" {
				select {
				case <-stop:
				case <-time.After(margin):
				}
				return
			}
			send(`"type":"toolcall_start","contentIndex":1,"id":"call_1","name":"get_weather"`)
			for _, piece := range []string{`{"loca`, `tion":"Par`, `is","unit":"celsius"}`} {
				send(fmt.Sprintf(`"type":"toolcall_delta","contentIndex":1,"delta":%q`, piece))
			}
			send(`"type":"toolcall_end","contentIndex":1,"toolCall":{"type":"toolCall","id":"call_1","name":"get_weather","arguments":{"location":"Paris","unit":"celsius"}}`)
			send(`"type":"done","reason":"toolUse","message":{"role":"assistant","stopReason":"toolUse","timestamp":1,` +
				`"content":[{"type":"text","text":"looking up ` + last + `"},{"type":"toolCall","id":"call_1","name":"get_weather","arguments":{"location":"Paris","unit":"celsius"}}],` +
				`"usage":{"input":10,"output":5,"cacheRead":0,"cacheWrite":0,"totalTokens":15,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}}}`)
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestHandWrittenServer: the client against a service that follows the documented contract
// without this package's server: the stream passes the suite's grammar check, the tool call's
// arguments grow with every delta, and a cancel reaches the service.
func TestHandWrittenServer(t *testing.T) {
	srv := newServer(t)
	snc, _ := srv.Connect(t)
	cancelled := make(chan string, 1)
	handWritten(t, snc, "llm.handwritten", cancelled)
	nc, _ := srv.Connect(t)
	c, err := llmbus.NewClient(nc, "llm.handwritten")
	if err != nil {
		t.Fatal(err)
	}
	c2 := &llm.Context{Messages: []llm.Message{llm.UserText("Paris", time.Now().UnixMilli())}}
	evs, final := providertest.Collect(t, context.Background(), c, model(), c2, nil)
	if final.StopReason != llm.StopReasonToolUse || final.TextContent() != "looking up Paris" || final.API != llmbus.API || final.Provider != "remote" {
		t.Fatalf("final %+v", final)
	}
	calls := final.ToolCalls()
	if len(calls) != 1 || !reflect.DeepEqual(calls[0].Arguments, providertest.WantToolArgs) {
		t.Fatalf("calls %+v", calls)
	}
	var grew []int
	for _, ev := range evs {
		if ev.Type == llm.EventToolCallDelta {
			grew = append(grew, len(ev.Partial.Content[1].Arguments))
		}
	}
	if len(grew) != 3 || grew[2] != 2 {
		t.Errorf("arguments per delta %v, want them parsed as they grow", grew)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hang := &llm.Context{Messages: []llm.Message{llm.UserText("hang", time.Now().UnixMilli())}}
	for ev := range c.Stream(ctx, model(), hang, nil) {
		if ev.Type == llm.EventTextEnd {
			cancel()
		}
	}
	select {
	case got := <-cancelled:
		if got != "hang" {
			t.Errorf("cancel for %q", got)
		}
	case <-time.After(margin):
		t.Fatal("the hand-written service got no cancel")
	}
}
