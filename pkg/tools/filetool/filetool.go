// Package filetool loads tools and agent presets defined in Markdown files, so operators can
// add them without writing Go:
//
//   - tools/<x>.tool.md: YAML frontmatter (name, description, parameters, handler, platforms,
//     scopes, requiredAnyRole, idempotent, preExecutable, keywords/tags, timeoutMs) and a body that
//     is a template with {{param}} placeholders. Without a handler the rendered body is the
//     tool's result; with one, the handler executable runs with the arguments as a JSON object
//     on stdin and its stdout is the result (through pkg/sandbox, with a timeout).
//   - agents/<x>.agent.md: frontmatter (name, description, tools, model, maxIterations) and a
//     body that is the preset's system prompt.
//
// Parameters use a documented subset of JSON Schema (see SupportedKeys and docs/tools.md).
// Anything outside it — an unknown type, oneOf, $ref, pattern, format, an unknown frontmatter
// key, a placeholder that names no parameter, a missing handler — fails loading with an error
// naming the file and the field (seed Grill #18: hard fail at start-up, never a silently
// different tool).
package filetool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentbus/agentbus/pkg/sandbox"
	"github.com/agentbus/agentbus/pkg/tools"
	"github.com/agentbus/agentbus/pkg/tools/frontmatter"
)

// ErrInvalid is matched by every definition error (concretely *FieldError).
var ErrInvalid = errors.New("invalid tool or agent definition")

// ToolSuffix and AgentSuffix are the file name endings the loaders look for.
const (
	ToolSuffix  = ".tool.md"
	AgentSuffix = ".agent.md"
)

// RunFunc runs a handler command; sandbox.Run by default.
type RunFunc func(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error)

// Options configure tool loading.
type Options struct {
	// Workspace is the working directory of handlers (required when a tool has a handler).
	Workspace string
	// Timeout bounds one handler run unless the tool says timeoutMs (default 30s).
	Timeout time.Duration
	// OutputLimit caps the handler's stdout and stderr (default sandbox.DefaultOutputLimit).
	OutputLimit int
	// Run defaults to sandbox.Run.
	Run RunFunc
}

type toolFront struct {
	Name            string    `yaml:"name"`
	Description     string    `yaml:"description"`
	Parameters      yaml.Node `yaml:"parameters"`
	Handler         string    `yaml:"handler"`
	Platforms       []string  `yaml:"platforms"`
	Scopes          []string  `yaml:"scopes"`
	RequiredAnyRole []string  `yaml:"requiredAnyRole"`
	Idempotent      bool      `yaml:"idempotent"`
	PreExecutable   bool      `yaml:"preExecutable"`
	Keywords        []string  `yaml:"keywords"`
	Tags            []string  `yaml:"tags"` // more selection keywords (the skills' spelling)
	TimeoutMs       int64     `yaml:"timeoutMs"`
}

