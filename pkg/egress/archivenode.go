package egress

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbus/agentbus/pkg/store/transcript"
)

// The archiver's consumers belong to one archive file: every transcripts.db needs every
// message, so it gets consumers of its own (transcripts-<node>-in/-sent), named by the node
// name kept next to it. A new archive (first start, a new volume, a deleted file) gets a new
// name and so fresh consumers that read IM_IN and IM_SENT from the start: it fills itself.
// Egress replicas with data directories of their own therefore each keep a complete archive
// without any configuration.
const (
	transcriptsFile = "transcripts.db"
	nodeFile        = "transcripts.node"
	// legacyNode is the name every archive had before names were kept with the file.
	legacyNode = "default"
)

// archiveNode returns the archiver node name of the archive in dir, creating it when the
// archive is new. Call it before opening the archive (it looks at whether the file exists).
func archiveNode(dir string) (string, error) {
	_, err := os.Stat(filepath.Join(dir, transcriptsFile))
	existed := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("archive node: %w", err)
	}
	path := filepath.Join(dir, nodeFile)
	if existed {
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			name := strings.TrimSpace(string(b))
			if err := transcript.CheckNode(name); err != nil {
				return "", fmt.Errorf("archive node: %s: %w", path, err)
			}
			return name, nil
		case errors.Is(err, fs.ErrNotExist):
			// An archive from before names were kept: its consumers are the legacy ones.
			return legacyNode, writeNode(path, legacyNode)
		default:
			return "", fmt.Errorf("archive node: %w", err)
		}
	}
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("archive node: %w", err)
	}
	name := "a" + hex.EncodeToString(r[:])
	return name, writeNode(path, name)
}

func writeNode(path, name string) error {
	if err := os.WriteFile(path, []byte(name+"\n"), 0o600); err != nil {
		return fmt.Errorf("archive node: %w", err)
	}
	return nil
}
