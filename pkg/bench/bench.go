package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/store"
)

// Config is one `agentbus bench` run.
type Config struct {
	Sessions int           // concurrent chat sessions (default 100)
	Messages int           // messages per session (default 10)
	Latency  time.Duration // model latency before its first event, per model call (ms resolution)
	Tool     bool          // every turn calls the bench_echo tool once
	Rate     float64       // offered turns/s; 0 = closed loop with concurrency = Sessions
	Kill     bool          // two turn workers; kill the second when half the turns are done
	// TurnWorkers is how many turn-worker replicas share the work (default 1; Kill needs 2
	// and adds the second when TurnWorkers < 2).
	TurnWorkers int
	// Baseline is how many messages the raw JetStream publish baseline sends (default 20000;
	// negative skips it). BaselineSize is their size in bytes (default 512).
	Baseline     int
	BaselineSize int
	// ReplyTimeout is how long one message waits for its reply before it counts as lost
	// (default 60s).
	ReplyTimeout time.Duration
	Dir          string       // see Options.Dir
	Log          *slog.Logger // see Options.Log
	// CPUProfile, when set, receives a pprof CPU profile of the measured phase.
	CPUProfile io.Writer
	// Trace, when set, receives a Go execution trace (runtime/trace) of the measured phase:
	// what each goroutine waited for (go tool trace).
	Trace io.Writer
	// HeapProfile, when set, receives a pprof heap profile taken at the sample with the most
	// turns inside a model call (re-taken whenever that number grows by a tenth).
	HeapProfile io.Writer
	// Stages observes the bus and reports how long a message takes to reach each stage. The
	// observer costs CPU in the same process, so the other figures are better without it.
	Stages bool

	// Processes runs every role replica as an OS process of its own against nats-server
	// processes (see Options.Processes; the executable's main must call ChildMain first).
	// Cluster, Ingests, ToolWorkers, Egresses, ProfileDir, Exe and ExeArgs: see Options.
	Processes                      bool
	Cluster                        int
	Ingests, ToolWorkers, Egresses int
	ProfileDir                     string
	Exe                            string
	ExeArgs                        []string
}

func (c *Config) defaults() error {
	if c.Sessions == 0 {
		c.Sessions = 100
	}
	if c.Messages == 0 {
		c.Messages = 10
	}
	if c.Sessions < 0 || c.Messages < 0 || c.Rate < 0 || c.Latency < 0 || c.TurnWorkers < 0 {
		return fmt.Errorf("%w: sessions, messages, rate and latency must not be negative", ErrConfig)
	}
	if c.Cluster < 0 || c.Ingests < 0 || c.ToolWorkers < 0 || c.Egresses < 0 {
		return fmt.Errorf("%w: process counts must not be negative", ErrConfig)
	}
	if !c.Processes && (c.Cluster > 1 || c.Ingests > 1 || c.ToolWorkers > 1 || c.Egresses > 1 || c.ProfileDir != "") {
		return fmt.Errorf("%w: cluster, ingest/tool-worker/egress replicas and per-process profiles need Processes", ErrConfig)
	}
	if c.Cluster == 2 {
		return fmt.Errorf("%w: a cluster of 2 cannot elect a JetStream leader once one node is gone; use 1 or 3", ErrConfig)
	}
	if c.Baseline == 0 {
		c.Baseline = 20000
	}
	if c.BaselineSize <= 0 {
		c.BaselineSize = 512
	}
	if c.ReplyTimeout <= 0 {
		c.ReplyTimeout = 60 * time.Second
	}
	return nil
}

// ErrConfig reports an unusable Config.
var ErrConfig = errors.New("bench: invalid config")

