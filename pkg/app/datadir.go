package app

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentbus/agentbus/pkg/config"
)

// Files agentbus keeps at the top of its data directory (dataDir).
const (
	// LockFile is held (flock) by the process that runs the embedded NATS server on the data
	// directory's JetStream store, so a second `agentbus up` there fails instead of opening the
	// same store twice. It holds that process's pid.
	LockFile = "agentbus.lock"
	// URLFile holds the embedded server's client URL (no credentials), written once the server
	// listens and removed when it stops, so `agentbus chat`, `sessions` and `replay` find the
	// server without flags even when it had to move off port 4222. Credentials, when the bus
	// requires them, are kept in a file of their own.
	URLFile = "nats.url"
)

// ErrDataDirLocked: another process runs an embedded server on this data directory; stop it
// or give this one another dataDir.
var ErrDataDirLocked = errors.New("app: data directory in use")

// prepareDataDir creates the data directory for the roles that keep files there (the
// embedded server's store, egress's transcript archive) and takes the data-directory lock
// when this process runs the embedded server.
func (p *Process) prepareDataDir(cfg *config.Config, r Roles) error {
	if !cfg.NATS.Embedded && !r.Egress {
		return nil
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("create the data directory (dataDir %s): %w", cfg.DataDir, err)
	}
	if !cfg.NATS.Embedded {
		return nil
	}
	path := filepath.Join(cfg.DataDir, LockFile)
	unlock, err := lockFile(path)
	if err != nil {
		if errors.Is(err, ErrDataDirLocked) {
			holder := ""
			if b, rerr := os.ReadFile(path); rerr == nil && strings.TrimSpace(string(b)) != "" {
				holder = " (pid " + strings.TrimSpace(string(b)) + ")"
			}
			return fmt.Errorf("%w: another agentbus%s already runs on data directory %s: stop it, or start this one with another dataDir", ErrDataDirLocked, holder, filepath.Clean(cfg.DataDir))
		}
		return fmt.Errorf("lock the data directory %s: %w", cfg.DataDir, err)
	}
	p.onStopFunc("data-directory lock", unlock)
	return nil
}

// writeURLFile records the embedded server's client URL in the data directory.
func (p *Process) writeURLFile(url string) error {
	if url == "" {
		return nil
	}
	path := filepath.Join(p.Config.DataDir, URLFile)
	if err := os.WriteFile(path, []byte(url+"\n"), 0o644); err != nil {
		return fmt.Errorf("record the NATS URL in %s: %w", path, err)
	}
	p.onStopFunc("nats.url", func() { _ = os.Remove(path) })
	return nil
}

// ReadURLFile returns the client URL an `agentbus up` on dataDir recorded, "" when there is
// none (no server runs there, or it runs without a TCP listener).
func ReadURLFile(dataDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, URLFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// portFree reports whether addr (host:port, port not 0) can be listened on now, and the
// listen error when it cannot.
func portFree(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); err != nil || n == 0 {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return ln.Close()
}
