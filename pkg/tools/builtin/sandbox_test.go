package builtin

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/execpolicy"
	"github.com/agentbus/agentbus/pkg/sandbox"
)

// playHost makes All see iso instead of probing (a host without bwrap, or
// without slirp4netns) for the rest of the test.
func playHost(t *testing.T, iso sandbox.Isolation) {
	t.Helper()
	orig := probeIsolation
	t.Cleanup(func() { probeIsolation = orig })
	probeIsolation = func() sandbox.Isolation { return iso }
}

func touchPolicy(t *testing.T, c *Config) {
	t.Helper()
	p, err := execpolicy.New(execpolicy.Options{Mode: execpolicy.ModeAllowlist, Allow: []string{"touch", "env"}, Files: c.Files})
	if err != nil {
		t.Fatal(err)
	}
	c.Exec = p
}

// TestBashRefusesWithoutIsolation: a tool worker that cannot isolate
// commands refuses every bash call, with the reason for the model and an
// error in the log, and runs nothing; with the operator's explicit opt-out
// it runs them (logged as loudly at start), still without the worker's
// secrets in their environment.
func TestBashRefusesWithoutIsolation(t *testing.T) {
	const secret = "sk-refuse-secret-1234"
	t.Setenv("OPENAI_API_KEY", secret)
	playHost(t, sandbox.Isolation{Reason: "bwrap (Debian package bubblewrap) not found"})
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	f := newFixture(t, func(c *Config) { touchPolicy(t, c); c.Log = log })
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "BASH DISABLED") {
		t.Fatalf("no loud start-up line:\n%s", logs.String())
	}
	r := f.call(t, "bash", map[string]any{"command": "touch ran"})
	want(t, r, true, "bash is disabled on this tool worker", "bwrap (Debian package bubblewrap) not found", "allowUnisolated")
	if _, err := os.Stat(filepath.Join(f.ws, "ran")); err == nil {
		t.Fatal("the refused command ran")
	}

	logs.Reset()
	opt := newFixture(t, func(c *Config) { touchPolicy(t, c); c.Log = log; c.Sandbox.AllowUnisolated = true })
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "BASH SANDBOX OPT-OUT") {
		t.Fatalf("the opt-out was not logged loudly:\n%s", logs.String())
	}
	want(t, opt.call(t, "bash", map[string]any{"command": "touch ran"}), false)
	if _, err := os.Stat(filepath.Join(opt.ws, "ran")); err != nil {
		t.Fatalf("the opted-out worker did not run the command: %v", err)
	}
	if r := opt.call(t, "bash", map[string]any{"command": "env"}); strings.Contains(r.Text(), secret) {
		t.Fatalf("the unisolated command saw the worker's key:\n%s", r.Text())
	}
}

// TestBashRefusesOutboundWithoutStack: the network preset's outbound
// network needs slirp4netns; without it bash refuses rather than run with
// no network or with the host's.
func TestBashRefusesOutboundWithoutStack(t *testing.T) {
	iso := sandbox.Probe()
	if !iso.Available {
		t.Skipf("needs bubblewrap (%s)", iso.Reason)
	}
	iso.Outbound, iso.OutboundReason = false, "slirp4netns not found"
	playHost(t, iso)
	f := newFixture(t, func(c *Config) { touchPolicy(t, c); c.Sandbox.Network = sandbox.NetworkOutbound })
	want(t, f.call(t, "bash", map[string]any{"command": "touch ran"}), true, "bash is disabled", "slirp4netns not found")
	if _, err := os.Stat(filepath.Join(f.ws, "ran")); err == nil {
		t.Fatal("the refused command ran")
	}
}

