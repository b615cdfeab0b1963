package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sized are the trees whose types and files stay small enough to read (issue 38): the turn
// worker and the protocol packages it was split into.
var sized = []string{"pkg/turn", "pkg/toolbus", "pkg/tasks", "pkg/inbox"}

const (
	maxMethods   = 40  // methods declared on one type
	maxFileLines = 800 // lines of one non-test file
)

// TestTurnWorkerStaysSmall keeps the limits the turn worker's redesign set: no type under the
// sized trees declares more than maxMethods methods, and no non-test file there has more than
// maxFileLines lines. A type that outgrows them is several things; split it where it is used.
func TestTurnWorkerStaysSmall(t *testing.T) {
	for _, root := range sized {
		methods := map[string]int{} // "dir.Type"
		var biggest string          // the longest file
		var biggestLines int
		err := filepath.WalkDir(filepath.Join("../..", root), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			src, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			n := strings.Count(string(src), "\n")
			if n > maxFileLines {
				t.Errorf("%s has %d lines, more than %d", p, n, maxFileLines)
			}
			if n > biggestLines {
				biggest, biggestLines = p, n
			}
			f, err := parser.ParseFile(token.NewFileSet(), p, src, 0)
			if err != nil {
				return err
			}
			for _, decl := range f.Decls {
				fd, ok := decl.(*ast.FuncDecl)
				if !ok || fd.Recv == nil {
					continue
				}
				typ := fd.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				if ix, ok := typ.(*ast.IndexExpr); ok {
					typ = ix.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					methods[filepath.Dir(p)+"."+id.Name]++
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(methods) == 0 {
			t.Errorf("%s: no methods found; is the module root ../..?", root)
		}
		most, mostN := "", 0
		for typ, n := range methods {
			if n > maxMethods {
				t.Errorf("%s has %d methods, more than %d", typ, n, maxMethods)
			}
			if n > mostN || n == mostN && typ < most {
				most, mostN = typ, n
			}
		}
		t.Logf("%s: most methods %s (%d), longest file %s (%d lines)", root, most, mostN, biggest, biggestLines)
	}
}
