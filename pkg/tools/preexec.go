package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// maxPreExecChars caps one pre-executed tool's text in the prompt, so a chatty tool cannot
// crowd out the conversation.
const maxPreExecChars = 4000

// RunPreExecutable runs the PreExecutable tools of ts that env may use, in parallel and without
// arguments, each bounded by timeout (0: no extra bound beyond ctx), and renders their outputs
// as a system-prompt section. Failures and timeouts are reported in the section, never
// returned: a broken status tool must not stop a turn. It returns "" when no tool ran.
func RunPreExecutable(ctx context.Context, ts []Tool, env Env, timeout time.Duration) string {
	var pre []Tool
	for i := range ts {
		if ts[i].PreExecutable && ts[i].AllowedFor(env) {
			pre = append(pre, ts[i])
		}
	}
	if len(pre) == 0 {
		return ""
	}
	out := make([]string, len(pre))
	var wg sync.WaitGroup
	for i := range pre {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			t := &pre[i]
			cctx, cancel := ctx, context.CancelFunc(func() {})
			if timeout > 0 {
				cctx, cancel = context.WithTimeoutCause(ctx, timeout,
					fmt.Errorf("pre-executed tool %s timed out after %s", t.Name, timeout))
			}
			defer cancel()
			done := make(chan Result, 1)
			go func() { done <- t.Run(cctx, Call{ID: "pre_" + t.Name, Env: env}) }()
			var r Result
			select {
			case r = <-done:
			case <-cctx.Done():
				// The tool ignores its context; report the timeout and leave it behind.
				r = ErrorResult("%v", context.Cause(cctx))
			}
			text := r.Text()
			if len(text) > maxPreExecChars {
				text = text[:maxPreExecChars] + "\n…(truncated)"
			}
			status := ""
			if r.IsError {
				status = " (failed)"
				if errors.Is(cctx.Err(), context.DeadlineExceeded) {
					status = " (timed out)"
				}
			}
			out[i] = fmt.Sprintf("### %s%s\n%s", t.Name, status, strings.TrimSpace(text))
		}(i)
	}
	wg.Wait()
	return "## Pre-executed tool results\n\n" + strings.Join(out, "\n\n")
}
