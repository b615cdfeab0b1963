package toolworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/internal/jsconflict"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/identity"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/tools"
)

// Profile limits. Profiles end up in every system prompt of the user, so they stay small and
// single-line.
const (
	MaxProfileKey     = 32  // runes
	MaxProfileValue   = 200 // runes
	MaxProfileEntries = 32
	// MaxSummary caps Summary's text (runes).
	MaxSummary = 1000
)

// ProfileStore reads and writes user profiles in KV "profiles": one key per user,
// events.EncodeToken(platform + ":" + userID), whose value is a JSON object of profile key to
// value. Writes are revision CAS, so concurrent sets of different keys both survive.
type ProfileStore struct {
	kv jetstream.KeyValue
}

// NewProfileStore opens the profiles bucket.
func NewProfileStore(ctx context.Context, js jetstream.JetStream) (*ProfileStore, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: profile store needs a JetStream context", ErrConfig)
	}
	kv, err := natsutil.KeyValue(ctx, js, events.BucketProfiles)
	if err != nil {
		return nil, fmt.Errorf("open KV %s: %w", events.BucketProfiles, err)
	}
	return &ProfileStore{kv: kv}, nil
}

// ProfileKey is the KV key of a user's profile.
func ProfileKey(platform, userID string) string { return events.EncodeToken(platform + ":" + userID) }

func checkUser(platform, userID string) error {
	if platform == "" || userID == "" {
		return fmt.Errorf("%w: the sender is unknown (platform and user id are required)", ErrInvalidProfile)
	}
	return nil
}

// CheckProfileKey accepts 1 to MaxProfileKey letters, digits, '_', '-' and '.'.
func CheckProfileKey(k string) error {
	n := utf8.RuneCountInString(k)
	if n == 0 || n > MaxProfileKey {
		return fmt.Errorf("%w: key must be 1 to %d characters, got %d", ErrInvalidProfile, MaxProfileKey, n)
	}
	for _, r := range k {
		if !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-' || r == '.') {
			return fmt.Errorf("%w: key %q: only letters, digits, '_', '-' and '.' are allowed (found %q)", ErrInvalidProfile, k, r)
		}
	}
	return nil
}

// CheckProfileValue accepts 1 to MaxProfileValue runes of printable, single-line text.
func CheckProfileValue(v string) error {
	if !utf8.ValidString(v) {
		return fmt.Errorf("%w: value is not valid UTF-8", ErrInvalidProfile)
	}
	n := utf8.RuneCountInString(v)
	if strings.TrimSpace(v) == "" || n > MaxProfileValue {
		return fmt.Errorf("%w: value must be 1 to %d characters of text, got %d", ErrInvalidProfile, MaxProfileValue, n)
	}
	for _, r := range v {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return fmt.Errorf("%w: value must be a single line without control characters", ErrInvalidProfile)
		}
	}
	return nil
}

// Get returns the user's profile (empty, never nil, when there is none).
func (s *ProfileStore) Get(ctx context.Context, platform, userID string) (map[string]string, error) {
	if err := checkUser(platform, userID); err != nil {
		return nil, err
	}
	p, _, err := s.load(ctx, ProfileKey(platform, userID))
	return p, err
}

func (s *ProfileStore) load(ctx context.Context, key string) (map[string]string, uint64, error) {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return map[string]string{}, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read profile: %w", err)
	}
	p := map[string]string{}
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return nil, 0, fmt.Errorf("read profile: malformed value at revision %d: %w", e.Revision(), err)
	}
	return p, e.Revision(), nil
}

// update applies fn to the profile under a revision CAS, retrying on conflicts. fn returns
// false when nothing changed (no write).
func (s *ProfileStore) update(ctx context.Context, platform, userID string, fn func(map[string]string) (bool, error)) error {
	if err := checkUser(platform, userID); err != nil {
		return err
	}
	key := ProfileKey(platform, userID)
	return jsconflict.Retry(ctx, func() error {
		p, rev, err := s.load(ctx, key)
		if err != nil {
			return err
		}
		changed, err := fn(p)
		if err != nil || !changed {
			return err
		}
		if len(p) == 0 && rev > 0 {
			err = s.kv.Delete(ctx, key, jetstream.LastRevision(rev))
		} else {
			data, _ := json.Marshal(p)
			if rev == 0 {
				_, err = s.kv.Create(ctx, key, data)
			} else {
				_, err = s.kv.Update(ctx, key, data, rev)
			}
		}
		if err != nil {
			return fmt.Errorf("write profile: %w", err)
		}
		return nil
	})
}

// Set stores key = value in the user's profile.
func (s *ProfileStore) Set(ctx context.Context, platform, userID, key, value string) error {
	if err := CheckProfileKey(key); err != nil {
		return err
	}
	// The profile is placed in every system prompt of the user: a sender prefix in it would
	// speak to the model with the runtime's voice (issue 36), so it goes through the sanitizer
	// every user text goes through.
	value = strings.TrimSpace(identity.SanitizeText(value))
	if err := CheckProfileValue(value); err != nil {
		return err
	}
	return s.update(ctx, platform, userID, func(p map[string]string) (bool, error) {
		old, had := p[key]
		if had && old == value {
			return false, nil
		}
		if !had && len(p) >= MaxProfileEntries {
			return false, fmt.Errorf("%w: at most %d entries; delete one first", ErrProfileFull, MaxProfileEntries)
		}
		p[key] = value
		return true, nil
	})
}

