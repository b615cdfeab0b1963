package builtin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/filepolicy"
	"github.com/agentbus/agentbus/pkg/tools"
)

// Limits of the file tools: big enough for source files, small enough for a context window.
const (
	maxReadBytes    = 256 << 10
	maxListEntries  = 500
	maxGlobResults  = 500
	maxGrepFileSize = 2 << 20
	maxGrepFiles    = 5000
	maxGrepLine     = 300
	defaultGrepHits = 100
)

type fileTools struct{ fp *filepolicy.Policy }

// rel shows paths relative to the workspace when they are inside it.
func (f fileTools) rel(abs string) string {
	if r, err := filepath.Rel(f.fp.Workspace(), abs); err == nil && !strings.HasPrefix(r, "..") {
		return filepath.ToSlash(r)
	}
	return abs
}

// open applies the file policy and returns the os.Root every operation on
// p goes through (so no "..", symlink or swap between check and use leaves
// the workspace), p relative to it, and the resolved path for messages.
// Refusals are worded for the model. The caller closes the Root.
func (f fileTools) open(p string, a filepolicy.Access) (*os.Root, string, string, *tools.Result) {
	root, rel, abs, err := f.fp.Root(p, a)
	if err != nil {
		r := tools.ErrorResult("%s %q refused: %v", a, p, err)
		return nil, "", "", &r
	}
	return root, rel, abs, nil
}

