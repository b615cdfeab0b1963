package telegram

import (
	"context"
	"errors"
	"fmt"
	"html"
	"strconv"
	"strings"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Cards (issue 39). A card is one sendMessage: its title bold, its text as Markdown made
// HTML, a bold "name: value" line per field, and its buttons as an inline keyboard, one
// button per row (url buttons open the link; value buttons carry the value as their
// callback_data, which events.Card bounds to Telegram's 64 bytes, so no id mapping has to be
// kept in step between the egress that sends and the ingest that receives the press).

// cardHTML is the message text of a card.
func cardHTML(c events.Card) string {
	var lines []string
	if c.Title != "" {
		lines = append(lines, "<b>"+html.EscapeString(c.Title)+"</b>")
	}
	if c.Text != "" {
		lines = append(lines, HTML(c.Text))
	}
	for _, f := range c.Fields {
		lines = append(lines, "<b>"+html.EscapeString(f.Name)+":</b> "+html.EscapeString(f.Value))
	}
	return strings.Join(lines, "\n")
}

// cardKeyboard is the inline keyboard of a card's buttons (nil: none).
func cardKeyboard(c events.Card) *tgbotapi.InlineKeyboardMarkup {
	if len(c.Buttons) == 0 {
		return nil
	}
	rows := make([][]tgbotapi.InlineKeyboardButton, 0, len(c.Buttons))
	for _, b := range c.Buttons {
		if b.URL != "" {
			rows = append(rows, tgbotapi.NewInlineKeyboardRow(tgbotapi.NewInlineKeyboardButtonURL(b.Label, b.URL)))
		} else {
			rows = append(rows, tgbotapi.NewInlineKeyboardRow(tgbotapi.NewInlineKeyboardButtonData(b.Label, b.Value)))
		}
	}
	kb := tgbotapi.NewInlineKeyboardMarkup(rows...)
	return &kb
}

// sendCard sends a card segment (see above). A card that does not validate (it came from
// outside the turn worker) goes out as its plain text.
func (s *Sender) sendCard(ctx context.Context, c *client, chat int64, seg events.Segment, replyTo int) (int, error) {
	card, _ := seg.Card()
	if err := card.Validate(); err != nil {
		return s.sendText(ctx, c, chat, card.PlainText(), replyTo)
	}
	msg := tgbotapi.NewMessage(chat, cardHTML(card))
	msg.ParseMode = tgbotapi.ModeHTML
	msg.ReplyToMessageID, msg.AllowSendingWithoutReply = replyTo, replyTo != 0
	msg.DisableWebPagePreview = true
	if kb := cardKeyboard(card); kb != nil {
		msg.ReplyMarkup = kb
	}
	var sent tgbotapi.Message
	send := func(api *tgbotapi.BotAPI) (err error) { sent, err = api.Send(msg); return err }
	err := c.inChat(ctx, chat, true, send)
	if isParseError(err) { // the text's Markdown made HTML Telegram rejects: plain, same keyboard
		msg.Text, msg.ParseMode = card.PlainText(), ""
		err = c.inChat(ctx, chat, true, send)
	}
	if err != nil {
		return 0, classifyChat("sendMessage", err)
	}
	return sent.MessageID, nil
}

// pressButton turns a callback query (a press of a card's value button) into an inbound
// message from the presser in the card's chat: "[pressed button: <label>] <value>", message
// id "press:<callback query id>" (Telegram redelivers an update it did not see confirmed;
// ingest drops the second copy). The press is checked against the keyboard of the message it
// came from, which Telegram includes: callback data that is no button of that message
// (forged by a modified client, or of a message too old to be included) is answered and
// dropped. Every query is answered (answerCallbackQuery), which stops the client's spinner.
func (in *Inbound) pressButton(ctx context.Context, cq *tgbotapi.CallbackQuery) error {
	label, ok := pressedLabel(cq)
	if !ok {
		in.log.Warn("telegram: button press dropped: no such button on the message", "query", cq.ID, "bytes", len(cq.Data))
		in.answerPress(ctx, cq.ID, "This button is no longer available.")
		return nil
	}
	scene, err := sceneOf(cq.Message.Chat)
	if err != nil {
		in.answerPress(ctx, cq.ID, "")
		return nil
	}
	name := strings.TrimSpace(cq.From.FirstName + " " + cq.From.LastName)
	if name == "" {
		name = cq.From.UserName
	}
	m := &events.IMMessage{Platform: Platform, Bot: in.o.Bot.ID, MessageID: "press:" + cq.ID, Scene: scene,
		Sender: events.Sender{ID: strconv.FormatInt(cq.From.ID, 10), Name: name}, Time: time.Now().UnixMilli(),
		MentionsBot: true, Content: events.Segments{events.TextSeg(events.PressText(label, cq.Data))}}
	if err := m.Validate(); err != nil { // a sender without an id: nothing to attribute the press to
		in.log.Warn("telegram: button press dropped", "query", cq.ID, "err", err)
		in.answerPress(ctx, cq.ID, "")
		return nil
	}
	last := im.Ingest(ctx, in.o.Sink, m, 4, 500*time.Millisecond)
	if last != nil && !errors.Is(last, events.ErrInvalid) {
		return last // not answered: the redelivered update answers it
	}
	in.answerPress(ctx, cq.ID, "")
	return last
}

// pressedLabel is the label of the button of cq's message whose callback data is cq.Data.
func pressedLabel(cq *tgbotapi.CallbackQuery) (string, bool) {
	if cq.From == nil || cq.Message == nil || cq.Message.Chat == nil || cq.Message.ReplyMarkup == nil ||
		cq.Data == "" || len(cq.Data) > events.CardMaxValue {
		return "", false
	}
	for _, row := range cq.Message.ReplyMarkup.InlineKeyboard {
		for _, b := range row {
			if b.CallbackData != nil && *b.CallbackData == cq.Data {
				return b.Text, true
			}
		}
	}
	return "", false
}

// answerPress answers a callback query (best effort: an unanswered one only spins a while).
func (in *Inbound) answerPress(ctx context.Context, id, text string) {
	if _, err := in.c.api(ctx).Request(tgbotapi.NewCallback(id, text)); err != nil {
		in.log.Warn("telegram: answerCallbackQuery", "err", classify("answerCallbackQuery", err))
	}
}

// sceneOf is the bus scene of a Telegram chat.
func sceneOf(chat *tgbotapi.Chat) (events.Scene, error) {
	id := strconv.FormatInt(chat.ID, 10)
	switch chat.Type {
	case "private":
		return events.Scene{Type: "private", ID: id}, nil
	case "group", "supergroup":
		return events.Scene{Type: "group", ID: id, Name: chat.Title}, nil
	case "channel":
		return events.Scene{Type: "channel", ID: id, Name: chat.Title}, nil
	}
	return events.Scene{}, fmt.Errorf("chat type %q is not private, group, supergroup or channel", chat.Type)
}
