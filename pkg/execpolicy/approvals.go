package execpolicy

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Approvals are one endpoint's owner approvals for bash (persisted by the
// caller as JSON in KV `approvals`, one key per endpoint; the shape matches
// the seed's owner-approve-always.json v2: bashAlways + bashRules).
//
// AlwaysBash skips owner confirmation for every command that would
// otherwise be Ask or denied for lack of approval; a rule approves the
// normalized commands its regular expression matches. Neither ever lifts
// the hard blocklist, the unjudgeable-command rule or mode "deny".
type Approvals struct {
	Version    int            `json:"v"`
	AlwaysBash bool           `json:"bashAlways"`
	Rules      []ApprovalRule `json:"bashRules,omitempty"`
}

// ApprovalRule is one `/approve rule <regex>` entry.
type ApprovalRule struct {
	ID        string    `json:"id"`
	Pattern   string    `json:"pattern"`
	CreatedAt time.Time `json:"createdAt"`
	CreatedBy string    `json:"createdBy,omitempty"`
}

// ApprovalsVersion is the current Approvals.Version.
const ApprovalsVersion = 2

var timeNow = time.Now

// match reports the first rule whose pattern matches cmd. Rules whose
// pattern does not compile (edited by hand) never match.
func (a *Approvals) match(cmd string) (ApprovalRule, bool) {
	if a == nil {
		return ApprovalRule{}, false
	}
	for _, r := range a.Rules {
		re, err := compileRule(r.Pattern)
		if err == nil && re.MatchString(cmd) {
			return r, true
		}
	}
	return ApprovalRule{}, false
}

// Matches reports whether an approval rule matches the normalized command
// cmd (as found in Verdict.Pending).
func (a *Approvals) Matches(cmd string) (ApprovalRule, bool) { return a.match(cmd) }

var ruleCache = newRegexpCache(256)

func compileRule(pat string) (*regexp.Regexp, error) { return ruleCache.get(pat) }

// AddRule validates pattern and appends a rule with a fresh random id.
func (a *Approvals) AddRule(pattern, by string, now time.Time) (ApprovalRule, error) {
	pattern = strings.TrimSpace(pattern)
	if pattern == "" {
		return ApprovalRule{}, fmt.Errorf("%w: empty regular expression", ErrBadApproveCommand)
	}
	if _, err := regexp.Compile(pattern); err != nil {
		return ApprovalRule{}, fmt.Errorf("%w: invalid regular expression %q: %v", ErrBadApproveCommand, pattern, err)
	}
	for _, r := range a.Rules {
		if r.Pattern == pattern {
			return r, nil // idempotent: the same rule twice is one rule
		}
	}
	r := ApprovalRule{ID: newID(), Pattern: pattern, CreatedAt: now.UTC(), CreatedBy: by}
	a.Version = ApprovalsVersion
	a.Rules = append(a.Rules, r)
	return r, nil
}

