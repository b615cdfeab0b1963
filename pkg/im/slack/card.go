package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	slackapi "github.com/slack-go/slack"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Cards (issue 39). A card is one chat.postMessage with blocks: a section with the title
// (bold) and the text, sections of up to ten fields ("*name*\nvalue", Slack's limit per
// section), and an actions block of buttons (url buttons open the link; value buttons carry
// the value, action_id "ab:<index>"). The message's text is the card's plain text, what
// notifications and clients without blocks show. Every piece of text is escaped (& < >), so
// model text cannot forge mentions or links. A press arrives as a block_actions interaction
// (Socket Mode, or the Events API request URL as a signed form post) and becomes an inbound
// message (pressButton).

// actionBlockID is the block_id of a card's actions block.
const actionBlockID = "ab-card"

// cardBlocks are the blocks of a card.
func cardBlocks(c events.Card) []slackapi.Block {
	var blocks []slackapi.Block
	var head []string
	if c.Title != "" {
		head = append(head, "*"+escaper.Replace(c.Title)+"*")
	}
	if c.Text != "" {
		head = append(head, escaper.Replace(c.Text))
	}
	if len(head) > 0 {
		// A section's text holds 3,000 characters; title and text together may be longer.
		blocks = append(blocks, slackapi.NewSectionBlock(slackapi.NewTextBlockObject(slackapi.MarkdownType, cutRunes(strings.Join(head, "\n"), 3000), false, false), nil, nil))
	}
	for i := 0; i < len(c.Fields); i += 10 {
		var fields []*slackapi.TextBlockObject
		for _, f := range c.Fields[i:min(i+10, len(c.Fields))] {
			fields = append(fields, slackapi.NewTextBlockObject(slackapi.MarkdownType, "*"+escaper.Replace(f.Name)+"*\n"+escaper.Replace(f.Value), false, false))
		}
		blocks = append(blocks, slackapi.NewSectionBlock(nil, fields, nil))
	}
	if len(c.Buttons) > 0 {
		var els []slackapi.BlockElement
		for i, b := range c.Buttons {
			btn := slackapi.NewButtonBlockElement("ab:"+strconv.Itoa(i), b.Value, slackapi.NewTextBlockObject(slackapi.PlainTextType, b.Label, false, false))
			btn.URL = b.URL
			els = append(els, btn)
		}
		blocks = append(blocks, slackapi.NewActionBlock(actionBlockID, els...))
	}
	return blocks
}

// postCard posts a card segment; one that does not validate goes out as its plain text.
func (s *Sender) postCard(ctx context.Context, b *webBot, channel string, seg events.Segment, thread string) (string, error) {
	c, _ := seg.Card()
	if c.Validate() != nil {
		return s.post(ctx, b, channel, escaper.Replace(c.PlainText()), thread)
	}
	opts := []slackapi.MsgOption{slackapi.MsgOptionText(escaper.Replace(c.PlainText()), false),
		slackapi.MsgOptionBlocks(cardBlocks(c)...), slackapi.MsgOptionDisableLinkUnfurl()}
	if thread != "" {
		opts = append(opts, slackapi.MsgOptionTS(thread))
	}
	ch, ts, err := b.api.PostMessageContext(ctx, channel, opts...)
	if err != nil {
		return "", classify("chat.postMessage", err)
	}
	if ch == "" {
		ch = channel
	}
	return MessageID(ch, ts, thread), nil
}

// maxInteraction bounds an interaction payload (Slack's are a few KiB).
const maxInteraction = 256 << 10

// wireInteraction is the part of a block_actions payload the adapter reads.
type wireInteraction struct {
	Type      string `json:"type"`
	TriggerID string `json:"trigger_id"`
	User      struct {
		ID       string `json:"id"`
		Username string `json:"username"`
		Name     string `json:"name"`
	} `json:"user"`
	Channel struct {
		ID string `json:"id"`
	} `json:"channel"`
	Container struct {
		ChannelID string `json:"channel_id"`
		MessageTS string `json:"message_ts"`
		ThreadTS  string `json:"thread_ts"`
	} `json:"container"`
	Message struct {
		TS       string      `json:"ts"`
		ThreadTS string      `json:"thread_ts"`
		Blocks   []wireBlock `json:"blocks"`
	} `json:"message"`
	Actions []struct {
		ActionID string `json:"action_id"`
		BlockID  string `json:"block_id"`
		Type     string `json:"type"`
		Value    string `json:"value"`
		ActionTS string `json:"action_ts"`
	} `json:"actions"`
}

