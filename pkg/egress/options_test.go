package egress

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Run fills the defaults and refuses unusable options with ErrConfig naming the field, before
// it touches the bus.
func TestOptionsValidate(t *testing.T) {
	nc := &nats.Conn{} // never dialled: Validate only checks that it is set
	tests := []struct {
		name string
		o    Options
		want string // "" = valid; else a substring of the error
	}{
		{"defaults", Options{NC: nc}, ""},
		{"no connection", Options{}, "NC is required"},
		{"retry bounds", Options{NC: nc, RetryInitial: time.Second, RetryMax: time.Millisecond}, "RetryInitial"},
		{"redelivery bounds", Options{NC: nc, RedeliveryDelay: time.Hour}, "RedeliveryDelay"},
		{"negative rate", Options{NC: nc, RateLimits: map[string]RateLimit{"telegram": {PerSecond: -1}}}, `RateLimits["telegram"]`},
		{"rate limit", Options{NC: nc, RateLimits: map[string]RateLimit{"*": {PerSecond: 30, Burst: 5}}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.o
			o.setDefaults()
			err := o.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.want != "" && (!errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate = %v, want ErrConfig naming %s", err, tt.want)
			}
			if tt.want == "" && (o.Concurrency != DefaultConcurrency || o.AckWait != DefaultAckWait || o.Durable != DefaultDurable) {
				t.Errorf("defaults not filled: %+v", o)
			}
		})
	}
}
