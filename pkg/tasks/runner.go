package tasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/inbox"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/loop"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/schedule"
	"github.com/agentbus/agentbus/pkg/toolbus"
)

// The turn-worker side of background work (docs/tasks.md): the Runner runs the subagent tasks
// (subagent.go) and deferred tool calls (deferred.go) queued on TASKS, installs the heartbeat
// and job schedules of ai.scheduler, and reads HEARTBEAT.md for the heartbeat's turn. The turn
// worker builds one Runner per replica and hands it what it runs on (RunnerConfig); the
// Runner never reaches into the turn worker but through the interfaces declared here.

// HeartbeatPrompt is the seed's fixed heartbeat prompt; the file's content follows it.
const HeartbeatPrompt = "[heartbeat] This is your periodic check of HEARTBEAT.md, the task list below. " +
	"Do what is due now, using your tools, and report briefly in this chat. " +
	"If nothing needs attention right now, answer exactly " + HeartbeatOK + " and nothing else."

// HeartbeatOK is the answer of a heartbeat with nothing to do; it is not posted to the chat.
const HeartbeatOK = "HEARTBEAT_OK"

// Defaults of Options.
const (
	DefaultHeartbeatEvery        = 30 * time.Minute // the seed's heartbeat period
	DefaultHeartbeatFile         = "HEARTBEAT.md"
	DefaultMaxSubagentIterations = 25
	// DefaultAckWait is the deferred consumer's AckWait when RunnerConfig.AckWait is zero
	// (the turn worker's default AckWait).
	DefaultAckWait = 2 * time.Second
)

// Options tune the Runner. pkg/app builds them from ai.agent and ai.scheduler; zero values
// pick the defaults named on each field.
type Options struct {
	// TaskTimeout bounds a background task that carries no deadline of its own (default
	// DefaultTimeout; ai.agent.taskTimeoutMs).
	TaskTimeout time.Duration
	// SubagentTools are what a subagent may use besides SubagentTools (ai.agent.subagentTools).
	SubagentTools []string
	// MaxSubagentIterations bounds the model calls of a subagent whose task sets no limit
	// (default DefaultMaxSubagentIterations; ai.agent.maxSubagentIterations).
	MaxSubagentIterations int
	// ToolExecution runs a subagent's tool calls in parallel or in sequence (default
	// loop.Parallel; ai.agent.toolExecution).
	ToolExecution loop.ToolExecutionMode
	// Workspace is the agent's workspace (ai.agent.workspace), where a relative heartbeat file
	// is read (the file tools edit the same file).
	Workspace string
	// Heartbeat is ai.scheduler.heartbeat; Jobs is ai.scheduler.jobs.
	Heartbeat Heartbeat
	Jobs      []Job
}

// Heartbeat is the periodic check of HEARTBEAT.md: every Every, when the file has content, the
// agent runs Prompt followed by the file in Session.
type Heartbeat struct {
	Session string        // "platform:bot:scope:scene"; empty: no heartbeat
	Every   time.Duration // default DefaultHeartbeatEvery
	File    string        // default DefaultHeartbeatFile; relative to Options.Workspace
	Prompt  string        // default HeartbeatPrompt
}

// Job is one recurring job: Prompt runs in Session every Every or on Cron (six fields, seconds
// first, or @daily and the like) in TimeZone.
type Job struct {
	ID       string
	Session  string // "platform:bot:scope:scene"
	Every    time.Duration
	Cron     string
	TimeZone string // cron only; empty: UTC
	Prompt   string
}

func (o *Options) setDefaults() {
	if o.TaskTimeout == 0 {
		o.TaskTimeout = DefaultTimeout
	}
	if o.MaxSubagentIterations == 0 {
		o.MaxSubagentIterations = DefaultMaxSubagentIterations
	}
	if o.ToolExecution == "" {
		o.ToolExecution = loop.Parallel
	}
	if o.Heartbeat.Every == 0 {
		o.Heartbeat.Every = DefaultHeartbeatEvery
	}
	if o.Heartbeat.File == "" {
		o.Heartbeat.File = DefaultHeartbeatFile
	}
	if o.Heartbeat.Prompt == "" {
		o.Heartbeat.Prompt = HeartbeatPrompt
	}
}