var placeholderRE = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_-]*)\s*\}\}`)

var knownRoles = []string{tools.RoleUser, tools.RoleGroupAdmin, tools.RoleGroupOwner, tools.RoleTrusted, tools.RoleMaster}
var knownScopes = []string{tools.ScopePrivate, tools.ScopeGroup, tools.ScopeChannel}

// fieldErr wraps frontmatter decode errors (which carry yaml line numbers) as FieldErrors.
func fieldErr(file, field string, err error) error {
	return &FieldError{File: file, Field: field, Msg: err.Error()}
}

// ParseTool converts one *.tool.md. file names it in errors and anchors a relative handler.
func ParseTool(file string, data []byte, o Options) (tools.Tool, error) {
	fmRaw, body, err := frontmatter.Split(data)
	if err != nil {
		return tools.Tool{}, fieldErr(file, "", err)
	}
	var fm toolFront
	if err := frontmatter.Decode(fmRaw, &fm); err != nil {
		return tools.Tool{}, fieldErr(file, "", err)
	}
	c := converter{file: file}
	switch {
	case fm.Name == "":
		return tools.Tool{}, &FieldError{File: file, Field: "name", Msg: "is required"}
	case !tools.ValidName(fm.Name):
		return tools.Tool{}, &FieldError{File: file, Field: "name", Msg: fmt.Sprintf("%q: want 1-64 characters of [a-zA-Z0-9_-]", fm.Name)}
	case strings.TrimSpace(fm.Description) == "":
		return tools.Tool{}, &FieldError{File: file, Field: "description", Msg: "is required"}
	case fm.TimeoutMs < 0:
		return tools.Tool{}, &FieldError{File: file, Field: "timeoutMs", Msg: "must not be negative"}
	}
	for i, r := range fm.RequiredAnyRole {
		if !contains(knownRoles, r) {
			return tools.Tool{}, &FieldError{File: file, Field: fmt.Sprintf("requiredAnyRole[%d]", i), Msg: fmt.Sprintf("unknown role %q (known: %s)", r, strings.Join(knownRoles, ", "))}
		}
	}
	for i, s := range fm.Scopes {
		if !contains(knownScopes, s) {
			return tools.Tool{}, &FieldError{File: file, Field: fmt.Sprintf("scopes[%d]", i), Msg: fmt.Sprintf("unknown scope %q (known: %s)", s, strings.Join(knownScopes, ", "))}
		}
	}
	var params *yaml.Node
	if fm.Parameters.Kind != 0 {
		params = &fm.Parameters
	}
	schema, names, err := c.parameters(params)
	if err != nil {
		return tools.Tool{}, err
	}
	var defaults map[string]any
	var sch struct {
		Properties map[string]struct {
			Default any `json:"default"`
		} `json:"properties"`
	}
	if json.Unmarshal(schema, &sch) == nil {
		for k, p := range sch.Properties {
			if p.Default != nil {
				if defaults == nil {
					defaults = map[string]any{}
				}
				defaults[k] = p.Default
			}
		}
	}
	body = strings.TrimSpace(body)
	for _, m := range placeholderRE.FindAllStringSubmatch(body, -1) {
		if !contains(names, m[1]) {
			return tools.Tool{}, &FieldError{File: file, Field: "body", Msg: fmt.Sprintf("placeholder {{%s}} names no parameter (declared: %s)", m[1], strings.Join(names, ", "))}
		}
	}
	t := tools.Tool{Name: fm.Name, Description: strings.TrimSpace(fm.Description), Parameters: schema,
		Platforms: fm.Platforms, Scopes: fm.Scopes, RequiredAnyRole: fm.RequiredAnyRole, Idempotent: fm.Idempotent,
		PreExecutable: fm.PreExecutable, Keywords: append(slices.Clone(fm.Keywords), fm.Tags...), Source: "file:" + file}
	if fm.Handler == "" {
		if body == "" {
			return tools.Tool{}, &FieldError{File: file, Field: "body", Msg: "is empty and there is no handler: the tool would return nothing"}
		}
		t.Execute = func(ctx context.Context, call tools.Call) (tools.Result, error) {
			return tools.TextResult(Render(body, call.Args, defaults)), nil
		}
		return t, nil
	}
	h := fm.Handler
	if !filepath.IsAbs(h) {
		h = filepath.Join(filepath.Dir(file), h)
	}
	h, _ = filepath.Abs(h)
	st, err := os.Stat(h)
	switch {
	case err != nil:
		return tools.Tool{}, &FieldError{File: file, Field: "handler", Msg: fmt.Sprintf("%s: %v", fm.Handler, err)}
	case !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0:
		return tools.Tool{}, &FieldError{File: file, Field: "handler", Msg: fmt.Sprintf("%s is not an executable file (chmod +x)", fm.Handler)}
	case o.Workspace == "":
		return tools.Tool{}, &FieldError{File: file, Field: "handler", Msg: "handlers need a workspace directory to run in (ai.agent.workspace)"}
	}
	timeout := o.Timeout
	if fm.TimeoutMs > 0 {
		timeout = time.Duration(fm.TimeoutMs) * time.Millisecond
	}
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	run := o.Run
	if run == nil {
		run = sandbox.Run
	}
	t.Execute = handlerExec(t.Name, h, o.Workspace, timeout, o.OutputLimit, defaults, run)
	return t, nil
}

// handlerExec runs the handler with the arguments (defaults filled in) as JSON on stdin.
// stdout is the result; a non-zero exit is an error result carrying stderr.
func handlerExec(name, handler, dir string, timeout time.Duration, limit int, defaults map[string]any, run RunFunc) tools.ExecuteFunc {
	return func(ctx context.Context, call tools.Call) (tools.Result, error) {
		args := map[string]any{}
		for k, v := range defaults {
			args[k] = v
		}
		for k, v := range call.Args {
			args[k] = v
		}
		in, err := json.Marshal(args)
		if err != nil {
			return tools.ErrorResult("tool %s: encode arguments: %v", name, err), nil
		}
		res, err := run(ctx, sandbox.Spec{
			Command: shellQuote(handler), Dir: dir, Timeout: timeout, OutputLimit: limit, Stdin: in,
			// Inside the bubblewrap sandbox only the workspace exists besides the system
			// directories: the handler's own directory (the operator's) is bound read-only.
			ReadOnly: []string{filepath.Dir(handler)},
			// The operator's handler keeps the host's network, as before the bash tool lost it:
			// handlers call the services they were written for.
			Network: sandbox.NetworkHost,
			// sandbox drops AGENTBUS_* and secret-looking names, hence the TOOL_ prefix.
			Env: []string{"TOOL_NAME=" + name, "TOOL_CALL_ID=" + call.ID, "TOOL_PLATFORM=" + call.Env.Platform,
				"TOOL_SCOPE=" + call.Env.Scope, "TOOL_SCENE=" + call.Env.SceneID, "TOOL_SENDER=" + call.Env.SenderID,
				"TOOL_SENDER_ROLES=" + strings.Join(call.Env.SenderRoles, ",")},
		})
		if err != nil {
			return tools.ErrorResult("tool %s: handler could not start: %v", name, err), nil
		}
		out := strings.TrimRight(res.Stdout, "\n")
		switch {
		case res.TimedOut:
			return tools.ErrorResult("tool %s: handler timed out after %s\n%s", name, timeout, out), nil
		case res.Canceled:
			return tools.ErrorResult("tool %s: canceled", name), nil
		case res.ExitCode != 0:
			return tools.ErrorResult("tool %s: handler exited with status %d\n%s", name, res.ExitCode,
				strings.TrimSpace(out+"\n"+res.Stderr)), nil
		}
		return tools.TextResult(out), nil
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Render substitutes {{param}} placeholders with the call's arguments (or their defaults; an
// absent optional parameter renders as ""). Strings are inserted as they are, other values
// as JSON.
func Render(body string, args, defaults map[string]any) string {
	return placeholderRE.ReplaceAllStringFunc(body, func(m string) string {
		name := placeholderRE.FindStringSubmatch(m)[1]
		v, ok := args[name]
		if !ok {
			v, ok = defaults[name]
		}
		if !ok || v == nil {
			return ""
		}
		if s, isStr := v.(string); isStr {
			return s
		}
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Sprint(v)
		}
		return string(b)
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// findFiles lists files under dir (recursively) ending in suffix, sorted. A missing dir holds
// nothing.
func findFiles(dir, suffix string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == dir {
				return fs.SkipAll
			}
			return err
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), suffix) {
			out = append(out, p)
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// LoadTools parses every *.tool.md under dir. Any bad file fails the whole load, and the
// error lists every problem, each naming its file and field; duplicate names are errors too.
func LoadTools(dir string, o Options) ([]tools.Tool, error) {
	files, err := findFiles(dir, ToolSuffix)
	if err != nil {
		return nil, fmt.Errorf("load tools from %s: %w", dir, err)
	}
	var out []tools.Tool
	var errs []error
	seen := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f, err))
			continue
		}
		t, err := ParseTool(f, data, o)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, dup := seen[t.Name]; dup {
			errs = append(errs, &FieldError{File: f, Field: "name", Msg: fmt.Sprintf("tool %q is also defined in %s", t.Name, prev)})
			continue
		}
		seen[t.Name] = f
		out = append(out, t)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// AgentPreset is one *.agent.md: a specialist the main agent can delegate to.
type AgentPreset struct {
	Name          string   `json:"name"`
	Description   string   `json:"description"`
	Tools         []string `json:"tools,omitempty"`
	Model         string   `json:"model,omitempty"`
	Provider      string   `json:"provider,omitempty"`
	MaxIterations int      `json:"maxIterations,omitempty"`
	SystemPrompt  string   `json:"systemPrompt"`
	File          string   `json:"file"`
}

type agentFront struct {
	Name          string   `yaml:"name"`
	Description   string   `yaml:"description"`
	Tools         []string `yaml:"tools"`
	Model         string   `yaml:"model"`
	Provider      string   `yaml:"provider"`
	MaxIterations int      `yaml:"maxIterations"`
}

// ParseAgent converts one *.agent.md.
func ParseAgent(file string, data []byte) (AgentPreset, error) {
	fmRaw, body, err := frontmatter.Split(data)
	if err != nil {
		return AgentPreset{}, fieldErr(file, "", err)
	}
	var fm agentFront
	if err := frontmatter.Decode(fmRaw, &fm); err != nil {
		return AgentPreset{}, fieldErr(file, "", err)
	}
	switch {
	case fm.Name == "":
		return AgentPreset{}, &FieldError{File: file, Field: "name", Msg: "is required"}
	case !tools.ValidName(fm.Name):
		return AgentPreset{}, &FieldError{File: file, Field: "name", Msg: fmt.Sprintf("%q: want 1-64 characters of [a-zA-Z0-9_-]", fm.Name)}
	case strings.TrimSpace(fm.Description) == "":
		return AgentPreset{}, &FieldError{File: file, Field: "description", Msg: "is required"}
	case fm.MaxIterations < 0:
		return AgentPreset{}, &FieldError{File: file, Field: "maxIterations", Msg: "must not be negative"}
	case strings.TrimSpace(body) == "":
		return AgentPreset{}, &FieldError{File: file, Field: "body", Msg: "is empty; the body is the preset's system prompt"}
	}
	for i, t := range fm.Tools {
		if !tools.ValidName(t) {
			return AgentPreset{}, &FieldError{File: file, Field: fmt.Sprintf("tools[%d]", i), Msg: fmt.Sprintf("%q is not a valid tool name", t)}
		}
	}
	return AgentPreset{Name: fm.Name, Description: strings.TrimSpace(fm.Description), Tools: fm.Tools, Model: fm.Model,
		Provider: fm.Provider, MaxIterations: fm.MaxIterations, SystemPrompt: strings.TrimSpace(body), File: file}, nil
}

// CheckTools reports preset tools that known does not offer (call it once the registry is
// built; an unknown tool is a start-up error, like everything else here).
func (p AgentPreset) CheckTools(known func(name string) bool) error {
	var missing []string
	for _, t := range p.Tools {
		if !known(t) {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return &FieldError{File: p.File, Field: "tools", Msg: fmt.Sprintf("unknown tools: %s", strings.Join(missing, ", "))}
	}
	return nil
}

// LoadAgents parses every *.agent.md under dir, failing on any bad file or duplicate name.
func LoadAgents(dir string) ([]AgentPreset, error) {
	files, err := findFiles(dir, AgentSuffix)
	if err != nil {
		return nil, fmt.Errorf("load agents from %s: %w", dir, err)
	}
	var out []AgentPreset
	var errs []error
	seen := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f, err))
			continue
		}
		a, err := ParseAgent(f, bytes.TrimSpace(data))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, dup := seen[a.Name]; dup {
			errs = append(errs, &FieldError{File: f, Field: "name", Msg: fmt.Sprintf("agent %q is also defined in %s", a.Name, prev)})
			continue
		}
		seen[a.Name] = f
		out = append(out, a)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}
