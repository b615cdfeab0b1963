package compaction

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"regexp"
	"strings"

	"github.com/agentbus/agentbus/pkg/llm"
)

// StreamFunc is llm.Stream's shape (loop.StreamFunc has the same), so tests and the turn worker
// can route the summary call as they route every model call.
type StreamFunc func(ctx context.Context, model *llm.Model, c *llm.Context, opts *llm.StreamOptions) iter.Seq[llm.Event]

// Request is one summary to write.
type Request struct {
	Model *llm.Model
	// Stream defaults to llm.Stream.
	Stream StreamFunc
	// Options of the call (the API key); nil = none.
	Options *llm.StreamOptions
	// Previous is the summary already standing for the messages before Messages ("" = none):
	// the new summary replaces it, so it must carry it forward.
	Previous string
	// Messages are the span to summarize.
	Messages []llm.Message
	// Instructions from the user (/compact <instructions>), added to the prompt.
	Instructions string
	// MaxInputBytes caps the transcript sent to the summarizer (0 = from the model's window).
	// The middle of a longer span is left out of the prompt; its identifiers are still checked.
	MaxInputBytes int
	// MaxToolResultBytes caps each tool result in the transcript (0 = 2000).
	MaxToolResultBytes int
	// TargetTokens asks the model to keep the summary under about this many tokens (0 = no
	// target). It is a request, not a cut: the text is kept whole, and identifiers the model
	// dropped are still appended.
	TargetTokens int
}

// Result is a written summary.
type Result struct {
	// Text is the summary as committed: the model's text plus, when it dropped identifiers of
	// the span, a line that lists them.
	Text string
	// Restored are the identifiers the model left out and Text lists again.
	Restored []string
	// Usage of the summary call.
	Usage *llm.Usage
}

// summarySystem is the summarizer's instruction. Identifiers are asked for verbatim; Summarize
// checks them afterwards anyway, because small models paraphrase them.
const summarySystem = `You compact the history of a long chat between users and an AI assistant. Write a summary that lets the assistant continue the conversation as if it remembered everything important.

Rules:
- Keep every identifier exactly as written: ids, ticket and order numbers, URLs, file names and paths, user names, dates, amounts and other numbers. Never round or paraphrase them.
- Keep decisions, facts the users stated about themselves, promises and open tasks, and what each tool call found out.
- Drop greetings, chit-chat and repetition.
- If a previous summary is given, merge it with the new messages into one summary; do not lose anything it kept.
- Answer with the summary only, in the conversation's language, using these sections:
## Goal
## Facts and decisions
## Identifiers
## Open tasks`

// Summarize writes a summary of r.Messages (and r.Previous) with r.Model, then verifies that the
// identifiers of the span survived and appends the missing ones. It fails with ErrSummaryFailed
// when the call fails or returns no text; ctx bounds the model call.
func Summarize(ctx context.Context, r Request) (Result, error) {
	if r.Model == nil {
		return Result{}, fmt.Errorf("%w: no model", ErrSummaryFailed)
	}
	stream := r.Stream
	if stream == nil {
		stream = llm.Stream
	}
	maxIn := r.MaxInputBytes
	if maxIn <= 0 {
		maxIn = 64 * 1024
		if w := r.Model.ContextWindow; w > 0 {
			maxIn = max(w*3-8*1024, 2*1024) // ~4 bytes a token, room for the prompt and the reply
		}
	}
	transcript := Transcript(r.Messages, r.MaxToolResultBytes)
	if len(transcript) > maxIn {
		head := TruncateUTF8(transcript, maxIn/3)
		tail := tailUTF8(transcript, maxIn-len(head))
		transcript = head + "\n[… middle of the conversation left out …]\n" + tail
	}
	var b strings.Builder
	if r.Previous != "" {
		b.WriteString("Previous summary:\n")
		b.WriteString(r.Previous)
		b.WriteString("\n\n")
	}
	b.WriteString("Conversation to summarize:\n")
	b.WriteString(transcript)
	if r.TargetTokens > 0 {
		// About three quarters of a word per token in English; the model counts words better.
		fmt.Fprintf(&b, "\n\nKeep the summary under about %d words.", max(r.TargetTokens*3/4, 50))
	}
	if ins := strings.TrimSpace(r.Instructions); ins != "" {
		b.WriteString("\n\nAdditional instructions for this summary: ")
		b.WriteString(ins)
	}
	c := &llm.Context{SystemPrompt: summarySystem, Messages: []llm.Message{llm.UserText(b.String(), 0)}}
	opts := r.Options
	if opts == nil {
		opts = &llm.StreamOptions{}
	}
	var final llm.Message
	for ev := range stream(ctx, r.Model, c, opts) {
		if ev.Message != nil {
			final = *ev.Message
		}
	}
	if final.StopReason == llm.StopReasonError || final.StopReason == llm.StopReasonAborted {
		return Result{}, fmt.Errorf("%w: %s", ErrSummaryFailed, final.ErrorMessage)
	}
	text := strings.TrimSpace(final.TextContent())
	if text == "" {
		return Result{}, fmt.Errorf("%w: the model returned no text", ErrSummaryFailed)
	}
	// The identifiers of the whole span and of the previous summary must survive: the summary
	// replaces both.
	ids := Identifiers(r.Previous + "\n" + Transcript(r.Messages, -1))
	missing := Missing(text, ids)
	if len(missing) > maxRestored {
		missing = missing[len(missing)-maxRestored:] // the newest matter most
	}
	if len(missing) > 0 {
		text += "\n\nIdentifiers from the summarized messages, verbatim: " + strings.Join(missing, ", ")
	}
	return Result{Text: text, Restored: missing, Usage: final.Usage}, nil
}

