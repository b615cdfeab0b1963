// Package tools is agentbus's tool API: what a tool is (name, description, JSON Schema
// parameters, IM gating, execution), how a call reaches it (Call with the sender's Env) and what
// comes back (Result). It knows nothing of NATS: tool workers and the in-process executor both
// run the same Tool values.
//
// A tool is built with New (parameters inferred from a Go struct) or Raw (a JSON Schema given
// by hand). IM extensions gate who sees a tool: Platforms, Scopes and RequiredAnyRole (see
// Allowed). PreExecutable tools run before a turn and their output goes into the system prompt
// (RunPreExecutable). Idempotent says whether a call may be repeated after a crash between the
// side effect and the result record (DESIGN.md §5).
//
// Execute contract: a tool reports failures the model should see as a Result with IsError set,
// or as a returned error (Run turns it into such a Result). Run never panics: a panicking tool
// becomes an error result too.
package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/agentbus/agentbus/pkg/llm"
)

// Sender roles (seed "权限控制（SenderRole）"). Every sender has RoleUser; master is the bot
// owner and satisfies any role requirement.
const (
	RoleUser       = "user"
	RoleGroupAdmin = "group_admin"
	RoleGroupOwner = "group_owner"
	RoleTrusted    = "trusted"
	RoleMaster     = "master"
)

// Scopes of a scene (the third part of a session key).
const (
	ScopePrivate = "private"
	ScopeGroup   = "group"
	ScopeChannel = "channel"
)

// Env is where a call comes from: the platform, bot, scene and sender of the message that
// started the turn, plus the session and the workspace directory the tool may touch.
// It is plain data so a call can travel over the bus.
type Env struct {
	Platform    string   `json:"platform,omitempty"`
	BotID       string   `json:"botId,omitempty"`
	Scope       string   `json:"scope,omitempty"` // private | group | channel
	SceneID     string   `json:"sceneId,omitempty"`
	SenderID    string   `json:"senderId,omitempty"`
	SenderRoles []string `json:"senderRoles,omitempty"`
	SessionKey  string   `json:"sessionKey,omitempty"`
	Workspace   string   `json:"workspace,omitempty"`
	// ModelID is the model serving the turn (skills size their instructions by it).
	ModelID string `json:"modelId,omitempty"`
	// ModelSize and SkillChars are the caller's resolved harness for ModelID (size class and
	// ai.agent(.modelHarness).skillInstructionMaxChars); empty / 0 = infer from ModelID.
	ModelSize  string `json:"modelSize,omitempty"`
	SkillChars int    `json:"skillChars,omitempty"`
	// Turn is the turn (or task) the call belongs to.
	Turn string `json:"turn,omitempty"`
}

// HasAnyRole reports whether the sender holds one of roles. RoleUser is implied for everyone
// and RoleMaster satisfies every requirement. An empty roles list is always satisfied.
func (e Env) HasAnyRole(roles ...string) bool {
	if len(roles) == 0 {
		return true
	}
	if slices.Contains(e.SenderRoles, RoleMaster) {
		return true
	}
	for _, r := range roles {
		if r == RoleUser || slices.Contains(e.SenderRoles, r) {
			return true
		}
	}
	return false
}

// Call is one invocation of a tool.
type Call struct {
	ID   string         `json:"id"`
	Args map[string]any `json:"args"`
	Env  Env            `json:"env"`
	// Update, when set, receives partial results while a long tool runs (tool_execution_update).
	Update func(Result) `json:"-"`
}

// Result is what a tool returns. Content goes back to the model; Details is structured data for
// the pipeline and UIs (never shown to the model). IsError marks a failure the model should
// see. NeedsOwner is the owner-approval signal: the action needs the owner's consent, and the
// agent should ask through ask_user (seed ZHIN_NEEDS_OWNER).
type Result struct {
	Content    []llm.Content   `json:"content"`
	Details    json.RawMessage `json:"details,omitempty"`
	IsError    bool            `json:"isError,omitempty"`
	NeedsOwner bool            `json:"needsOwner,omitempty"`
}

