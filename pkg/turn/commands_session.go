package turn

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/store"
)

// The session and introspection commands (seed: 会话 /new /clear, 内省 /tools /mcp /bindings;
// and what operators of other gateways use daily: /status /model /queue /usage /whoami
// /context). Permissions are checked by ingest (command.Access in pkg/command's table) before an event reaches the
// session: /mcp, /bindings and /model are for masters and trusted users, /new, /clear and
// /queue need a moderator in groups, the rest is for everyone.

// policies are the values of ai.agent.concurrency and /queue.
var policies = []string{"parallel", "queue", "steer", "interrupt", "collect"}

// resetSession is /reset, /new and /clear (inbox event seq): the running turns stop, the epoch
// ends, the chat history (transcripts) stays. The ended epoch is archived and trimmed in the
// background (epochs.go).
func (cs commands) resetSession(seq uint64) (string, error) {
	a := cs.a
	a.abortAll("session reset")
	s, err := a.w.sessions.Archive(a.ctx, a.sk, store.EndInboxAt(seq))
	if err != nil {
		return "", err
	}
	a.w.settler.settle(a.sk, seq)
	a.hk.sessionNewHook(s.SessionID, s.Epoch) // hooks.go
	return fmt.Sprintf("Session reset: a new conversation starts now (epoch %d). Chat history is kept.", s.Epoch), nil
}

// toolsReport lists the tools the sender may use here, with where each comes from; filter
// keeps the names or sources containing it.
// raw is "[filter] [page]" (filterPage); a long list is paged (pageOf).
func (cs commands) toolsReport(m events.IMMessage, raw string) string {
	a := cs.a
	filter, page := filterPage(raw)
	var entries []string
	for _, t := range a.w.tools.For(m) {
		if filter != "" && !strings.Contains(t.Name, filter) && !strings.Contains(t.Source, filter) {
			continue
		}
		entries = append(entries, fmt.Sprintf("%s (%s): %s", t.Name, orDash(t.Source), firstSentence(t.Description)))
	}
	head := fmt.Sprintf("%s you may use here", count(len(entries), "tool"))
	if filter != "" {
		head += fmt.Sprintf(" matching %q", filter)
	}
	if len(entries) > 0 {
		head += " (a turn is offered those that fit its message)"
	}
	return pageOf(head, "tools", filter, entries, page)
}

// mcpReport lists the configured MCP servers with the tools the tool workers serve for each.
func (cs commands) mcpReport(m events.IMMessage) string {
	a := cs.a
	byServer := map[string][]string{}
	for _, t := range a.w.tools.For(m) {
		if srv, ok := strings.CutPrefix(t.Source, "mcp:"); ok {
			byServer[srv] = append(byServer[srv], t.Name)
		}
	}
	for _, name := range a.w.opts.MCPServers {
		if _, ok := byServer[name]; !ok {
			byServer[name] = nil
		}
	}
	if len(byServer) == 0 {
		return "No MCP servers are configured (ai.mcpServers)."
	}
	var b strings.Builder
	b.WriteString("MCP servers:")
	for _, name := range sortedKeys(byServer) {
		list := byServer[name]
		if len(list) == 0 {
			fmt.Fprintf(&b, "\n- %s: no tools served (not reachable yet; tool workers retry with backoff)", name)
			continue
		}
		sort.Strings(list)
		fmt.Fprintf(&b, "\n- %s: %s: %s", name, count(len(list), "tool"), strings.Join(list, ", "))
	}
	return b.String()
}