type wireBlock struct {
	Type     string `json:"type"`
	BlockID  string `json:"block_id"`
	Elements []struct {
		Type     string `json:"type"`
		ActionID string `json:"action_id"`
		Value    string `json:"value"`
		URL      string `json:"url"`
		Text     struct {
			Text string `json:"text"`
		} `json:"text"`
	} `json:"elements"`
}

// pressButton ingests a block_actions interaction: a press of a card's value button becomes
// an inbound message from the presser, "[pressed button: <label>] <value>", in the card's
// channel; its message id is "<channel>/press:<action_ts>[/<thread ts>]": unique per press, so
// a redelivered interaction is deduplicated, and in the MessageID form, so the answer is
// threaded like an answer to the card (threadFor). The action must be a button of the card's actions block in the message Slack
// includes, with the same value; anything else (other interactions, forged or oversized
// values, a message Slack did not include) is dropped with no error (Slack is answered 200
// and does not send it again).
func (in *Inbound) pressButton(ctx context.Context, raw []byte) error {
	if len(raw) > maxInteraction {
		in.log.Warn("slack: interaction over the size limit dropped", "bytes", len(raw))
		return nil
	}
	var p wireInteraction
	if err := json.Unmarshal(raw, &p); err != nil {
		in.log.Warn("slack: interaction is not JSON", "err", err)
		return nil
	}
	if p.Type != "block_actions" || len(p.Actions) != 1 {
		return nil
	}
	a := p.Actions[0]
	label, ok := pressedLabel(p.Message.Blocks, a.BlockID, a.ActionID, a.Value)
	channel := firstNonEmpty(p.Container.ChannelID, p.Channel.ID)
	msgTS := firstNonEmpty(p.Container.MessageTS, p.Message.TS)
	if !ok || a.Type != "button" || p.User.ID == "" || channel == "" || msgTS == "" || a.ActionTS == "" || len(a.ActionTS) > 32 {
		in.log.Warn("slack: button press dropped: no such button on the message", "action", a.ActionID, "bytes", len(a.Value))
		return nil
	}
	scene := events.Scene{Type: events.ScopeGroup, ID: channel}
	if strings.HasPrefix(channel, "D") { // direct message channels' ids start with D
		scene.Type = events.ScopePrivate
	}
	// The answer goes where an answer to the card would: into its thread, or in a channel
	// into a new thread under the card; in a DM outside threads, not into one.
	thread := firstNonEmpty(p.Container.ThreadTS, p.Message.ThreadTS)
	if thread == "" && scene.Type == events.ScopeGroup {
		thread = msgTS
	}
	now := time.Now()
	m := &events.IMMessage{Platform: Platform, Bot: in.o.Bot.ID, MessageID: MessageID(channel, "press:"+a.ActionTS, thread),
		Scene: scene, Sender: events.Sender{ID: p.User.ID, Name: firstNonEmpty(p.User.Name, p.User.Username)}, Time: now.UnixMilli(),
		MentionsBot: true, Content: events.Segments{events.TextSeg(events.PressText(label, a.Value))}}
	if err := m.Validate(); err != nil {
		in.log.Warn("slack: button press dropped", "err", err)
		return nil
	}
	last := im.Ingest(ctx, in.o.Sink, m, 3, 300*time.Millisecond)
	if last != nil && !errors.Is(last, events.ErrInvalid) {
		return fmt.Errorf("slack: button press: %w", last)
	}
	return nil
}

// pressedLabel is the label of the card button (block blockID, action actionID) whose value
// is value, in the message's blocks.
func pressedLabel(blocks []wireBlock, blockID, actionID, value string) (string, bool) {
	if value == "" || len(value) > events.CardMaxValue || blockID != actionBlockID || !strings.HasPrefix(actionID, "ab:") {
		return "", false
	}
	for _, b := range blocks {
		if b.Type != "actions" || b.BlockID != blockID {
			continue
		}
		for _, e := range b.Elements {
			if e.Type == "button" && e.ActionID == actionID && e.Value == value && e.URL == "" {
				return e.Text.Text, true
			}
		}
	}
	return "", false
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// cutRunes cuts s to at most n characters.
func cutRunes(s string, n int) string {
	i := 0
	for k := range s {
		if i == n {
			return s[:k]
		}
		i++
	}
	return s
}
