package command

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/events"
)

// /help answered this before the table existed (pkg/turn's helpText); the table must give the
// same reply, line for line.
const helpBefore = `Commands:
/new, /clear, /reset: start a new conversation (chat history is kept)
/cancel: stop the running turn
/status: this session: model, concurrency, turns, context size
/model [name]: show or switch this chat's model (masters, trusted)
/queue [policy]: show or set how messages during a turn are handled: parallel, queue, steer, interrupt, collect
/usage: tokens and cost of this conversation
/context: what the model sees next turn, how full the window is, compactions so far
/compact [instructions]: summarize the older part of the conversation now (masters, trusted)
/tree, /tree N: the conversation's points; continue from point N (masters, trusted)
/whoami: who the bot takes you for
/tools [filter] [page]: the tools you may use here
/cmd [filter] [page]: the commands, one per line
/endpoints [filter] [page]: the IM endpoints (platform/bot) and their adapters' state (masters, trusted)
/mcp, /bindings: MCP servers, ai.agents bindings (masters, trusted)
/models, /health: providers and models, worker health
/steer <text>, /followup <text>: add to the running turn (masters)
/approve [id]: let a waiting bash command of this chat (or the one with that id) run once (masters)
/approve always|rule …|list|revoke …: approve bash commands for good (masters, private chat)
/tasks, /tasks cancel <id>: reminders, scheduled jobs and background tasks of this chat`

func TestHelpTextUnchanged(t *testing.T) {
	if got := HelpText(); got != helpBefore {
		t.Errorf("HelpText changed:\n got: %s\nwant: %s", got, helpBefore)
	}
}

// The rows must be usable by ingest's parser and by HelpLines: unique names that commandName
// accepts, a usage starting with the name, and a HelpWith that names a later listed row of the
// same access (one line of /help must not mix who may run it).
func TestTableRows(t *testing.T) {
	name := regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)
	seen := map[string]bool{}
	for i, c := range table {
		if !name.MatchString(c.Name) {
			t.Errorf("row %d: name %q is not a command name", i, c.Name)
		}
		if seen[c.Name] {
			t.Errorf("row %d: %s twice", i, c.Name)
		}
		seen[c.Name] = true
		if !strings.HasPrefix(c.Usage, "/"+c.Name) {
			t.Errorf("%s: usage %q does not start with /%s", c.Name, c.Usage, c.Name)
		}
		if c.HelpWith == "" {
			continue
		}
		if c.Help != "" {
			t.Errorf("%s: both Help and HelpWith", c.Name)
		}
		j := slices.IndexFunc(table, func(o Command) bool { return o.Name == c.HelpWith })
		switch {
		case j <= i:
			t.Errorf("%s: HelpWith %q is not a later row", c.Name, c.HelpWith)
		case table[j].Help == "":
			t.Errorf("%s: HelpWith %q, which is not listed", c.Name, c.HelpWith)
		case table[j].Access != c.Access:
			t.Errorf("%s: shares a line with %s but not its access", c.Name, c.HelpWith)
		}
	}
}

func TestAccess(t *testing.T) {
	master := events.Sender{ID: "m", Roles: []string{events.RoleMaster, events.RoleTrusted}}
	trusted := events.Sender{ID: "t", Roles: []string{events.RoleTrusted}}
	admin := events.Sender{ID: "a", Roles: []string{"group_admin"}}
	user := events.Sender{ID: "u"}
	tests := []struct {
		name   string
		scope  string
		sender events.Sender
		want   bool
	}{
		{"status", events.ScopeGroup, user, true},
		{"steer", events.ScopePrivate, user, false},
		{"steer", events.ScopePrivate, trusted, false},
		{"steer", events.ScopeGroup, master, true},
		{"approve", events.ScopePrivate, admin, false},
		{"model", events.ScopePrivate, user, false},
		{"model", events.ScopePrivate, trusted, true},
		{"bindings", events.ScopeGroup, admin, false},
		{"reset", events.ScopePrivate, user, true},
		{"reset", events.ScopeGroup, user, false},
		{"reset", events.ScopeGroup, admin, true},
		{"queue", events.ScopeChannel, trusted, true},
		{"cancel", events.ScopeGroup, user, false},
		{"tree", events.ScopeGroup, user, true},
	}
	for _, tt := range tests {
		c, ok := Lookup(tt.name)
		if !ok {
			t.Fatalf("no /%s", tt.name)
		}
		if got := c.Access.Allows(tt.scope, tt.sender); got != tt.want {
			t.Errorf("/%s in %s by %v: %v, want %v", tt.name, tt.scope, tt.sender.Roles, got, tt.want)
		}
	}
	if _, ok := Lookup("frobnicate"); ok {
		t.Error("Lookup found /frobnicate")
	}
}

