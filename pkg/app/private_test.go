package app

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/filepolicy"
)

// The configuration file and the data directory (bus credentials) are private to the file
// tools even when the workspace holds them, while the rest of the workspace stays usable.
func TestConfigAndDataArePrivate(t *testing.T) {
	ws := t.TempDir()
	cfgPath := filepath.Join(ws, "agentbus.yml")
	if err := os.WriteFile(cfgPath, []byte("dataDir: "+filepath.Join(ws, "data")+"\nai:\n  agent:\n    workspace: "+ws+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(ws, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"data/nats-credentials.json", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(ws, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepolicy.New(filepolicy.Options{Workspace: cfg.AI.Agent.Workspace, PrivateDirs: privatePaths(cfg)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path    string
		allowed bool
	}{
		{"agentbus.yml", false},
		{"./agentbus.yml", false},
		{"data/nats-credentials.json", false},
		{"nope/../data/nats-credentials.json", false},
		{"notes.txt", true},
	} {
		_, err := files.Resolve(tc.path, filepolicy.Read)
		if (err == nil) != tc.allowed {
			t.Errorf("read %s: err %v, want allowed=%v", tc.path, err, tc.allowed)
		}
	}
}
