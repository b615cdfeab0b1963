// Package dendritetest runs a real Dendrite homeserver as a child process for tests: SQLite
// databases and an in-memory JetStream in a temporary directory, federation off, listening
// on a random loopback port, shared-secret registration on so tests create their accounts.
//
// The binary is $AGENTBUS_DENDRITE, else "dendrite" on PATH. Without it, Start skips the
// test with a message saying how to get it, unless the CI environment variable is set: then
// the test fails, because CI (.ci/run) builds Dendrite and must run these tests.
//
// Build it as .ci/run does: Dendrite v0.13.8 with a fixed SQLite driver (.ci/dendrite/go.mod
// says why; pure Go, about 90 s on 2 cores with a cold build cache):
//
//	export AGENTBUS_DENDRITE="$(bash .ci/dendrite/build)/dendrite"
package dendritetest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"debug/buildinfo"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/semver"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/id"
	"maunium.net/go/mautrix/synapseadmin"
)

// Version is the Dendrite release the tests are written against.
const Version = "v0.13.8"

// EnvBinary names the environment variable that points at the dendrite binary.
const EnvBinary = "AGENTBUS_DENDRITE"

// ServerName is the homeserver's server name: user ids are @<name>:localhost.
const ServerName = "localhost"

// Options configure Start.
type Options struct {
	// RateLimit turns Dendrite's client API rate limiter on: Threshold requests per caller in
	// flight within Cooloff (429 M_LIMIT_EXCEEDED with retry_after_ms beyond that). Users in
	// Exempt (full user ids) are never limited.
	RateLimit bool
	Threshold int           // default 10
	Cooloff   time.Duration // default 500ms
	Exempt    []string
}

// Server is a running Dendrite.
type Server struct {
	// URL is the client-server API base, http://127.0.0.1:<port>.
	URL    string
	Dir    string
	secret string
	cmd    *exec.Cmd
	done   chan struct{}
	log    *syncBuffer
}

// Binary finds the dendrite binary: $AGENTBUS_DENDRITE, else dendrite on PATH.
func Binary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvBinary, p, err)
		}
		return p, nil
	}
	p, err := exec.LookPath("dendrite")
	if err != nil {
		return "", fmt.Errorf("no dendrite binary: set %s or put dendrite on PATH", EnvBinary)
	}
	return p, nil
}

// Start runs Dendrite for the test and stops it at cleanup (the test's temporary directory
// holds its databases, media and log). It skips or fails as the package doc says when there
// is no binary.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("dendritetest: %v (CI must build Dendrite %s: see .ci/run)", err, Version)
		}
		t.Skipf(`dendritetest: %v; build Dendrite %s with: export %s="$(bash .ci/dendrite/build)/dendrite"`, err, Version, EnvBinary)
	}
	if err := checkDriver(bin); err != nil {
		t.Fatalf("dendritetest: %v", err)
	}
	if o.Threshold == 0 {
		o.Threshold = 10
	}
	if o.Cooloff == 0 {
		o.Cooloff = 500 * time.Millisecond
	}
	dir := t.TempDir()
	key := filepath.Join(dir, "matrix_key.pem")
	if err := writeKey(bin, key); err != nil {
		t.Fatalf("dendritetest: signing key: %v", err)
	}
	s := &Server{Dir: dir, secret: "shared-secret-for-tests", done: make(chan struct{}), log: &syncBuffer{}}
	cfg := filepath.Join(dir, "dendrite.yaml")
	if err := os.WriteFile(cfg, []byte(s.config(key, o)), 0o600); err != nil {
		t.Fatal(err)
	}
	// The port is picked by the kernel and released for Dendrite; another process taking it
	// in between makes Dendrite exit, which the readiness wait reports.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	s.URL = "http://" + addr
	s.cmd = exec.Command(bin, "-config", cfg, "-http-bind-address", addr)
	s.cmd.Dir = dir
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("dendritetest: start %s: %v", bin, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("dendrite output (last 4 KiB):\n%s", s.log.tail(4096))
		}
	})
	if err := s.waitReady(90 * time.Second); err != nil {
		t.Fatalf("dendritetest: %v\n%s", err, s.log.tail(4096))
	}
	return s
}

// Stop ends Dendrite (SIGINT, then SIGKILL after 10 s). Safe to call twice.
func (s *Server) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func (s *Server) waitReady(d time.Duration) error {
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("dendrite exited: %v", s.cmd.ProcessState)
		default:
		}
		resp, err := http.Get(s.URL + "/_matrix/client/versions")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("versions: HTTP %d", resp.StatusCode)
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("dendrite not ready after %v: %v", d, last)
}

// User is a registered account.
type User struct {
	ID     id.UserID
	Token  string
	Client *mautrix.Client
}

