package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/agentbus/agentbus/internal/childproc"
	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/tools"
)

// ChildEnv tells a process started by the multi-process bench (Options.Processes) which part it
// plays: "nats" (a nats-server node), "role" (one agentbus role) or "relay" (the bus-less relay
// of the outside bench, RunOutside).
const ChildEnv = "AGENTBUS_BENCH_CHILD"

// Environment of a role child (the nats child reads childproc.NodeFromEnv).
const (
	envRole     = "AGENTBUS_BENCH_ROLE" // ingest, turn-worker, tool-worker, egress
	envURL      = "AGENTBUS_BENCH_NATS_URL"
	envUser     = "AGENTBUS_BENCH_NATS_USER"
	envPassword = "AGENTBUS_BENCH_NATS_PASSWORD"
	envReplicas = "AGENTBUS_BENCH_REPLICAS"
	envDir      = "AGENTBUS_BENCH_DIR"
	envSecret   = "AGENTBUS_BENCH_SECRET"
	envCallback = "AGENTBUS_BENCH_CALLBACK"
	envLatency  = "AGENTBUS_BENCH_LATENCY_MS"
	envProfile  = "AGENTBUS_BENCH_CPUPROFILE" // file for the CPU profile of the measured phase
)

// ChildMain runs this process as a part of a multi-process bench when ChildEnv is set, and
// returns its exit code and true; otherwise it returns (0, false) at once. A main (or a
// TestMain) that runs the multi-process bench calls it first:
//
//	if code, ok := bench.ChildMain(); ok {
//		os.Exit(code)
//	}
//
// A child runs until SIGTERM/SIGINT or until its parent is gone (childproc.ParentGone).
func ChildMain() (int, bool) {
	kind := os.Getenv(ChildEnv)
	if kind == "" {
		return 0, false
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-childproc.ParentGone()
		stop()
	}()
	var err error
	switch kind {
	case "nats":
		err = natsChild(ctx)
	case "role":
		err = roleChild(ctx, log)
	case "relay":
		err = relayChild(ctx)
	default:
		err = fmt.Errorf("unknown %s=%q", ChildEnv, kind)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench child %s: %v\n", kind, err)
		return 1, true
	}
	return 0, true
}

func natsChild(ctx context.Context) error {
	node, err := childproc.NodeFromEnv()
	if err != nil {
		return err
	}
	srv, err := childproc.StartNode(node, nil)
	if err != nil {
		return err
	}
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	st := &childStats{profile: os.Getenv(envProfile), counters: func() (*jsCounters, error) {
		c, err := serverCounters(srv)
		return &c, err
	}}
	url, closeStats, err := st.serve()
	if err != nil {
		return err
	}
	defer closeStats()
	childproc.Ready("stats=" + url)
	<-ctx.Done()
	return nil
}

func roleChild(ctx context.Context, log *slog.Logger) error {
	latency, _ := strconv.Atoi(os.Getenv(envLatency))
	dir := os.Getenv(envDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	cfg, err := benchConfig(dir, os.Getenv(envSecret), os.Getenv(envCallback), time.Duration(latency)*time.Millisecond)
	if err != nil {
		return err
	}
	cfg.NATS.Embedded = false
	cfg.NATS.URL, cfg.NATS.User, cfg.NATS.Password = os.Getenv(envURL), os.Getenv(envUser), os.Getenv(envPassword)
	if r, _ := strconv.Atoi(os.Getenv(envReplicas)); r > 0 {
		cfg.NATS.Replicas = r
	}
	var roles app.Roles
	switch role := os.Getenv(envRole); role {
	case roleIngest:
		roles.Ingest = true
	case roleTurn:
		roles.TurnWorker = true
	case roleTool:
		roles.ToolWorker = true
	case roleEgress:
		roles.Egress = true
	default:
		return fmt.Errorf("unknown %s=%q", envRole, role)
	}
	// The process's lifetime, not the start's: some roles stop when the context they started
	// with ends.
	p, err := app.Start(ctx, cfg, app.Options{Roles: roles, Out: io.Discard, Log: log, NoProbe: true,
		ExtraTools: []tools.Tool{echoTool()}})
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Stop(sctx); err != nil {
			log.Error("stop", "err", err)
		}
	}()
	st := &childStats{profile: os.Getenv(envProfile)}
	info := []string{}
	if roles.TurnWorker {
		inner, err := llm.LookupAPI(llm.APIFaux)
		if err != nil {
			return err
		}
		llm.RegisterAPI(llm.APIFaux, &countingProvider{inner: inner, calls: &st.modelCalls, inFlight: &st.modelInFlight})
		info = append(info, "worker="+p.Turn.ID())
	}
	if p.WebhookURL != "" {
		info = append(info, "webhook="+p.WebhookURL)
	}
	url, closeStats, err := st.serve()
	if err != nil {
		return err
	}
	defer closeStats()
	childproc.Ready(strings.Join(append([]string{"stats=" + url}, info...), " "))
	<-ctx.Done()
	return nil
}