// bindingsReport lists ai.agents: each binding, what it resolves to and when it is used.
func (cs commands) bindingsReport() string {
	w := cs.a.w
	agents := w.opts.Agents
	if len(agents) == 0 {
		return "No ai.agents bindings: turns use the best model of the configured providers."
	}
	var b strings.Builder
	b.WriteString("Bindings (ai.agents):")
	for _, name := range sortedKeys(agents) {
		ab := agents[name]
		target := ab.Provider + "/" + orDash(ab.Model)
		if m, err := w.resolveModel(name); err == nil {
			target = m.Provider + "/" + m.ID
		} else {
			target += " (" + err.Error() + ")"
		}
		fmt.Fprintf(&b, "\n- %s → %s", name, target)
		if ab.Priority != 0 {
			fmt.Fprintf(&b, ", priority %d", ab.Priority)
		}
		if len(ab.HasMedia) > 0 {
			fmt.Fprintf(&b, ", for messages with %s", strings.Join(ab.HasMedia, "/"))
		}
	}
	return b.String()
}

// statusReport is the session's state: id, model, policy, turns, context size, owner.
func (cs commands) statusReport() (string, error) {
	a := cs.a
	s, err := a.w.sessions.Current(a.ctx, a.sk)
	if err != nil {
		return "", err
	}
	a.mu.Lock()
	running, queued := len(a.turns), len(a.queued)
	a.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "Session %s (epoch %d, %s)\n", s.SessionID, s.Epoch, s.Status)
	fmt.Fprintf(&b, "Model: %s\n", cs.modelLine(s))
	fmt.Fprintf(&b, "Concurrency: %s\n", cs.policyLine())
	fmt.Fprintf(&b, "Turns: %d running, %d queued\n", running, queued)
	if sid, err := s.ID(); err == nil {
		if l, err := a.cx.loadContext(a.ctx, sid); err == nil {
			fmt.Fprintf(&b, "Context: %s, ≈%d tokens\n", count(len(l.Messages), "message"), approxTokens(l.Messages))
			if m, err := a.w.pickModel(events.IMMessage{}, nil, s.ModelOverride); err == nil {
				fmt.Fprintf(&b, "%s\n", cs.compactionNote(l, m)) // commands_compact.go
			}
		}
	}
	fmt.Fprintf(&b, "Worker: %s", a.w.opts.ID)
	return b.String(), nil
}

func (cs commands) modelLine(s *store.Session) string {
	a := cs.a
	if s.ModelOverride != "" {
		line := s.ModelOverride + " (chosen with /model)"
		if m, err := a.w.resolveModel(s.ModelOverride); err == nil && m.Provider+"/"+m.ID != s.ModelOverride {
			line += " → " + m.Provider + "/" + m.ID
		}
		return line
	}
	if m, err := a.w.defaultModel(); err == nil {
		line := m.Provider + "/" + m.ID + " (routing)"
		if s.Model != "" && s.Model != m.Provider+"/"+m.ID {
			line += ", last turn used " + s.Model
		}
		return line
	}
	return orDash(s.Model)
}

func (cs commands) policyLine() string {
	a := cs.a
	a.mu.Lock()
	p := a.chatPolicy
	a.mu.Unlock()
	if p != "" {
		return p + " (chosen with /queue)"
	}
	return a.w.opts.Concurrency + " (ai.agent.concurrency)"
}

// modelCommand is /model [name]: without a name it shows the model and the choices; with one
// it switches the session to it (an ai.agents binding or provider/model) until /model default.
func (cs commands) modelCommand(arg string) (string, error) {
	a := cs.a
	if arg == "" {
		s, err := a.w.sessions.Current(a.ctx, a.sk)
		if err != nil {
			return "", err
		}
		return "Model: " + cs.modelLine(s) + "\n" + cs.modelChoices() + "\nSwitch with /model <name>, back to routing with /model default.", nil
	}
	override, reply := "", "Model: back to routing"
	switch strings.ToLower(arg) {
	case "default", "auto", "reset":
		if m, err := a.w.defaultModel(); err == nil {
			reply += " (" + m.Provider + "/" + m.ID + ")"
		}
		reply += "."
	default:
		m, err := a.w.resolveModel(arg)
		if err != nil {
			return fmt.Sprintf("Unknown model %q: %v\n%s", arg, err, cs.modelChoices()), nil
		}
		override = arg
		reply = fmt.Sprintf("Model for this chat: %s/%s. Images still go to a vision binding when this model has no image input.", m.Provider, m.ID)
	}
	if _, err := a.updateSession(a.ctx, func(s *store.Session) { s.ModelOverride = override }); err != nil {
		return "", err
	}
	return reply, nil
}