// Run starts a process, warms it up, runs the workload, measures the raw publish baseline on
// the same server and stops the process.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	h, err := Start(ctx, Options{Latency: cfg.Latency, SecondWorker: cfg.Kill, TurnWorkers: cfg.TurnWorkers, Dir: cfg.Dir, Log: cfg.Log,
		Processes: cfg.Processes, Cluster: cfg.Cluster, Ingests: cfg.Ingests, ToolWorkers: cfg.ToolWorkers, Egresses: cfg.Egresses,
		ProfileDir: cfg.ProfileDir, Exe: cfg.Exe, ExeArgs: cfg.ExeArgs})
	if err != nil {
		return nil, err
	}
	defer h.Close()
	if err := h.Warm(ctx, cfg.Tool); err != nil {
		return nil, err
	}
	res, err := h.Run(ctx, Workload{Sessions: cfg.Sessions, Messages: cfg.Messages, Tool: cfg.Tool,
		Rate: cfg.Rate, Kill: cfg.Kill, ReplyTimeout: cfg.ReplyTimeout, CPUProfile: cfg.CPUProfile, Trace: cfg.Trace,
		Stages: cfg.Stages, HeapProfile: cfg.HeapProfile})
	if err != nil {
		return nil, err
	}
	if cfg.Baseline > 0 {
		bctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		rate, err := natsutil.BaselinePublish(bctx, h.js, cfg.Baseline, cfg.BaselineSize)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		res.Baseline = &Baseline{Messages: cfg.Baseline, Size: cfg.BaselineSize, MsgsPerSec: rate}
	}
	return res, nil
}

// Warm sends messages on a session of its own until a reply shows that the turn worker sees
// the tool worker's tools (withTool) or until one reply arrived, so the measured phase starts
// with every role ready and the HTTP connections open.
func (h *Harness) Warm(ctx context.Context, withTool bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		id := h.tag + "-warm-" + strconv.Itoa(i)
		wt := h.expectBody(id)
		text := "warm up"
		if withTool {
			text = ToolName + " warm"
		}
		if err := h.send(ctx, id, -1, text); err != nil {
			h.forget(id)
			return fmt.Errorf("bench: warm-up: %w", err)
		}
		select {
		case r := <-wt.ch:
			if !withTool || r.usedTool {
				return nil
			}
		case <-time.After(time.Until(deadline)):
			h.forget(id)
			return fmt.Errorf("bench: warm-up: no reply within 30s")
		case <-ctx.Done():
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: warm-up: the turn worker never offered %s to the model", ToolName)
		}
		time.Sleep(100 * time.Millisecond) // the tool registry is a KV heartbeat away
	}
}

// Workload is one measured phase on a running Harness.
type Workload struct {
	Sessions, Messages int
	Tool               bool
	Rate               float64
	Kill               bool // needs Options.SecondWorker
	ReplyTimeout       time.Duration
	CPUProfile         io.Writer // see Config.CPUProfile
	Trace              io.Writer // see Config.Trace
	Stages             bool      // see Config.Stages
	HeapProfile        io.Writer // see Config.HeapProfile
}

// session is the load generator's state for one chat session.
type session struct {
	mu      sync.Mutex
	pending string // id of the message waiting for its reply, "" when idle
	lat     []time.Duration
	marks   marks
	stages  [numStages][]time.Duration
	turns   []turnStages // with Stages: every message's stage times
}

