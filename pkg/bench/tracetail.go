package bench

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/exp/trace"
)

// TraceTail is what an execution trace of a measured phase (Config.Trace) says about the
// slow messages: whether they ran into a garbage-collection mark phase, how long runnable
// goroutines waited for a P inside and outside those phases, and where the process sat in
// system calls. It answers "is the tail a wait, a queue or the collector" on any machine;
// the milliseconds themselves are the machine's (a loaded machine stretches everything).
type TraceTail struct {
	Turns int `json:"turns"` // messages whose reply is in the trace
	// The collector's mark phases in the trace: how many, how long, and their share of the
	// time between the first message sent and the last reply.
	GCMarks     int     `json:"gcMarks"`
	GCMarkP50Ms float64 `json:"gcMarkP50Ms"`
	GCMarkMaxMs float64 `json:"gcMarkMaxMs"`
	GCMarkShare float64 `json:"gcMarkShare"`
	// Messages whose time from POST to callback overlapped a mark phase, and the others.
	TouchingGC      int     `json:"touchingGC"`
	TouchingGCP50Ms float64 `json:"touchingGCP50Ms"`
	TouchingGCP99Ms float64 `json:"touchingGCP99Ms"`
	OthersP50Ms     float64 `json:"othersP50Ms"`
	OthersP99Ms     float64 `json:"othersP99Ms"`
	// SlowestTouchingGC is the share of the slowest 1 % of the messages that overlapped a
	// mark phase (against TouchingGC/Turns for all of them).
	SlowestTouchingGC float64 `json:"slowestTouchingGC"`
	// A runnable goroutine's wait for a P (the Go scheduler's run queue), p99, for waits that
	// began inside a mark phase and outside.
	RunnableGCP99Ms    float64 `json:"runnableGCP99Ms"`
	RunnableOtherP99Ms float64 `json:"runnableOtherP99Ms"`
	// Syscalls: the places that spent the most time in system calls (blocking ones hold an OS
	// thread, and until the runtime takes it back, a P).
	Syscalls []TraceSyscall `json:"syscalls,omitempty"`
}

// TraceSyscall is the time spent in system calls made from one place (its two innermost
// callers outside the runtime, syscall and os packages).
type TraceSyscall struct {
	Where   string  `json:"where"`
	N       int     `json:"n"`
	TotalMs float64 `json:"totalMs"`
	MaxMs   float64 `json:"maxMs"`
}

// traceTurnCategory is the trace log category of a message's latency (bench.go).
const traceTurnCategory = "bench.turn"