// modelChoices names what /model accepts.
func (cs commands) modelChoices() string {
	w := cs.a.w
	var names []string
	names = append(names, sortedKeys(w.opts.Agents)...)
	if w.opts.Models != nil {
		for _, alias := range w.opts.Models.Aliases() {
			ms, err := w.opts.Models.Models(alias)
			if err != nil {
				continue
			}
			for _, m := range ms {
				names = append(names, alias+"/"+m.ID)
			}
		}
	}
	if len(names) == 0 {
		return "Choices: none known (see /models)."
	}
	const most = 30
	more := ""
	if len(names) > most {
		more = fmt.Sprintf(", … (%d more, see /models)", len(names)-most)
		names = names[:most]
	}
	return "Choices: " + strings.Join(names, ", ") + more
}

// resolveModel turns a /model name into a model: an ai.agents binding, or provider/model of a
// configured provider.
func (w *Worker) resolveModel(name string) (*llm.Model, error) {
	if w.opts.Models == nil {
		return nil, fmt.Errorf("no providers configured")
	}
	if b, ok := w.opts.Agents[name]; ok {
		if b.Provider == "" {
			return w.defaultModel()
		}
		return w.opts.Models.GetModel(b.Provider, b.Model)
	}
	alias, id, ok := strings.Cut(name, "/")
	if !ok || alias == "" || id == "" {
		return nil, fmt.Errorf("not an ai.agents binding; use provider/model")
	}
	if _, ok := w.opts.Models.Settings(alias); !ok {
		return nil, fmt.Errorf("no provider %q in ai.providers", alias)
	}
	return w.opts.Models.GetModel(alias, id)
}

// queueCommand is /queue [policy]: the session's concurrency policy, stored in its record.
func (cs commands) queueCommand(arg string) (string, error) {
	a := cs.a
	arg = strings.ToLower(arg)
	if arg == "" {
		return "Concurrency: " + cs.policyLine() + "\nChoices: " + strings.Join(policies, ", ") + ", default.", nil
	}
	p := arg
	if p == "default" || p == "reset" {
		p = ""
	} else if !slices.Contains(policies, p) {
		return fmt.Sprintf("Unknown policy %q; choices: %s, default.", arg, strings.Join(policies, ", ")), nil
	}
	if _, err := a.updateSession(a.ctx, func(s *store.Session) { s.Concurrency = p }); err != nil {
		return "", err
	}
	a.setChatPolicy(p)
	return "Concurrency for this chat: " + cs.policyLine() + ".", nil
}

func (a *actor) setChatPolicy(p string) {
	a.mu.Lock()
	a.chatPolicy = p
	a.mu.Unlock()
}

// concurrency is the policy new messages are scheduled with: the chat's /queue choice, else
// ai.agent.concurrency.
func (a *actor) concurrency() string {
	a.mu.Lock()
	p := a.chatPolicy
	a.mu.Unlock()
	if p != "" {
		return p
	}
	return a.w.opts.Concurrency
}

