package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// yamlBlocks returns the ```yaml blocks of a docs page.
func yamlBlocks(t *testing.T, page string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", page))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(raw), -1) {
		out = append(out, m[1])
	}
	return out
}

// The configuration blocks of docs/observability.md, and those of docs/configuration.md that
// set metrics: or log:, load, and say what the pages say they do.
func TestObservabilityDocBlocks(t *testing.T) {
	var blocks []string
	blocks = append(blocks, yamlBlocks(t, "observability.md")...)
	for _, b := range yamlBlocks(t, "configuration.md") {
		if strings.HasPrefix(b, "metrics:") || strings.HasPrefix(b, "log:") {
			blocks = append(blocks, b)
		}
	}
	if len(blocks) < 3 {
		t.Fatalf("%d blocks found, want the metrics and log examples of both pages", len(blocks))
	}
	for _, b := range blocks {
		c, err := Parse([]byte(b))
		if err != nil {
			t.Errorf("%v:\n%s", err, b)
			continue
		}
		if strings.Contains(b, "metrics:") && c.Metrics.Listen != "127.0.0.1:9091" {
			t.Errorf("metrics.listen = %q:\n%s", c.Metrics.Listen, b)
		}
		if strings.Contains(b, "log:") && (c.Log.Format != "json" || c.Log.Level != "info") {
			t.Errorf("log = %+v:\n%s", c.Log, b)
		}
	}
}
