package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
)

// jsCounters are the embedded server's cumulative counters.
type jsCounters struct {
	streamMsgs uint64 // sum of every stream's last sequence: messages ever appended
	apiTotal   uint64 // JetStream API requests served
	inMsgs     uint64 // every message the server received (publishes, acks, pulls, gets)
	inBytes    uint64 // payload bytes of those
	perStream  map[string]uint64
	// streamBytes is every stream's stored bytes; a work-queue stream's shrink as it is acked,
	// so only growth is reported.
	streamBytes map[string]uint64
}

func (a jsCounters) sub(b jsCounters) jsCounters {
	d := jsCounters{a.streamMsgs - b.streamMsgs, a.apiTotal - b.apiTotal, a.inMsgs - b.inMsgs, a.inBytes - b.inBytes,
		map[string]uint64{}, map[string]uint64{}}
	for name, n := range a.perStream {
		if n > b.perStream[name] {
			d.perStream[name] = n - b.perStream[name]
		}
	}
	for name, n := range a.streamBytes {
		if n > b.streamBytes[name] {
			d.streamBytes[name] = n - b.streamBytes[name]
		}
	}
	return d
}

// jsCounters reads the counters from the server itself (monitoring calls, not JetStream API
// requests, so reading them does not change them).
func (h *Harness) jsCounters() (jsCounters, error) {
	if h.procs != nil {
		return h.procs.counters(context.Background())
	}
	if h.Proc.Embedded == nil {
		return jsCounters{}, fmt.Errorf("bench: needs the embedded server")
	}
	return serverCounters(h.Proc.Embedded.Server())
}

// env describes the machine the figures came from.
type env struct {
	gomaxprocs, numCPU int
	load               string
}

func environment() env {
	e := env{gomaxprocs: runtime.GOMAXPROCS(0), numCPU: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			e.load = strings.Join(f[:3], " ")
		}
	}
	return e
}
