package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// yamlBlock is a fenced YAML block of a Markdown file.
var yamlBlock = regexp.MustCompile("(?s)```ya?ml\n(.*?)```")

// docEnvRef is a ${VAR} or ${VAR:-default} reference.
var docEnvRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}`)

// TestDocumentedConfigsValidate loads every YAML block of the docs and README that is a whole
// configuration file (its top-level keys are the file's), and deploy/agentbus.yml, with every
// ${VAR} they name set, so that a validation rule (such as refusing unauthenticated listeners)
// never leaves a documented example that agentbus refuses to start with.
func TestDocumentedConfigsValidate(t *testing.T) {
	files, _ := filepath.Glob("../../docs/*.md")
	more, _ := filepath.Glob("../../docs/adapters/*.md")
	files = append(append(files, more...), "../../README.md")
	top := map[string]bool{}
	for _, k := range []string{"dataDir", "log", "nats", "im", "ai", "roles", "health", "metrics", "console", "mcp", "tools", "skills"} {
		top[k] = true
	}
	var docs []struct{ where, text string }
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range yamlBlock.FindAllStringSubmatch(string(b), -1) {
			docs = append(docs, struct{ where, text string }{filepath.Base(f) + " block " + strconv.Itoa(i+1), m[1]})
		}
	}
	if b, err := os.ReadFile("../../deploy/agentbus.yml"); err == nil {
		docs = append(docs, struct{ where, text string }{"deploy/agentbus.yml", string(b)})
	}
	checked := 0
	for _, d := range docs {
		var keys map[string]any
		if yaml.Unmarshal([]byte(d.text), &keys) != nil || len(keys) == 0 {
			continue
		}
		whole := true
		for k := range keys {
			whole = whole && top[k]
		}
		if !whole || keys["im"] == nil && keys["ai"] == nil && keys["nats"] == nil {
			continue // a fragment (one provider, one bot) shown inside its block
		}
		t.Run(d.where, func(t *testing.T) {
			for _, m := range docEnvRef.FindAllStringSubmatch(d.text, -1) {
				if m[2] == "" { // ${VAR:-default} keeps its default
					t.Setenv(m[1], "doc-"+strings.ToLower(m[1]))
				}
			}
			if _, err := Parse([]byte(d.text)); err != nil {
				t.Errorf("%v\n%s", err, d.text)
			}
		})
		checked++
	}
	if checked < 5 {
		t.Fatalf("only %d documented configurations found; the extraction is broken", checked)
	}
	t.Logf("%d documented configurations validate", checked)
}