// usageReport sums the usage of the assistant messages in this conversation (the current
// epoch's context).
func (cs commands) usageReport() (string, error) {
	a := cs.a
	s, err := a.w.sessions.Current(a.ctx, a.sk)
	if err != nil {
		return "", err
	}
	sid, err := s.ID()
	if err != nil {
		return "", err
	}
	l, err := a.cx.loadContext(a.ctx, sid)
	if err != nil {
		return "", err
	}
	var u llm.Usage
	calls := 0
	for _, m := range l.Messages {
		if m.Role != llm.RoleAssistant || m.Usage == nil {
			continue
		}
		calls++
		u.Input += m.Usage.Input
		u.Output += m.Usage.Output
		u.CacheRead += m.Usage.CacheRead
		u.CacheWrite += m.Usage.CacheWrite
		u.TotalTokens += m.Usage.TotalTokens
		u.Cost.Total += m.Usage.Cost.Total
	}
	if calls == 0 {
		return fmt.Sprintf("Usage of this conversation (epoch %d): no model calls yet.", s.Epoch), nil
	}
	return fmt.Sprintf("Usage of this conversation (epoch %d): %s, %d input + %d output tokens (%d cache read, %d cache write), %d total, $%.4f.",
		s.Epoch, count(calls, "model call"), u.Input, u.Output, u.CacheRead, u.CacheWrite, u.TotalTokens, u.Cost.Total), nil
}

// whoami says who the bot takes the sender for.
func whoami(from events.Sender, sk events.SessionKey) string {
	roles := from.Roles
	if len(roles) == 0 {
		roles = []string{"user"}
	}
	name := ""
	if from.Name != "" {
		name = " (" + from.Name + ")"
	}
	return fmt.Sprintf("You are %s%s on %s, bot %s, in %s chat %s. Roles: %s.", orDash(from.ID), name, sk.Platform, sk.Bot, sk.Scope, sk.Scene, strings.Join(roles, ", "))
}

// contextReport is what the model sees next turn: messages by role, summary, size against the
// model's context window.
func (cs commands) contextReport() (string, error) {
	a := cs.a
	s, err := a.w.sessions.Current(a.ctx, a.sk)
	if err != nil {
		return "", err
	}
	sid, err := s.ID()
	if err != nil {
		return "", err
	}
	l, err := a.cx.loadContext(a.ctx, sid)
	if err != nil {
		return "", err
	}
	by := map[string]int{}
	for _, m := range l.Messages {
		by[m.Role]++
	}
	var parts []string
	for _, r := range sortedKeys(by) {
		parts = append(parts, fmt.Sprintf("%d %s", by[r], r))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Context of %s: %s", s.SessionID, count(len(l.Messages), "message"))
	if len(parts) > 0 {
		b.WriteString(" (" + strings.Join(parts, ", ") + ")")
	}
	if l.Summary != nil {
		b.WriteString(", plus a summary of earlier messages")
	}
	tokens := approxTokens(l.Messages)
	fmt.Fprintf(&b, ", ≈%d tokens", tokens)
	model, err := a.w.defaultModel()
	if s.ModelOverride != "" {
		model, err = a.w.resolveModel(s.ModelOverride)
	}
	if err == nil && model.ContextWindow > 0 {
		fmt.Fprintf(&b, " of %s's %d-token window (%d%%)", model.ID, model.ContextWindow, tokens*100/model.ContextWindow)
	}
	b.WriteString(". " + cs.compactionNote(l, model) + " /new starts over.") // commands_compact.go
	return b.String(), nil
}

// approxTokens estimates tokens at 4 characters each (CJK: one per character), counting text,
// thinking and tool arguments.
func approxTokens(msgs []llm.Message) int {
	n := 0
	for _, m := range msgs {
		for _, c := range m.Content {
			s := c.Text + c.Thinking
			if c.Arguments != nil {
				s += fmt.Sprint(c.Arguments)
			}
			ascii := 0
			for _, r := range s {
				if r < utf8.RuneSelf {
					ascii++
				} else {
					n++
				}
			}
			n += (ascii + 3) / 4
		}
	}
	return n
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// firstSentence shortens a tool description for a listing.
func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i > 0 {
		s = s[:i+1]
	}
	if utf8.RuneCountInString(s) > 120 {
		r := []rune(s)
		s = string(r[:117]) + "…"
	}
	return s
}