// Register creates an account through shared-secret registration and returns it logged in.
func (s *Server) Register(t testing.TB, localpart, displayName string) *User {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	anon, err := mautrix.NewClient(s.URL, "", "")
	if err != nil {
		t.Fatal(err)
	}
	admin := synapseadmin.Client{Client: anon}
	resp, err := admin.SharedSecretRegister(ctx, s.secret, synapseadmin.ReqSharedSecretRegister{
		Username: localpart, Password: "password-" + localpart, Displayname: displayName})
	if err != nil {
		t.Fatalf("dendritetest: register %s: %v", localpart, err)
	}
	c, err := mautrix.NewClient(s.URL, resp.UserID, resp.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	c.DeviceID = resp.DeviceID
	if displayName != "" {
		// Dendrite takes the display name from registration only on some paths; set it.
		if err := c.SetDisplayName(ctx, displayName); err != nil {
			t.Fatalf("dendritetest: display name of %s: %v", localpart, err)
		}
	}
	return &User{ID: resp.UserID, Token: resp.AccessToken, Client: c}
}

// minSQLite is the first modernc.org/sqlite release without the leaked read transaction and
// the stray interrupt that wedge Dendrite's SQLite databases when a client hangs up
// mid-request (.ci/dendrite/go.mod; TestHangUps).
const minSQLite = "v1.42.2"

// checkDriver refuses a dendrite binary built with an older SQLite driver, which makes the
// tests flaky in a way that looks like the adapter's fault. A binary without build
// information (not a Go binary, or stripped of it), or whose driver has no release version (a
// local replacement), is let through.
func checkDriver(bin string) error {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil
	}
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		if d.Path == "modernc.org/sqlite" && semver.IsValid(d.Version) && olderThan(d.Version, minSQLite) {
			return fmt.Errorf("%s was built with %s %s, which wedges when a client hangs up mid-request; "+
				"build Dendrite with: export %s=\"$(bash .ci/dendrite/build)/dendrite\"", bin, d.Path, d.Version, EnvBinary)
		}
	}
	return nil
}

// olderThan reports whether semantic version v precedes than.
func olderThan(v, than string) bool { return semver.Compare(v, than) < 0 }

// config is the homeserver's configuration (Dendrite fills in its defaults for the rest).
func (s *Server) config(key string, o Options) string {
	db := func(name string) string {
		return fmt.Sprintf("  database:\n    connection_string: file:%s\n", filepath.Join(s.Dir, name+".db"))
	}
	exempt := "[]"
	if len(o.Exempt) > 0 {
		exempt = "[" + strings.Join(quoteAll(o.Exempt), ", ") + "]"
	}
	return fmt.Sprintf(`version: 2
global:
  server_name: %[1]s
  private_key: %[2]s
  disable_federation: true
  presence: {enable_inbound: false, enable_outbound: false}
  trusted_third_party_id_servers: []
  jetstream:
    in_memory: true
    storage_path: %[3]s
    topic_prefix: Dendrite
  metrics: {enabled: false}
  dns_cache: {enabled: false}
  report_stats: {enabled: false}
  server_notices: {enabled: false, local_part: _server, display_name: Server, room_name: Server}
client_api:
  registration_disabled: true
  registration_shared_secret: %[4]s
  guests_disabled: true
  rate_limiting:
    enabled: %[5]v
    threshold: %[6]d
    cooloff_ms: %[7]d
    exempt_user_ids: %[8]s
federation_api:
%[9]s  key_perspectives: []
  send_max_retries: 1
key_server:
%[10]smedia_api:
%[11]s  base_path: %[3]s/media
  max_file_size_bytes: 10485760
room_server:
%[12]ssync_api:
%[13]s  search: {enabled: false}
user_api:
  bcrypt_cost: 4
  account_database:
    connection_string: file:%[3]s/userapi.db
relay_api:
%[14]smscs:
  mscs: []
%[15]slogging:
- type: std
  level: warn
`, ServerName, key, s.Dir, s.secret, o.RateLimit, o.Threshold, o.Cooloff.Milliseconds(), exempt,
		db("federationapi"), db("keyserver"), db("mediaapi"), db("roomserver"), db("syncapi"), db("relayapi"), db("mscs"))
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// writeKey writes the signing key with generate-keys next to the dendrite binary when it is
// there (what an operator does), else an ed25519 seed in Dendrite's PEM format.
func writeKey(bin, path string) error {
	gen := filepath.Join(filepath.Dir(bin), "generate-keys")
	if _, err := os.Stat(gen); err == nil {
		out, err := exec.Command(gen, "--private-key", path).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v: %s", gen, err, out)
		}
		return nil
	}
	seed := make([]byte, ed25519.SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return err
	}
	b := pem.EncodeToMemory(&pem.Block{Type: "MATRIX PRIVATE KEY", Headers: map[string]string{"Key-ID": "ed25519:test"}, Bytes: seed})
	return os.WriteFile(path, b, 0o600)
}

// syncBuffer collects the child's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 4<<20 {
		s.b.Reset()
	}
	return s.b.Write(p)
}

func (s *syncBuffer) tail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.b.Bytes()
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
