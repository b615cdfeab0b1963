package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/testwait"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// regionTestServer starts the leaf-node hub (domain "") or a region's JetStream server in
// domain, a leaf node of the hub listening on leafPort.
func regionTestServer(t *testing.T, domain string, leafPort int) *server.Server {
	t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, ServerName: "hub"}
	if domain == "" {
		o.LeafNode = server.LeafNodeOpts{Host: "127.0.0.1", Port: leafPort}
	} else {
		u, _ := url.Parse(fmt.Sprintf("nats-leaf://127.0.0.1:%d", leafPort))
		o.ServerName, o.JetStream, o.JetStreamDomain, o.StoreDir = "region-"+domain, true, domain, t.TempDir()
		o.LeafNode = server.LeafNodeOpts{Remotes: []*server.RemoteLeafOpts{{URLs: []*url.URL{u}}}}
	}
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(s.Shutdown)
	if domain != "" { // the hub runs already: the region's leaf connection comes up
		testwait.Eventually(t, 0, func() error {
			return testwait.Want(s.NumLeafNodes() > 0, "region %s has no leaf connection to the hub", domain)
		})
	}
	return s
}

// TestRegionCommands: `agentbus provision` on a standby's config creates mirrors of the live
// domain, `agentbus region status` shows them as mirrors, `agentbus region promote` makes
// every one live, and status then shows them live.
func TestRegionCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	leaf := l.Addr().(*net.TCPAddr).Port
	l.Close()
	regionTestServer(t, "", leaf)
	a := regionTestServer(t, "a", leaf)
	b := regionTestServer(t, "b", leaf)
	nc, err := nats.Connect(a.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	jsA, _ := jetstream.New(nc)
	spec := events.DefaultSpec()
	if err := natsutil.Provision(ctx, jsA, spec); err != nil {
		t.Fatal(err)
	}
	if err := natsutil.ProvisionRegion(ctx, jsA, spec); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "standby.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("nats:\n  url: %s\n  region: {name: b, standby: true, source: a}\n", b.ClientURL())), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(f func(context.Context, []string, *bytes.Buffer) error, args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := f(ctx, args, &out); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}
	provision := func(ctx context.Context, args []string, out *bytes.Buffer) error { return cmdProvision(ctx, args, out) }
	region := func(ctx context.Context, args []string, out *bytes.Buffer) error { return cmdRegion(ctx, args, out) }
	if out := run(provision, "--config", cfg); !strings.Contains(out, "as a mirror of domain a") {
		t.Errorf("provision of a standby: %q", out)
	}
	n := len(natsutil.RegionStreams(spec))
	if out := run(region, "status", "--config", cfg); strings.Count(out, "mirror of a") != n {
		t.Errorf("status of the standby: want %d mirrors of a:\n%s", n, out)
	}
	if out := run(region, "promote", "--config", cfg); !strings.Contains(out, fmt.Sprintf("region promoted: %d of %d streams were mirrors", n, n)) {
		t.Errorf("promote:\n%s", out)
	}
	if out := run(region, "status", "--config", cfg); strings.Count(out, " live ") != n || strings.Contains(out, "mirror of") {
		t.Errorf("status after promotion: want %d live streams:\n%s", n, out)
	}
}