// maxRestored bounds the identifiers re-appended to one summary.
const maxRestored = 200

// Transcript renders msgs as the plain text a summarizer reads. Tool results longer than
// maxToolResult bytes are shortened (0 = 2000, < 0 = never).
func Transcript(msgs []llm.Message, maxToolResult int) string {
	if maxToolResult == 0 {
		maxToolResult = 2000
	}
	var b strings.Builder
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case llm.RoleToolResult:
			text := llm.TextContentOf(m.Content)
			if maxToolResult > 0 && len(text) > maxToolResult {
				text = TruncateUTF8(text, maxToolResult) + " […]"
			}
			status := ""
			if m.IsError {
				status = " (error)"
			}
			fmt.Fprintf(&b, "[tool result %s%s] %s\n", m.ToolName, status, text)
			continue
		case llm.RoleUser, llm.RoleAssistant:
		default:
			continue
		}
		for _, c := range m.Content {
			switch c.Type {
			case llm.ContentText:
				if strings.TrimSpace(c.Text) != "" {
					fmt.Fprintf(&b, "[%s] %s\n", m.Role, c.Text)
				}
			case llm.ContentImage:
				fmt.Fprintf(&b, "[%s] (an image)\n", m.Role)
			case llm.ContentToolCall:
				args, _ := json.Marshal(c.Arguments)
				fmt.Fprintf(&b, "[%s calls %s] %s\n", m.Role, c.Name, args)
			}
		}
	}
	return b.String()
}

var (
	urlRe   = regexp.MustCompile(`https?://[^\s<>"'()\[\]{}]+`)
	pathRe  = regexp.MustCompile(`(?:\.{0,2}/)?(?:[\w-]+/)*[\w-]{2,}\.[A-Za-z][A-Za-z0-9]{0,5}\b`)
	tokenRe = regexp.MustCompile(`#?[\p{L}\p{N}][\p{L}\p{N}_#-]*[\p{L}\p{N}]|\p{N}+`)
	numRe   = regexp.MustCompile(`\p{N}`)
	// decimalRe: grouped or decimal numbers (1,250.50; 3.14; 12:30), taken whole.
	decimalRe = regexp.MustCompile(`\b\d+(?:[.,:]\d+)+\b`)
	letRe     = regexp.MustCompile(`\p{L}`)
)

// Identifiers lists, once each and in order of first appearance, the strings of text a summary
// must keep verbatim: URLs, file names and paths, tokens that mix letters and digits (ids like
// PR-1234, a1b2c3, call_07), and numbers of three or more digits. One- and two-digit numbers
// are too common to be worth checking.
func Identifiers(text string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		s = strings.TrimRight(s, ".,;:!?")
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	rest := text
	for _, u := range urlRe.FindAllString(text, -1) {
		add(u)
		rest = strings.ReplaceAll(rest, u, " ")
	}
	for _, d := range decimalRe.FindAllString(rest, -1) {
		add(d)
		rest = strings.ReplaceAll(rest, d, " ")
	}
	for _, p := range pathRe.FindAllString(rest, -1) {
		if strings.ContainsAny(p, "/") || !isVersionLike(p) {
			add(p)
		}
	}
	for _, tok := range tokenRe.FindAllString(rest, -1) {
		hasNum, hasLet := numRe.MatchString(tok), letRe.MatchString(tok)
		switch {
		case hasNum && hasLet && len(tok) >= 4:
			add(tok)
		case hasNum && !hasLet && len(strings.Trim(tok, "#-_")) >= 3:
			add(tok)
		}
	}
	return out
}

// isVersionLike is a "file name" that is really a word pair across a full stop ("e.g",
// "done.The"): a lower-case extension longer than four letters with no digit.
func isVersionLike(p string) bool {
	i := strings.LastIndexByte(p, '.')
	ext := p[i+1:]
	return len(ext) > 4 && !numRe.MatchString(ext)
}

// Missing returns the identifiers of ids that summary does not contain.
func Missing(summary string, ids []string) []string {
	var out []string
	for _, id := range ids {
		if !strings.Contains(summary, id) {
			out = append(out, id)
		}
	}
	return out
}