// RevokeRule deletes the rule whose id equals idOrPrefix or starts with it
// (at least 4 characters, like the seed's 8-character prefixes).
func (a *Approvals) RevokeRule(idOrPrefix string) (ApprovalRule, error) {
	idOrPrefix = strings.TrimSpace(idOrPrefix)
	at := -1
	for i, r := range a.Rules {
		if r.ID == idOrPrefix {
			at = i
			break
		}
		if len(idOrPrefix) >= 4 && strings.HasPrefix(r.ID, idOrPrefix) {
			if at >= 0 {
				return ApprovalRule{}, fmt.Errorf("%w: %q", ErrAmbiguousRule, idOrPrefix)
			}
			at = i
		}
	}
	if at < 0 {
		return ApprovalRule{}, fmt.Errorf("%w: %q", ErrNoSuchRule, idOrPrefix)
	}
	r := a.Rules[at]
	a.Rules = append(a.Rules[:at:at], a.Rules[at+1:]...)
	return r, nil
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ApproveKind is the kind of an /approve command.
type ApproveKind int

const (
	ApproveAlwaysBash   ApproveKind = iota + 1 // /approve always bash
	ApproveAlways                              // /approve always (needs a pending bash confirmation)
	ApproveRule                                // /approve rule <regex>
	ApproveList                                // /approve list
	ApproveRevokeRule                          // /approve revoke rule <id>
	ApproveRevokeAlways                        // /approve revoke
)

// ApproveCommand is a parsed owner /approve command.
type ApproveCommand struct {
	Kind    ApproveKind
	Pattern string // ApproveRule
	ID      string // ApproveRevokeRule
}

// ApproveUsage is the help text for bad /approve commands.
const ApproveUsage = "usage: /approve always bash | /approve always | /approve rule <regex> | /approve list | /approve revoke rule <id> | /approve revoke"

// ParseApproveCommand parses an owner command ("/approve ..." or
// "approve ..."). The regular expression of "rule" is everything after the
// keyword, spaces included, and must compile (Go RE2 syntax).
func ParseApproveCommand(text string) (ApproveCommand, error) {
	s := strings.TrimSpace(text)
	s = strings.TrimPrefix(s, "/")
	head, rest, _ := strings.Cut(s, " ")
	if head != "approve" {
		return ApproveCommand{}, fmt.Errorf("%w: not an /approve command; %s", ErrBadApproveCommand, ApproveUsage)
	}
	rest = strings.TrimSpace(rest)
	sub, arg, _ := strings.Cut(rest, " ")
	arg = strings.TrimSpace(arg)
	switch sub {
	case "always":
		switch arg {
		case "bash":
			return ApproveCommand{Kind: ApproveAlwaysBash}, nil
		case "":
			return ApproveCommand{Kind: ApproveAlways}, nil
		}
	case "rule":
		if arg == "" {
			return ApproveCommand{}, fmt.Errorf("%w: missing regular expression; %s", ErrBadApproveCommand, ApproveUsage)
		}
		if _, err := regexp.Compile(arg); err != nil {
			return ApproveCommand{}, fmt.Errorf("%w: invalid regular expression %q: %v", ErrBadApproveCommand, arg, err)
		}
		return ApproveCommand{Kind: ApproveRule, Pattern: arg}, nil
	case "list":
		if arg == "" {
			return ApproveCommand{Kind: ApproveList}, nil
		}
	case "revoke":
		if arg == "" {
			return ApproveCommand{Kind: ApproveRevokeAlways}, nil
		}
		kw, id, _ := strings.Cut(arg, " ")
		id = strings.TrimSpace(id)
		if kw == "rule" && id != "" && !strings.Contains(id, " ") {
			return ApproveCommand{Kind: ApproveRevokeRule, ID: id}, nil
		}
	}
	return ApproveCommand{}, fmt.Errorf("%w: %q; %s", ErrBadApproveCommand, strings.TrimSpace(text), ApproveUsage)
}

// ApplyContext is what [Approvals.Apply] needs to know besides the command.
type ApplyContext struct {
	Now time.Time
	By  string // who issued the command (owner id), recorded on rules
	// PendingBash: a bash confirmation was asked recently on this endpoint
	// (required by "/approve always" without "bash").
	PendingBash bool
}

// Apply executes cmd on a (the caller loads and stores the value, e.g.
// with a KV CAS) and returns the reply text for the owner. changed is
// false for list and for no-op commands.
func (a *Approvals) Apply(cmd ApproveCommand, ac ApplyContext) (reply string, changed bool, err error) {
	if ac.Now.IsZero() {
		ac.Now = time.Now()
	}
	switch cmd.Kind {
	case ApproveAlwaysBash:
		changed = !a.AlwaysBash
		a.AlwaysBash, a.Version = true, ApprovalsVersion
		return "bash: owner confirmation is now skipped on this endpoint (hard-blocked commands stay blocked). Undo with /approve revoke.", changed, nil
	case ApproveAlways:
		if !ac.PendingBash {
			return "", false, fmt.Errorf("%w: use /approve always bash", ErrNoPendingApproval)
		}
		changed = !a.AlwaysBash
		a.AlwaysBash, a.Version = true, ApprovalsVersion
		return "bash: owner confirmation is now skipped on this endpoint. Undo with /approve revoke.", changed, nil
	case ApproveRule:
		n := len(a.Rules)
		r, err := a.AddRule(cmd.Pattern, ac.By, ac.Now)
		if err != nil {
			return "", false, err
		}
		return fmt.Sprintf("rule %s added: %s", r.ID, r.Pattern), len(a.Rules) != n, nil
	case ApproveList:
		return a.String(), false, nil
	case ApproveRevokeRule:
		r, err := a.RevokeRule(cmd.ID)
		if err != nil {
			return "", false, err
		}
		return fmt.Sprintf("rule %s revoked: %s", r.ID, r.Pattern), true, nil
	case ApproveRevokeAlways:
		changed = a.AlwaysBash
		a.AlwaysBash = false
		return "bash: owner confirmation is required again (rules kept).", changed, nil
	}
	return "", false, fmt.Errorf("%w: unknown kind %d", ErrBadApproveCommand, cmd.Kind)
}

// String lists the approvals for /approve list.
func (a *Approvals) String() string {
	var b strings.Builder
	if a.AlwaysBash {
		b.WriteString("bash always: on\n")
	} else {
		b.WriteString("bash always: off\n")
	}
	if len(a.Rules) == 0 {
		b.WriteString("rules: none")
		return b.String()
	}
	b.WriteString("rules:")
	for _, r := range a.Rules {
		fmt.Fprintf(&b, "\n  %s  %s", r.ID, r.Pattern)
	}
	return b.String()
}
