package tools

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func nop(context.Context, Call) (Result, error) { return TextResult("ok"), nil }

func TestAllowedRoleGating(t *testing.T) {
	mk := func(name string, opts ...Option) Tool { return MustRaw(name, name, nil, nop, opts...) }
	reg, err := NewRegistry(
		mk("open"),
		mk("admin_only", WithRoles(RoleGroupAdmin, RoleGroupOwner)),
		mk("master_only", WithRoles(RoleMaster)),
		mk("trusted_only", WithRoles(RoleTrusted)),
		mk("user_role", WithRoles(RoleUser)),
		mk("qq_groups", WithPlatforms("icqq"), WithScopes(ScopeGroup)),
		mk("private_only", WithScopes(ScopePrivate)),
	)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		env  Env
		want string
	}{
		{"plain user in group", Env{Platform: "icqq", Scope: ScopeGroup, SenderRoles: []string{RoleUser}},
			"open qq_groups user_role"},
		{"no roles at all", Env{Platform: "web", Scope: ScopePrivate},
			"open private_only user_role"},
		{"group admin", Env{Platform: "icqq", Scope: ScopeGroup, SenderRoles: []string{RoleUser, RoleGroupAdmin}},
			"admin_only open qq_groups user_role"},
		{"group owner elsewhere", Env{Platform: "discord", Scope: ScopeChannel, SenderRoles: []string{RoleGroupOwner}},
			"admin_only open user_role"},
		{"trusted", Env{Platform: "web", Scope: ScopeGroup, SenderRoles: []string{RoleTrusted}},
			"open trusted_only user_role"},
		{"master holds every role", Env{Platform: "icqq", Scope: ScopePrivate, SenderRoles: []string{RoleMaster}},
			"admin_only master_only open private_only trusted_only user_role"},
		{"unknown scope fails closed", Env{Platform: "icqq", SenderRoles: []string{RoleUser}},
			"open user_role"},
		{"forged role string is just a string", Env{Scope: ScopeGroup, SenderRoles: []string{"Master", "admin"}},
			"open user_role"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var names []string
			for _, tl := range reg.Allowed(c.env) {
				names = append(names, tl.Name)
			}
			if got := strings.Join(names, " "); got != c.want {
				t.Errorf("Allowed = %q, want %q", got, c.want)
			}
		})
	}
}

func TestRegistry(t *testing.T) {
	reg, _ := NewRegistry()
	a := MustRaw("a", "a", nil, nop)
	if err := reg.Add(a); err != nil {
		t.Fatal(err)
	}
	if err := reg.Add(a); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("second Add: %v, want ErrDuplicate", err)
	}
	if err := reg.Add(Tool{Name: "bad name!", Execute: nop}); !errors.Is(err, ErrInvalidTool) {
		t.Fatalf("bad name: %v", err)
	}
	if err := reg.Add(Tool{Name: "x", Execute: nop, Parameters: json.RawMessage(`{"type":"string"}`)}); !errors.Is(err, ErrInvalidTool) {
		t.Fatalf("non-object schema: %v", err)
	}
	if !reg.Remove("a") || reg.Remove("a") {
		t.Fatal("Remove")
	}
	if _, ok := reg.Get("a"); ok {
		t.Fatal("removed tool still there")
	}
}

type greetArgs struct {
	Name  string `json:"name" jsonschema:"who to greet"`
	Times int    `json:"times,omitempty"`
}

func TestNewInfersSchemaAndDecodes(t *testing.T) {
	tl, err := New("greet", "Greets", func(_ context.Context, _ Call, a greetArgs) (Result, error) {
		return TextResult(strings.Repeat("hi "+a.Name+" ", max(a.Times, 1))), nil
	}, Idempotent())
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Type       string                    `json:"type"`
		Properties map[string]map[string]any `json:"properties"`
		Required   []string                  `json:"required"`
	}
	if err := json.Unmarshal(tl.LLM().Parameters, &s); err != nil {
		t.Fatal(err)
	}
	if s.Type != "object" || s.Properties["name"]["type"] != "string" || s.Properties["name"]["description"] != "who to greet" ||
		s.Properties["times"]["type"] != "integer" || len(s.Required) != 1 || s.Required[0] != "name" {
		t.Fatalf("schema = %s", tl.Parameters)
	}
	r := tl.Run(context.Background(), Call{Args: map[string]any{"name": "bo", "times": 2}})
	if r.IsError || r.Text() != "hi bo hi bo " {
		t.Fatalf("result %+v", r)
	}
	if args, err := tl.CheckArgs(map[string]any{"name": "bo", "times": "3"}); err != nil || args["times"] != float64(3) && args["times"] != 3 && args["times"] != int64(3) {
		t.Fatalf("CheckArgs coercion: %v %#v", err, args)
	}
	if _, err := tl.CheckArgs(map[string]any{"times": 1}); err == nil {
		t.Fatal("missing required name accepted")
	}
	r = tl.Run(context.Background(), Call{Args: map[string]any{"name": 5}})
	if !r.IsError || !strings.Contains(r.Text(), "greet") {
		t.Fatalf("bad args should be an error result: %+v", r)
	}
}

func TestRunNeverPanics(t *testing.T) {
	tl := MustRaw("boom", "", nil, func(context.Context, Call) (Result, error) { panic("kaboom") })
	r := tl.Run(context.Background(), Call{})
	if !r.IsError || !strings.Contains(r.Text(), "kaboom") {
		t.Fatalf("%+v", r)
	}
	tl = MustRaw("fail", "", nil, func(context.Context, Call) (Result, error) { return Result{}, errors.New("disk full") })
	if r := tl.Run(context.Background(), Call{}); !r.IsError || !strings.Contains(r.Text(), "disk full") {
		t.Fatalf("%+v", r)
	}
}

func TestAskContract(t *testing.T) {
	r := AskResult("May I run npm install?", "yes", "no")
	d, ok := AskQuestion(r)
	if !ok || d.Ask != "May I run npm install?" || len(d.Options) != 2 {
		t.Fatalf("%+v %v", d, ok)
	}
	if _, ok := AskQuestion(TextResult("x")); ok {
		t.Fatal("plain result is not a question")
	}
}

func TestRunPreExecutable(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	ts := []Tool{
		MustRaw("status", "", nil, func(_ context.Context, c Call) (Result, error) {
			return TextResult("online as " + c.Env.BotID), nil
		}, PreExecutable()),
		MustRaw("broken", "", nil, func(context.Context, Call) (Result, error) {
			return Result{}, errors.New("no backend")
		}, PreExecutable()),
		MustRaw("stuck", "", nil, func(context.Context, Call) (Result, error) {
			<-block // ignores ctx on purpose
			return TextResult("late"), nil
		}, PreExecutable()),
		MustRaw("secret", "", nil, nop, PreExecutable(), WithRoles(RoleMaster)),
		MustRaw("normal", "", nil, nop),
	}
	got := RunPreExecutable(context.Background(), ts, Env{BotID: "b1"}, 50*time.Millisecond)
	for _, want := range []string{"### status\nonline as b1", "### broken (failed)", "no backend", "### stuck (timed out)"} {
		if !strings.Contains(got, want) {
			t.Errorf("section lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "secret") || strings.Contains(got, "normal") {
		t.Errorf("gated or non-pre tool ran:\n%s", got)
	}
	if RunPreExecutable(context.Background(), ts[4:], Env{}, 0) != "" {
		t.Error("no pre tools should give an empty section")
	}
}