// childStats is a child's control endpoint: POST /begin starts the measured phase (and the
// CPU profile, when asked for), POST /end ends it and answers with the phase's figures; a NATS
// node also answers GET /counters with its JetStream counters.
type childStats struct {
	profile  string                      // CPU profile file ("" = none)
	counters func() (*jsCounters, error) // a NATS node's counters (nil in a role)

	modelCalls    atomic.Int64
	modelInFlight atomic.Int64

	mu        sync.Mutex
	begun     bool
	cpu0      time.Duration
	wait0     time.Duration
	calls0    int64
	sched0    *metrics.Float64Histogram
	alloc0    allocCounters
	idleHeap  uint64
	peaks     memPeaks
	stopPeaks context.CancelFunc
	peaksDone chan struct{}
	profFile  *os.File
}

// phaseStats is what a child reports for the measured phase.
type phaseStats struct {
	CPUNs             int64         `json:"cpuNs"`
	RunqueueWaitNs    int64         `json:"runqueueWaitNs"` // runnable, waiting for a CPU (Linux)
	ModelCalls        int64         `json:"modelCalls"`
	PeakModelInFlight int64         `json:"peakModelInFlight"`
	SchedP50Ms        float64       `json:"schedP50Ms"`
	SchedP99Ms        float64       `json:"schedP99Ms"`
	IdleHeapInuse     uint64        `json:"idleHeapInuse"`
	PeakHeapInuse     uint64        `json:"peakHeapInuse"`
	PeakLiveHeap      uint64        `json:"peakLiveHeap"`
	MaxRSSKiB         int64         `json:"maxRSSKiB"`
	Allocs            allocCounters `json:"allocs"` // allocated and collected in the phase
}

