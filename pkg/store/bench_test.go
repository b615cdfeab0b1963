package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/store/internal/benchutil"
)

// benchTurn is a realistic 4-message turn: the user asks, the model calls a tool, the tool
// answers, the model replies (~1.5 KB as a record).
func benchTurn(i int) []llm.Message {
	ts := time.Now().UnixMilli()
	return []llm.Message{
		llm.UserText(fmt.Sprintf("@bot what is the weather in Hangzhou tomorrow, and should I bring an umbrella? (%d)", i), ts),
		{Role: llm.RoleAssistant, Content: []llm.Content{llm.ToolCall(fmt.Sprint("call_", i), "weather", map[string]any{"city": "Hangzhou", "day": "tomorrow"})},
			API: llm.APIOpenAICompletions, Provider: "openai", Model: "gpt-4o-mini", StopReason: llm.StopReasonToolUse, Timestamp: ts,
			Usage: &llm.Usage{Input: 812, Output: 23, TotalTokens: 835}},
		{Role: llm.RoleToolResult, ToolCallID: fmt.Sprint("call_", i), ToolName: "weather", Timestamp: ts,
			Content: []llm.Content{llm.Text(`{"city":"Hangzhou","date":"tomorrow","condition":"light rain","high_c":19,"low_c":13,"precip_mm":6.5,"wind":"NE 3","humidity":0.82}`)}},
		{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text(strings.Repeat("Tomorrow in Hangzhou: light rain, 13–19°C, north-east wind. Yes, bring an umbrella. ", 3))},
			API: llm.APIOpenAICompletions, Provider: "openai", Model: "gpt-4o-mini", StopReason: llm.StopReasonStop, Timestamp: ts,
			Usage: &llm.Usage{Input: 901, Output: 64, TotalTokens: 965}},
	}
}

func recordSize() int {
	b, _ := json.Marshal(events.New(events.CtxMessages{Messages: benchTurn(0)}))
	return len(b)
}

// reportBaseline measures raw async publishes of size-byte messages on the same server and
// connection, after the timed part, so every figure has its machine-speed reference beside it.
func reportBaseline(b *testing.B, js jetstream.JetStream, size int) {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rate, err := benchutil.BaselinePublish(ctx, js, 20000, size)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(rate, "baseline-async-pub/s")
}

// BenchmarkContextCommit: fenced 4-message commits, each goroutine its own session (concurrent
// sessions), each commit expecting the sequence of the previous one.
func BenchmarkContextCommit(b *testing.B) {
	srv := natstest.New(b)
	ctx := context.Background()
	log, err := NewContextLog(ctx, srv.JS, ContextBounds{})
	if err != nil {
		b.Fatal(err)
	}
	var sessions atomic.Int64
	msgs := benchTurn(1)
	b.SetParallelism(32) // 64 sessions on 2 cores: commits are round trips, not CPU
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := events.NewSessionID(testKey(fmt.Sprint("commit-", sessions.Add(1))), 1)
		var last uint64
		for pb.Next() {
			var err error
			if last, err = log.AppendMessages(ctx, id, last, msgs); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
	reportBaseline(b, srv.JS, recordSize())
}

// BenchmarkLeaseRenew: CAS renewals with a fresh per-message TTL, one lease per goroutine.
func BenchmarkLeaseRenew(b *testing.B) {
	srv := natstest.New(b)
	ctx := context.Background()
	leases, err := NewLeases(ctx, srv.JS)
	if err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := n.Add(1)
		lease, err := leases.Acquire(ctx, testKey(fmt.Sprint("renew-", w)), fmt.Sprint("worker-", w), 30*time.Second)
		if err != nil {
			b.Error(err)
			return
		}
		for pb.Next() {
			if lease, err = leases.Renew(ctx, lease); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "renewals/s")
	reportBaseline(b, srv.JS, 120)
}

// BenchmarkLeaseRenewAll: a worker renewing the 100 leases it holds in one pipelined batch
// (what a ticker does), per renewal.
func BenchmarkLeaseRenewAll(b *testing.B) {
	srv := natstest.New(b)
	ctx := context.Background()
	leases, _ := NewLeases(ctx, srv.JS)
	held := make([]Lease, 100)
	for i := range held {
		var err error
		if held[i], err = leases.Acquire(ctx, testKey(fmt.Sprint("all-", i)), "worker", 30*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	done := 0
	for done < b.N {
		var errs []error
		held, errs = leases.RenewAll(ctx, held)
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		done += len(held)
	}
	b.ReportMetric(float64(done)/b.Elapsed().Seconds(), "renewals/s")
	reportBaseline(b, srv.JS, 120)
}

// BenchmarkLeaseAcquireRelease: take a free lease and give it back (a session changing hands).
func BenchmarkLeaseAcquireRelease(b *testing.B) {
	srv := natstest.New(b)
	ctx := context.Background()
	leases, _ := NewLeases(ctx, srv.JS)
	var n atomic.Int64
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := n.Add(1)
		sk := testKey(fmt.Sprint("acq-", w))
		for pb.Next() {
			lease, err := leases.Acquire(ctx, sk, fmt.Sprint("worker-", w), 30*time.Second)
			if err == nil {
				err = leases.Release(ctx, lease)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acquire+release/s")
	reportBaseline(b, srv.JS, 120)
}

// BenchmarkLoadContext200: load a 200-message context (50 commits of 4), without and with a
// summary in front of the tail. cold = a process that has never seen the session (every record
// read and decoded); warm = the session's actor, whose cache holds what it committed (one direct
// get to learn the log has not moved).
func BenchmarkLoadContext200(b *testing.B) {
	for _, tc := range []struct {
		name    string
		summary bool
		cache   int
	}{
		{"cold/summary=false", false, 0},
		{"cold/summary=true", true, 0},
		{"warm/summary=false", false, 256},
		{"warm/summary=true", true, 256},
	} {
		b.Run(tc.name, func(b *testing.B) {
			srv := natstest.New(b)
			ctx := context.Background()
			log, _ := NewContextLog(ctx, srv.JS, ContextBounds{MaxMessages: 200, MaxAge: 24 * time.Hour}, WithCacheSessions(tc.cache))
			id := events.NewSessionID(testKey("load"), 1)
			var last uint64
			var err error
			if tc.summary {
				// 25 older commits that the summary covers, then the 200-message tail.
				for i := 0; i < 25; i++ {
					if last, err = log.AppendMessages(ctx, id, last, benchTurn(i)); err != nil {
						b.Fatal(err)
					}
				}
				if last, err = log.AppendSummary(ctx, id, last, Summary{Text: strings.Repeat("Earlier: weather questions. ", 20), AnchorSeq: last}); err != nil {
					b.Fatal(err)
				}
			}
			for i := 0; i < 50; i++ {
				if last, err = log.AppendMessages(ctx, id, last, benchTurn(i)); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				got, err := log.LoadContext(ctx, id)
				if err != nil || len(got.Messages) != 200 || got.LastSeq != last || (got.Summary != nil) != tc.summary {
					b.Fatalf("loaded %d messages, last %d, err %v", len(got.Messages), got.LastSeq, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/load")
			reportBaseline(b, srv.JS, recordSize())
		})
	}
}
