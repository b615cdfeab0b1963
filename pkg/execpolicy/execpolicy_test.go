package execpolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/pkg/config"
)

func mustNew(t testing.TB, o Options) *Policy {
	t.Helper()
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNewErrors(t *testing.T) {
	bad := []Options{
		{Mode: "yolo"},
		{Mode: ModeAllowlist, Preset: "everything"},
		{Mode: ModeAllowlist, Approval: "maybe"},
		{Mode: ModeAllowlist, Allow: []string{"sudo"}},
		{Mode: ModeAllowlist, Allow: []string{"/usr/bin/ls"}},
		{Mode: ModeAllowlist, Allow: []string{"ls -la"}},
		{Mode: ModeAllowlist, Sensitive: map[string][]string{"icqq": {"("}}},
	}
	for _, o := range bad {
		if _, err := New(o); !errors.Is(err, ErrBadOption) {
			t.Errorf("New(%+v) = %v, want ErrBadOption", o, err)
		}
	}
	p := mustNew(t, Options{})
	if p.Mode() != ModeDeny || p.ApprovalMode() != ApprovalDeny {
		t.Fatalf("defaults: %s %s", p.Mode(), p.ApprovalMode())
	}
}

func TestFromConfig(t *testing.T) {
	p, err := FromConfig(config.Agent{ExecSecurity: "allowlist", ExecPreset: "network", ExecAllowlist: []string{"docker"}, ExecApprovalMode: "ask"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Allowlist(); !contains(got, "docker") || !contains(got, "curl") || !contains(got, "ls") || contains(got, "npm") {
		t.Fatalf("allowlist %v", got)
	}
	if v := p.Check("npm install", nil); v.Decision != Ask {
		t.Fatalf("npm install: %+v", v)
	}
	// A configured table replaces the default one.
	p, err = FromConfig(config.Agent{ExecSecurity: "allowlist", SensitiveSubcommands: map[string][]string{"kubectl": {`^kubectl\s+delete\b`}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := p.Check("kubectl get pods", nil); v.Decision != Allow {
		t.Fatalf("kubectl get: %+v", v)
	}
	if v := p.Check("kubectl delete pod x", nil); v.Decision != Deny {
		t.Fatalf("kubectl delete: %+v", v)
	}
	if v := p.Check("icqq friend like 1", nil); v.Decision != Deny {
		t.Fatalf("icqq without table: %+v", v)
	}
}

func TestVerdictDetails(t *testing.T) {
	p := mustNew(t, Options{Mode: ModeAllowlist, Preset: "readonly", Approval: ApprovalAsk})
	v := p.Check(`FOO=1 timeout 5 nice -n 3 icqq group kick 123 "a b" && ls`, nil)
	if v.Decision != Ask {
		t.Fatalf("%+v", v)
	}
	wantCmds := []string{"icqq group kick 123 'a b'", "ls"}
	if !reflect.DeepEqual(v.Commands, wantCmds) {
		t.Fatalf("commands %q, want %q", v.Commands, wantCmds)
	}
	if !reflect.DeepEqual(v.Pending, []string{"icqq group kick 123 'a b'"}) {
		t.Fatalf("pending %q", v.Pending)
	}
	if !strings.Contains(v.Reason, "sensitive") {
		t.Fatalf("reason %q", v.Reason)
	}
	// The approval rule the seed suggests matches the normalized command.
	ap := &Approvals{}
	if _, err := ap.AddRule(`^icqq\s+group\s+kick\b`, "owner", time.Now()); err != nil {
		t.Fatal(err)
	}
	if v := p.Check(`FOO=1 timeout 5 nice -n 3 icqq group kick 123 "a b" && ls`, ap); v.Decision != Allow || !strings.Contains(v.Reason, ap.Rules[0].ID) {
		t.Fatalf("with rule: %+v", v)
	}
}

func TestHardBlockNotApprovable(t *testing.T) {
	p := mustNew(t, Options{Mode: ModeFull, Approval: ApprovalAllow})
	ap := &Approvals{AlwaysBash: true}
	if _, err := ap.AddRule(".*", "owner", time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"sudo id", "bash -c 'eval x'", "$X", "f() { :; }"} {
		if v := p.Check(c, ap); v.Decision != Deny {
			t.Errorf("%q: %+v", c, v)
		}
	}
}

func TestParseApproveCommand(t *testing.T) {
	good := map[string]ApproveCommand{
		"/approve always bash":                  {Kind: ApproveAlwaysBash},
		"approve always bash":                   {Kind: ApproveAlwaysBash},
		"/approve always":                       {Kind: ApproveAlways},
		`/approve rule ^icqq\s+friend\s+like\b`: {Kind: ApproveRule, Pattern: `^icqq\s+friend\s+like\b`},
		"/approve rule ^git (status|diff)$":     {Kind: ApproveRule, Pattern: "^git (status|diff)$"},
		"/approve list":                         {Kind: ApproveList},
		"/approve revoke rule 1a2b3c4d":         {Kind: ApproveRevokeRule, ID: "1a2b3c4d"},
		"  /approve revoke  ":                   {Kind: ApproveRevokeAlways},
	}
	for in, want := range good {
		got, err := ParseApproveCommand(in)
		if err != nil || got != want {
			t.Errorf("ParseApproveCommand(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	bad := []string{"", "/approve", "/approve sometimes", "/approve rule", "/approve rule (unclosed", "/approve rule a[", "/approve revoke rule", "/approve list all", "/approve always zsh", "/deny x"}
	for _, in := range bad {
		if _, err := ParseApproveCommand(in); !errors.Is(err, ErrBadApproveCommand) {
			t.Errorf("ParseApproveCommand(%q) = %v, want ErrBadApproveCommand", in, err)
		} else if in == "/approve rule (unclosed" && !strings.Contains(err.Error(), "invalid regular expression") {
			t.Errorf("bad regex error does not say so: %v", err)
		}
	}
}

func TestApprovalsApply(t *testing.T) {
	var a Approvals
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	apply := func(text string, pending bool) (string, bool, error) {
		cmd, err := ParseApproveCommand(text)
		if err != nil {
			t.Fatal(err)
		}
		return a.Apply(cmd, ApplyContext{Now: now, By: "owner", PendingBash: pending})
	}
	if _, _, err := apply("/approve always", false); !errors.Is(err, ErrNoPendingApproval) {
		t.Fatalf("always without pending: %v", err)
	}
	if _, changed, err := apply("/approve always", true); err != nil || !changed || !a.AlwaysBash {
		t.Fatalf("always with pending: %v %v", changed, err)
	}
	if _, changed, _ := apply("/approve always bash", false); changed {
		t.Fatal("always bash twice reported a change")
	}
	reply, changed, err := apply(`/approve rule ^icqq\s+friend\s+like\b`, false)
	if err != nil || !changed || !strings.Contains(reply, a.Rules[0].ID) {
		t.Fatalf("rule: %q %v %v", reply, changed, err)
	}
	if _, changed, _ := apply(`/approve rule ^icqq\s+friend\s+like\b`, false); changed || len(a.Rules) != 1 {
		t.Fatal("duplicate rule added")
	}
	if _, err := a.AddRule(`^npm\s+install$`, "owner", now); err != nil {
		t.Fatal(err)
	}
	a.Rules[1].ID = a.Rules[0].ID[:4] + "ffffffffffff" // force a shared 4-char prefix
	list, _, _ := apply("/approve list", false)
	if !strings.Contains(list, "bash always: on") || !strings.Contains(list, `^npm\s+install$`) {
		t.Fatalf("list: %q", list)
	}
	if _, err := a.RevokeRule(a.Rules[0].ID[:4]); !errors.Is(err, ErrAmbiguousRule) {
		t.Fatalf("ambiguous prefix: %v", err)
	}
	if _, err := a.RevokeRule("nope"); !errors.Is(err, ErrNoSuchRule) {
		t.Fatalf("missing id: %v", err)
	}
	if _, _, err := apply("/approve revoke rule "+a.Rules[1].ID[:8], false); err != nil || len(a.Rules) != 1 {
		t.Fatalf("revoke by prefix: %v %d", err, len(a.Rules))
	}
	if _, changed, _ := apply("/approve revoke", false); !changed || a.AlwaysBash || len(a.Rules) != 1 {
		t.Fatalf("revoke always: %v %+v", changed, a)
	}
	// The persisted JSON keeps the seed's v2 field names.
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"bashAlways":false`) || !strings.Contains(string(b), `"bashRules":[`) || !strings.Contains(string(b), `"v":2`) {
		t.Fatalf("json %s", b)
	}
	var back Approvals
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, a) {
		t.Fatalf("round trip: %v\n%+v\n%+v", err, back, a)
	}
}

func TestCLI(t *testing.T) {
	tests := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"check", "--mode", "allowlist", "--preset", "readonly", "--", "ls -la | grep x"}, ExitAllow, "allow\t"},
		{[]string{"check", "--mode", "full", "--", "sudo", "rm", "-rf", "/"}, ExitDeny, "deny\tsudo is on the hard blocklist"},
		{[]string{"check", "--mode", "allowlist", "--approval", "ask", "--", "npm install"}, ExitAsk, "ask\tneeds owner approval"},
		{[]string{"check", "--mode", "allowlist", "--allow", "npm", "--allow", "node", "--", "npm test && node x.js"}, ExitAllow, "allow\t"},
		{[]string{"check", "--mode", "deny", "--", "ls"}, ExitDeny, "deny\t"},
		{[]string{"check", "--approval", "ask", "--approve-rule", `^npm\s+install$`, "--", "npm install"}, ExitAllow, "approved by owner rule"},
		{[]string{"check", "--approval", "ask", "--approve-always", "--", "npm install"}, ExitAllow, "approved by the owner"},
		{[]string{"check", "-v", "--", "env FOO=1 ls"}, ExitAllow, "  command: ls"},
		{[]string{"check", "--workspace", t.TempDir(), "--", "cat /etc/shadow"}, ExitDeny, "private path"},
		{[]string{"check", "--mode", "bogus", "--", "ls"}, ExitUsage, ""},
		{[]string{"check", "--approve-rule", "(", "--", "ls"}, ExitUsage, ""},
		{[]string{"check"}, ExitUsage, ""},
		{[]string{"check", "--nope", "--", "ls"}, ExitUsage, ""},
		{[]string{"frobnicate"}, ExitUsage, ""},
		{nil, ExitUsage, ""},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		code := CLI(tt.args, &out, &errb)
		if code != tt.code || !strings.Contains(out.String(), tt.out) {
			t.Errorf("CLI(%q) = %d %q (stderr %q), want %d %q", tt.args, code, out.String(), errb.String(), tt.code, tt.out)
		}
		if code == ExitUsage && errb.Len() == 0 {
			t.Errorf("CLI(%q): usage error without a message", tt.args)
		}
	}
}

func TestCheckConcurrent(t *testing.T) {
	p := mustNew(t, Options{Mode: ModeAllowlist, Preset: "development", Approval: ApprovalAsk})
	ap := &Approvals{Rules: []ApprovalRule{{ID: "x", Pattern: `^docker\s+ps$`}}}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 50; k++ {
				if v := p.Check("docker ps && git status | head", ap); v.Decision != Allow {
					t.Errorf("%+v", v)
					return
				}
			}
		}()
	}
	wg.Wait()
}

var benchLines = []string{
	"ls -la",
	"cat README.md | grep -n foo | head -n 20",
	"FOO=1 timeout 10 nice -n 5 bash -c 'git status && git diff --stat'",
	"find . -name '*.go' -exec grep -l TODO {} + | xargs wc -l",
	"icqq group kick 123 456",
	"sudo rm -rf /",
}

func BenchmarkCheck(b *testing.B) {
	p := mustNew(b, Options{Mode: ModeAllowlist, Preset: "development", Approval: ApprovalAsk})
	for _, line := range benchLines {
		name := line
		if len(name) > 24 {
			name = name[:24]
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.Check(line, nil)
			}
		})
	}
}
