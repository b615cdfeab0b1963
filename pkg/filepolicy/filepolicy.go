// Package filepolicy decides which files the agent's file tools and shell
// commands may touch.
//
// A [Policy] confines paths to one workspace directory: relative paths are
// resolved against the workspace, ".." and "~" are resolved, and every
// symlink on the way is followed by hand (also for paths that do not exist
// yet and for dangling links), so a link inside the workspace that points
// outside is caught before a write through it creates a file elsewhere.
// Device and kernel paths (/dev, /proc, /sys, named pipes, sockets, device
// nodes) and private locations (~/.ssh, ~/.aws, ~/.gnupg, .env files, the
// agentbus data directory, /etc/shadow, ...) are refused even when
// AllowOutside is set.
//
// [ClassifyCommand] is the read/write classification of shell commands that
// the exec policy (pkg/execpolicy) shares: it says whether argv only reads,
// and which paths it reads or writes, so both policies judge the same files
// the same way.
//
// The checks are static: they see the file system as it is when Resolve is
// called. A process that swaps a directory for a symlink between the check
// and the use (TOCTOU) is outside what a path check can stop; the sandbox's
// OS user is the last line for that.
package filepolicy

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Access is what the caller intends to do with a path.
type Access int

const (
	// Read: open for reading, list, stat.
	Read Access = iota + 1
	// Write: create, truncate, append, delete, rename.
	Write
)

func (a Access) String() string {
	switch a {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return fmt.Sprintf("Access(%d)", int(a))
}

// Options configure a [Policy].
type Options struct {
	// Workspace is the directory the agent works in (required). It is
	// created if missing and resolved through symlinks once, here.
	Workspace string
	// ReadRoots are further directories that may be read but not written
	// (for example the skills directory).
	ReadRoots []string
	// PrivateDirs are further private files or directories (for example the
	// agentbus data directory). A private directory that contains the
	// workspace does not hide the workspace itself.
	PrivateDirs []string
	// AllowOutside lifts workspace confinement; device and private checks
	// still apply.
	AllowOutside bool
	// Home is the user's home directory for "~" and the default private
	// list; default os.UserHomeDir().
	Home string
	// NoDefaultPrivate drops the built-in private list (tests only).
	NoDefaultPrivate bool
}

// DefaultPrivateHome lists the private entries relative to the home directory.
var DefaultPrivateHome = []string{
	".ssh", ".aws", ".gnupg", ".gpg", ".azure", ".kube", ".docker",
	".config/gcloud", ".config/gh", ".config/op", ".password-store",
	".netrc", ".npmrc", ".pypirc", ".git-credentials", ".pgpass",
	".bash_history", ".zsh_history", ".mysql_history", ".psql_history",
}

// DefaultPrivateAbs lists private absolute paths.
var DefaultPrivateAbs = []string{
	"/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-",
	"/etc/sudoers", "/etc/sudoers.d", "/etc/ssh", "/root",
	"/var/run/secrets", "/run/secrets", "/var/run/docker.sock", "/run/docker.sock",
}

// Policy is an immutable, goroutine-safe file policy. Build it with [New].
type Policy struct {
	workspace    string // absolute, symlinks resolved
	readRoots    []string
	private      []string // absolute, cleaned (both as given and resolved)
	allowOutside bool
	home         string
}

// New validates opts, creates the workspace directory if needed and returns
// the policy.
func New(opts Options) (*Policy, error) {
	if strings.TrimSpace(opts.Workspace) == "" {
		return nil, fmt.Errorf("filepolicy: workspace is required")
	}
	home := opts.Home
	if home == "" {
		h, err := os.UserHomeDir()
		if err == nil {
			home = h
		}
	}
	ws, err := filepath.Abs(opts.Workspace)
	if err != nil {
		return nil, fmt.Errorf("filepolicy: workspace %q: %w", opts.Workspace, err)
	}
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return nil, fmt.Errorf("filepolicy: create workspace: %w", err)
	}
	if ws, err = filepath.EvalSymlinks(ws); err != nil {
		return nil, fmt.Errorf("filepolicy: resolve workspace: %w", err)
	}
	p := &Policy{workspace: ws, allowOutside: opts.AllowOutside, home: home}
	for _, r := range opts.ReadRoots {
		abs, err := filepath.Abs(r)
		if err != nil {
			return nil, fmt.Errorf("filepolicy: read root %q: %w", r, err)
		}
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			abs = real
		}
		p.readRoots = append(p.readRoots, abs)
	}
	var priv []string
	if !opts.NoDefaultPrivate {
		if home != "" {
			for _, rel := range DefaultPrivateHome {
				priv = append(priv, filepath.Join(home, rel))
			}
		}
		priv = append(priv, DefaultPrivateAbs...)
	}
	priv = append(priv, opts.PrivateDirs...)
	for _, d := range priv {
		if strings.HasPrefix(d, "~/") && home != "" {
			d = filepath.Join(home, d[2:])
		}
		abs, err := filepath.Abs(d)
		if err != nil {
			continue
		}
		p.private = append(p.private, abs)
		if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
			p.private = append(p.private, real)
		}
	}
	return p, nil
}

