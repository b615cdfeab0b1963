package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsFlowNamesRealCode keeps docs/flow.md true to the code it walks through: every path
// it names (pkg/..., cmd/...) exists, and every method it names as (*Type).name, (Type).name
// or type.name is declared in a package whose path the same paragraph or list item names.
func TestDocsFlowNamesRealCode(t *testing.T) {
	root := "../.."
	doc, err := os.ReadFile(filepath.Join(root, "docs", "flow.md"))
	if err != nil {
		t.Fatal(err)
	}
	fence := regexp.MustCompile("(?ms)^```.*?^```")
	item := regexp.MustCompile(`(?m)^(?:- |\n)`) // a list item or a paragraph starts
	ticks := regexp.MustCompile("`([^`\n]+)`")
	method := regexp.MustCompile(`^\(?\*?([A-Za-z]\w*)\)?\.([A-Za-z]\w*)$`)
	checked := 0
	for _, part := range item.Split(fence.ReplaceAllString(string(doc), ""), -1) {
		var dirs, names []string
		for _, m := range ticks.FindAllStringSubmatch(part, -1) {
			tok := m[1]
			if !strings.HasPrefix(tok, "pkg/") && !strings.HasPrefix(tok, "cmd/") {
				names = append(names, tok)
				continue
			}
			p := strings.TrimSuffix(tok, "/*")
			fi, err := os.Stat(filepath.Join(root, p))
			if err != nil {
				t.Errorf("docs/flow.md names %s, which does not exist", tok)
				continue
			}
			if !fi.IsDir() {
				p = filepath.Dir(p)
			}
			dirs = append(dirs, p)
		}
		for _, tok := range names {
			mm := method.FindStringSubmatch(tok)
			if mm == nil {
				continue
			}
			typeDecl := regexp.MustCompile(`(?m)^type ` + mm[1] + ` `)
			decl := regexp.MustCompile(`(?m)^func \(\w+ \*?` + mm[1] + `\) ` + mm[2] + `\(`)
			isMethod := strings.Contains(tok, "(") // type.name may be a package's (loop.ToolExecutor)
			found := false
			for _, d := range dirs {
				dir := filepath.Join(root, d)
				isMethod = isMethod || declaredIn(t, dir, typeDecl)
				if declaredIn(t, dir, decl) {
					found = true
					break
				}
			}
			switch {
			case found:
				checked++
			case isMethod:
				t.Errorf("docs/flow.md names %s, which none of %v declares", tok, dirs)
			}
		}
	}
	if checked < 10 {
		t.Errorf("only %d methods checked; does docs/flow.md still name them as (*Type).method?", checked)
	}
	t.Logf("%d methods named in docs/flow.md are declared where it says", checked)
}

// declaredIn reports whether a non-test Go file of dir matches decl.
func declaredIn(t *testing.T, dir string, decl *regexp.Regexp) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if decl.Match(src) {
			return true
		}
	}
	return false
}
