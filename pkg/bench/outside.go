package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbus/agentbus/internal/childproc"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// outsideTool and outsideFile are the tool call of a tool turn in the outside bench: a
// built-in tool of `agentbus up` (so the process under test is the one a user runs, with
// nothing added) that costs almost nothing itself, on a small file of the workspace.
const (
	outsideTool = "read_file"
	outsideFile = "bench.txt"
)

// OutsideConfig configures RunOutside.
type OutsideConfig struct {
	Sessions int // chats talking at once (closed loop: the concurrency)
	Messages int // messages per chat and phase
	// Rate is the offered load of the latency phases in turns/s; 0 = half of the closed-loop
	// maximum each side reached in this run, < 0 = no latency phase.
	Rate float64
	// Rounds repeats the closed-loop pair (agentbus, relay), interleaved, for each shape.
	Rounds int
	// Tool and Plain choose the shapes; both false = both.
	Tool, Plain bool
	// Exe and ExeArgs start `agentbus up` (Exe ExeArgs... up --config FILE) and the relay
	// (Exe ExeArgs... with ChildEnv=relay); "" = os.Executable.
	Exe     string
	ExeArgs []string
	// Progress receives a line per phase (nil: none).
	Progress io.Writer
	// UpProfile, when set, is where `agentbus up` writes a CPU profile of its whole run
	// (AGENTBUS_UP_CPUPROFILE).
	UpProfile string
}

// OutsidePhase is one measured phase of one side.
type OutsidePhase struct {
	Side        string  `json:"side"`  // "agentbus" or "relay"
	Shape       string  `json:"shape"` // "plain" or "tool"
	Offered     float64 `json:"offeredPerSec"`
	Turns       int     `json:"turns"`
	Lost        int     `json:"lost"`
	Seconds     float64 `json:"seconds"`
	TurnsPerSec float64 `json:"turnsPerSec"`
	// CPUPerTurnMs is the CPU time of the process under test (all threads, user + system,
	// from /proc) over the phase, per turn.
	CPUPerTurnMs float64 `json:"cpuPerTurnMs"`
	P50Ms        float64 `json:"p50Ms"`
	P99Ms        float64 `json:"p99Ms"`
	ModelCalls   float64 `json:"modelCallsPerTurn"`
	// ModelRequestBytes is the mean size of the model requests' bodies (the history sent).
	ModelRequestBytes float64 `json:"modelRequestBytes"`
}

// OutsideResult is what RunOutside measured, in the order it ran.
type OutsideResult struct {
	Sessions, Messages int
	Phases             []OutsidePhase
	LoadBefore         string `json:"loadBefore"`
	LoadAfter          string `json:"loadAfter"`
}

