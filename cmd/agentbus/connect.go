package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/natsutil"
)

// busFlags are the connection flags of chat, sessions and replay.
type busFlags struct {
	url     *string
	dataDir *string
}

func addBusFlags(fs *flag.FlagSet) busFlags {
	dd := os.Getenv("AGENTBUS_DATA_DIR")
	if dd == "" {
		dd = "data"
	}
	return busFlags{
		url:     fs.String("nats", os.Getenv("AGENTBUS_NATS_URL"), "NATS URL of a running agentbus (default: the one in the data directory's "+natsutil.CredentialsFile+", else nats://127.0.0.1:4222)"),
		dataDir: fs.String("data", dd, "data directory of `agentbus up`, where its NATS credentials are"),
	}
}

// dial connects like a person expects: to --nats (or AGENTBUS_NATS_URL) if given, else to the
// URL `agentbus up` wrote into the data directory, with the user and password kept there
// (unless the URL carries its own credentials).
func (b busFlags) dial(name string) (*nats.Conn, error) {
	url := strings.TrimSpace(*b.url)
	opts := []nats.Option{nats.Name(name)}
	path := filepath.Join(*b.dataDir, natsutil.CredentialsFile)
	creds, err := natsutil.ReadCredentials(path)
	switch {
	case err == nil:
		if url == "" {
			url = creds.URL
		}
		if !strings.Contains(url, "@") {
			opts = append(opts, nats.UserInfo(creds.User, creds.Password))
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		hint := ""
		if errors.Is(err, nats.ErrAuthorization) {
			hint = fmt.Sprintf(" (credentials: %s; run from the directory of `agentbus up` or pass --data)", path)
		}
		return nil, fmt.Errorf("connect %s (is `agentbus up` running?): %w%s", url, err, hint)
	}
	return nc, nil
}
