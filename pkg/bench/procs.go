package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/childproc"
)

// Role names of the child processes (and of their figures in Result.Processes).
const (
	roleNATS   = "nats"
	roleIngest = "ingest"
	roleTurn   = "turn-worker"
	roleTool   = "tool-worker"
	roleEgress = "egress"
)

// benchChild is one child process of a multi-process run.
type benchChild struct {
	name, role string
	proc       *childproc.Proc
	stats      string // control endpoint
	webhook    string // ingest: the webhook's base URL
	worker     string // turn worker: its id (lease holder name)

	mu     sync.Mutex
	last   *phaseStats // figures of the last phase
	killed bool
}

func (c *benchChild) setLast(st *phaseStats) {
	c.mu.Lock()
	c.last = st
	c.mu.Unlock()
}

func (c *benchChild) figures() *phaseStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

func (c *benchChild) isKilled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.killed
}

// processes is a multi-process run: nats-server processes and one process per role replica,
// all children of this one (childproc: no orphans).
type processes struct {
	nodes, roles []*benchChild
	urls         string
	user, pass   string
	nc           *nats.Conn
	js           jetstream.JetStream
	client       *http.Client
	logDir       string
}

// startProcesses starts the NATS node(s), then every role process at once (each provisions
// the streams, as role processes started together on a fresh server do), and waits until all
// are ready. A failure stops whatever was started.
func startProcesses(ctx context.Context, o Options, dir, secret, callback string) (_ *processes, err error) {
	var pw [12]byte
	_, _ = rand.Read(pw[:])
	ps := &processes{user: "bench", pass: hex.EncodeToString(pw[:]), logDir: filepath.Join(dir, "logs"),
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}}
	defer func() {
		if err != nil {
			ps.close()
		}
	}()
	if err := os.MkdirAll(ps.logDir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	plan, err := childproc.PlanNodes(max(o.Cluster, 1), "nats", dir, ps.user, ps.pass)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	ps.urls = childproc.URLs(plan)
	for _, n := range plan {
		c, err := ps.spawn(o, n.Name, roleNATS, append([]string{ChildEnv + "=nats"}, n.Env()...))
		if err != nil {
			return nil, err
		}
		ps.nodes = append(ps.nodes, c)
	}
	if err := ps.waitReady(ctx, ps.nodes, 60*time.Second); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	err = childproc.WaitJetStream(wctx, ps.urls, nats.UserInfo(ps.user, ps.pass))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if ps.nc, err = nats.Connect(ps.urls, nats.UserInfo(ps.user, ps.pass), nats.Name("agentbus bench"), nats.MaxReconnects(-1)); err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	if ps.js, err = jetstream.New(ps.nc); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	replicas := 1
	if len(plan) >= 3 {
		replicas = 3
	}
	common := []string{ChildEnv + "=role", envURL + "=" + ps.urls, envUser + "=" + ps.user, envPassword + "=" + ps.pass,
		envReplicas + "=" + strconv.Itoa(replicas), envSecret + "=" + secret, envCallback + "=" + callback,
		envLatency + "=" + strconv.FormatInt(o.Latency.Milliseconds(), 10)}
	counts := []struct {
		role string
		n    int
	}{{roleEgress, max(o.Egresses, 1)}, {roleTool, max(o.ToolWorkers, 1)}, {roleTurn, o.turnWorkers()}, {roleIngest, max(o.Ingests, 1)}}
	for _, rc := range counts {
		for i := 1; i <= rc.n; i++ {
			name := rc.role + "-" + strconv.Itoa(i)
			env := append(append([]string{}, common...), envRole+"="+rc.role, envDir+"="+filepath.Join(dir, name))
			if o.ProfileDir != "" {
				env = append(env, envProfile+"="+filepath.Join(o.ProfileDir, name+".pprof"))
			}
			c, err := ps.spawn(o, name, rc.role, env)
			if err != nil {
				return nil, err
			}
			ps.roles = append(ps.roles, c)
		}
	}
	if err := ps.waitReady(ctx, ps.roles, 3*time.Minute); err != nil {
		return nil, err
	}
	return ps, nil
}

func (ps *processes) spawn(o Options, name, role string, env []string) (*benchChild, error) {
	if role == roleNATS && o.ProfileDir != "" {
		env = append(env, envProfile+"="+filepath.Join(o.ProfileDir, name+".pprof"))
	}
	p, err := childproc.Start(childproc.Spec{Name: name, Path: o.Exe, Args: o.ExeArgs, Env: env,
		Log: filepath.Join(ps.logDir, name+".log")})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return &benchChild{name: name, role: role, proc: p}, nil
}

// waitReady waits for every child's ready line and reads what it announced.
func (ps *processes) waitReady(ctx context.Context, cs []*benchChild, d time.Duration) error {
	for _, c := range cs {
		info, err := c.proc.WaitReadyContext(ctx, d)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		for _, f := range strings.Fields(info) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "stats":
				c.stats = v
			case "webhook":
				c.webhook = v
			case "worker":
				c.worker = v
			}
		}
		if c.stats == "" {
			return fmt.Errorf("bench: %s announced no control endpoint (%q)", c.name, info)
		}
	}
	return nil
}

