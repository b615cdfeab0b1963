package builtin

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/execpolicy"
	"github.com/agentbus/agentbus/pkg/filepolicy"
	"github.com/agentbus/agentbus/pkg/sandbox"
	"github.com/agentbus/agentbus/pkg/tools"
)

// ExecChecker judges a command line; *execpolicy.Policy implements it. Subagents and deferred
// workers get the same value as the main agent, so they cannot bypass it.
type ExecChecker interface {
	Check(cmdline string, ap *execpolicy.Approvals) execpolicy.Verdict
}

// ApprovalsFunc loads the owner approvals of the endpoint a call comes from (KV approvals).
type ApprovalsFunc func(ctx context.Context, env tools.Env) (*execpolicy.Approvals, error)

// Confirmations keeps the owner confirmations of commands that need approval
// (execApprovalMode ask): Record notes a command that was refused for want of approval, and
// Consume reports (and uses up) an approval given since — "/approve" by the owner, or the
// owner's own answer in a later turn. pkg/approvals.BashConfirmations implements it on KV.
type Confirmations interface {
	Consume(ctx context.Context, env tools.Env, commands []string) (bool, error)
	Record(ctx context.Context, env tools.Env, commands []string, line string) error
}

type bashTool struct {
	exec      ExecChecker
	approvals ApprovalsFunc
	confirm   Confirmations
	files     *filepolicy.Policy
	timeout   time.Duration
	maxOut    int
	log       *slog.Logger
	run       func(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error)
	// hide are the file policy's private paths, masked inside the sandbox.
	hide []string
	// sandbox is the network, limits and user of every command.
	sandbox SandboxConfig
	// refuse, when set, is the answer to every call: this worker cannot isolate commands
	// and the operator did not opt out (see newBashTool).
	refuse string
	// unisolated: the operator's opt-out; commands run as plain child processes. Otherwise
	// every command requires isolation.
	unisolated bool
}

type bashArgs struct {
	Command        string `json:"command" jsonschema:"the shell command line to run in the workspace"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"timeout in seconds (capped by the operator's limit)"`
}

// needsOwnerText is what the model reads when a command needs approval: it must not retry
// blindly but ask the owner through ask_user.
func needsOwnerText(cmd string, v execpolicy.Verdict) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: the command was NOT run. It needs the owner's approval (%s).\n", execpolicy.OwnerApprovalSignal, v.Reason)
	if len(v.Pending) > 0 {
		fmt.Fprintf(&b, "Needs approval: %s\n", strings.Join(v.Pending, "; "))
	}
	fmt.Fprintf(&b, "Do not retry it now. Call ask_user to ask the owner whether to run `%s`, saying what it does and why. "+
		"Run it again only after the owner agreed: the owner's \"yes\" in this chat, or /approve (once) in a private chat "+
		"(for good: /approve rule <regex> or /approve always bash).", cmd)
	return b.String()
}

func (bt bashTool) tool() tools.Tool {
	return tools.MustNew("bash", "Run a shell command line in the workspace (bash). The operator's exec policy decides what may run; refused commands say why. Output is capped; long commands time out.",
		func(ctx context.Context, c tools.Call, a bashArgs) (tools.Result, error) {
			if bt.refuse != "" {
				bt.log.Error("bash call refused: no sandbox", "session", c.Env.SessionKey)
				r := tools.ErrorResult("%s", bt.refuse)
				r.Details = details(map[string]any{"decision": "unavailable"})
				return r, nil
			}
			cmd := strings.TrimSpace(a.Command)
			if cmd == "" {
				return tools.ErrorResult("command is required"), nil
			}
			var ap *execpolicy.Approvals
			if bt.approvals != nil {
				var err error
				if ap, err = bt.approvals(ctx, c.Env); err != nil {
					// Without the approvals the policy judges as if none were given: stricter, not looser.
					bt.log.Warn("bash: load approvals", "session", c.Env.SessionKey, "err", err)
					ap = nil
				}
			}
			v := bt.exec.Check(cmd, ap)
			det := map[string]any{"decision": v.Decision.String(), "reason": v.Reason, "commands": v.Commands}
			switch v.Decision {
			case execpolicy.Deny:
				r := tools.ErrorResult("Command refused by the exec policy: %s", v.Reason)
				r.Details = details(det)
				return r, nil
			case execpolicy.Ask:
				if bt.confirm != nil {
					ok, err := bt.confirm.Consume(ctx, c.Env, v.Pending)
					if err != nil {
						bt.log.Warn("bash: read confirmations", "session", c.Env.SessionKey, "err", err)
					}
					if ok {
						det["approvedOnce"] = true
						break // the owner approved exactly these commands: run them once
					}
				}
				det["pending"] = v.Pending
				if bt.confirm != nil {
					if err := bt.confirm.Record(ctx, c.Env, v.Pending, cmd); err != nil {
						bt.log.Warn("bash: record pending confirmation", "session", c.Env.SessionKey, "err", err)
					}
				}
				r := tools.ErrorResult("%s", needsOwnerText(cmd, v))
				r.NeedsOwner, r.Details = true, details(det)
				return r, nil
			case execpolicy.Allow:
			default:
				return tools.ErrorResult("Command refused: unknown policy decision %v", v.Decision), nil
			}
			dir := bt.files.Workspace()
			if c.Env.Workspace != "" {
				d, err := bt.files.Resolve(c.Env.Workspace, filepolicy.Write)
				if err != nil {
					return tools.ErrorResult("workspace %q refused: %v", c.Env.Workspace, err), nil
				}
				dir = d
			}
			timeout := bt.timeout
			if a.TimeoutSeconds > 0 && time.Duration(a.TimeoutSeconds)*time.Second < timeout {
				timeout = time.Duration(a.TimeoutSeconds) * time.Second
			}
			res, err := bt.run(ctx, sandbox.Spec{Command: cmd, Dir: dir, Timeout: timeout, OutputLimit: bt.maxOut,
				Hide: bt.hide, RequireIsolation: !bt.unisolated, NoIsolation: bt.unisolated,
				Network: bt.sandbox.Network, AllowNets: bt.sandbox.AllowNets, Limits: bt.sandbox.Limits, RunAs: bt.sandbox.RunAs})
			if err != nil {
				return tools.ErrorResult("bash could not start: %v", err), nil
			}
			det["exitCode"], det["timedOut"], det["truncated"], det["durationMs"] = res.ExitCode, res.TimedOut, res.Truncated, res.Duration.Milliseconds()
			var b strings.Builder
			b.WriteString(res.Stdout)
			if res.Stderr != "" {
				if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
					b.WriteByte('\n')
				}
				b.WriteString("[stderr]\n")
				b.WriteString(res.Stderr)
			}
			if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
				b.WriteByte('\n')
			}
			switch {
			case res.TimedOut:
				fmt.Fprintf(&b, "[timed out after %s; the process group was killed]", timeout)
			case res.Canceled:
				b.WriteString("[canceled]")
			default:
				fmt.Fprintf(&b, "[exit code %d]", res.ExitCode)
			}
			if res.Truncated {
				b.WriteString(" [output truncated]")
			}
			r := tools.Result{Content: tools.TextResult(b.String()).Content, Details: details(det)}
			r.IsError = res.ExitCode != 0 || res.TimedOut || res.Canceled
			return r, nil
		}, tools.WithKeywords("shell", "bash", "command", "run", "execute", "terminal", "uname", "命令", "执行", "终端", "运行"), tools.WithSource("builtin"))
}
