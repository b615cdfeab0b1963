// Package memory is the seed's 文件制记忆: durable notes the model keeps in plain Markdown files,
// data/memory/MEMORY.md (long-term) and data/memory/<YYYY-MM-DD>.md (the day's notes), plus the
// bootstrap file AGENTS.md, which the seed makes writable by the model (SOUL.md is not).
//
// Files are capped per file and in total, and every cut lands on a UTF-8 character boundary.
// A Store may be used concurrently; writes of one process are serialized, and each write
// replaces the file atomically (temp file + rename), so a reader never sees half a note.
// Several processes sharing one directory may lose one of two simultaneous appends.
package memory

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/identity"
)

var (
	// ErrNotWritable: the model asked to write a file it may not (SOUL.md, a path, any other
	// name). The tool reports it to the model as an error result.
	ErrNotWritable = errors.New("memory: file is not writable by the model")
	// ErrTooLarge: the write would grow the file past its cap. Nothing is written.
	ErrTooLarge = errors.New("memory: file would exceed its size limit")
)

// File names the model may write.
const (
	LongTerm = "MEMORY.md"
	Agents   = "AGENTS.md"
	Soul     = "SOUL.md"
	Today    = "today" // the day's notes, <YYYY-MM-DD>.md
)

// Limits caps the files (bytes).
type Limits struct {
	LongTerm int // MEMORY.md (default 16 KiB)
	Daily    int // <date>.md (default 8 KiB)
	Agents   int // AGENTS.md (default 16 KiB, the seed's bootstrap cap)
	// Total caps the Memory section of the system prompt (default 24 KiB).
	Total int
}

func (l *Limits) defaults() {
	if l.LongTerm <= 0 {
		l.LongTerm = 16 << 10
	}
	if l.Daily <= 0 {
		l.Daily = 8 << 10
	}
	if l.Agents <= 0 {
		l.Agents = 16 << 10
	}
	if l.Total <= 0 {
		l.Total = 24 << 10
	}
}

// Store reads and writes the memory files under a data directory.
type Store struct {
	dataDir string
	limits  Limits
	now     func() time.Time
	mu      sync.Mutex

	// The last Section, for sectionTTL: every turn's system prompt asks for it, and reading it
	// anew is three file reads and the date arithmetic for their names. version counts the
	// writes through this Store; a Section read across one is not kept.
	secMu      sync.Mutex
	secBody    string
	secAt      time.Time
	secVersion uint64
	version    atomic.Uint64
}

// sectionTTL is how long Section reuses what it read: a write through the Store shows at once,
// an edit by another process or by hand within this long.
const sectionTTL = time.Second

// New returns a store for dataDir (memory files in dataDir/memory, AGENTS.md in dataDir).
func New(dataDir string, limits Limits) *Store {
	limits.defaults()
	return &Store{dataDir: dataDir, limits: limits, now: time.Now}
}

// Dir is where MEMORY.md and the daily notes live.
func (s *Store) Dir() string { return filepath.Join(s.dataDir, "memory") }

// resolve maps a name the model gave to a path and its cap.
func (s *Store) resolve(name string) (string, int, error) {
	switch strings.TrimSpace(name) {
	case LongTerm, "memory/" + LongTerm:
		return filepath.Join(s.Dir(), LongTerm), s.limits.LongTerm, nil
	case Today, "", "daily":
		return filepath.Join(s.Dir(), s.now().UTC().Format("2006-01-02")+".md"), s.limits.Daily, nil
	case Agents:
		return filepath.Join(s.dataDir, Agents), s.limits.Agents, nil
	case Soul:
		return "", 0, fmt.Errorf("%w: %s is the bot's persona and read-only", ErrNotWritable, Soul)
	}
	return "", 0, fmt.Errorf("%w: %q (writable: %s, %s, %s)", ErrNotWritable, name, LongTerm, Today, Agents)
}

