package app

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// TestDeadLetterCounterCountsIngestLetters checks that the dead letters ingest's IM adapters
// publish (pkg/im.DeadLetter, which counts nothing itself) reach agentbus_dead_letters_total
// through the publisher startIngest hands them, and that other publishes are not counted.
func TestDeadLetterCounterCountsIngestLetters(t *testing.T) {
	srv := natstest.New(t)
	reg := metrics.New()
	js := deadLetterCounter{srv.JS, metrics.NewDeadLetters(reg)}
	ctx := context.Background()
	for range 2 {
		if err := im.DeadLetter(ctx, js, "telegram/tg1", events.DLQInvalid, errors.New("no message"), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "im.in.webhook.b1.private.u1", Data: []byte("{}")}); err != nil {
		t.Fatal(err) // not a dead letter: not counted
	}

	want := `
# HELP agentbus_dead_letters_total Dead-letter records published (dlq.<role>.<reason>), by role and reason.
# TYPE agentbus_dead_letters_total counter
agentbus_dead_letters_total{reason="invalid",role="ingest"} 2
`
	if err := testutil.GatherAndCompare(reg.Gatherer(), strings.NewReader(want), "agentbus_dead_letters_total"); err != nil {
		t.Fatal(err)
	}
}