func details(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

func isBinary(b []byte) bool {
	if len(b) > 8000 {
		b = b[:8000]
	}
	return bytes.IndexByte(b, 0) >= 0
}

type readArgs struct {
	Path   string `json:"path" jsonschema:"file path, relative to the workspace"`
	Offset int    `json:"offset,omitempty" jsonschema:"first line to return, 1-based (default 1)"`
	Limit  int    `json:"limit,omitempty" jsonschema:"maximum number of lines (default: the whole file up to 256 KiB)"`
}

func (f fileTools) readFile() tools.Tool {
	return tools.MustNew("read_file", "Read a text file from the workspace. Use offset/limit (lines) for large files.",
		func(ctx context.Context, c tools.Call, a readArgs) (tools.Result, error) {
			root, rel, abs, bad := f.open(a.Path, filepolicy.Read)
			if bad != nil {
				return *bad, nil
			}
			defer root.Close()
			st, err := root.Stat(rel)
			if err != nil {
				return tools.ErrorResult("read %s: %v", a.Path, err), nil
			}
			if st.IsDir() {
				return tools.ErrorResult("%s is a directory; use list_dir", a.Path), nil
			}
			fh, err := root.Open(rel)
			if err != nil {
				return tools.ErrorResult("read %s: %v", a.Path, err), nil
			}
			defer fh.Close()
			sc := bufio.NewScanner(fh)
			sc.Buffer(make([]byte, 64<<10), maxReadBytes)
			start := max(a.Offset, 1)
			var out strings.Builder
			line, shown, truncated := 0, 0, false
			for sc.Scan() {
				line++
				if line < start {
					continue
				}
				if a.Limit > 0 && shown >= a.Limit {
					truncated = true
					break
				}
				b := sc.Bytes()
				if isBinary(b) {
					return tools.ErrorResult("%s looks like a binary file", a.Path), nil
				}
				if out.Len()+len(b) > maxReadBytes {
					truncated = true
					break
				}
				out.Write(b)
				out.WriteByte('\n')
				shown++
			}
			if err := sc.Err(); err != nil {
				return tools.ErrorResult("read %s: %v", a.Path, err), nil
			}
			text := out.String()
			if truncated {
				text += fmt.Sprintf("\n[showing lines %d-%d; more follows, use offset=%d]", start, start+shown-1, start+shown)
			}
			return tools.Result{Content: tools.TextResult(text).Content,
				Details: details(map[string]any{"path": f.rel(abs), "lines": shown, "truncated": truncated})}, nil
		}, tools.Idempotent(), tools.WithKeywords("read", "file", "cat", "读取", "文件"), tools.WithSource("builtin"))
}

type writeArgs struct {
	Path    string `json:"path" jsonschema:"file path, relative to the workspace"`
	Content string `json:"content" jsonschema:"the text to write"`
	Append  bool   `json:"append,omitempty" jsonschema:"append instead of replacing the file"`
}

func (f fileTools) writeFile() tools.Tool {
	return tools.MustNew("write_file", "Write (or append to) a text file in the workspace, creating parent directories.",
		func(ctx context.Context, c tools.Call, a writeArgs) (tools.Result, error) {
			root, rel, abs, bad := f.open(a.Path, filepolicy.Write)
			if bad != nil {
				return *bad, nil
			}
			defer root.Close()
			if d := filepath.Dir(rel); d != "." {
				if err := root.MkdirAll(d, 0o755); err != nil {
					return tools.ErrorResult("create directory for %s: %v", a.Path, err), nil
				}
			}
			flag := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
			if a.Append {
				flag = os.O_CREATE | os.O_WRONLY | os.O_APPEND
			}
			fh, err := root.OpenFile(rel, flag, 0o644)
			if err != nil {
				return tools.ErrorResult("write %s: %v", a.Path, err), nil
			}
			_, werr := fh.WriteString(a.Content)
			if cerr := fh.Close(); werr == nil {
				werr = cerr
			}
			if werr != nil {
				return tools.ErrorResult("write %s: %v", a.Path, werr), nil
			}
			verb := "Wrote"
			if a.Append {
				verb = "Appended"
			}
			return tools.Result{Content: tools.TextResult(fmt.Sprintf("%s %d bytes to %s", verb, len(a.Content), f.rel(abs))).Content,
				Details: details(map[string]any{"path": f.rel(abs), "bytes": len(a.Content)})}, nil
		}, tools.WithKeywords("write", "save", "file", "写入", "保存", "文件"), tools.WithSource("builtin"))
}

type editArgs struct {
	Path       string `json:"path" jsonschema:"file path, relative to the workspace"`
	OldString  string `json:"old_string" jsonschema:"exact text to replace; must occur exactly once unless replace_all"`
	NewString  string `json:"new_string" jsonschema:"replacement text"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence"`
}

func (f fileTools) editFile() tools.Tool {
	return tools.MustNew("edit_file", "Replace exact text in a file. old_string must match exactly once (include surrounding lines to make it unique) unless replace_all is set.",
		func(ctx context.Context, c tools.Call, a editArgs) (tools.Result, error) {
			if a.OldString == "" {
				return tools.ErrorResult("old_string must not be empty; use write_file to create a file"), nil
			}
			if a.OldString == a.NewString {
				return tools.ErrorResult("old_string and new_string are identical; nothing to do"), nil
			}
			root, rel, abs, bad := f.open(a.Path, filepolicy.Write)
			if bad != nil {
				return *bad, nil
			}
			defer root.Close()
			data, err := root.ReadFile(rel)
			if err != nil {
				return tools.ErrorResult("edit %s: %v", a.Path, err), nil
			}
			text := string(data)
			n := strings.Count(text, a.OldString)
			switch {
			case n == 0:
				return tools.ErrorResult("old_string was not found in %s; read the file and copy the text exactly (whitespace included)", a.Path), nil
			case n > 1 && !a.ReplaceAll:
				return tools.ErrorResult("old_string occurs %d times in %s; add surrounding context to make it unique, or set replace_all", n, a.Path), nil
			}
			if a.ReplaceAll {
				text = strings.ReplaceAll(text, a.OldString, a.NewString)
			} else {
				text = strings.Replace(text, a.OldString, a.NewString, 1)
			}
			st, _ := root.Stat(rel)
			mode := fs.FileMode(0o644)
			if st != nil {
				mode = st.Mode().Perm()
			}
			if err := root.WriteFile(rel, []byte(text), mode); err != nil {
				return tools.ErrorResult("edit %s: %v", a.Path, err), nil
			}
			return tools.Result{Content: tools.TextResult(fmt.Sprintf("Replaced %d occurrence(s) in %s", n, f.rel(abs))).Content,
				Details: details(map[string]any{"path": f.rel(abs), "replacements": n})}, nil
		}, tools.WithKeywords("edit", "replace", "modify", "修改", "编辑"), tools.WithSource("builtin"))
}

type listArgs struct {
	Path string `json:"path,omitempty" jsonschema:"directory, relative to the workspace (default: the workspace)"`
}

func (f fileTools) listDir() tools.Tool {
	return tools.MustNew("list_dir", "List a directory of the workspace (directories end with /).",
		func(ctx context.Context, c tools.Call, a listArgs) (tools.Result, error) {
			if a.Path == "" {
				a.Path = "."
			}
			root, rel, abs, bad := f.open(a.Path, filepolicy.Read)
			if bad != nil {
				return *bad, nil
			}
			defer root.Close()
			dh, err := root.Open(rel)
			if err != nil {
				return tools.ErrorResult("list %s: %v", a.Path, err), nil
			}
			entries, err := dh.ReadDir(-1)
			dh.Close()
			if err != nil {
				return tools.ErrorResult("list %s: %v", a.Path, err), nil
			}
			sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
			var b strings.Builder
			for i, e := range entries {
				if i == maxListEntries {
					fmt.Fprintf(&b, "[%d more entries not shown]\n", len(entries)-i)
					break
				}
				switch {
				case e.IsDir():
					fmt.Fprintf(&b, "%s/\n", e.Name())
				case e.Type()&fs.ModeSymlink != 0:
					fmt.Fprintf(&b, "%s@\n", e.Name())
				default:
					size := int64(-1)
					if info, err := e.Info(); err == nil {
						size = info.Size()
					}
					fmt.Fprintf(&b, "%s\t%d\n", e.Name(), size)
				}
			}
			if len(entries) == 0 {
				b.WriteString("(empty directory)")
			}
			return tools.Result{Content: tools.TextResult(b.String()).Content,
				Details: details(map[string]any{"path": f.rel(abs), "entries": len(entries)})}, nil
		}, tools.Idempotent(), tools.WithKeywords("list", "directory", "ls", "目录", "列出"), tools.WithSource("builtin"))
}

// skipDir names directories the walkers do not descend into.
func skipDir(name string) bool {
	return name == ".git" || name == "node_modules" || name == ".hg" || name == ".svn"
}

// MatchGlob matches a slash-separated path against a pattern where "**" as a whole segment
// matches zero or more segments and the other segments follow path.Match.
func MatchGlob(pattern, name string) bool {
	return matchSegs(strings.Split(pattern, "/"), strings.Split(name, "/"))
}

func matchSegs(pat, segs []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for len(pat) > 1 && pat[1] == "**" {
				pat = pat[1:]
			}
			if len(pat) == 1 {
				return true
			}
			for i := 0; i <= len(segs); i++ {
				if matchSegs(pat[1:], segs[i:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 {
			return false
		}
		if ok, err := path.Match(pat[0], segs[0]); err != nil || !ok {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

type globArgs struct {
	Pattern string `json:"pattern" jsonschema:"glob pattern, e.g. **/*.go or src/*.ts (** matches any number of directories)"`
	Path    string `json:"path,omitempty" jsonschema:"directory to search from (default: the workspace)"`
}

func (f fileTools) glob() tools.Tool {
	return tools.MustNew("glob", "Find files by glob pattern (supports **). Returns paths relative to the search directory.",
		func(ctx context.Context, c tools.Call, a globArgs) (tools.Result, error) {
			a.Pattern = strings.TrimPrefix(filepath.ToSlash(a.Pattern), "./")
			if a.Pattern == "" {
				return tools.ErrorResult("pattern is required"), nil
			}
			if _, err := path.Match(strings.ReplaceAll(a.Pattern, "**", "x"), ""); err != nil {
				return tools.ErrorResult("bad pattern %q: %v", a.Pattern, err), nil
			}
			if a.Path == "" {
				a.Path = "."
			}
			top, rel, _, bad := f.open(a.Path, filepolicy.Read)
			if bad != nil {
				return *bad, nil
			}
			defer top.Close()
			sub, err := top.OpenRoot(rel)
			if err != nil {
				return tools.ErrorResult("glob %s: %v", a.Path, err), nil
			}
			defer sub.Close()
			var hits []string
			more := false
			err = fs.WalkDir(sub.FS(), ".", func(r string, d fs.DirEntry, err error) error {
				if err != nil {
					return nil // unreadable entries are skipped
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if r == "." {
					return nil
				}
				if d.IsDir() && skipDir(d.Name()) {
					return fs.SkipDir
				}
				if MatchGlob(a.Pattern, r) {
					if len(hits) == maxGlobResults {
						more = true
						return fs.SkipAll
					}
					if d.IsDir() {
						r += "/"
					}
					hits = append(hits, r)
				}
				return nil
			})
			if err != nil {
				return tools.ErrorResult("glob: %v", err), nil
			}
			sort.Strings(hits)
			text := strings.Join(hits, "\n")
			if len(hits) == 0 {
				text = "no matches"
			}
			if more {
				text += fmt.Sprintf("\n[stopped at %d matches; narrow the pattern]", maxGlobResults)
			}
			return tools.Result{Content: tools.TextResult(text).Content, Details: details(map[string]any{"matches": len(hits), "truncated": more})}, nil
		}, tools.Idempotent(), tools.WithKeywords("find", "files", "glob", "查找", "文件"), tools.WithSource("builtin"))
}

type grepArgs struct {
	Pattern    string `json:"pattern" jsonschema:"regular expression (Go RE2 syntax)"`
	Path       string `json:"path,omitempty" jsonschema:"file or directory to search (default: the workspace)"`
	Glob       string `json:"glob,omitempty" jsonschema:"only search files whose path matches this glob, e.g. **/*.go"`
	IgnoreCase bool   `json:"ignore_case,omitempty"`
	MaxResults int    `json:"max_results,omitempty" jsonschema:"maximum matching lines (default 100)"`
}

func (f fileTools) grep() tools.Tool {
	return tools.MustNew("grep", "Search file contents with a regular expression. Returns path:line: text for each match.",
		func(ctx context.Context, c tools.Call, a grepArgs) (tools.Result, error) {
			expr := a.Pattern
			if a.IgnoreCase {
				expr = "(?i)" + expr
			}
			re, err := regexp.Compile(expr)
			if err != nil {
				return tools.ErrorResult("bad pattern: %v", err), nil
			}
			limit := a.MaxResults
			if limit <= 0 || limit > 1000 {
				limit = defaultGrepHits
			}
			if a.Path == "" {
				a.Path = "."
			}
			top, rel, root, bad := f.open(a.Path, filepolicy.Read)
			if bad != nil {
				return *bad, nil
			}
			defer top.Close()
			st, err := top.Stat(rel)
			if err != nil {
				return tools.ErrorResult("grep %s: %v", a.Path, err), nil
			}
			// Walk and read through a Root of the search directory (or of the
			// file's directory), so nothing the walk meets leaves it.
			subRel, only := rel, ""
			if !st.IsDir() {
				subRel, only = filepath.Dir(rel), filepath.Base(rel)
				root = filepath.Dir(root)
			}
			sub, err := top.OpenRoot(subRel)
			if err != nil {
				return tools.ErrorResult("grep %s: %v", a.Path, err), nil
			}
			defer sub.Close()
			fsys := sub.FS()
			var b strings.Builder
			hits, files, skipped := 0, 0, 0
			stop := errors.New("stop")
			searchFile := func(r string) error {
				p := filepath.Join(root, filepath.FromSlash(r))
				// Every file goes through the policy: a walk must not read .env files or
				// follow a link out of the workspace that Resolve would refuse.
				if _, err := f.fp.Resolve(p, filepolicy.Read); err != nil {
					skipped++
					return nil
				}
				st, err := fs.Stat(fsys, r)
				if err != nil || !st.Mode().IsRegular() || st.Size() > maxGrepFileSize {
					skipped++
					return nil
				}
				data, err := fs.ReadFile(fsys, r)
				if err != nil || isBinary(data) {
					skipped++
					return nil
				}
				files++
				for i, line := range strings.Split(string(data), "\n") {
					if !re.MatchString(line) {
						continue
					}
					if hits == limit {
						return stop
					}
					hits++
					if len(line) > maxGrepLine {
						cut := maxGrepLine
						for cut > 0 && !utf8.RuneStart(line[cut]) {
							cut--
						}
						line = line[:cut] + "…"
					}
					fmt.Fprintf(&b, "%s:%d: %s\n", f.rel(p), i+1, line)
				}
				return nil
			}
			full := false
			if only != "" {
				full = searchFile(only) == stop
			} else {
				werr := fs.WalkDir(fsys, ".", func(r string, d fs.DirEntry, err error) error {
					if err != nil {
						return nil
					}
					if ctx.Err() != nil {
						return ctx.Err()
					}
					if d.IsDir() {
						if r != "." && skipDir(d.Name()) {
							return fs.SkipDir
						}
						return nil
					}
					if a.Glob != "" {
						if !MatchGlob(a.Glob, r) && !MatchGlob(a.Glob, d.Name()) {
							return nil
						}
					}
					if files >= maxGrepFiles {
						return stop
					}
					return searchFile(r)
				})
				if werr == stop {
					full = true
				} else if werr != nil {
					return tools.ErrorResult("grep: %v", werr), nil
				}
			}
			text := b.String()
			if hits == 0 {
				text = "no matches"
			}
			if full {
				text += fmt.Sprintf("\n[stopped after %d matches in %d files; narrow the search]", hits, files)
			}
			return tools.Result{Content: tools.TextResult(text).Content,
				Details: details(map[string]any{"matches": hits, "files": files, "skipped": skipped, "truncated": full})}, nil
		}, tools.Idempotent(), tools.WithKeywords("search", "grep", "regex", "搜索", "查找"), tools.WithSource("builtin"))
}