// Write appends text to the named file (append) or replaces it. It returns the file's new size.
func (s *Store) Write(name, text string, replace bool) (int, error) {
	path, limit, err := s.resolve(name)
	if err != nil {
		return 0, err
	}
	if !utf8.ValidString(text) {
		return 0, errors.New("memory: text is not valid UTF-8")
	}
	// The files are shared by every chat and placed in system prompts: what the model copies
	// into them from a user's words goes through the user-text sanitizer, so a spoofed sender
	// prefix cannot be laundered through memory into another chat (issue 36).
	text = identity.SanitizeText(text)
	s.mu.Lock()
	defer s.mu.Unlock()
	var next string
	if replace {
		next = text
	} else {
		old, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("memory: read %s: %w", filepath.Base(path), err)
		}
		next = string(old)
		if next != "" && !strings.HasSuffix(next, "\n") {
			next += "\n"
		}
		next += strings.TrimRight(text, "\n") + "\n"
	}
	if len(next) > limit {
		return 0, fmt.Errorf("%w: %s would be %d bytes, limit %d; rewrite it shorter (replace)", ErrTooLarge, filepath.Base(path), len(next), limit)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return 0, fmt.Errorf("memory: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".memory-*")
	if err != nil {
		return 0, fmt.Errorf("memory: %w", err)
	}
	_, werr := tmp.WriteString(next)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return 0, fmt.Errorf("memory: write %s: %w", filepath.Base(path), err)
	}
	err = os.Rename(tmp.Name(), path)
	s.version.Add(1) // after the rename: a Section that read the old file is not kept
	if err != nil {
		_ = os.Remove(tmp.Name())
		return 0, fmt.Errorf("memory: write %s: %w", filepath.Base(path), err)
	}
	return len(next), nil
}

// Section is the Memory section of the system prompt: MEMORY.md, then yesterday's and today's
// notes, each capped, the whole capped at Limits.Total ("" when there are none). What it read
// is reused for up to a second (sectionTTL); a Write through this Store is seen at once.
func (s *Store) Section() string {
	now := s.now()
	v := s.version.Load()
	s.secMu.Lock()
	if s.secVersion == v && !s.secAt.IsZero() && now.Sub(s.secAt) < sectionTTL && now.Sub(s.secAt) >= 0 &&
		now.UTC().YearDay() == s.secAt.UTC().YearDay() {
		body := s.secBody
		s.secMu.Unlock()
		return body
	}
	s.secMu.Unlock()
	body := s.readSection(now.UTC())
	if s.version.Load() == v { // no write went by while reading
		s.secMu.Lock()
		s.secBody, s.secAt, s.secVersion = body, now, v
		s.secMu.Unlock()
	}
	return body
}

func (s *Store) readSection(now time.Time) string {
	parts := []struct{ title, path string }{
		{"Long-term memory (memory/MEMORY.md)", filepath.Join(s.Dir(), LongTerm)},
		{"Notes of " + now.AddDate(0, 0, -1).Format("2006-01-02"), filepath.Join(s.Dir(), now.AddDate(0, 0, -1).Format("2006-01-02")+".md")},
		{"Notes of today, " + now.Format("2006-01-02"), filepath.Join(s.Dir(), now.Format("2006-01-02")+".md")},
	}
	var b strings.Builder
	for i, p := range parts {
		data, err := os.ReadFile(p.path)
		if err != nil || strings.TrimSpace(string(data)) == "" {
			continue
		}
		limit := s.limits.Daily
		if i == 0 {
			limit = s.limits.LongTerm
		}
		fmt.Fprintf(&b, "### %s\n%s\n", p.title, Cap(strings.TrimSpace(identity.SanitizeText(string(data))), limit))
	}
	return Cap(b.String(), s.limits.Total)
}

// truncated marks a capped text.
const truncated = "\n…(truncated)"

// Cap returns s cut to at most n bytes on a character boundary, marked when cut.
func Cap(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n -= len(truncated)
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + truncated
}
