package egress

import (
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/metrics"
	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
)

// The transcript archiver's dead letters count in agentbus_dead_letters_total with egress's
// own, as role "archiver": an undecodable IM_IN message moves the counter.
func TestArchiverDeadLetterCounted(t *testing.T) {
	srv := natstest.New(t)
	reg := metrics.New()
	o := fastOptions(srv, testConfig(nil), t)
	o.DataDir = t.TempDir()
	o.DeadLetters = metrics.NewDeadLetters(reg)
	start(t, o)

	if got := deadLetterCount(t, reg, events.RoleArchiver, "invalid"); got != 0 {
		t.Fatalf("before: %v archiver dead letters counted", got)
	}
	publishRaw(t, srv.JS, "im.in.webhook.b1.group.g1", []byte("{not json"))
	testwait.Eventually(t, 0, func() error {
		n := deadLetterCount(t, reg, events.RoleArchiver, "invalid")
		return testwait.Want(n == 1, "agentbus_dead_letters_total{role=archiver,reason=invalid} = %v, want 1", n)
	})
	// The letter the counter counted is on the bus.
	dl := lastMsg(t, srv.JS, events.StreamDeadLetters, events.DeadLetterSubject(events.RoleArchiver, "invalid"))
	if len(dl.Data) == 0 {
		t.Fatal("no dead letter on the bus")
	}
}

// deadLetterCount reads agentbus_dead_letters_total{role, reason} from reg (0 when absent).
func deadLetterCount(t *testing.T, reg *metrics.Registry, role, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "agentbus_dead_letters_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label(m, "role") == role && label(m, "reason") == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
