package app

import (
	"time"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/egress"
)

// Roles read no YAML: the composition root maps each block of the configuration onto the
// typed Options of the role it tunes (milliseconds become time.Duration here, once), and the
// role validates the result at Run.

// withEgressTuning sets the fields of o that im.egress tunes; zero values in ec leave egress's
// defaults in charge.
func withEgressTuning(ec config.Egress, o egress.Options) egress.Options {
	o.Concurrency = ec.Concurrency
	o.MaxRetries = ec.MaxRetries
	o.MaxDeliveries = ec.MaxDeliveries
	o.AckWait = time.Duration(ec.AckWaitMs) * time.Millisecond
	if len(ec.RateLimits) > 0 {
		o.RateLimits = make(map[string]egress.RateLimit, len(ec.RateLimits))
		for k, v := range ec.RateLimits {
			o.RateLimits[k] = egress.RateLimit{PerSecond: v.PerSecond, Burst: v.Burst}
		}
	}
	return o
}