func (st *childStats) serve() (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("stats listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /begin", func(w http.ResponseWriter, r *http.Request) {
		ps, err := st.begin()
		st.reply(w, ps, err)
	})
	mux.HandleFunc("POST /end", func(w http.ResponseWriter, r *http.Request) {
		ps, err := st.end()
		st.reply(w, ps, err)
	})
	if st.counters != nil {
		mux.HandleFunc("GET /counters", func(w http.ResponseWriter, r *http.Request) {
			c, err := st.counters()
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(c.toJSON())
		})
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

func (st *childStats) reply(w http.ResponseWriter, ps *phaseStats, err error) {
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ps)
}

func (st *childStats) begin() (*phaseStats, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.begun {
		return nil, errors.New("bench child: phase already begun")
	}
	ps := &phaseStats{}
	if st.profile != "" {
		f, err := os.Create(st.profile)
		if err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		st.profFile = f
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	st.idleHeap = m.HeapInuse
	st.begun = true
	st.cpu0, st.wait0, st.calls0, st.sched0 = cpuTime(), runqueueWait(), st.modelCalls.Load(), schedHist()
	st.alloc0 = readAllocs()
	st.peaks = memPeaks{}
	ctx, cancel := context.WithCancel(context.Background())
	st.stopPeaks, st.peaksDone = cancel, make(chan struct{})
	go st.sample(ctx, st.peaksDone)
	return ps, nil
}

// sample records the heap and model-call peaks every 20 ms (through a heapSampler, as the
// in-process bench does).
func (st *childStats) sample(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	hs := newHeapSampler()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		inuse, live := hs.read()
		st.mu.Lock()
		st.peaks.model = max(st.peaks.model, st.modelInFlight.Load())
		st.peaks.heapInuse = max(st.peaks.heapInuse, inuse)
		st.peaks.live = max(st.peaks.live, live)
		st.mu.Unlock()
	}
}

func (st *childStats) end() (*phaseStats, error) {
	st.mu.Lock()
	if !st.begun {
		st.mu.Unlock()
		return nil, errors.New("bench child: no phase begun")
	}
	st.begun = false
	stop, done := st.stopPeaks, st.peaksDone
	st.mu.Unlock()
	stop()
	<-done
	st.mu.Lock()
	defer st.mu.Unlock()
	p50, p99 := schedPercentiles(st.sched0, schedHist())
	ps := &phaseStats{
		CPUNs: int64(cpuTime() - st.cpu0), RunqueueWaitNs: int64(runqueueWait() - st.wait0), ModelCalls: st.modelCalls.Load() - st.calls0,
		PeakModelInFlight: st.peaks.model, SchedP50Ms: ms(p50), SchedP99Ms: ms(p99),
		IdleHeapInuse: st.idleHeap, PeakHeapInuse: st.peaks.heapInuse, PeakLiveHeap: st.peaks.live,
		MaxRSSKiB: maxRSSKiB(),
	}
	ps.Allocs = readAllocs().sub(st.alloc0)
	if st.profFile != nil {
		pprof.StopCPUProfile()
		err := st.profFile.Close()
		st.profFile = nil
		if err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
	}
	return ps, nil
}

// serverCounters reads a server's counters (monitoring calls, not JetStream API requests, so
// reading them does not change them).
func serverCounters(srv *server.Server) (jsCounters, error) {
	jsz, err := srv.Jsz(&server.JSzOptions{Accounts: true, Streams: true, Limit: 1 << 16})
	if err != nil {
		return jsCounters{}, fmt.Errorf("bench: jsz: %w", err)
	}
	c := jsCounters{perStream: map[string]uint64{}, streamBytes: map[string]uint64{}}
	c.apiTotal = jsz.API.Total
	for _, a := range jsz.AccountDetails {
		for _, s := range a.Streams {
			if strings.HasPrefix(s.Name, "BASELINE_") {
				continue
			}
			c.streamMsgs += s.State.LastSeq
			c.perStream[s.Name] = s.State.LastSeq
			c.streamBytes[s.Name] = s.State.Bytes
		}
	}
	vz, err := srv.Varz(nil)
	if err != nil {
		return jsCounters{}, fmt.Errorf("bench: varz: %w", err)
	}
	c.inMsgs = uint64(vz.InMsgs)
	c.inBytes = uint64(vz.InBytes)
	return c, nil
}

// countersJSON carries jsCounters from a NATS node to the bench.
type countersJSON struct {
	APITotal    uint64            `json:"apiTotal"`
	InMsgs      uint64            `json:"inMsgs"`
	InBytes     uint64            `json:"inBytes"`
	PerStream   map[string]uint64 `json:"perStream"`
	StreamBytes map[string]uint64 `json:"streamBytes"`
}

func (c jsCounters) toJSON() *countersJSON {
	return &countersJSON{APITotal: c.apiTotal, InMsgs: c.inMsgs, InBytes: c.inBytes, PerStream: c.perStream, StreamBytes: c.streamBytes}
}

// mergeCounters combines the nodes of a cluster: a replicated stream is on several nodes with
// the same last sequence (a lagging follower's is lower), so per stream the largest counts;
// API requests and messages received are each node's own, so they add up (in a cluster the
// latter include the route traffic between nodes).
func mergeCounters(nodes []*countersJSON) jsCounters {
	c := jsCounters{perStream: map[string]uint64{}, streamBytes: map[string]uint64{}}
	for _, n := range nodes {
		if n == nil {
			continue
		}
		c.apiTotal += n.APITotal
		c.inMsgs += n.InMsgs
		c.inBytes += n.InBytes
		for name, v := range n.PerStream {
			c.perStream[name] = max(c.perStream[name], v)
		}
		for name, v := range n.StreamBytes {
			c.streamBytes[name] = max(c.streamBytes[name], v)
		}
	}
	for _, v := range c.perStream {
		c.streamMsgs += v
	}
	return c
}