// Validate reports what of o cannot work; zero values are valid (they pick the defaults).
// Session keys are checked when the schedules are installed, where a bad one is logged and
// the others installed, as ai.scheduler always was.
func (o Options) Validate() error {
	var errs []error
	if o.TaskTimeout < 0 {
		errs = append(errs, fmt.Errorf("TaskTimeout %s is negative", o.TaskTimeout))
	}
	if o.MaxSubagentIterations < 0 {
		errs = append(errs, fmt.Errorf("MaxSubagentIterations %d is negative", o.MaxSubagentIterations))
	}
	switch o.ToolExecution {
	case "", loop.Parallel, loop.Sequential:
	default:
		errs = append(errs, fmt.Errorf("ToolExecution %q: want %s or %s", o.ToolExecution, loop.Parallel, loop.Sequential))
	}
	if o.Heartbeat.Every < 0 {
		errs = append(errs, fmt.Errorf("Heartbeat.Every %s is negative", o.Heartbeat.Every))
	}
	for _, j := range o.Jobs {
		if (j.Every > 0) == (j.Cron != "") {
			errs = append(errs, fmt.Errorf("job %q: set exactly one of Every and Cron", j.ID))
		}
		if j.Every < 0 {
			errs = append(errs, fmt.Errorf("job %q: Every %s is negative", j.ID, j.Every))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tasks: invalid options: %w", err)
	}
	return nil
}

// Turns reads back what the turn worker recorded of one turn (AGENT_EVENTS and, once it is
// committed, the context log): the Runner checks every task against the turn that queued it.
type Turns interface {
	// ReadTurn returns the turn's turn_started record (nil when the session has no such
	// turn) and its messages, its prompts first. An error is the bus's: try again later.
	ReadTurn(ctx context.Context, sk events.SessionKey, turn string) (*events.TurnStarted, []llm.Message, error)
}

// ToolClient runs tool calls on tool workers (a toolbus.Client).
type ToolClient interface {
	Executor(call toolbus.Call) *toolbus.Executor
}

var _ ToolClient = (*toolbus.Client)(nil)

// RunnerConfig is what a Runner is built from: its Options and the parts of the turn worker it
// runs on. Everything but Options, AckWait, Secrets and Log is required.
type RunnerConfig struct {
	Options
	// Worker is the turn worker's id, recorded in KV tasks as the runner of a task.
	Worker string
	JS     jetstream.JetStream
	// Inbox is SESSION_IN, where the event that started a task's turn is read; Publisher posts
	// a task's result into its session's inbox.
	Inbox     jetstream.Stream
	Publisher *inbox.Publisher
	Schedules *schedule.Schedules
	Tasks     *schedule.Tasks
	Turns     Turns
	// Catalog is the worker catalogue (KV tools); Tools runs the calls.
	Catalog *toolbus.Catalog
	Tools   ToolClient
	// Models resolves a task's model by alias and holds the API keys; DefaultModel is the
	// model of a task that names none (the turn worker's default route).
	Models       *llm.Registry
	DefaultModel func() (*llm.Model, error)
	StreamFn     loop.StreamFunc // nil: llm.Stream
	Secrets      []string        // removed from model errors (llm.StreamOptions.Secrets)
	// AckWait of the deferred consumer (default DefaultAckWait): the turn worker's, whose
	// in-progress acks keep a running task's delivery.
	AckWait time.Duration
	// DeadLetter records a task the Runner gives up on (the turn worker's dead letters).
	DeadLetter func(subject string, seq uint64, body []byte, h nats.Header, reason string, cause error)
	Log        *slog.Logger
}

// Runner runs the background work queued on TASKS for one turn-worker replica. Its goroutines
// are counted in the WaitGroup Start is given and end with Start's ctx; it holds no lock.
type Runner struct {
	cfg     RunnerConfig
	records Records
	log     *slog.Logger

	// Set by Start.
	ctx      context.Context
	wg       *sync.WaitGroup
	progress *natsutil.InProgress
}

// NewRunner checks cfg and applies its defaults.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.JS == nil || cfg.Inbox == nil || cfg.Publisher == nil || cfg.Schedules == nil || cfg.Tasks == nil ||
		cfg.Turns == nil || cfg.Catalog == nil || cfg.Tools == nil || cfg.Models == nil || cfg.DefaultModel == nil || cfg.DeadLetter == nil {
		return nil, errors.New("tasks: RunnerConfig lacks a required part")
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = DefaultAckWait
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Runner{cfg: cfg, log: cfg.Log, records: Records{Tasks: cfg.Tasks, Worker: cfg.Worker, Log: cfg.Log}}, nil
}

// Start installs the configured schedules (a failure is logged: the bus may be busy, and the
// next start or another replica installs them) and starts the subagent and deferred-task
// consumers. startCtx bounds creating the consumers; they and the tasks they run go on until
// ctx ends, each goroutine counted in wg. progress sends the in-progress acks of running
// tasks; it is the turn worker's, so that a killed worker stops sending them for its tasks and
// its held deliveries alike.
func (r *Runner) Start(startCtx, ctx context.Context, wg *sync.WaitGroup, progress *natsutil.InProgress) error {
	r.ctx, r.wg, r.progress = ctx, wg, progress
	if err := r.startSubagents(startCtx); err != nil {
		return err
	}
	if err := r.installSchedules(startCtx); err != nil {
		// Not fatal: the bus may be busy; the schedules are installed by the next start or
		// by another replica. Say so loudly.
		r.log.Error("install ai.scheduler schedules", "err", err)
	}
	return r.startDeferred(startCtx)
}

// consume runs run for each message of cons on a goroutine of its own until the Runner's ctx
// ends.
func (r *Runner) consume(cons jetstream.Consumer, run func(jetstream.Msg)) error {
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			run(msg)
		}()
	}, natsutil.FailoverConsume(jetstream.PullMaxMessages(8))...)
	if err != nil {
		return err
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		<-r.ctx.Done()
		cc.Stop()
	}()
	return nil
}