// Text returns the result's text blocks joined by newlines.
func (r Result) Text() string {
	var b strings.Builder
	for _, c := range r.Content {
		if c.Type == llm.ContentText {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// TextResult is a successful result with one text block.
func TextResult(text string) Result { return Result{Content: []llm.Content{llm.Text(text)}} }

// ErrorResult is a failed result whose text is the formatted message.
func ErrorResult(format string, a ...any) Result {
	return Result{Content: []llm.Content{llm.Text(fmt.Sprintf(format, a...))}, IsError: true}
}

// AskDetails is the Details payload of an ask_user result: the pipeline ends the turn and sends
// Ask to the user as a question; the user's answer arrives as the next message.
type AskDetails struct {
	Ask     string   `json:"ask"`
	Options []string `json:"options,omitempty"`
}

// AskResult builds the ask_user contract result.
func AskResult(question string, options ...string) Result {
	d, _ := json.Marshal(AskDetails{Ask: question, Options: options})
	return Result{Content: []llm.Content{llm.Text("Question sent to the user: " + question +
		"\nWait for the user's answer; it arrives as their next message.")}, Details: d}
}

// AskQuestion returns the question of an ask_user result, if r is one.
func AskQuestion(r Result) (AskDetails, bool) {
	if len(r.Details) == 0 {
		return AskDetails{}, false
	}
	var d AskDetails
	if err := json.Unmarshal(r.Details, &d); err != nil || d.Ask == "" {
		return AskDetails{}, false
	}
	return d, true
}

// ExecuteFunc runs a call.
type ExecuteFunc func(ctx context.Context, call Call) (Result, error)

// Tool is one tool. The zero value is not usable; build tools with New or Raw, or fill the
// struct and check it with Validate.
type Tool struct {
	Name        string
	Description string
	// Parameters is a JSON Schema of type object.
	Parameters json.RawMessage
	// Platforms limits the tool to these platforms (empty: all).
	Platforms []string
	// Scopes limits the tool to these scopes: private, group, channel (empty: all).
	Scopes []string
	// RequiredAnyRole: the sender needs one of these roles (empty: everyone).
	RequiredAnyRole []string
	// PreExecutable tools run before a turn without arguments; their output goes into the
	// system prompt.
	PreExecutable bool
	// Idempotent tools may be re-executed after a crash; others are not retried blindly.
	Idempotent bool
	// Keywords help skill/tool selection rank the tool against the user's message.
	Keywords []string
	// Source says where the tool came from: "builtin", "file:<path>", "mcp:<server>", ...
	Source  string
	Execute ExecuteFunc
}

// Option adjusts a tool built by New or Raw.
type Option func(*Tool)

// WithPlatforms limits the tool to platforms.
func WithPlatforms(p ...string) Option { return func(t *Tool) { t.Platforms = p } }

// WithScopes limits the tool to scopes.
func WithScopes(s ...string) Option { return func(t *Tool) { t.Scopes = s } }

// WithRoles requires one of roles.
func WithRoles(r ...string) Option { return func(t *Tool) { t.RequiredAnyRole = r } }

// WithKeywords sets selection keywords.
func WithKeywords(k ...string) Option { return func(t *Tool) { t.Keywords = k } }

// WithSource records the tool's origin.
func WithSource(s string) Option { return func(t *Tool) { t.Source = s } }

// PreExecutable marks the tool to run before every turn.
func PreExecutable() Option { return func(t *Tool) { t.PreExecutable = true } }

// Idempotent marks the tool safe to re-run.
func Idempotent() Option { return func(t *Tool) { t.Idempotent = true } }

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// ValidName reports whether name is accepted by every provider: [a-zA-Z0-9_-], 1 to 64 chars.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// Validate checks that t can be offered to a model.
func (t Tool) Validate() error {
	if !ValidName(t.Name) {
		return fmt.Errorf("%w: name %q: want 1-64 characters of [a-zA-Z0-9_-]", ErrInvalidTool, t.Name)
	}
	if t.Execute == nil {
		return fmt.Errorf("%w: %s: no Execute", ErrInvalidTool, t.Name)
	}
	if err := checkObjectSchema(t.Parameters); err != nil {
		return fmt.Errorf("%w: %s: parameters: %v", ErrInvalidTool, t.Name, err)
	}
	return nil
}

// emptyObject is the schema of a tool without parameters.
var emptyObject = json.RawMessage(`{"type":"object","properties":{}}`)

func checkObjectSchema(s json.RawMessage) error {
	if len(s) == 0 {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(s, &m); err != nil {
		return fmt.Errorf("not a JSON object: %v", err)
	}
	if ty, ok := m["type"]; ok && ty != "object" {
		return fmt.Errorf("type is %v, want object", ty)
	}
	return nil
}

// LLM returns what the model is told about the tool.
func (t Tool) LLM() llm.Tool {
	p := t.Parameters
	if len(p) == 0 {
		p = emptyObject
	}
	return llm.Tool{Name: t.Name, Description: t.Description, Parameters: p}
}

// LLMTools converts a list for an llm.Context.
func LLMTools(ts []Tool) []llm.Tool {
	out := make([]llm.Tool, len(ts))
	for i := range ts {
		out[i] = ts[i].LLM()
	}
	return out
}

// CheckArgs validates (and coerces) args against the tool's schema with llm.ValidateArguments.
// The agent loop does this before execution; a caller that runs tools without the loop (a
// tool worker taking calls from the bus) must call it first.
func (t Tool) CheckArgs(args map[string]any) (map[string]any, error) {
	lt := t.LLM()
	return llm.ValidateArguments(&lt, args)
}

// Run executes the call and always returns a Result: an error from Execute or a panic inside
// it becomes an IsError result naming the tool, and a nil Args map is replaced by an empty one.
func (t Tool) Run(ctx context.Context, call Call) (res Result) {
	if call.Args == nil {
		call.Args = map[string]any{}
	}
	defer func() {
		if p := recover(); p != nil {
			res = ErrorResult("tool %s failed: internal error: %v", t.Name, p)
		}
	}()
	if t.Execute == nil {
		return ErrorResult("tool %s has no implementation", t.Name)
	}
	r, err := t.Execute(ctx, call)
	if err != nil {
		if ctx.Err() != nil && len(r.Content) == 0 {
			return ErrorResult("tool %s: %v (%v)", t.Name, err, context.Cause(ctx))
		}
		if len(r.Content) == 0 {
			r.Content = []llm.Content{llm.Text(fmt.Sprintf("tool %s: %v", t.Name, err))}
		}
		r.IsError = true
	}
	if r.Content == nil {
		r.Content = []llm.Content{}
	}
	return r
}

// Raw builds a tool from a hand-written JSON Schema (type object; empty means no parameters).
func Raw(name, desc string, schema json.RawMessage, fn ExecuteFunc, opts ...Option) (Tool, error) {
	t := Tool{Name: name, Description: desc, Parameters: schema, Execute: fn}
	if len(t.Parameters) == 0 {
		t.Parameters = emptyObject
	}
	for _, o := range opts {
		o(&t)
	}
	if err := t.Validate(); err != nil {
		return Tool{}, err
	}
	return t, nil
}

// MustRaw is Raw for definitions known at compile time; it panics on a bad definition.
func MustRaw(name, desc string, schema json.RawMessage, fn ExecuteFunc, opts ...Option) Tool {
	t, err := Raw(name, desc, schema, fn, opts...)
	if err != nil {
		panic(err)
	}
	return t
}

// New builds a tool whose parameters are inferred from the Go struct T (json tags name the
// properties, fields without omitempty are required, `jsonschema:"..."` tags describe them).
// Before fn runs, the call's arguments are decoded into a T; a decoding failure becomes an
// error result telling the model what was wrong.
func New[T any](name, desc string, fn func(ctx context.Context, call Call, args T) (Result, error), opts ...Option) (Tool, error) {
	schema, err := llm.SchemaFor[T]()
	if err != nil {
		return Tool{}, fmt.Errorf("%w: %s: infer parameters: %v", ErrInvalidTool, name, err)
	}
	exec := func(ctx context.Context, call Call) (Result, error) {
		var args T
		if err := DecodeArgs(call.Args, &args); err != nil {
			return ErrorResult("tool %s: %v", name, err), nil
		}
		return fn(ctx, call, args)
	}
	return Raw(name, desc, schema, exec, opts...)
}

// MustNew is New for definitions known at compile time; it panics on a bad definition.
func MustNew[T any](name, desc string, fn func(ctx context.Context, call Call, args T) (Result, error), opts ...Option) Tool {
	t, err := New(name, desc, fn, opts...)
	if err != nil {
		panic(err)
	}
	return t
}

// DecodeArgs decodes a call's arguments into v (a pointer to a struct) through JSON.
func DecodeArgs(args map[string]any, v any) error {
	if args == nil {
		args = map[string]any{}
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadArguments, err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadArguments, err)
	}
	return nil
}