// Delete removes key from the user's profile and reports whether it was there.
func (s *ProfileStore) Delete(ctx context.Context, platform, userID, key string) (bool, error) {
	if err := CheckProfileKey(key); err != nil {
		return false, err
	}
	var had bool
	err := s.update(ctx, platform, userID, func(p map[string]string) (bool, error) {
		_, had = p[key]
		delete(p, key)
		return had, nil
	})
	return had, err
}

// Summary is the profile as one line for the system prompt: "User profile: name=Ann,
// style=concise" (keys sorted, at most MaxSummary runes), or "" when the user has none.
func (s *ProfileStore) Summary(ctx context.Context, platform, userID string) (string, error) {
	p, err := s.Get(ctx, platform, userID)
	if err != nil {
		return "", err
	}
	return FormatSummary(p), nil
}

// FormatSummary renders a profile the way Summary does. Values go through the user-text
// sanitizer and lose brackets, "=" and line breaks (identity.EscapeValue).
func FormatSummary(p map[string]string) string {
	if len(p) == 0 {
		return ""
	}
	keys := sortedKeys(p)
	var b strings.Builder
	b.WriteString("User profile: ")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k)
		b.WriteByte('=')
		// Sanitized (values stored before Set sanitized them) and escaped: no bracket or "="
		// of one value can join the next into a prefix or fake an entry.
		b.WriteString(identity.EscapeValue(identity.SanitizeText(p[k])))
	}
	out := identity.SanitizeText(b.String()) // nor across two values
	if utf8.RuneCountInString(out) > MaxSummary {
		r := []rune(out)
		out = string(r[:MaxSummary-1]) + "…"
	}
	return out
}

func sortedKeys(p map[string]string) []string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ProfileArgs are user_profile's arguments.
type ProfileArgs struct {
	Action string `json:"action" jsonschema:"get: read every entry; set: save key=value; delete: remove key"`
	Key    string `json:"key,omitempty" jsonschema:"the preference name, e.g. name, style, interests, timezone (set and delete)"`
	Value  string `json:"value,omitempty" jsonschema:"the preference value, one line (set)"`
}

const profileSchema = `{
  "type": "object",
  "properties": {
    "action": {"type": "string", "enum": ["get", "set", "delete"], "description": "get: read every entry; set: save key=value; delete: remove key"},
    "key": {"type": "string", "description": "preference name, e.g. name, style, interests, timezone (for set and delete); letters, digits, _ - ."},
    "value": {"type": "string", "description": "preference value, one line (for set)"}
  },
  "required": ["action"],
  "additionalProperties": false
}`

// UserProfileTool is the user_profile tool on store: it reads and writes the preferences of
// the message's sender (never anyone else's: the user comes from the call's Env). Idempotent:
// repeating a set or delete leaves the same profile.
func UserProfileTool(store *ProfileStore) tools.Tool {
	return tools.MustRaw("user_profile",
		"Read or update the current user's saved preferences (name, style, interests, timezone, ...), "+
			"which are remembered across conversations and shown to you at the start of each one. "+
			"Save something only when the user states it about themselves or asks you to remember it.",
		json.RawMessage(profileSchema),
		func(ctx context.Context, call tools.Call) (tools.Result, error) {
			var a ProfileArgs
			if err := tools.DecodeArgs(call.Args, &a); err != nil {
				return tools.ErrorResult("user_profile: %v", err), nil
			}
			platform, user := call.Env.Platform, call.Env.SenderID
			switch a.Action {
			case "get":
				p, err := store.Get(ctx, platform, user)
				if err != nil {
					return tools.Result{}, err
				}
				d, _ := json.Marshal(p)
				if len(p) == 0 {
					return tools.Result{Content: tools.TextResult("No preferences saved for this user yet.").Content, Details: d}, nil
				}
				var b strings.Builder
				b.WriteString("Saved preferences of this user:")
				for _, k := range sortedKeys(p) {
					fmt.Fprintf(&b, "\n- %s: %s", k, p[k])
				}
				return tools.Result{Content: tools.TextResult(b.String()).Content, Details: d}, nil
			case "set":
				if a.Key == "" || a.Value == "" {
					return tools.ErrorResult("user_profile set needs both key and value"), nil
				}
				if err := store.Set(ctx, platform, user, a.Key, a.Value); err != nil {
					return tools.ErrorResult("user_profile: %v", err), nil
				}
				return tools.TextResult(fmt.Sprintf("Saved %s = %s.", a.Key, strings.TrimSpace(a.Value))), nil
			case "delete":
				if a.Key == "" {
					return tools.ErrorResult("user_profile delete needs key"), nil
				}
				had, err := store.Delete(ctx, platform, user, a.Key)
				if err != nil {
					return tools.ErrorResult("user_profile: %v", err), nil
				}
				if !had {
					return tools.TextResult(fmt.Sprintf("%s was not set; nothing to delete.", a.Key)), nil
				}
				return tools.TextResult(fmt.Sprintf("Deleted %s.", a.Key)), nil
			}
			return tools.ErrorResult("user_profile: action must be get, set or delete, got %q", a.Action), nil
		},
		tools.Idempotent(), tools.WithSource("builtin"), tools.WithKeywords("profile", "preference", "remember", "name", "画像", "偏好"))
}
