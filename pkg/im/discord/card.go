package discord

import (
	"context"
	"strings"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Cards (issue 39). A card is one message with an embed (title, description = the card's
// text, fields) and its buttons as components: action rows of up to five buttons, link style
// for URL buttons, primary style with custom_id "ab:<value>" for value buttons (events.Card
// bounds values to 64 bytes; Discord's custom_id takes 100 characters). A press arrives as an
// INTERACTION_CREATE on the gateway; it is acknowledged with a deferred message update (the
// message stays as it is) and becomes an inbound message (pressButton).

// customIDPrefix marks the custom_ids of card buttons, so that presses of other components
// (none today) are not taken for card presses.
const customIDPrefix = "ab:"

// maxCustomID is Discord's custom_id limit.
const maxCustomID = 100

// cardMessage is the message of a card.
func cardMessage(c events.Card) *discordgo.MessageSend {
	e := &discordgo.MessageEmbed{Title: c.Title, Description: c.Text}
	for _, f := range c.Fields {
		e.Fields = append(e.Fields, &discordgo.MessageEmbedField{Name: f.Name, Value: f.Value, Inline: f.Inline})
	}
	m := &discordgo.MessageSend{Embeds: []*discordgo.MessageEmbed{e}}
	var row discordgo.ActionsRow
	for _, b := range c.Buttons {
		btn := discordgo.Button{Label: b.Label, Style: discordgo.PrimaryButton, CustomID: customIDPrefix + b.Value}
		if b.URL != "" {
			btn = discordgo.Button{Label: b.Label, Style: discordgo.LinkButton, URL: b.URL}
		}
		row.Components = append(row.Components, btn)
		if len(row.Components) == 5 {
			m.Components = append(m.Components, row)
			row = discordgo.ActionsRow{}
		}
	}
	if len(row.Components) > 0 {
		m.Components = append(m.Components, row)
	}
	return m
}

// pressButton handles one INTERACTION_CREATE: a press of a card's value button becomes an
// inbound message from the presser in the card's channel, "[pressed button: <label>]
// <value>", message id the interaction id. The custom_id must carry the card prefix,
// fit Discord's limit and be a button of the message the interaction came from (Discord
// includes it); anything else is acknowledged and dropped. Every component interaction is
// acknowledged first: Discord wants an answer within three seconds, and ingest may take
// longer.
func (in *Inbound) pressButton(ctx context.Context, s *discordgo.Session, i *discordgo.Interaction) {
	if i == nil || i.Type != discordgo.InteractionMessageComponent {
		return
	}
	if err := s.InteractionRespond(i, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredMessageUpdate},
		discordgo.WithContext(ctx)); err != nil {
		in.log.Warn("discord: interaction response", "interaction", i.ID, "err", classify("interactionResponse", err))
	}
	data := i.MessageComponentData()
	label, ok := pressedLabel(i.Message, data.CustomID)
	user := i.User
	if i.Member != nil && i.Member.User != nil {
		user = i.Member.User
	}
	if !ok || user == nil || i.ChannelID == "" || i.ID == "" {
		in.log.Warn("discord: button press dropped: no such button on the message", "interaction", i.ID, "bytes", len(data.CustomID))
		return
	}
	scene := events.Scene{Type: events.ScopePrivate, ID: i.ChannelID}
	if i.GuildID != "" {
		scene.Type = events.ScopeGroup
	}
	name := user.GlobalName
	if name == "" {
		name = user.Username
	}
	if i.Member != nil && i.Member.Nick != "" {
		name = i.Member.Nick
	}
	value := strings.TrimPrefix(data.CustomID, customIDPrefix)
	// The message id is the interaction's own snowflake: unique (a redelivered press is
	// deduplicated), and a valid message_reference for the reply, which Discord then sends
	// without a quote (fail_if_not_exists false) where "press:<id>" would be rejected.
	m := &events.IMMessage{Platform: Platform, Bot: in.o.Bot.ID, MessageID: i.ID, Scene: scene,
		Sender: events.Sender{ID: user.ID, Name: name}, Time: time.Now().UnixMilli(), MentionsBot: true,
		Content: events.Segments{events.TextSeg(events.PressText(label, value))}}
	if err := m.Validate(); err != nil {
		in.log.Warn("discord: button press dropped", "interaction", i.ID, "err", err)
		return
	}
	if err := im.Ingest(ctx, in.o.Sink, m, 6, 500*time.Millisecond); err != nil {
		in.log.Error("discord: button press not ingested", "interaction", i.ID, "err", err)
	}
}

// pressedLabel is the label of msg's card button whose custom_id is id.
func pressedLabel(msg *discordgo.Message, id string) (string, bool) {
	if msg == nil || len(id) > maxCustomID || !strings.HasPrefix(id, customIDPrefix) || len(id) == len(customIDPrefix) {
		return "", false
	}
	for _, c := range msg.Components {
		row, ok := c.(*discordgo.ActionsRow)
		if !ok {
			continue
		}
		for _, cc := range row.Components {
			if b, ok := cc.(*discordgo.Button); ok && b.CustomID == id {
				return b.Label, true
			}
		}
	}
	return "", false
}