// RunOutside measures `agentbus up` from outside, as a chat platform sees it, next to a
// bus-less relay of the same shape, both as processes of their own started from Exe:
//
//   - agentbus: `agentbus up --config FILE`, the embedded default (NATS in the process, every
//     role), its one webhook bot calling back to this process, its provider openai-completions
//     at a model server in this process;
//   - relay: the same executable as ChildEnv=relay (relayChild): signature check, the loop
//     with the same provider and tool, callback; no NATS.
//
// For each shape (plain; tool: the model calls read_file once, then answers) it runs Rounds
// closed-loop pairs, agentbus then relay, then one phase each at Rate (default half of that
// side's best closed-loop turns/s) for latency. Each phase sends Sessions×Messages signed
// Standard Webhooks POSTs, new chats per phase, and waits for every callback. CPU per turn
// is the process's own CPU (/proc/<pid>/stat), so the load generator and the model server are
// not in it. ctx bounds the whole run; both processes are stopped before it returns.
func RunOutside(ctx context.Context, c OutsideConfig) (*OutsideResult, error) {
	c.Sessions, c.Messages, c.Rounds = max(c.Sessions, 1), max(c.Messages, 1), max(c.Rounds, 1)
	shapes := []string{"plain", "tool"}
	switch {
	case c.Tool && !c.Plain:
		shapes = []string{"tool"}
	case c.Plain && !c.Tool:
		shapes = []string{"plain"}
	}
	if _, err := procCPU(os.Getpid()); err != nil {
		return nil, fmt.Errorf("bench: --outside reads the CPU of other processes from /proc: %w", err)
	}
	dir, err := os.MkdirTemp("", "agentbus-outside-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	ws := filepath.Join(dir, "workspace")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := os.WriteFile(filepath.Join(ws, outsideFile), []byte("The benchmark file says hello.\n"), 0o644); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var key [24]byte
	_, _ = rand.Read(key[:])
	secret := hex.EncodeToString(key[:])
	var tagb [4]byte
	_, _ = rand.Read(tagb[:])

	model, err := startModelServer()
	if err != nil {
		return nil, err
	}
	defer model.close()
	lg, err := newLoadGen(secret)
	if err != nil {
		return nil, err
	}
	defer lg.close()

	up, err := startUp(ctx, c, dir, ws, secret, lg.cbURL, model.url)
	if err != nil {
		return nil, err
	}
	defer up.stop()
	rl, relayURL, err := startRelayProc(ctx, c, dir, ws, secret, lg.cbURL, model.url)
	if err != nil {
		return nil, err
	}
	defer rl.Kill()
	sides := []struct {
		name string
		url  string
		pid  int
	}{{"agentbus", up.webhook, up.cmd.Process.Pid}, {"relay", relayURL, rl.Pid()}}

	res := &OutsideResult{Sessions: c.Sessions, Messages: c.Messages, LoadBefore: loadAvg()}
	phaseNo := 0
	run := func(side int, shape string, rate float64) (OutsidePhase, error) {
		phaseNo++
		s := sides[side]
		model.tool.Store(shape == "tool")
		prefix := fmt.Sprintf("o%s-%d-", hex.EncodeToString(tagb[:]), phaseNo)
		// One warm-up message per chat-less phase start: a tool turn's first call makes
		// the turn worker fetch the tool list; the relay's connections open.
		if err := lg.one(ctx, s.url, prefix+"warm", 0, "warm up"); err != nil {
			return OutsidePhase{}, fmt.Errorf("bench: %s warm-up: %w", s.name, err)
		}
		calls0, bytes0 := model.calls.Load(), model.bytes.Load()
		cpu0, err := procCPU(s.pid)
		if err != nil {
			return OutsidePhase{}, err
		}
		st := lg.phase(ctx, s.url, prefix, c.Sessions, c.Messages, rate, shape)
		cpu1, err := procCPU(s.pid)
		if err != nil {
			return OutsidePhase{}, err
		}
		p := OutsidePhase{Side: s.name, Shape: shape, Offered: rate, Turns: len(st.lat), Lost: st.lost, Seconds: st.wall.Seconds()}
		if p.Turns > 0 {
			p.TurnsPerSec = float64(p.Turns) / st.wall.Seconds()
			p.CPUPerTurnMs = float64((cpu1 - cpu0).Microseconds()) / 1000 / float64(p.Turns)
			p.P50Ms, p.P99Ms = outsidePct(st.lat, 0.50), outsidePct(st.lat, 0.99)
			p.ModelCalls = float64(model.calls.Load()-calls0) / float64(p.Turns)
			if n := model.calls.Load() - calls0; n > 0 {
				p.ModelRequestBytes = float64(model.bytes.Load()-bytes0) / float64(n)
			}
		}
		res.Phases = append(res.Phases, p)
		if c.Progress != nil {
			fmt.Fprintf(c.Progress, "  %-8s %-5s %s\n", p.Side, p.Shape, p.line())
		}
		return p, nil
	}
	for _, shape := range shapes {
		best := [2]float64{}
		for r := 0; r < c.Rounds; r++ {
			for side := range sides {
				p, err := run(side, shape, 0)
				if err != nil {
					return res, err
				}
				best[side] = max(best[side], p.TurnsPerSec)
			}
		}
		if c.Rate < 0 {
			continue
		}
		for side := range sides {
			rate := c.Rate
			if rate == 0 {
				rate = best[side] / 2
			}
			if _, err := run(side, shape, rate); err != nil {
				return res, err
			}
		}
	}
	res.LoadAfter = loadAvg()
	return res, nil
}

func (p OutsidePhase) line() string {
	load := "closed loop"
	if p.Offered > 0 {
		load = fmt.Sprintf("at %.0f/s", p.Offered)
	}
	lost := ""
	if p.Lost > 0 {
		lost = fmt.Sprintf(", %d LOST", p.Lost)
	}
	return fmt.Sprintf("%-12s %7.0f turns/s  %6.3f ms CPU/turn  p50 %6.2f ms  p99 %7.2f ms  (%d turns, %.1f model calls/turn of %.1f KiB%s)",
		load, p.TurnsPerSec, p.CPUPerTurnMs, p.P50Ms, p.P99Ms, p.Turns, p.ModelCalls, p.ModelRequestBytes/1024, lost)
}

// WriteText prints every phase and the summary (WriteSummary).
func (r *OutsideResult) WriteText(w io.Writer) {
	for _, p := range r.Phases {
		fmt.Fprintf(w, "  %-8s %-5s %s\n", p.Side, p.Shape, p.line())
	}
	r.WriteSummary(w)
}

// WriteSummary prints the run's size, the load average and, per shape, the ratios agentbus ÷
// relay of the medians of the closed-loop phases and the latencies at half load.
func (r *OutsideResult) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "agentbus up (one process, embedded NATS) vs a bus-less relay, through the signed webhook: %d chats × %d messages per phase\n", r.Sessions, r.Messages)
	fmt.Fprintf(w, "load average before: %s; after: %s\n", r.LoadBefore, r.LoadAfter)
	for _, shape := range []string{"plain", "tool"} {
		var tps, cpu [2][]float64
		var lat [2]*OutsidePhase
		for i := range r.Phases {
			p := &r.Phases[i]
			if p.Shape != shape {
				continue
			}
			s := 0
			if p.Side == "relay" {
				s = 1
			}
			if p.Offered > 0 {
				lat[s] = p
				continue
			}
			tps[s] = append(tps[s], p.TurnsPerSec)
			cpu[s] = append(cpu[s], p.CPUPerTurnMs)
		}
		if len(tps[0]) == 0 || len(tps[1]) == 0 {
			continue
		}
		a, b := median(tps[0]), median(tps[1])
		ca, cb := median(cpu[0]), median(cpu[1])
		ratio := "n/a (the relay's CPU is under the 10 ms tick: run more turns)"
		if cb > 0 {
			ratio = fmt.Sprintf("%.1f×", ca/cb)
		}
		fmt.Fprintf(w, "%s: agentbus ÷ relay turns/s %.2f (%.0f / %.0f); CPU per turn %.3f / %.3f ms = %s",
			shape, a/b, a, b, ca, cb, ratio)
		if lat[0] != nil && lat[1] != nil {
			fmt.Fprintf(w, "; at half load p50 %.2f / %.2f ms, p99 %.2f / %.2f ms", lat[0].P50Ms, lat[1].P50Ms, lat[0].P99Ms, lat[1].P99Ms)
		}
		fmt.Fprintln(w)
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func outsidePct(d []time.Duration, q float64) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(q*float64(len(s)-1) + 0.5)
	return float64(s[i].Microseconds()) / 1000
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// procCPU is the CPU time (user + system, every thread) of process pid, from /proc/<pid>/stat
// (in clock ticks of 10 ms, the USER_HZ of Linux on every architecture Go supports).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: count from the ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("bench: /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 { // state is f[0]; utime and stime are fields 14 and 15 of the line
		return 0, fmt.Errorf("bench: /proc/%d/stat: short", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bench: /proc/%d/stat: utime/stime", pid)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// upProc is `agentbus up` running as a child.
type upProc struct {
	cmd     *exec.Cmd
	webhook string // base URL
	done    chan struct{}
	log     string
}

// startUp writes the configuration and starts `agentbus up` with it; it returns once up
// has printed its webhook URL.
func startUp(ctx context.Context, c OutsideConfig, dir, ws, secret, cb, model string) (*upProc, error) {
	cfg := fmt.Sprintf(`dataDir: %q
nats: {embedded: true, listen: "127.0.0.1:0"}
console: {listen: "off"}
log: {level: info}
im:
  webhook:
    listen: "127.0.0.1:0"
    maxInFlight: 4096
    rateLimit: {perBot: {perSecond: -1}, perSender: {perSecond: -1}}
    bots:
      - {id: %s, secret: %q, callback: %q}
ai:
  providers:
    bench: {api: openai-completions, baseUrl: %q, apiKey: bench, contextWindow: 128000, maxTokens: 4096, models: [{id: bench, name: benchmark model}]}
  agents:
    zhin: {provider: bench, model: bench}
  agent: {workspace: %q}
  tools: {enabled: [%s]}
`, filepath.Join(dir, "up"), BotID, secret, cb, model, ws, outsideTool)
	file := filepath.Join(dir, "agentbus.yml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	exe := c.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	logPath := filepath.Join(dir, "up.log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	cmd := exec.Command(exe, append(slices.Clone(c.ExeArgs), "up", "--config", file)...)
	cmd.Dir = dir
	cmd.Stderr = lf
	if c.UpProfile != "" {
		cmd.Env = append(os.Environ(), "AGENTBUS_UP_CPUPROFILE="+c.UpProfile)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		lf.Close()
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("bench: start agentbus up: %w", err)
	}
	u := &upProc{cmd: cmd, done: make(chan struct{}), log: logPath}
	found := make(chan string, 1)
	go func() {
		defer close(u.done)
		defer lf.Close()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(lf, line)
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "Webhook:"); ok {
				if f := strings.Fields(rest); len(f) >= 2 && f[0] == "POST" {
					if base, ok := strings.CutSuffix(f[1], "/webhook/{bot}"); ok {
						select {
						case found <- base:
						default:
						}
					}
				}
			}
		}
		_ = cmd.Wait()
	}()
	t := time.NewTimer(2 * time.Minute)
	defer t.Stop()
	select {
	case u.webhook = <-found:
		return u, nil
	case <-u.done:
		return nil, fmt.Errorf("bench: agentbus up exited (log %s):\n%s", logPath, childproc.Tail(logPath, 15))
	case <-t.C:
		u.stop()
		return nil, fmt.Errorf("bench: agentbus up printed no webhook URL in 2 minutes (log %s):\n%s", logPath, childproc.Tail(logPath, 15))
	case <-ctx.Done():
		u.stop()
		return nil, ctx.Err()
	}
}

// stop sends SIGINT (up's clean stop), and SIGKILL after 30 s.
func (u *upProc) stop() {
	_ = u.cmd.Process.Signal(os.Interrupt)
	select {
	case <-u.done:
	case <-time.After(30 * time.Second):
		_ = u.cmd.Process.Kill()
		<-u.done
	}
}

func startRelayProc(ctx context.Context, c OutsideConfig, dir, ws, secret, cb, model string) (*childproc.Proc, string, error) {
	p, err := childproc.Start(childproc.Spec{Name: "relay", Path: c.Exe, Args: c.ExeArgs,
		Env: []string{ChildEnv + "=relay", envSecret + "=" + secret, envCallback + "=" + cb,
			envRelayModel + "=" + model, envRelayWorkspace + "=" + ws},
		Log: filepath.Join(dir, "relay.log")})
	if err != nil {
		return nil, "", fmt.Errorf("bench: %w", err)
	}
	url, err := p.WaitReadyContext(ctx, time.Minute)
	if err != nil {
		p.Kill()
		return nil, "", fmt.Errorf("bench: relay: %w", err)
	}
	return p, url, nil
}

// loadGen posts signed messages and receives the callbacks of both sides.
type loadGen struct {
	secret  string
	client  *http.Client
	cbSrv   *http.Server
	cbURL   string
	waiters sync.Map // message id -> chan time.Time
}

func newLoadGen(secret string) (*loadGen, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: callback listen: %w", err)
	}
	g := &loadGen{secret: secret, cbURL: "http://" + ln.Addr().String() + "/callback",
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			Proxy: nil, MaxConnsPerHost: maxConns, MaxIdleConns: 2 * maxConns, MaxIdleConnsPerHost: maxConns, IdleConnTimeout: 90 * time.Second,
		}}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /callback", g.onCallback)
	g.cbSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = g.cbSrv.Serve(ln) }()
	return g, nil
}