// Workspace returns the resolved workspace directory.
func (p *Policy) Workspace() string { return p.workspace }

// PrivatePaths returns the private files and directories (absolute), for
// a sandbox to mask.
func (p *Policy) PrivatePaths() []string { return append([]string(nil), p.private...) }

// Root checks path like [Policy.Resolve] and opens it for use through an
// os.Root: the directory that holds it (the workspace, a read root, or "/"
// with AllowOutside) and the path relative to that root as written, not
// as resolved. Every operation through the Root is traversal-resistant in
// the kernel's sense: a "..", or a symlink that appears between this check
// and the use, cannot leave the root. Real is the resolved absolute path,
// for messages. The caller closes the Root.
func (p *Policy) Root(path string, access Access) (root *os.Root, rel, real string, err error) {
	real, err = p.Resolve(path, access)
	if err != nil {
		return nil, "", "", err
	}
	abs := path
	if abs == "~" || strings.HasPrefix(abs, "~/") {
		abs = filepath.Join(p.home, strings.TrimPrefix(abs[1:], "/"))
	} else if !filepath.IsAbs(abs) {
		abs = p.workspace + "/" + abs
	}
	dir := ""
	switch {
	case within(real, p.workspace):
		dir = p.workspace
	default:
		for _, r := range p.readRoots {
			if within(real, r) {
				dir = r
				break
			}
		}
	}
	if dir == "" {
		if !p.allowOutside {
			return nil, "", "", fmt.Errorf("%w: %q", ErrOutsideWorkspace, path)
		}
		dir = "/"
	}
	if r, ok := strings.CutPrefix(abs, strings.TrimSuffix(dir, "/")+"/"); ok && dir != "/" {
		rel = r
	} else if rr, err := filepath.Rel(dir, real); err == nil {
		// Named from outside (a link to the workspace): use where it lands.
		rel = rr
	} else {
		return nil, "", "", fmt.Errorf("%w: %q", ErrOutsideWorkspace, path)
	}
	if rel == "" {
		rel = "."
	}
	root, err = os.OpenRoot(dir)
	if err != nil {
		return nil, "", "", fmt.Errorf("filepolicy: open root %s: %w", dir, err)
	}
	return root, rel, real, nil
}

// Resolve checks path for the given access and returns the absolute,
// symlink-resolved path the caller must use (so the check and the use name
// the same file). Relative paths are taken against the workspace; "~" and
// "~/x" against the home directory. Errors wrap the sentinels in errors.go.
func (p *Policy) Resolve(path string, access Access) (string, error) {
	if path == "" || strings.ContainsRune(path, 0) {
		return "", fmt.Errorf("%w: %q", ErrEmptyPath, path)
	}
	orig := path
	if path == "~" || strings.HasPrefix(path, "~/") {
		if p.home == "" {
			return "", fmt.Errorf("%w: %q: no home directory", ErrOutsideWorkspace, orig)
		}
		path = filepath.Join(p.home, strings.TrimPrefix(path[1:], "/"))
	}
	if !filepath.IsAbs(path) {
		// Not filepath.Join: that would clean "link/.." lexically, while
		// the kernel resolves ".." after following link.
		path = p.workspace + "/" + path
	}
	lexical := filepath.Clean(path)
	if err := p.checkName(lexical, access, orig); err != nil {
		return "", err
	}
	real, err := resolveLinks(path)
	if err != nil {
		return "", fmt.Errorf("resolve %q: %w", orig, err)
	}
	if err := p.checkName(real, access, orig); err != nil {
		if !p.allowOutside && within(lexical, p.workspace) && !within(real, p.workspace) {
			return "", fmt.Errorf("%w: %q -> %s", ErrSymlinkEscape, orig, real)
		}
		return "", err
	}
	if isNullDevice(real) {
		return real, nil
	}
	if fi, err := os.Stat(real); err == nil {
		if fi.Mode()&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket|fs.ModeIrregular) != 0 {
			return "", fmt.Errorf("%w: %q is a %s", ErrDevicePath, orig, fileKind(fi.Mode()))
		}
	}
	return real, nil
}