// Run runs one measured phase and returns its figures (Baseline unset).
func (h *Harness) Run(ctx context.Context, wl Workload) (*Result, error) {
	if wl.Sessions <= 0 || wl.Messages <= 0 {
		return nil, fmt.Errorf("%w: need at least one session and one message", ErrConfig)
	}
	if wl.Kill && h.victim == nil {
		return nil, fmt.Errorf("%w: the kill scenario needs Options.SecondWorker", ErrConfig)
	}
	if wl.ReplyTimeout <= 0 {
		wl.ReplyTimeout = 60 * time.Second
	}
	run := h.runSeq.Add(1)
	total := wl.Sessions * wl.Messages
	res := &Result{Sessions: wl.Sessions, Messages: wl.Messages, Tool: wl.Tool,
		ModelLatencyMs: ms(h.opts.Latency), OfferedRate: wl.Rate, TurnWorkers: h.opts.turnWorkers()}
	e := environment()
	res.GOMAXPROCS, res.NumCPU, res.LoadAvg = e.gomaxprocs, e.numCPU, e.load

	runtime.GC()
	var msIdle runtime.MemStats
	runtime.ReadMemStats(&msIdle)
	jsBefore, err := h.jsCounters()
	if err != nil {
		return nil, err
	}
	if wl.CPUProfile != nil {
		if err := pprof.StartCPUProfile(wl.CPUProfile); err != nil {
			return nil, fmt.Errorf("bench: cpu profile: %w", err)
		}
	}
	if wl.Trace != nil {
		if err := trace.Start(wl.Trace); err != nil {
			return nil, fmt.Errorf("bench: trace: %w", err)
		}
	}
	if h.procs != nil {
		if err := h.procs.begin(ctx); err != nil {
			return nil, err
		}
	}
	callsBefore := h.modelCalls.Load()
	allocBefore := readAllocs()
	cpuBefore, waitBefore := cpuTime(), runqueueWait()
	schedBefore := schedHist()
	start := time.Now()

	var inflight, done, failed, lost atomic.Int64
	var peakAwaiting atomicMax // messages awaiting their reply, at most (samples can miss a peak)
	sessions := make([]*session, wl.Sessions)
	for i := range sessions {
		sessions[i] = &session{lat: make([]time.Duration, 0, wl.Messages)}
	}
	if wl.Stages {
		ms := make([]*marks, len(sessions))
		for i, s := range sessions {
			ms[i] = &s.marks
		}
		obs, err := h.observe(ms)
		if err != nil {
			return nil, err
		}
		defer obs.close()
	}

	// Memory: sample the heap every 10 ms. The per-turn figures divide the largest heap seen
	// by the most turns seen in flight (an upper bound that does not depend on where in the GC
	// cycle a sample fell).
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var mem memPeaks
	var heapProf bytes.Buffer
	var profiled int64
	var samplerDone sync.WaitGroup
	samplerDone.Add(1)
	// poke asks for a sample now (the first message went out): a short run can be over before
	// the first tick.
	poke := make(chan struct{}, 1)
	go func() {
		defer samplerDone.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		hs := newHeapSampler()
		var last time.Time
		for {
			poked := false
			select {
			case <-sampleCtx.Done():
				return
			case <-t.C:
			case <-poke:
				if time.Since(last) < 10*time.Millisecond {
					continue
				}
				poked = true // sample even if the message is answered already: a tiny run has nothing else
			}
			model, accepted := h.modelInFlight.Load(), inflight.Load()
			if model == 0 && accepted == 0 && !poked {
				continue
			}
			last = time.Now()
			inuse, live := hs.read()
			mem.model = max(mem.model, min(model, h.modelInFlight.Load()))
			mem.awaiting = max(mem.awaiting, min(accepted, inflight.Load()))
			mem.heapInuse = max(mem.heapInuse, inuse)
			mem.live = max(mem.live, live)
			if wl.HeapProfile != nil && model > profiled+profiled/10 {
				heapProf.Reset()
				runtime.GC() // the profile shows the heap as of the last GC
				if pprof.Lookup("heap").WriteTo(&heapProf, 0) == nil {
					profiled = model
				}
			}
		}
	}()

	// Rate: a pacer hands out permits; nil means closed loop.
	var permits chan struct{}
	if wl.Rate > 0 {
		permits = make(chan struct{})
		go pace(sampleCtx, permits, wl.Rate, total)
	}

	var kill *killWatch
	if wl.Kill {
		kill = &killWatch{}
		go h.killHalfway(ctx, kill, sessions, &done, int64(total/2))
	}

	var wg sync.WaitGroup
	for i := range sessions {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			// Label the load generator's CPU (its HTTP client connections inherit the label) so
			// that a profile tells it apart: go tool pprof -tagfocus part=loadgen.
			pprof.SetGoroutineLabels(pprof.WithLabels(ctx, loadgenLabels))
			s := sessions[i]
			for m := 0; m < wl.Messages; m++ {
				if permits != nil {
					select {
					case <-permits:
					case <-ctx.Done():
						return
					}
				}
				id := h.tag + "-r" + strconv.FormatInt(run, 10) + "-s" + strconv.Itoa(i) + "-m" + strconv.Itoa(m)
				text := "hello " + strconv.Itoa(m)
				if wl.Tool {
					text = ToolName + " " + strconv.Itoa(m)
				}
				wt := h.expect(id)
				s.mu.Lock()
				s.pending = id
				s.mu.Unlock()
				peakAwaiting.max(inflight.Add(1))
				select {
				case poke <- struct{}{}:
				default:
				}
				t0 := time.Now()
				if wl.Stages {
					s.marks.reset(t0)
				}
				err := h.send(ctx, id, i, text)
				if err != nil {
					inflight.Add(-1)
					h.forget(id)
					failed.Add(1)
					s.mu.Lock()
					s.pending = ""
					s.mu.Unlock()
					if ctx.Err() != nil {
						return
					}
					continue
				}
				timer := time.NewTimer(wl.ReplyTimeout)
				select {
				case r := <-wt.ch:
					timer.Stop()
					s.mu.Lock()
					s.pending = ""
					s.lat = append(s.lat, r.at.Sub(t0))
					if wl.Trace != nil {
						// For a trace reader: this message's latency, ending at the callback
						// (r.at), so that a slow message's span can be matched with what ran.
						trace.Log(ctx, "bench.turn", strconv.FormatInt(int64(r.at.Sub(t0)), 10)+" "+strconv.FormatInt(int64(time.Since(r.at)), 10))
					}
					if wl.Stages {
						s.turns = append(s.turns, turnStages{lat: r.at.Sub(t0), at: s.marks.collect(&s.stages)})
					}
					s.mu.Unlock()
					if kill != nil {
						kill.replied(id, r.at)
					}
					done.Add(1)
				case <-timer.C:
					h.forget(id)
					lost.Add(1)
					s.mu.Lock()
					s.pending = ""
					s.mu.Unlock()
				case <-ctx.Done():
					timer.Stop()
					inflight.Add(-1)
					return
				}
				inflight.Add(-1)
			}
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu, wait := cpuTime()-cpuBefore, runqueueWait()-waitBefore
	allocs := readAllocs().sub(allocBefore)
	sp50, sp99 := schedPercentiles(schedBefore, schedHist())
	if wl.CPUProfile != nil {
		pprof.StopCPUProfile()
	}
	if wl.Trace != nil {
		trace.Stop()
	}
	stopSampling()
	samplerDone.Wait()
	if mem.heapInuse == 0 { // the run ended before the sampler ran once
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		mem.heapInuse, mem.live = m.HeapInuse, liveHeap()
	}
	if wl.HeapProfile != nil && heapProf.Len() > 0 {
		if _, err := wl.HeapProfile.Write(heapProf.Bytes()); err != nil {
			return nil, fmt.Errorf("bench: heap profile: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	modelCalls := h.modelCalls.Load() - callsBefore
	if h.procs != nil {
		if err := h.procs.end(ctx); err != nil {
			return nil, err
		}
		res.NATSServers = len(h.procs.nodes)
		res.Processes = h.procs.figures(cpu, wait, elapsed)
		res.Processes[0].PeakHeapMiB = float64(mem.heapInuse) / (1 << 20)
		res.Processes[0].allocs = allocs
		// Every process's peak, summed (an upper bound: the peaks need not coincide); this
		// process's own (the load generator) included, as in the in-process figures.
		mem = memPeaks{heapInuse: mem.heapInuse, live: mem.live}
		for _, c := range h.procs.all() {
			st := c.figures()
			if st == nil {
				continue
			}
			cpu += time.Duration(st.CPUNs)
			wait += time.Duration(st.RunqueueWaitNs)
			modelCalls += st.ModelCalls
			mem.model += st.PeakModelInFlight
			mem.heapInuse += st.PeakHeapInuse
			mem.live += st.PeakLiveHeap
			msIdle.HeapInuse += st.IdleHeapInuse
			sp50, sp99 = max(sp50, msDur(st.SchedP50Ms)), max(sp99, msDur(st.SchedP99Ms))
		}
	}
	jsAfter, err := h.jsCounters()
	if err != nil {
		return nil, err
	}

	var all []time.Duration
	var stages [numStages][]time.Duration
	var perTurn []turnStages
	for _, s := range sessions {
		all = append(all, s.lat...)
		for i := range stages {
			stages[i] = append(stages[i], s.stages[i]...)
		}
		perTurn = append(perTurn, s.turns...)
	}
	res.Stages = stageTimes(&stages)
	res.Steps = stepTimes(perTurn)
	slices.Sort(all)
	turns := len(all)
	res.Turns, res.Failed, res.Lost = turns, int(failed.Load()), int(lost.Load())
	res.Seconds = elapsed.Seconds()
	if turns > 0 {
		res.TurnsPerSec = float64(turns) / elapsed.Seconds()
		res.P50Ms, res.P90Ms, res.P99Ms, res.MaxMs = ms(pct(all, 50)), ms(pct(all, 90)), ms(pct(all, 99)), ms(all[turns-1])
		calls := 1
		if wl.Tool {
			calls = 2
		}
		model := time.Duration(calls) * h.opts.Latency
		res.AddedP50Ms, res.AddedP99Ms = ms(pct(all, 50)-model), ms(pct(all, 99)-model)
		res.CPUSecondsPerTurn = cpu.Seconds() / float64(turns)
		for i := range res.Processes {
			p := &res.Processes[i]
			p.CPUMsPerTurn = p.CPUSeconds * 1000 / float64(turns)
			p.AllocKiBPerTurn, p.AllocObjectsPerTurn, p.GCShare = p.allocs.perTurn(turns)
		}
		res.ModelCallsPerTurn = float64(modelCalls) / float64(turns)
		if h.procs == nil { // the roles' allocations are this process's only when they run in it
			res.AllocKiBPerTurn, res.AllocObjectsPerTurn, res.GCShare = allocs.perTurn(turns)
			res.GCCycles = int(allocs.Cycles)
		}
		d := jsAfter.sub(jsBefore)
		res.StreamMsgsPerTurn = float64(d.streamMsgs) / float64(turns)
		res.AppendsPerTurn = map[string]float64{}
		for name, n := range d.perStream {
			res.AppendsPerTurn[name] = float64(n) / float64(turns)
		}
		res.JSAPIPerTurn = float64(d.apiTotal) / float64(turns)
		res.NATSInMsgsPerTurn = float64(d.inMsgs) / float64(turns)
		res.NATSInBytesPerTurn = float64(d.inBytes) / float64(turns)
		res.StoredBytesPerTurn = map[string]float64{}
		for name, n := range d.streamBytes {
			res.StoredBytesPerTurn[name] = float64(n) / float64(turns)
		}
	}
	res.CPUCores = cpu.Seconds() / elapsed.Seconds()
	res.RunqueueWaitSeconds = wait.Seconds()
	res.SchedP50Ms, res.SchedP99Ms = ms(sp50), ms(sp99)
	res.HeapIdleMiB = float64(msIdle.HeapInuse) / (1 << 20)
	mem.awaiting = max(mem.awaiting, peakAwaiting.Load())
	res.PeakInFlight, res.PeakAwaitingReply = int(mem.model), int(mem.awaiting)
	res.HeapAtPeakMiB = float64(mem.heapInuse) / (1 << 20)
	res.LiveHeapAtPeakMiB = float64(mem.live) / (1 << 20)
	if mem.model > 0 {
		res.HeapPerInFlightKiB = float64(mem.heapInuse) / 1024 / float64(mem.model)
		grown := int64(mem.heapInuse) - int64(msIdle.HeapInuse)
		res.HeapGrowthPerInFlightKiB = float64(grown) / 1024 / float64(mem.model)
		res.LivePerInFlightKiB = float64(mem.live) / 1024 / float64(mem.model)
	}
	if mem.awaiting > 0 {
		res.HeapPerAwaitingKiB = float64(mem.heapInuse) / 1024 / float64(mem.awaiting)
		res.LivePerAwaitingKiB = float64(mem.live) / 1024 / float64(mem.awaiting)
	}
	if kill != nil {
		res.Kill = kill.result()
	}
	return res, nil
}

// memPeaks are the largest values the sampler saw.
type memPeaks struct {
	model, awaiting int64  // turns inside a model call; messages awaiting their reply
	heapInuse, live uint64 // HeapInuse; heap marked live by the last GC
}

// liveHeap is the heap the last garbage collection found live (HeapInuse also counts garbage
// not yet swept, so it swings with GC timing).
// heapSampler reads the heap in use (= runtime.MemStats.HeapInuse) and the live heap from
// runtime/metrics. The samplers use it instead of runtime.ReadMemStats, which stops the world:
// at 100 Hz that preempted every running goroutine of the measured process a hundred times a
// second, about 5 % of its CPU.
type heapSampler struct{ s []metrics.Sample }

func newHeapSampler() *heapSampler {
	return &heapSampler{s: []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"}, {Name: "/gc/heap/live:bytes"}}}
}

func (h *heapSampler) read() (inuse, live uint64) {
	metrics.Read(h.s)
	if h.s[0].Value.Kind() == metrics.KindUint64 && h.s[1].Value.Kind() == metrics.KindUint64 {
		inuse = h.s[0].Value.Uint64() + h.s[1].Value.Uint64()
	}
	if h.s[2].Value.Kind() == metrics.KindUint64 {
		live = h.s[2].Value.Uint64()
	}
	return inuse, live
}

// allocCounters are the runtime's cumulative allocation and collection counters (a child
// reports the difference over the phase as JSON).
type allocCounters struct {
	Bytes   uint64  `json:"bytes"`
	Objects uint64  `json:"objects"`
	Cycles  uint64  `json:"cycles"`
	GCCPU   float64 `json:"gcCpuSeconds"`   // the runtime's CPU estimates: the collector's,
	BusyCPU float64 `json:"busyCpuSeconds"` // and everything's but idle time
}

var allocMetrics = []string{"/gc/heap/allocs:bytes", "/gc/heap/allocs:objects", "/gc/heap/tiny/allocs:objects",
	"/gc/cycles/total:gc-cycles", "/cpu/classes/gc/total:cpu-seconds", "/cpu/classes/total:cpu-seconds", "/cpu/classes/idle:cpu-seconds"}

func readAllocs() allocCounters {
	s := make([]metrics.Sample, len(allocMetrics))
	for i, n := range allocMetrics {
		s[i].Name = n
	}
	metrics.Read(s)
	u := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	f := func(i int) float64 {
		if s[i].Value.Kind() != metrics.KindFloat64 {
			return 0
		}
		return s[i].Value.Float64()
	}
	return allocCounters{Bytes: u(0), Objects: u(1) + u(2), Cycles: u(3), GCCPU: f(4), BusyCPU: f(5) - f(6)}
}

// perTurn returns c's allocation per turn (turns > 0) and the collector's share of the busy CPU.
func (c allocCounters) perTurn(turns int) (kib, objects, gcShare float64) {
	if c.BusyCPU > 0 {
		gcShare = c.GCCPU / c.BusyCPU
	}
	return float64(c.Bytes) / 1024 / float64(turns), float64(c.Objects) / float64(turns), gcShare
}

func (a allocCounters) sub(b allocCounters) allocCounters {
	return allocCounters{Bytes: a.Bytes - b.Bytes, Objects: a.Objects - b.Objects, Cycles: a.Cycles - b.Cycles,
		GCCPU: a.GCCPU - b.GCCPU, BusyCPU: a.BusyCPU - b.BusyCPU}
}

func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// pace sends n permits at rate per second: permits due are computed from the start time, so a
// late wake-up does not lower the rate. When no session is idle to take a permit, the backlog
// is capped at 10 ms worth of permits, so the pacer does not burst to catch up and the offered
// rate is a ceiling.
func pace(ctx context.Context, permits chan<- struct{}, rate float64, n int) {
	maxBacklog := max(1, int(rate/100))
	start := time.Now()
	sent := 0
	for sent < n {
		due := min(n, int(time.Since(start).Seconds()*rate)+1)
		if due-sent > maxBacklog {
			// Stalled (every session busy): forget the permits that could not be taken.
			start = time.Now().Add(-time.Duration(float64(sent) / rate * float64(time.Second)))
			due = sent + 1
		}
		for ; sent < due; sent++ {
			select {
			case permits <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
		next := start.Add(time.Duration(float64(sent) / rate * float64(time.Second)))
		if d := time.Until(next); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return
			}
		}
	}
}

// killWatch measures takeovers after the kill.
type killWatch struct {
	mu       sync.Mutex
	at       time.Time
	worker   string
	owned    int
	pending  int
	watch    map[string]struct{} // pending message ids of the killed worker's sessions
	takeover []time.Duration
	err      error
}

func (k *killWatch) replied(id string, at time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.watch[id]; ok {
		delete(k.watch, id)
		k.takeover = append(k.takeover, at.Sub(k.at))
	}
}

// killHalfway kills the second turn worker once half the turns are done and records which of
// its sessions had a message waiting for a reply.
func (h *Harness) killHalfway(ctx context.Context, k *killWatch, sessions []*session, done *atomic.Int64, half int64) {
	for done.Load() < half {
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
	leases, err := store.NewLeases(ctx, h.js)
	if err != nil {
		k.mu.Lock()
		k.err = err
		k.mu.Unlock()
		return
	}
	victim := h.victim.ID()
	// The holders are looked up 32 at a time: one by one, 1,000 lookups took longer than the
	// rest of a fast run, and the kill came when no message was pending any more.
	var owned []int
	var ownedMu sync.Mutex
	var lookups sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range sessions {
		sem <- struct{}{}
		lookups.Add(1)
		go func() {
			defer lookups.Done()
			defer func() { <-sem }()
			if owner, _, err := leases.Holder(ctx, h.sessionKey(i)); err == nil && owner == victim {
				ownedMu.Lock()
				owned = append(owned, i)
				ownedMu.Unlock()
			}
		}()
	}
	lookups.Wait()
	k.mu.Lock()
	defer k.mu.Unlock()
	h.victim.Kill()
	k.at = time.Now()
	k.worker, k.owned = victim, len(owned)
	k.watch = map[string]struct{}{}
	for _, i := range owned {
		s := sessions[i]
		s.mu.Lock()
		if s.pending != "" {
			k.watch[s.pending] = struct{}{}
		}
		s.mu.Unlock()
	}
	k.pendingAtKill()
}

func (k *killWatch) pendingAtKill() { k.pending = len(k.watch) }

func (k *killWatch) result() *KillResult {
	k.mu.Lock()
	defer k.mu.Unlock()
	r := &KillResult{Worker: k.worker, SessionsOwned: k.owned, Pending: k.pending, Recovered: len(k.takeover)}
	if k.err != nil {
		r.Error = k.err.Error()
	}
	if len(k.takeover) > 0 {
		t := slices.Clone(k.takeover)
		slices.Sort(t)
		r.P50Ms, r.P90Ms, r.P99Ms, r.MaxMs = ms(pct(t, 50)), ms(pct(t, 90)), ms(pct(t, 99)), ms(t[len(t)-1])
	}
	return r
}

// pct returns the p-th percentile of sorted (nearest rank).
func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	return sorted[i-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// atomicMax is the largest value it was given.
type atomicMax struct{ atomic.Int64 }

func (m *atomicMax) max(v int64) {
	for cur := m.Load(); v > cur && !m.CompareAndSwap(cur, v); cur = m.Load() {
	}
}

func msDur(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