func (g *loadGen) close() {
	_ = g.cbSrv.Close()
	g.client.CloseIdleConnections()
}

func (g *loadGen) onCallback(w http.ResponseWriter, r *http.Request) {
	var out struct {
		ReplyTo string `json:"replyTo"`
	}
	body, err := io.ReadAll(r.Body)
	now := time.Now()
	if err != nil || json.Unmarshal(body, &out) != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	if v, ok := g.waiters.LoadAndDelete(out.ReplyTo); ok {
		v.(chan time.Time) <- now
	}
	w.WriteHeader(http.StatusOK)
}

// post sends one Standard Webhooks-signed text message from user u<session> in private
// scene scene.
func (g *loadGen) post(ctx context.Context, base, id, scene string, session int, text string) error {
	now := time.Now()
	body := inboundBody(id, scene, session, text, now.UnixMilli())
	h, err := webhook.SignStandard(g.secret, id, now, body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/webhook/"+BotID, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.client.Do(req)
	if err != nil {
		return fmt.Errorf("post %s: %w", id, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("post %s: %w: status %d", id, errRejected, resp.StatusCode)
	}
	return nil
}

// one sends one message and waits for its reply.
func (g *loadGen) one(ctx context.Context, base, scene string, session int, text string) error {
	ch := make(chan time.Time, 1)
	id := scene + "-m"
	g.waiters.Store(id, ch)
	defer g.waiters.Delete(id)
	if err := g.post(ctx, base, id, scene, session, text); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-time.After(time.Minute):
		return errors.New("no reply in a minute")
	case <-ctx.Done():
		return ctx.Err()
	}
}

type outsideStats struct {
	lat  []time.Duration
	lost int
	wall time.Duration
}

// phase runs sessions chats of messages messages each: closed loop (rate 0) or paced at
// rate turns/s over the idle chats.
func (g *loadGen) phase(ctx context.Context, base, prefix string, sessions, messages int, rate float64, shape string) outsideStats {
	var permits chan struct{}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if rate > 0 {
		permits = make(chan struct{})
		go func() {
			start := time.Now()
			for i := 0; ; i++ {
				at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
				if d := time.Until(at); d > 0 {
					select {
					case <-time.After(d):
					case <-pctx.Done():
						return
					}
				}
				select {
				case permits <- struct{}{}:
				case <-pctx.Done():
					return
				}
			}
		}()
	}
	var mu sync.Mutex
	var st outsideStats
	var lost atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for s := 0; s < sessions; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			scene := prefix + strconv.Itoa(s)
			lat := make([]time.Duration, 0, messages)
			for m := 0; m < messages; m++ {
				if permits != nil {
					select {
					case <-permits:
					case <-pctx.Done():
						return
					}
				}
				text := "hello " + strconv.Itoa(m)
				if shape == "tool" {
					text = "please read " + outsideFile + " " + strconv.Itoa(m)
				}
				id := scene + "-" + strconv.Itoa(m)
				ch := make(chan time.Time, 1)
				g.waiters.Store(id, ch)
				t0 := time.Now()
				if err := g.post(pctx, base, id, scene, s, text); err != nil {
					g.waiters.Delete(id)
					lost.Add(1)
					continue
				}
				select {
				case at := <-ch:
					lat = append(lat, at.Sub(t0))
				case <-time.After(time.Minute):
					g.waiters.Delete(id)
					lost.Add(1)
				case <-pctx.Done():
					return
				}
			}
			mu.Lock()
			st.lat = append(st.lat, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	st.wall = time.Since(start)
	st.lost = int(lost.Load())
	return st
}