// TestSandboxFromConfig: the network follows the preset unless configured,
// and the other keys reach the spec.
func TestSandboxFromConfig(t *testing.T) {
	for _, tt := range []struct {
		preset, network string
		want            sandbox.Network
		bad             bool
	}{
		{"readonly", "", sandbox.NetworkNone, false},
		{"development", "", sandbox.NetworkNone, false},
		{"custom", "auto", sandbox.NetworkNone, false},
		{"network", "", sandbox.NetworkOutbound, false},
		{"network", "none", sandbox.NetworkNone, false},
		{"development", "outbound", sandbox.NetworkOutbound, false},
		{"network", "host", "", true},
	} {
		sc, err := SandboxFromConfig(config.Agent{ExecPreset: tt.preset, Sandbox: config.Sandbox{Network: tt.network}})
		if (err != nil) != tt.bad || (!tt.bad && sc.Network != tt.want) {
			t.Errorf("preset %s network %q: %v %v, want %v", tt.preset, tt.network, sc.Network, err, tt.want)
		}
	}
	sc, err := SandboxFromConfig(config.Agent{Sandbox: config.Sandbox{RunAs: "65534:65533", AllowNetworks: []string{"10.20.0.0/16"},
		Limits: config.SandboxLimits{Processes: 10, TmpMiB: -1}}})
	if err != nil || sc.RunAs == nil || *sc.RunAs != (sandbox.Credential{UID: 65534, GID: 65533}) ||
		len(sc.AllowNets) != 1 || sc.AllowNets[0].String() != "10.20.0.0/16" || sc.Limits.Processes != 10 || sc.Limits.TmpMiB != -1 {
		t.Fatalf("%+v %v", sc, err)
	}
}

// TestBashNetworkByPreset: through the real bash tool and policy, a
// command cannot reach a listener on the host's loopback in the
// development preset (no network) nor in the network preset (outbound
// through slirp4netns, which keeps the host out).
func TestBashNetworkByPreset(t *testing.T) {
	iso := sandbox.Probe()
	if !iso.Available {
		t.Skipf("needs bubblewrap (%s)", iso.Reason)
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, "hello")
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	for _, preset := range []string{"development", "network"} {
		if preset == "network" && !iso.Outbound {
			t.Logf("network preset skipped: %s", iso.OutboundReason)
			continue
		}
		f := newFixture(t, func(c *Config) {
			p, err := execpolicy.New(execpolicy.Options{Mode: execpolicy.ModeFull, Preset: preset, Files: c.Files})
			if err != nil {
				t.Fatal(err)
			}
			c.Exec = p
			sc, err := SandboxFromConfig(config.Agent{ExecPreset: preset})
			if err != nil {
				t.Fatal(err)
			}
			c.Sandbox = sc
		})
		// (The policy already refuses bash's /dev/tcp; curl is what the preset is for.)
		for _, cmd := range []string{fmt.Sprintf("curl -sS -m 3 http://127.0.0.1:%d/", port)} {
			r := f.call(t, "bash", map[string]any{"command": cmd})
			if strings.Contains(r.Text(), "hello") {
				t.Errorf("preset %s: %q reached the host's loopback:\n%s", preset, cmd, r.Text())
			}
			if !strings.Contains(r.Text(), "curl: (") {
				t.Errorf("preset %s: %q did not run:\n%s", preset, cmd, r.Text())
			}
		}
	}
}

// TestSandboxDocConfig loads the ai.agent.sandbox block of docs/security.md.
func TestSandboxDocConfig(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i := strings.Index(doc, "### Limits")
	if i < 0 {
		t.Fatal("docs/security.md has no Limits section")
	}
	doc = doc[i:]
	start := strings.Index(doc, "```yaml\n")
	end := strings.Index(doc[start+8:], "```")
	if start < 0 || end < 0 {
		t.Fatal("no yaml block in the Limits section")
	}
	c, err := config.Parse([]byte(doc[start+8 : start+8+end]))
	if err != nil {
		t.Fatalf("docs/security.md sandbox block: %v", err)
	}
	sc, err := SandboxFromConfig(c.AI.Agent)
	if err != nil {
		t.Fatal(err)
	}
	d := sandbox.DefaultLimits
	if sc.Network != sandbox.NetworkOutbound || sc.RunAs == nil || len(sc.AllowNets) != 1 || sc.AllowUnisolated ||
		sc.Limits != d {
		t.Fatalf("the documented block gives %+v; the documented defaults are %+v", sc, d)
	}
}
