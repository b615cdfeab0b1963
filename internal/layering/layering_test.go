// Package layering holds the test that keeps the import graph the way DESIGN.md §1 draws it.
package layering

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/agentbus/agentbus"

// roles are the role packages: none may import another, directly or through a package below.
var roles = []string{"pkg/ingest", "pkg/turn", "pkg/toolworker", "pkg/egress"}

// library are the pi-shaped packages, usable without agentbus: what they may reach of the module.
var library = []string{"pkg/llm", "pkg/loop"}

// protocols are the packages that hold one cross-role protocol each (issue 38): every role
// that speaks it imports the package, so it must reach no role, and each may import only
// what is listed here (directly; the module packages below them are checked by their own
// entries or are leaves such as pkg/events).
var protocols = map[string][]string{
	"pkg/toolbus": {"internal/jsconflict", "pkg/events", "pkg/llm", "pkg/loop",
		"pkg/natsutil", "pkg/store", "pkg/tools", "pkg/tracing"},
	// Background tasks: the tools that queue them and the runners the turn worker starts.
	"pkg/tasks": {"pkg/events", "pkg/inbox", "pkg/llm", "pkg/loop", "pkg/natsutil", "pkg/schedule", "pkg/skills",
		"pkg/toolbus", "pkg/tools", "pkg/tools/filetool"},
	"pkg/inbox": {"internal/jsconflict", "pkg/events", "pkg/natsutil"},
	"pkg/store": {"internal/jsconflict", "pkg/events", "pkg/llm", "pkg/natsutil"},
	// The turn worker's ownership protocol: it reaches the bus only through the stores.
	"pkg/turn/ownership": {"pkg/events", "pkg/metrics", "pkg/natsutil", "pkg/store"},
	// The chat commands: ingest reads who may run each, the turn worker runs them through
	// an interface the package declares.
	"pkg/command": {"pkg/events"},
}

func libraryMayImport(pkg string) bool {
	return under(pkg, "pkg/llm") || under(pkg, "pkg/loop") || pkg == "internal/jsonesc"
}

func under(pkg, root string) bool { return pkg == root || strings.HasPrefix(pkg, root+"/") }

// compositionRoots may import pkg/app, the composition root: it wires every role together, so
// only what sits above it (cmd/, and pkg/bench, which starts whole processes) may reach it.
var compositionRoots = []string{"cmd", "pkg/bench"}

// TestImportGraph reads every non-test Go file of the module and checks the layering: pkg/llm
// and pkg/loop reach nothing of the application, no role reaches another role, nothing below
// cmd/ imports a command, and nothing under pkg/ or internal/ but a composition root reaches
// pkg/app.
func TestImportGraph(t *testing.T) {
	graph := imports(t, "../..")
	if len(graph) < 20 {
		t.Fatalf("read only %d packages; is the module root ../..?", len(graph))
	}
	for pkg := range graph {
		deps := reach(graph, pkg)
		for _, lib := range library {
			if !under(pkg, lib) {
				continue
			}
			for _, d := range deps {
				if !libraryMayImport(d) {
					t.Errorf("%s reaches %s: the library must not depend on the application (%s)", pkg, d, path(graph, pkg, d))
				}
			}
		}
		for _, r := range roles {
			if !under(pkg, r) {
				continue
			}
			for _, d := range deps {
				for _, other := range roles {
					if other != r && under(d, other) {
						t.Errorf("role %s reaches role %s (%s): what two roles share belongs below both", pkg, d, path(graph, pkg, d))
					}
				}
			}
		}
		for _, d := range graph[pkg] {
			if under(d, "cmd") && !under(pkg, "cmd") {
				t.Errorf("%s imports the command %s", pkg, d)
			}
			// A role's subpackage (pkg/turn/ownership) is a part the role is built from: it
			// declares what it needs as interfaces and never reaches back up.
			for _, r := range roles {
				if under(pkg, r) && pkg != d && under(pkg, d) {
					t.Errorf("%s imports its parent %s: a subpackage declares what it needs as an interface instead", pkg, d)
				}
			}
		}
		if !under(pkg, "pkg/app") && !slices.ContainsFunc(compositionRoots, func(r string) bool { return under(pkg, r) }) {
			for _, d := range deps {
				if under(d, "pkg/app") {
					t.Errorf("%s reaches the composition root %s (%s): only cmd/ and pkg/bench may", pkg, d, path(graph, pkg, d))
				}
			}
		}
		if allowed, ok := protocols[pkg]; ok {
			for _, d := range graph[pkg] {
				if !slices.Contains(allowed, d) {
					t.Errorf("protocol package %s imports %s, which its entry in protocols does not allow", pkg, d)
				}
			}
			for _, d := range deps {
				for _, r := range roles {
					if under(d, r) && !under(pkg, r) {
						t.Errorf("protocol package %s reaches the role %s (%s)", pkg, d, path(graph, pkg, d))
					}
				}
			}
		}
	}
	for p := range protocols {
		if _, ok := graph[p]; !ok {
			t.Errorf("protocols lists %s, which holds no Go package", p)
		}
	}
}