// checkName applies the name-based rules to an absolute, cleaned path.
func (p *Policy) checkName(abs string, access Access, orig string) error {
	if isNullDevice(abs) {
		return nil
	}
	for _, d := range []string{"/dev", "/proc", "/sys"} {
		if within(abs, d) {
			return fmt.Errorf("%w: %q", ErrDevicePath, orig)
		}
	}
	for _, d := range p.private {
		if within(abs, d) && !(within(p.workspace, d) && within(abs, p.workspace)) {
			return fmt.Errorf("%w: %q", ErrPrivatePath, orig)
		}
	}
	if IsSecretFileName(filepath.Base(abs)) {
		return fmt.Errorf("%w: %q (secret file name)", ErrPrivatePath, orig)
	}
	if access == Write && runsPrograms(abs) {
		return fmt.Errorf("%w: %q (git configuration and hooks run programs)", ErrPrivatePath, orig)
	}
	if within(abs, p.workspace) || p.allowOutside {
		return nil
	}
	for _, r := range p.readRoots {
		if within(abs, r) {
			if access == Write {
				return fmt.Errorf("%w: %q", ErrReadOnly, orig)
			}
			return nil
		}
	}
	return fmt.Errorf("%w: %q (workspace %s)", ErrOutsideWorkspace, orig, p.workspace)
}

// secretNames are base names that hold credentials wherever they are.
var secretNames = map[string]bool{
	".envrc": true, ".netrc": true, "_netrc": true, ".git-credentials": true, ".pgpass": true, ".npmrc": true, ".pypirc": true,
	".yarnrc": true, ".yarnrc.yml": true, ".dockercfg": true, ".htpasswd": true, ".boto": true, ".s3cfg": true, ".vault-token": true,
	"credentials": true, "credentials.json": true, "credentials.yml": true, "credentials.yaml": true, "secrets.json": true,
	"secrets.yml": true, "secrets.yaml": true, "service-account.json": true, "authorized_keys": true,
	"terraform.tfstate": true, "terraform.tfvars": true, ".terraformrc": true, "kubeconfig": true, ".kubeconfig": true,
}

// secretExts are extensions of key and credential files (NATS .creds and
// .nk included).
var secretExts = []string{".key", ".pem", ".p12", ".pfx", ".jks", ".keystore", ".kdbx", ".creds", ".nk", ".seed", ".gpg", ".asc", ".ppk", ".tfvars"}

// IsSecretFileName reports whether a base name conventionally holds
// secrets: .env and .env.* (except examples and templates), .envrc, SSH
// keys (id_rsa*, id_ed25519*, ...), key and certificate stores (*.key,
// *.pem, *.p12, ...), NATS credentials (*.creds, *.nk), registry and cloud
// credential files (.npmrc, .pypirc, .git-credentials, credentials.json,
// ...) and authorized_keys.
func IsSecretFileName(base string) bool {
	b := strings.ToLower(base)
	if b == ".env" || strings.HasPrefix(b, ".env.") {
		switch b {
		case ".env.example", ".env.sample", ".env.template", ".env.dist":
			return false
		}
		return true
	}
	if secretNames[b] {
		return true
	}
	for _, k := range []string{"id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_xmss"} {
		if strings.HasPrefix(b, k) {
			return true
		}
	}
	for _, e := range secretExts {
		if strings.HasSuffix(b, e) {
			return true
		}
	}
	return false
}

// runsPrograms reports whether abs is configuration that makes a program
// run commands of its own (git's config and hooks run on git status and
// git commit): such files may be read but not written.
func runsPrograms(abs string) bool {
	dir, base := filepath.Base(filepath.Dir(abs)), filepath.Base(abs)
	if dir == ".git" && (base == "config" || base == "hooks") {
		return true
	}
	return strings.Contains(abs, "/.git/hooks/") || strings.HasSuffix(abs, "/.git/hooks")
}

func isNullDevice(abs string) bool {
	return abs == "/dev/null"
}

// within reports whether path is dir or below it (both absolute, cleaned).
func within(path, dir string) bool {
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}

// maxLinks bounds symlink hops, like the kernel's ELOOP limit.
const maxLinks = 40

// resolveLinks follows symlinks component by component. Unlike
// filepath.EvalSymlinks it succeeds for paths whose tail does not exist yet
// and for dangling links, returning where a create would land.
func resolveLinks(abs string) (string, error) {
	hops := 0
	rest := strings.Split(strings.TrimPrefix(abs, "/"), "/")
	cur := "/"
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			// Not there (or not readable): a create makes it a plain
			// directory, so a later ".." comes back to cur and the links
			// after it are still followed (nope/../link/secret).
			cur = next
			continue
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		hops++
		if hops > maxLinks {
			return "", fmt.Errorf("%w: %s", ErrSymlinkLoop, abs)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return cur, nil
}

func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "special file"
}