// deadLetter records msg, a task the Runner gives up on, and terminates its delivery.
func (r *Runner) deadLetter(msg jetstream.Msg, reason string, cause error) {
	meta, _ := msg.Metadata()
	var seq uint64
	if meta != nil {
		seq = meta.Sequence.Stream
	}
	r.cfg.DeadLetter(msg.Subject(), seq, msg.Data(), msg.Headers(), reason, cause)
	_ = msg.Term()
}

// maxHeartbeatBytes bounds what of HEARTBEAT.md goes into the prompt.
const maxHeartbeatBytes = 16 << 10

// HeartbeatFile is the HEARTBEAT.md the heartbeat reads, in the agent's workspace unless
// Heartbeat.File is absolute.
func (r *Runner) HeartbeatFile() string {
	if name := r.cfg.Heartbeat.File; !filepath.IsAbs(name) {
		return filepath.Join(r.cfg.Workspace, name)
	}
	return r.cfg.Heartbeat.File
}

// HeartbeatInput is what a heartbeat that fired asks the model: the heartbeat prompt followed
// by HEARTBEAT.md (its first 16 KiB). It is "" when the file is missing or blank: the
// heartbeat then runs no turn. err is a failure to read the file other than its absence.
func (r *Runner) HeartbeatInput() (string, error) {
	body, err := os.ReadFile(r.HeartbeatFile())
	if len(body) > maxHeartbeatBytes {
		body = body[:maxHeartbeatBytes]
	}
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	if err != nil || strings.TrimSpace(string(body)) == "" {
		return "", err
	}
	return r.cfg.Heartbeat.Prompt + "\n\n## HEARTBEAT.md\n" + strings.TrimSpace(string(body)), nil
}

// configuredSchedule is one schedule ai.scheduler asks for.
type configuredSchedule struct {
	sk          events.SessionKey
	id, pattern string
	tz          string
	ev          events.Scheduled
}

// wantedSchedules turns the heartbeat and the jobs into schedules.
func (o Options) wantedSchedules() ([]configuredSchedule, error) {
	var out []configuredSchedule
	operator := events.Sender{ID: "scheduler", Name: "ai.scheduler"}
	if h := o.Heartbeat; h.Session != "" {
		sk, err := events.ParseSessionKey(h.Session)
		if err != nil {
			return nil, fmt.Errorf("ai.scheduler.heartbeat.session: %w", err)
		}
		out = append(out, configuredSchedule{sk: sk, id: events.ScheduleID(events.ScheduleHeartbeat, ""),
			pattern: schedule.Every(h.Every),
			ev:      events.Scheduled{Text: "check HEARTBEAT.md", CreatedBy: operator, Kind: events.ScheduleHeartbeat}})
	}
	for _, j := range o.Jobs {
		sk, err := events.ParseSessionKey(j.Session)
		if err != nil {
			return nil, fmt.Errorf("ai.scheduler.jobs %s: %w", j.ID, err)
		}
		pattern := j.Cron
		if j.Every > 0 {
			pattern = schedule.Every(j.Every)
		}
		out = append(out, configuredSchedule{sk: sk, id: events.ScheduleID(events.ScheduleJob, j.ID), pattern: pattern, tz: j.TimeZone,
			ev: events.Scheduled{Text: j.Prompt, CreatedBy: operator, Kind: events.ScheduleJob}})
	}
	return out, nil
}

// installSchedules makes the heartbeat and job schedules match the Options: missing or changed
// ones are written (once, whatever the number of replicas starting), and heartbeat and job
// schedules no longer configured are removed. An unchanged "@every" schedule is left alone so
// that restarts do not shift its period.
func (r *Runner) installSchedules(ctx context.Context) error {
	want, err := r.cfg.wantedSchedules()
	if err != nil {
		return err
	}
	scheds := r.cfg.Schedules
	keep := map[string]bool{}
	var errs []error
	for _, c := range want {
		keep[events.ScheduleSubject(c.sk, c.id)] = true
		wrote, err := scheds.Ensure(ctx, c.sk, c.id, c.pattern, c.tz, c.ev)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if wrote {
			r.log.Info("schedule installed", "session", c.sk.String(), "id", c.id, "schedule", c.pattern)
		}
	}
	all, err := scheds.ListAll(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, p := range all {
		kind := events.ScheduleKindOf(p.ID)
		if (kind == events.ScheduleHeartbeat || kind == events.ScheduleJob) && !keep[events.ScheduleSubject(p.Session, p.ID)] {
			if _, err := scheds.Cancel(ctx, p.Session, p.ID); err != nil && !errors.Is(err, schedule.ErrNotFound) {
				errs = append(errs, err)
			} else {
				r.log.Info("schedule removed (no longer in ai.scheduler)", "session", p.Session.String(), "id", p.ID)
			}
		}
	}
	return errors.Join(errs...)
}
