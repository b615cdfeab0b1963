package skills

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Store holds the skills of one or more directories (each holding <name>/SKILL.md). Earlier
// directories win when two define the same name. A SKILL.md that does not parse is skipped
// and reported (Errors, and the error of Load), so one bad file never hides the others.
// It is safe for concurrent use.
type Store struct {
	dirs []string
	log  *slog.Logger

	mu     sync.RWMutex
	skills map[string]*Skill
	errs   []error
	sig    string
	subs   []func([]*Skill)
}

// NewStore returns an empty store over dirs; call Load (or Refresh) to read them. A missing
// directory is not an error: it just holds no skills yet.
func NewStore(log *slog.Logger, dirs ...string) *Store {
	if log == nil {
		log = slog.Default()
	}
	return &Store{dirs: dirs, log: log, skills: map[string]*Skill{}}
}

// Dirs returns the directories the store reads, in priority order.
func (s *Store) Dirs() []string { return append([]string(nil), s.dirs...) }

// OnChange registers fn to run after every reload that changed the set of skills.
func (s *Store) OnChange(fn func([]*Skill)) {
	s.mu.Lock()
	s.subs = append(s.subs, fn)
	s.mu.Unlock()
}

// skillFiles lists <dir>/<name>/SKILL.md for every dir.
func (s *Store) skillFiles() []string {
	var out []string
	for _, d := range s.dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !e.IsDir() && e.Type()&fs.ModeSymlink == 0 {
				continue
			}
			p := filepath.Join(d, e.Name(), FileName)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				out = append(out, p)
			}
		}
	}
	return out
}

// signature summarizes paths, sizes and mtimes: a change means a reload is due.
func signature(files []string) string {
	var b strings.Builder
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "%s|%d|%d\n", f, st.Size(), st.ModTime().UnixNano())
	}
	return b.String()
}

// Load (re)reads every directory. It returns the joined parse errors; the skills that parsed
// are loaded regardless.
func (s *Store) Load() error {
	_, err := s.reload(true)
	return err
}

// Refresh reloads only when a SKILL.md was added, removed or changed since the last load, and
// reports whether it did.
func (s *Store) Refresh() (bool, error) { return s.reload(false) }

func (s *Store) reload(force bool) (bool, error) {
	files := s.skillFiles()
	sig := signature(files)
	s.mu.RLock()
	same := sig == s.sig
	s.mu.RUnlock()
	if same && !force {
		return false, nil
	}
	next := map[string]*Skill{}
	var errs []error
	for _, f := range files {
		sk, err := LoadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, dup := next[sk.Name]; dup {
			errs = append(errs, fmt.Errorf("%w: %s: skill %q already defined by %s", ErrInvalidSkill, f, sk.Name, prev.Path))
			continue
		}
		next[sk.Name] = sk
	}
	s.mu.Lock()
	s.skills, s.errs, s.sig = next, errs, sig
	subs := append([]func([]*Skill){}, s.subs...)
	s.mu.Unlock()
	for _, e := range errs {
		s.log.Warn("skill skipped", "err", e)
	}
	list := s.List()
	for _, fn := range subs {
		fn(list)
	}
	return true, errors.Join(errs...)
}

// Watch polls for changes every interval (default 2s) until ctx ends. Reload errors are
// logged, never fatal.
func (s *Store) Watch(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = 2 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if changed, _ := s.Refresh(); changed {
				s.log.Info("skills reloaded", "count", len(s.List()))
			}
		}
	}
}

// List returns the loaded skills sorted by name.
func (s *Store) List() []*Skill {
	s.mu.RLock()
	out := make([]*Skill, 0, len(s.skills))
	for _, sk := range s.skills {
		out = append(out, sk)
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Get returns the skill called name.
func (s *Store) Get(name string) (*Skill, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if sk, ok := s.skills[name]; ok {
		return sk, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
}

// Errors returns the problems of the last load.
func (s *Store) Errors() []error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]error(nil), s.errs...)
}