// typedOptions are the packages that take typed Options and read no YAML (issue 38): only
// the composition root (pkg/app) and cmd/ map the configuration onto their options, so none of
// them (nor any package below them) imports pkg/config. IM adapters under pkg/im still read
// their own blocks, and libraries configured in the configuration's terms (pkg/hooks,
// pkg/models) may: a role reaches pkg/config through them, never by importing it.
var typedOptions = []string{"pkg/turn", "pkg/ingest", "pkg/egress", "pkg/toolworker", "pkg/toolbus",
	"pkg/tasks", "pkg/inbox", "pkg/loop", "pkg/llm"}

// TestNoConfigInRoles checks that no non-test file of the typedOptions packages (and their
// subpackages) imports pkg/config.
func TestNoConfigInRoles(t *testing.T) {
	const root = "../.."
	fset := token.NewFileSet()
	for _, dir := range typedOptions {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if name := d.Name(); strings.HasPrefix(name, ".") || name == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			rel = filepath.ToSlash(rel)
			for _, imp := range f.Imports {
				if strings.Trim(imp.Path.Value, `"`) == module+"/pkg/config" {
					t.Errorf("%s imports pkg/config: take typed Options instead, and map the configuration onto them in pkg/app (options.go)", rel)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// imports maps each package of the module (path relative to the root) to the module packages
// its non-test files import.
func imports(t *testing.T, root string) map[string][]string {
	t.Helper()
	graph := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "data") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		pkg := filepath.ToSlash(rel)
		if _, ok := graph[pkg]; !ok {
			graph[pkg] = nil
		}
		for _, imp := range f.Imports {
			ip := strings.Trim(imp.Path.Value, `"`)
			if dep, ok := strings.CutPrefix(ip, module+"/"); ok && !slices.Contains(graph[pkg], dep) {
				graph[pkg] = append(graph[pkg], dep)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", root, err)
	}
	return graph
}

// reach lists every module package pkg imports, directly or not.
func reach(graph map[string][]string, pkg string) []string {
	seen := map[string]bool{pkg: true}
	var out []string
	queue := []string{pkg}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, d := range graph[p] {
			if !seen[d] {
				seen[d] = true
				out = append(out, d)
				queue = append(queue, d)
			}
		}
	}
	slices.Sort(out)
	return out
}

// path shows one import chain from a to b, for the error message.
func path(graph map[string][]string, a, b string) string {
	prev := map[string]string{a: ""}
	queue := []string{a}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == b {
			break
		}
		for _, d := range graph[p] {
			if _, ok := prev[d]; !ok {
				prev[d] = p
				queue = append(queue, d)
			}
		}
	}
	chain := []string{b}
	for p := prev[b]; p != ""; p = prev[p] {
		chain = append([]string{p}, chain...)
	}
	return strings.Join(chain, " -> ")
}
