package natsutil

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// CredentialsFile is the name, inside the data directory, of the file `agentbus up` writes for
// its embedded server: the URL it listens on and the user and password it requires. It is
// created with mode 0600; `agentbus chat/sessions/replay` read it to connect without flags.
const CredentialsFile = "nats-credentials.json"

// Credentials is the content of CredentialsFile.
type Credentials struct {
	URL      string `json:"url,omitempty"`
	User     string `json:"user"`
	Password string `json:"password"`
}

// EmbeddedUser is the user `agentbus up` creates for its embedded server.
const EmbeddedUser = "agentbus"

// LoadOrCreateCredentials returns the credentials in dir/CredentialsFile, creating the file
// (mode 0600, 32 random bytes of password) when it does not exist. A file readable by others
// is refused: whoever can read it can act as any role on the bus.
func LoadOrCreateCredentials(dir string) (Credentials, error) {
	path := filepath.Join(dir, CredentialsFile)
	c, err := ReadCredentials(path)
	if err == nil {
		return c, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return Credentials{}, err
	}
	pw, err := randomPassword()
	if err != nil {
		return Credentials{}, err
	}
	c = Credentials{User: EmbeddedUser, Password: pw}
	if err := WriteCredentials(path, c); err != nil {
		return Credentials{}, err
	}
	return c, nil
}

// ReadCredentials reads a CredentialsFile. Errors wrap fs.ErrNotExist when there is none, and
// ErrConfig when the file is readable by group or others or is malformed.
func ReadCredentials(path string) (Credentials, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Credentials{}, fmt.Errorf("natsutil: credentials: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return Credentials{}, fmt.Errorf("%w: %s is readable by others (mode %o): chmod 600 it", ErrConfig, path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Credentials{}, fmt.Errorf("natsutil: credentials: %w", err)
	}
	var c Credentials
	if err := json.Unmarshal(b, &c); err != nil || c.User == "" || c.Password == "" {
		return Credentials{}, fmt.Errorf("%w: %s: not a credentials file (want user and password)", ErrConfig, path)
	}
	return c, nil
}

// WriteCredentials writes c to path with mode 0600 (atomically: a temporary file renamed over).
func WriteCredentials(path string, c Credentials) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("natsutil: credentials dir: %w", err)
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".nats-credentials-*")
	if err != nil {
		return fmt.Errorf("natsutil: write credentials: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("natsutil: write credentials: %w", err)
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("natsutil: write credentials: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("natsutil: write credentials: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("natsutil: write credentials: %w", err)
	}
	return nil
}

// randomPassword is 32 random bytes, base64url.
func randomPassword() (string, error) {
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("natsutil: generate password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(buf), nil
}