// recorder is a Session that answers every command with the name of the method called, so
// the test sees which method each row's handler reaches.
type recorder struct{}

func (recorder) say(m string) (string, error) { return m, nil }

func (r recorder) Reset(context.Context, events.Command) (string, error)   { return r.say("Reset") }
func (r recorder) Model(context.Context, events.Command) (string, error)   { return r.say("Model") }
func (r recorder) Queue(context.Context, events.Command) (string, error)   { return r.say("Queue") }
func (r recorder) Compact(context.Context, events.Command) (string, error) { return r.say("Compact") }
func (r recorder) Tree(context.Context, events.Command) (string, error)    { return r.say("Tree") }
func (r recorder) Status(context.Context, events.Command) (string, error)  { return r.say("Status") }
func (r recorder) Usage(context.Context, events.Command) (string, error)   { return r.say("Usage") }
func (r recorder) Context(context.Context, events.Command) (string, error) { return r.say("Context") }
func (r recorder) Whoami(context.Context, events.Command) (string, error)  { return r.say("Whoami") }
func (r recorder) Tools(context.Context, events.Command) (string, error)   { return r.say("Tools") }
func (r recorder) Cmd(context.Context, events.Command) (string, error)     { return r.say("Cmd") }
func (r recorder) Endpoints(context.Context, events.Command) (string, error) {
	return r.say("Endpoints")
}
func (r recorder) MCP(context.Context, events.Command) (string, error)      { return r.say("MCP") }
func (r recorder) Bindings(context.Context, events.Command) (string, error) { return r.say("Bindings") }
func (r recorder) Models(context.Context, events.Command) (string, error)   { return r.say("Models") }
func (r recorder) Health(context.Context, events.Command) (string, error)   { return r.say("Health") }
func (r recorder) Help(context.Context, events.Command) (string, error)     { return r.say("Help") }
func (r recorder) Approve(context.Context, events.Command) (string, error)  { return r.say("Approve") }
func (r recorder) Tasks(context.Context, events.Command) (string, error)    { return r.say("Tasks") }

// Each command reaches the method of its name (/new and /clear are /reset); the three that
// ingest turns into other events have none.
func TestHandlers(t *testing.T) {
	want := map[string]string{"new": "Reset", "clear": "Reset", "mcp": "MCP", "cancel": "", "steer": "", "followup": ""}
	for _, c := range All() {
		w, ok := want[c.Name]
		if !ok {
			w = strings.ToUpper(c.Name[:1]) + c.Name[1:]
		}
		got, ran, err := c.Run(context.Background(), recorder{}, events.Command{Name: c.Name})
		if err != nil || ran != (w != "") || got != w {
			t.Errorf("/%s ran %v: %q, %v; want %q", c.Name, ran, got, err, w)
		}
	}
}

// docs/configuration.md lists the commands in a table | command | who | what |: it must name
// every command of the table and nothing else, and its "who" must start with the access of
// each command it names (Access.String), so that the docs cannot drift from what ingest does.
func TestDocsCommandTable(t *testing.T) {
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	start := slices.Index(lines, "| command | who | what |")
	if start < 0 {
		t.Fatal(`docs/configuration.md has no "| command | who | what |" table`)
	}
	names := regexp.MustCompile("`/([a-z][a-z0-9_-]*)")
	documented := map[string]bool{}
	for _, l := range lines[start+2:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.Trim(l, "|"), " | ")
		if len(cells) < 3 {
			t.Errorf("row %q: fewer than three cells", l)
			continue
		}
		who := strings.TrimSpace(cells[1])
		for _, m := range names.FindAllStringSubmatch(cells[0], -1) {
			name := m[1]
			documented[name] = true
			c, ok := Lookup(name)
			if !ok {
				t.Errorf("docs list /%s, which is not in the table", name)
				continue
			}
			if got := accessOf(who); got != c.Access {
				t.Errorf("docs: /%s is for %q; the table says %q", name, who, c.Access)
			}
		}
	}
	for _, c := range table {
		if !documented[c.Name] {
			t.Errorf("/%s is missing from docs/configuration.md's command table", c.Name)
		}
	}
}

// accessOf reads the access a "who" cell of the docs starts with; the longest phrase wins
// ("masters, trusted" is not "masters").
func accessOf(who string) Access {
	best, n := Access(-1), 0
	for _, a := range []Access{Anyone, Moderator, Trusted, Master} {
		if s := a.String(); strings.HasPrefix(who, s) && len(s) > n {
			best, n = a, len(s)
		}
	}
	return best
}