// webhooks are the ingest processes' webhook base URLs.
func (ps *processes) webhooks() []string {
	var out []string
	for _, c := range ps.roles {
		if c.webhook != "" {
			out = append(out, c.webhook)
		}
	}
	return out
}

// all is every child, NATS nodes first.
func (ps *processes) all() []*benchChild {
	return append(append([]*benchChild{}, ps.nodes...), ps.roles...)
}

// call POSTs (or GETs) a child's control endpoint and decodes its answer into out.
func (ps *processes) call(ctx context.Context, c *benchChild, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.stats+path, nil)
	if err != nil {
		return err
	}
	resp, err := ps.client.Do(req)
	if err != nil {
		return fmt.Errorf("bench: %s %s: %w", c.name, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bench: %s %s: %s: %s", c.name, path, resp.Status, bytes.TrimSpace(body))
	}
	return json.Unmarshal(body, out)
}

// each runs f on every live child at once and joins the errors.
func (ps *processes) each(f func(c *benchChild) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, c := range ps.all() {
		if c.isKilled() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(c); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// begin starts the measured phase in every child.
func (ps *processes) begin(ctx context.Context) error {
	return ps.each(func(c *benchChild) error {
		c.setLast(nil)
		var st phaseStats
		return ps.call(ctx, c, http.MethodPost, "/begin", &st)
	})
}

// end ends the measured phase in every child and keeps each one's figures in last (a child
// killed during the phase keeps those read just before its kill).
func (ps *processes) end(ctx context.Context) error {
	return ps.each(func(c *benchChild) error {
		var st phaseStats
		if err := ps.call(ctx, c, http.MethodPost, "/end", &st); err != nil {
			return err
		}
		c.setLast(&st)
		return nil
	})
}

// counters reads every live node's counters and merges them.
func (ps *processes) counters(ctx context.Context) (jsCounters, error) {
	var mu sync.Mutex
	var all []*countersJSON
	err := ps.each(func(c *benchChild) error {
		if c.role != roleNATS {
			return nil
		}
		var cj countersJSON
		if err := ps.call(ctx, c, http.MethodGet, "/counters", &cj); err != nil {
			return err
		}
		mu.Lock()
		all = append(all, &cj)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return jsCounters{}, err
	}
	return mergeCounters(all), nil
}

// dial opens a connection of its own to the NATS server(s).
func (ps *processes) dial() (*nats.Conn, error) {
	return nats.Connect(ps.urls, nats.UserInfo(ps.user, ps.pass))
}

// close stops the role processes (all at once: SIGTERM, SIGKILL after 30 s), then the NATS
// nodes, then the bench's own connection.
func (ps *processes) close() {
	stop := func(cs []*benchChild) {
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.proc.Stop(30 * time.Second)
			}()
		}
		wg.Wait()
	}
	stop(ps.roles)
	if ps.nc != nil {
		ps.nc.Close()
	}
	stop(ps.nodes)
}

// procVictim is a turn-worker process for the kill scenario.
type procVictim struct {
	ps *processes
	c  *benchChild
}

func (v procVictim) ID() string { return v.c.worker }

// Kill reads the process's figures of the phase so far, then kills it with SIGKILL.
func (v procVictim) Kill() {
	var st phaseStats
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if v.ps.call(ctx, v.c, http.MethodPost, "/end", &st) == nil {
		v.c.setLast(&st)
	}
	cancel()
	v.c.mu.Lock()
	v.c.killed = true
	v.c.mu.Unlock()
	v.c.proc.Kill()
}

// figures are the per-process figures of the phase that ended, the bench process first (self:
// its CPU over the phase).
func (ps *processes) figures(self, selfWait, elapsed time.Duration) []ProcessFigures {
	out := []ProcessFigures{{Name: "bench", Role: "load generator", Pid: os.Getpid(), CPUSeconds: self.Seconds(),
		CPUCores: self.Seconds() / elapsed.Seconds(), RunqueueWaitSeconds: selfWait.Seconds(), MaxRSSMiB: float64(maxRSSKiB()) / 1024}}
	for _, c := range ps.all() {
		st := c.figures()
		if st == nil {
			continue
		}
		cpu := time.Duration(st.CPUNs)
		out = append(out, ProcessFigures{Name: c.name, Role: c.role, Pid: c.proc.Pid(), Killed: c.isKilled(),
			CPUSeconds: cpu.Seconds(), CPUCores: cpu.Seconds() / elapsed.Seconds(),
			RunqueueWaitSeconds: time.Duration(st.RunqueueWaitNs).Seconds(),
			SchedP99Ms:          st.SchedP99Ms, ModelCalls: st.ModelCalls,
			PeakHeapMiB: float64(st.PeakHeapInuse) / (1 << 20), MaxRSSMiB: float64(st.MaxRSSKiB) / 1024, allocs: st.Allocs})
	}
	return out
}
