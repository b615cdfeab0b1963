package filepolicy

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
)

type fixture struct {
	root, ws, outside, home, data string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := fixture{
		root:    root,
		data:    filepath.Join(root, "data"),
		ws:      filepath.Join(root, "data", "workspace"),
		outside: filepath.Join(root, "outside"),
		home:    filepath.Join(root, "home"),
	}
	for _, d := range []string{f.ws, f.outside, filepath.Join(f.home, ".ssh"), filepath.Join(f.ws, "sub"), filepath.Join(root, "skills")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, body string) {
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(f.ws, "notes.txt"), "hi")
	write(filepath.Join(f.ws, ".env"), "K=v")
	write(filepath.Join(f.ws, ".env.example"), "K=")
	write(filepath.Join(f.outside, "secret.txt"), "s")
	write(filepath.Join(f.home, ".ssh", "id_rsa"), "key")
	write(filepath.Join(f.data, "sessions.db"), "db")
	write(filepath.Join(root, "skills", "SKILL.md"), "# s")
	links := map[string]string{
		"link_out":    f.outside,
		"chain2":      "link_out",
		"chain1":      "chain2",
		"dangling":    filepath.Join(f.outside, "missing", "new.txt"),
		"loop1":       "loop2",
		"loop2":       "loop1",
		"inside_link": "sub",
		"up":          "..",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(f.ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(f.ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestResolve(t *testing.T) {
	f := newFixture(t)
	p, err := New(Options{Workspace: f.ws, Home: f.home, PrivateDirs: []string{f.data}, ReadRoots: []string{filepath.Join(f.root, "skills")}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		path   string
		access Access
		want   string // resolved path on success
		err    error
	}{
		{"relative file", "notes.txt", Read, filepath.Join(f.ws, "notes.txt"), nil},
		{"new file", "out/new.txt", Write, filepath.Join(f.ws, "out/new.txt"), nil},
		{"absolute inside", filepath.Join(f.ws, "notes.txt"), Read, filepath.Join(f.ws, "notes.txt"), nil},
		{"dot dot inside", "sub/../notes.txt", Read, filepath.Join(f.ws, "notes.txt"), nil},
		{"symlink inside", "inside_link/x.txt", Write, filepath.Join(f.ws, "sub/x.txt"), nil},
		{"workspace itself", ".", Read, f.ws, nil},
		{"dev null", "/dev/null", Write, "/dev/null", nil},
		{"env example", ".env.example", Read, filepath.Join(f.ws, ".env.example"), nil},
		{"read root", filepath.Join(f.root, "skills", "SKILL.md"), Read, filepath.Join(f.root, "skills", "SKILL.md"), nil},

		{"empty", "", Read, "", ErrEmptyPath},
		{"nul", "a\x00b", Read, "", ErrEmptyPath},
		{"dot dot into data dir", "../sessions.db", Read, "", ErrPrivatePath},
		{"dot dot escape", "../../outside/secret.txt", Read, "", ErrOutsideWorkspace},
		{"deep dot dot", "sub/../../../outside/secret.txt", Read, "", ErrOutsideWorkspace},
		{"absolute outside", filepath.Join(f.outside, "secret.txt"), Read, "", ErrOutsideWorkspace},
		{"etc passwd", "/etc/passwd", Read, "", ErrOutsideWorkspace},
		{"symlink out", "link_out/secret.txt", Read, "", ErrSymlinkEscape},
		{"symlink chain", "chain1/secret.txt", Read, "", ErrSymlinkEscape},
		{"new file under symlinked dir", "link_out/new.txt", Write, "", ErrSymlinkEscape},
		{"dangling link write", "dangling", Write, "", ErrSymlinkEscape},
		{"link then dot dot", "inside_link/../../../outside/secret.txt", Read, "", ErrOutsideWorkspace},
		{"link to parent", "up/outside/secret.txt", Read, "", ErrSymlinkEscape},
		{"symlink loop", "loop1/x", Read, "", ErrSymlinkLoop},
		{"dev zero", "/dev/zero", Read, "", ErrDevicePath},
		{"dev sda", "/dev/sda", Write, "", ErrDevicePath},
		{"proc environ", "/proc/self/environ", Read, "", ErrDevicePath},
		{"sys", "/sys/kernel/notes", Read, "", ErrDevicePath},
		{"named pipe", "fifo", Read, "", ErrDevicePath},
		{"ssh key via tilde", "~/.ssh/id_rsa", Read, "", ErrPrivatePath},
		{"dot env", ".env", Read, "", ErrPrivatePath},
		{"dot env write", "sub/.env.local", Write, "", ErrPrivatePath},
		{"data dir", filepath.Join(f.data, "sessions.db"), Read, "", ErrPrivatePath},
		{"etc shadow", "/etc/shadow", Read, "", ErrPrivatePath},
		{"read root write", filepath.Join(f.root, "skills", "SKILL.md"), Write, "", ErrReadOnly},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := p.Resolve(tt.path, tt.access)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("Resolve(%q) = %q, %v; want error %v", tt.path, got, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve(%q): %v", tt.path, err)
			}
			if got != tt.want {
				t.Fatalf("Resolve(%q) = %q, want %q", tt.path, got, tt.want)
			}
		})
	}
}

func TestAllowOutside(t *testing.T) {
	f := newFixture(t)
	p, err := New(Options{Workspace: f.ws, Home: f.home, AllowOutside: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Resolve(filepath.Join(f.outside, "secret.txt"), Read); err != nil {
		t.Fatalf("outside with AllowOutside: %v", err)
	}
	if _, err := p.Resolve("link_out/secret.txt", Write); err != nil {
		t.Fatalf("symlink out with AllowOutside: %v", err)
	}
	for _, bad := range []string{"~/.ssh/id_rsa", "/proc/1/mem", "/etc/shadow"} {
		if _, err := p.Resolve(bad, Read); err == nil {
			t.Errorf("Resolve(%q) allowed with AllowOutside", bad)
		}
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Fatal("New without workspace succeeded")
	}
}

func TestClassifyCommand(t *testing.T) {
	tests := []struct {
		argv  []string
		class Class
		uses  []PathUse
	}{
		{[]string{"cat", "a", "-", "b"}, ReadOnly, []PathUse{{"a", Read}, {"b", Read}}},
		{[]string{"head", "-n", "5", "a"}, ReadOnly, []PathUse{{"a", Read}}},
		{[]string{"head", "-n5", "a"}, ReadOnly, []PathUse{{"a", Read}}},
		{[]string{"tail", "-5", "a"}, ReadOnly, []PathUse{{"a", Read}}},
		{[]string{"grep", "-rn", "pat", "dir"}, ReadOnly, []PathUse{{"dir", Read}}},
		{[]string{"grep", "-e", "pat", "f1", "f2"}, ReadOnly, []PathUse{{"f1", Read}, {"f2", Read}}},
		{[]string{"grep", "-f", "pats", "f1"}, ReadOnly, []PathUse{{"pats", Read}, {"f1", Read}}},
		{[]string{"grep", "--include=*.go", "x", "."}, ReadOnly, []PathUse{{".", Read}}},
		{[]string{"ls"}, ReadOnly, nil},
		{[]string{"echo", "/etc/shadow"}, ReadOnly, nil},
		{[]string{"sort", "-o", "out", "in"}, Writes, []PathUse{{"out", Write}, {"in", Read}}},
		{[]string{"sort", "--output=out", "in"}, Writes, []PathUse{{"out", Write}, {"in", Read}}},
		{[]string{"sort", "--compress-program=sh", "in"}, Unknown, nil},
		{[]string{"uniq", "in", "out"}, Writes, []PathUse{{"in", Read}, {"out", Write}}},
		{[]string{"date", "-s", "2020-01-01"}, Writes, nil},
		{[]string{"date", "+%s"}, ReadOnly, nil},
		{[]string{"hostname"}, ReadOnly, nil},
		{[]string{"hostname", "evil"}, Writes, nil},
		{[]string{"find"}, ReadOnly, []PathUse{{".", Read}}},
		{[]string{"find", "src", "docs", "-name", "*.go"}, ReadOnly, []PathUse{{"src", Read}, {"docs", Read}}},
		{[]string{"find", "-L", "src", "-type", "f"}, ReadOnly, []PathUse{{"src", Read}}},
		{[]string{"find", ".", "-delete"}, Writes, []PathUse{{".", Write}}},
		{[]string{"find", ".", "-fprint", "out"}, Writes, []PathUse{{".", Read}, {"out", Write}}},
		{[]string{"find", ".", "-exec", "rm", "{}", ";"}, Unknown, nil},
		{[]string{"rm", "-rf", "x"}, Unknown, nil},
		{[]string{"python3", "x.py"}, Unknown, nil},
		{nil, Unknown, nil},
	}
	for _, tt := range tests {
		class, uses := ClassifyCommand(tt.argv)
		if class != tt.class || !reflect.DeepEqual(uses, tt.uses) {
			t.Errorf("ClassifyCommand(%q) = %v %v, want %v %v", tt.argv, class, uses, tt.class, tt.uses)
		}
	}
}

func BenchmarkResolve(b *testing.B) {
	ws := b.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, "a", "b", "c"), 0o755); err != nil {
		b.Fatal(err)
	}
	p, err := New(Options{Workspace: ws})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Resolve("a/b/c/file.txt", Write); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRootTraversal: Resolve follows links behind a missing component and
// "..", and the os.Root from Root keeps a later swap of a directory for a
// symlink (between check and use) inside the workspace.
func TestRootTraversal(t *testing.T) {
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	outside := filepath.Join(root, "outside")
	for _, d := range []string{filepath.Join(ws, "sub"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Workspace: ws, Home: filepath.Join(root, "home")})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path   string
		access Access
		want   error
	}{
		{"nope/../link/secret", Read, ErrSymlinkEscape},
		{"nope/../link/secret", Write, ErrSymlinkEscape},
		{"a/b/../../link/x", Write, ErrSymlinkEscape},
		{"nope/../../outside/x", Write, ErrOutsideWorkspace},
		{"sub/../ok", Write, nil},
		{"nope/../ok", Write, nil},
		{".envrc", Read, ErrPrivatePath},
		{"deploy/server.key", Read, ErrPrivatePath},
		{"id_rsa.pub", Read, ErrPrivatePath},
		{"x/nats.creds", Read, ErrPrivatePath},
		{".git/config", Write, ErrPrivatePath},
		{".git/config", Read, nil},
		{".git/hooks/pre-commit", Write, ErrPrivatePath},
		{"~/.ssh/authorized_keys", Write, ErrPrivatePath},
	}
	for _, tt := range tests {
		_, err := p.Resolve(tt.path, tt.access)
		if (tt.want == nil) != (err == nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
			t.Errorf("Resolve(%q, %v) = %v, want %v", tt.path, tt.access, err, tt.want)
		}
	}
	r, rel, _, err := p.Root("sub/f", Write)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Swap sub for a link out after the check.
	if err := os.Remove(filepath.Join(ws, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "sub")); err != nil {
		t.Fatal(err)
	}
	if fh, err := r.OpenFile(rel, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
		fh.Close()
		t.Fatal("write through a swapped-in symlink succeeded")
	}
	if _, err := os.Stat(filepath.Join(outside, "f")); err == nil {
		t.Fatal("file created outside the workspace")
	}
}