// ReadTraceTail reads an execution trace written with Config.Trace.
func ReadTraceTail(r io.Reader) (*TraceTail, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("bench: trace: %w", err)
	}
	type span struct{ a, b trace.Time }
	var (
		turns    []span // POST -> callback
		marks    []span
		markFrom = trace.Time(-1)
		runnable []span // runnable -> running
		since    = map[trace.GoID]trace.Time{}
		sysFrom  = map[trace.GoID]trace.Time{}
		sysAt    = map[trace.GoID]string{}
		sys      = map[string]*TraceSyscall{}
	)
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("bench: trace: %w", err)
		}
		switch ev.Kind() {
		case trace.EventLog:
			l := ev.Log()
			if l.Category != traceTurnCategory {
				continue
			}
			lat, late, ok := strings.Cut(l.Message, " ")
			ln, err1 := strconv.ParseInt(lat, 10, 64)
			dn, err2 := strconv.ParseInt(late, 10, 64)
			if !ok || err1 != nil || err2 != nil {
				continue
			}
			end := ev.Time() - trace.Time(dn)
			turns = append(turns, span{end - trace.Time(ln), end})
		case trace.EventRangeBegin, trace.EventRangeEnd:
			rg := ev.Range()
			if rg.Scope.Kind != trace.ResourceNone || !strings.HasPrefix(rg.Name, "GC concurrent mark") {
				continue
			}
			if ev.Kind() == trace.EventRangeBegin {
				markFrom = ev.Time()
			} else if markFrom >= 0 {
				marks = append(marks, span{markFrom, ev.Time()})
				markFrom = -1
			}
		case trace.EventStateTransition:
			st := ev.StateTransition()
			if st.Resource.Kind != trace.ResourceGoroutine {
				continue
			}
			g := st.Resource.Goroutine()
			from, to := st.Goroutine()
			switch {
			case to == trace.GoRunnable:
				since[g] = ev.Time()
			case from == trace.GoRunnable && to == trace.GoRunning:
				if t, ok := since[g]; ok {
					runnable = append(runnable, span{t, ev.Time()})
					delete(since, g)
				}
			}
			switch {
			case to == trace.GoSyscall:
				sysFrom[g], sysAt[g] = ev.Time(), syscallSite(st.Stack)
			case from == trace.GoSyscall:
				if t, ok := sysFrom[g]; ok {
					s := sys[sysAt[g]]
					if s == nil {
						s = &TraceSyscall{Where: sysAt[g]}
						sys[sysAt[g]] = s
					}
					d := float64(ev.Time()-t) / 1e6
					s.N++
					s.TotalMs += d
					s.MaxMs = max(s.MaxMs, d)
					delete(sysFrom, g)
				}
			}
		}
	}
	t := &TraceTail{Turns: len(turns), GCMarks: len(marks)}
	for _, s := range sys {
		t.Syscalls = append(t.Syscalls, *s)
	}
	slices.SortFunc(t.Syscalls, func(a, b TraceSyscall) int { return int(b.TotalMs - a.TotalMs) })
	t.Syscalls = t.Syscalls[:min(len(t.Syscalls), 6)]
	if len(turns) == 0 {
		return t, nil
	}
	// Marks come in time order; overlap is the time of [a, b) spent in one.
	overlap := func(a, b trace.Time) (o trace.Time) {
		for _, m := range marks {
			o += max(0, min(m.b, b)-max(m.a, a))
		}
		return o
	}
	inMark := func(at trace.Time) bool {
		i, _ := slices.BinarySearchFunc(marks, at, func(m span, at trace.Time) int {
			switch {
			case m.b <= at:
				return -1
			case m.a > at:
				return 1
			}
			return 0
		})
		return i < len(marks) && marks[i].a <= at && at < marks[i].b
	}
	first, last := turns[0].a, turns[0].b
	var markLen []float64
	for _, s := range turns {
		first, last = min(first, s.a), max(last, s.b)
	}
	for _, m := range marks {
		markLen = append(markLen, float64(m.b-m.a)/1e6)
	}
	if len(markLen) > 0 {
		slices.Sort(markLen)
		t.GCMarkP50Ms, t.GCMarkMaxMs = markLen[len(markLen)/2], markLen[len(markLen)-1]
		t.GCMarkShare = float64(overlap(first, last)) / float64(max(1, last-first))
	}
	var touching, others []float64
	slices.SortFunc(turns, func(a, b span) int { return int((b.b - b.a) - (a.b - a.a)) }) // slowest first
	slow := max(1, len(turns)/100)
	slowTouching := 0
	for i, s := range turns {
		lat := float64(s.b-s.a) / 1e6
		if overlap(s.a, s.b) > 0 {
			touching = append(touching, lat)
			if i < slow {
				slowTouching++
			}
		} else {
			others = append(others, lat)
		}
	}
	t.TouchingGC = len(touching)
	t.SlowestTouchingGC = float64(slowTouching) / float64(slow)
	t.TouchingGCP50Ms, t.TouchingGCP99Ms = quantiles(touching)
	t.OthersP50Ms, t.OthersP99Ms = quantiles(others)
	var rGC, rOther []float64
	for _, r := range runnable {
		if r.a < first || r.a > last {
			continue
		}
		if inMark(r.a) {
			rGC = append(rGC, float64(r.b-r.a)/1e6)
		} else {
			rOther = append(rOther, float64(r.b-r.a)/1e6)
		}
	}
	_, t.RunnableGCP99Ms = quantiles(rGC)
	_, t.RunnableOtherP99Ms = quantiles(rOther)
	return t, nil
}

// quantiles returns the p50 and p99 of v (sorted in place); 0 for none.
func quantiles(v []float64) (p50, p99 float64) {
	if len(v) == 0 {
		return 0, 0
	}
	slices.Sort(v)
	at := func(p int) float64 { return v[max(1, (len(v)*p+99)/100)-1] }
	return at(50), at(99)
}

// syscallSite names where a system call was made: its two innermost callers outside the
// runtime and the syscall, os and internal packages.
func syscallSite(s trace.Stack) string {
	var parts []string
	for fr := range s.Frames() {
		f := fr.Func
		if strings.HasPrefix(f, "runtime.") || strings.HasPrefix(f, "syscall.") || strings.HasPrefix(f, "os.") ||
			strings.HasPrefix(f, "internal/") || strings.HasPrefix(f, "golang.org/x/sys/") {
			continue
		}
		if i := strings.LastIndexByte(f, '/'); i >= 0 {
			f = f[i+1:]
		}
		parts = append(parts, f)
		if len(parts) == 2 {
			break
		}
	}
	if len(parts) == 0 {
		return "?"
	}
	return strings.Join(parts, " < ")
}

// WriteText prints the summary (agentbus bench --trace).
func (t *TraceTail) WriteText(w io.Writer) {
	fmt.Fprintf(w, "  trace:          %d messages; %d GC mark phases (p50 %s ms, max %s ms), %.1f %% of the time\n",
		t.Turns, t.GCMarks, num(t.GCMarkP50Ms), num(t.GCMarkMaxMs), 100*t.GCMarkShare)
	fmt.Fprintf(w, "    overlapping a mark phase: %d messages, p50 %s ms, p99 %s ms; the others: p50 %s ms, p99 %s ms; of the slowest 1 %%: %.0f %%\n",
		t.TouchingGC, num(t.TouchingGCP50Ms), num(t.TouchingGCP99Ms), num(t.OthersP50Ms), num(t.OthersP99Ms), 100*t.SlowestTouchingGC)
	fmt.Fprintf(w, "    runnable goroutines waited for a P: p99 %s ms in a mark phase, %s ms outside\n",
		num(t.RunnableGCP99Ms), num(t.RunnableOtherP99Ms))
	for _, s := range t.Syscalls {
		fmt.Fprintf(w, "    syscalls %-70s %6d, %s ms in all, max %s ms\n", s.Where+":", s.N, num(s.TotalMs), num(s.MaxMs))
	}
}
