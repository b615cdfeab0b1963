package events

import (
	"hash/fnv"
	"strconv"
	"strings"
)

// Event types (the envelope's "type"). One constant per payload type.
const (
	TypeIMMessage   = "im.message"    // IM_IN     im.in.<platform>.<bot>.<scope>.<scene>
	TypeIMOut       = "im.out"        // IM_OUT    im.out.<platform>.<bot>.<scope>.<scene>
	TypeIMSent      = "im.sent"       // IM_SENT   im.sent.<platform>.<bot>.<scope>.<scene>.<out>
	TypeIMSentBatch = "im.sent.batch" // IM_SENT im.sent.batch.<bucket>
)

// Segment types of a message's content, as in the seed's MessageElement[] ({type, data}).
// Adapters may send other types; they are carried along and skipped by the agent.
const (
	SegText    = "text"    // data.text
	SegImage   = "image"   // data.url | data.file | data.src | data.object (media store name) | data.base64 (+ mimeType)
	SegAudio   = "audio"   // data.data | data.base64 (+ data.format wav|mp3) | data.url | data.file | data.object
	SegRecord  = "record"  // like audio
	SegVoice   = "voice"   // like audio
	SegVideo   = "video"   // data.url | data.file | data.src | data.object | data.base64
	SegFace    = "face"    // data.id | data.face_id (+ text, name, describe)
	SegSticker = "sticker" // like face
	SegEmoji   = "emoji"   // like face
	SegAt      = "at"      // mention: data.id | data.user_id | data.qq (+ name, + self: true for the receiving bot); id "all" mentions everyone
	SegReply   = "reply"   // quoted message: data.id | data.message_id
	SegFile    = "file"    // data.url | data.file | data.object | data.base64 (+ name, size)
	// SegCard (card.go): data.title, data.text, data.fields, data.buttons.
)

// Segment is one element of a message: the seed's MessageSegment {type, data}. Data values are
// JSON values (strings, numbers, booleans, objects); media is referenced, never inlined beyond
// small base64 voice clips: large payloads go to the "media" object store and data.object
// names the object.
type Segment struct {
	Type string         `json:"type"`
	Data map[string]any `json:"data"`
}

// TextSeg returns a text segment.
func TextSeg(s string) Segment { return Segment{Type: SegText, Data: map[string]any{"text": s}} }

// ImageSeg returns an image segment referencing url.
func ImageSeg(url string) Segment { return Segment{Type: SegImage, Data: map[string]any{"url": url}} }

// AtSeg returns a mention of user id (name optional).
func AtSeg(id, name string) Segment {
	d := map[string]any{"id": id}
	if name != "" {
		d["name"] = name
	}
	return Segment{Type: SegAt, Data: d}
}

// SelfAtSeg returns a mention of the receiving bot itself, as its adapter saw it: id is the bot's
// user id on the platform (a QQ number, a Telegram user id, a Matrix user id), which is not the
// bot's configured id, so the adapter marks it (data.self = true). Ingest and the turn worker
// drop it from the text (so "@bot /reset" is the command /reset) and count it as addressing the
// bot (MentionsBot).
func SelfAtSeg(id, name string) Segment {
	s := AtSeg(id, name)
	s.Data["self"] = true
	return s
}

// IsSelfMention reports whether s is an at segment that mentions the receiving bot, whose
// configured id is bot: one its adapter marked data.self (SelfAtSeg), or one whose id is bot.
func (s Segment) IsSelfMention(bot string) bool {
	if s.Type != SegAt {
		return false
	}
	if self, _ := s.Data["self"].(bool); self {
		return true
	}
	return bot != "" && s.MentionID() == bot
}

// ReplySeg returns a quote of platform message id.
func ReplySeg(messageID string) Segment {
	return Segment{Type: SegReply, Data: map[string]any{"id": messageID}}
}

// Str returns data[key] when it is a non-empty string, or a number written as a string.
func (s Segment) Str(key string) string {
	switch v := s.Data[key].(type) {
	case string:
		return v
	case float64:
		return trimFloat(v)
	case int:
		return itoa(int64(v))
	case int64:
		return itoa(v)
	}
	return ""
}

// first returns the first non-empty string among keys.
func (s Segment) first(keys ...string) string {
	for _, k := range keys {
		if v := s.Str(k); v != "" {
			return v
		}
	}
	return ""
}

// MentionID returns the mentioned user id of an at segment.
func (s Segment) MentionID() string { return s.first("id", "user_id", "qq") }

// ReplyID returns the quoted message id of a reply segment.
func (s Segment) ReplyID() string { return s.first("id", "message_id") }

// MediaRef returns where a media segment's bytes are: url, file, src or object.
func (s Segment) MediaRef() string { return s.first("url", "file", "src", "object") }

// IsMedia reports whether the segment carries media (image, audio, video, face, file).
func (s Segment) IsMedia() bool {
	switch s.Type {
	case SegImage, SegAudio, SegRecord, SegVoice, SegVideo, SegFace, SegSticker, SegEmoji, SegFile:
		return true
	}
	return false
}

// Validate checks the fields the known segment types need; unknown types only need a type.
func (s Segment) Validate() error {
	if s.Type == "" {
		return required("type")
	}
	switch s.Type {
	case SegText:
		if _, ok := s.Data["text"].(string); !ok {
			return badField("data.text", "is required (a string)")
		}
	case SegImage, SegVideo:
		if s.MediaRef() == "" && s.Str("base64") == "" {
			return badField("data", "needs one of url, file, src, object, base64")
		}
	case SegAudio, SegRecord, SegVoice:
		if s.first("data", "base64") == "" && s.MediaRef() == "" {
			return badField("data", "needs one of data, base64, url, file, src, object")
		}
	case SegFace, SegSticker, SegEmoji:
		if s.first("id", "face_id") == "" {
			return badField("data", "needs id or face_id")
		}
	case SegAt:
		if s.MentionID() == "" {
			return badField("data", "needs id (or user_id, qq)")
		}
	case SegReply:
		if s.ReplyID() == "" {
			return badField("data", "needs id (or message_id)")
		}
	case SegFile:
		if s.MediaRef() == "" && s.Str("base64") == "" {
			return badField("data", "needs one of url, file, object, base64")
		}
	case SegCard:
		c, _ := s.Card()
		if err := c.Validate(); err != nil {
			return within("data", err)
		}
	}
	return nil
}

// Segments is a message's content.
type Segments []Segment

// Validate checks every segment, naming the index of the first bad one.
func (ss Segments) Validate() error {
	for i, s := range ss {
		if err := s.Validate(); err != nil {
			return within("content["+itoa(int64(i))+"]", err)
		}
	}
	return nil
}

// PlainText joins the text segments: the transcript body (seed: extractTextContent). Mentions
// become "@name" (or "@id") so that keyword search finds them; a card becomes its plain text
// (Card.PlainText) on lines of its own.
func (ss Segments) PlainText() string {
	var b strings.Builder
	for _, s := range ss {
		switch s.Type {
		case SegText:
			b.WriteString(s.Str("text"))
		case SegAt:
			b.WriteByte('@')
			if n := strings.TrimPrefix(s.Str("name"), "@"); n != "" { // Telegram's names carry their "@"
				b.WriteString(n)
			} else {
				b.WriteString(s.MentionID())
			}
			b.WriteByte(' ')
		case SegCard:
			c, _ := s.Card()
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(c.PlainText())
		}
	}
	return b.String()
}

// HasMedia reports whether any segment carries media.
func (ss Segments) HasMedia() bool {
	for _, s := range ss {
		if s.IsMedia() {
			return true
		}
	}
	return false
}

// Mentions reports whether the content mentions user id.
func (ss Segments) Mentions(id string) bool {
	for _, s := range ss {
		if s.Type == SegAt && s.MentionID() == id {
			return true
		}
	}
	return false
}

// MentionsSelf reports whether the content mentions the receiving bot (IsSelfMention).
func (ss Segments) MentionsSelf(bot string) bool {
	for _, s := range ss {
		if s.IsSelfMention(bot) {
			return true
		}
	}
	return false
}

// Sender roles as the seed's permission model knows them. Platforms may add their own.
const (
	RoleMaster  = "master"  // bot owner (ai.trigger.masters): may steer, approve, reset anything
	RoleTrusted = "trusted" // ai.trigger.trusted
	RoleOwner   = "owner"   // group owner on the platform
	RoleAdmin   = "admin"   // group admin on the platform
	RoleMember  = "member"
)

// Sender is who wrote a message.
type Sender struct {
	ID    string   `json:"id"`
	Name  string   `json:"name,omitempty"`
	Roles []string `json:"roles,omitempty"`
}

// HasRole reports whether the sender has role r.
func (s Sender) HasRole(r string) bool {
	for _, x := range s.Roles {
		if x == r {
			return true
		}
	}
	return false
}

// Validate requires an id.
func (s Sender) Validate() error {
	if s.ID == "" {
		return required("id")
	}
	return nil
}

// Scene is where a message was written: type private|group|channel and the platform's id.
type Scene struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
}

// Validate requires a valid type and an id.
func (s Scene) Validate() error {
	switch {
	case s.Type == "":
		return required("type")
	case !ValidScope(s.Type):
		return badField("type", "%q must be private, group or channel", s.Type)
	case s.ID == "":
		return required("id")
	}
	return nil
}

// IMMessage is one normalized inbound IM message (IM_IN, type "im.message"). Ingest publishes it
// on IMInSubject(m.SessionKey()) with Nats-Msg-Id = MsgID(), so a platform's redelivery of the
// same message is dropped by the stream.
type IMMessage struct {
	Platform string `json:"platform"`
	Bot      string `json:"bot"` // the bot's id on the platform (botId of the session key)
	// MessageID is the platform's message id.
	MessageID string   `json:"messageId"`
	Scene     Scene    `json:"scene"`
	Sender    Sender   `json:"sender"`
	Content   Segments `json:"content"`
	// Time is when the platform says the message was sent, Unix ms (0 = unknown; use the envelope time).
	Time int64 `json:"time,omitempty"`
	// MentionsBot is set by the adapter when the bot was @-mentioned (or addressed by a platform
	// mechanism that is not an at segment).
	MentionsBot bool `json:"mentionsBot,omitempty"`
}

func (IMMessage) EventType() string { return TypeIMMessage }

// SessionKey returns the session the message belongs to.
func (m IMMessage) SessionKey() SessionKey {
	return SessionKey{Platform: m.Platform, Bot: m.Bot, Scope: m.Scene.Type, Scene: m.Scene.ID}
}

// MsgID is the dedupe id: "<platform>/<bot>/<messageId>" (qualified, because two platforms or
// bots may reuse the same message id within the duplicate window).
func (m IMMessage) MsgID() string { return m.Platform + "/" + m.Bot + "/" + m.MessageID }

// Validate checks every field the pipeline relies on.
func (m IMMessage) Validate() error {
	switch {
	case m.Platform == "":
		return required("platform")
	case strings.IndexByte(m.Platform, ':') >= 0:
		return badField("platform", "%q must not contain ':'", m.Platform)
	case m.Bot == "":
		return required("bot")
	case strings.IndexByte(m.Bot, ':') >= 0:
		return badField("bot", "%q must not contain ':'", m.Bot)
	case m.MessageID == "":
		return required("messageId")
	case m.Time < 0:
		return badField("time", "must not be negative")
	}
	if err := m.Scene.Validate(); err != nil {
		return within("scene", err)
	}
	if err := m.Sender.Validate(); err != nil {
		return within("sender", err)
	}
	if len(m.Content) == 0 {
		return badField("content", "must have at least one segment")
	}
	return m.Content.Validate()
}

// Outbound is one reply part to deliver (IM_OUT, type "im.out"), published on
// IMOutSubject(key) with Nats-Msg-Id = OutID. A turn's n-th part has OutID = OutID(turn, n),
// so a resumed turn that publishes the part again is deduplicated, and egress sends it at most
// once (delivered KV keyed by OutID).
type Outbound struct {
	OutID    string `json:"outId"`
	Turn     string `json:"turn,omitempty"`
	Part     int    `json:"part"`
	Platform string `json:"platform"`
	Bot      string `json:"bot"`
	Scene    Scene  `json:"scene"`
	// ReplyTo is the platform message id to quote/thread under, if any.
	ReplyTo string   `json:"replyTo,omitempty"`
	Content Segments `json:"content"`
	// Final marks the turn's last part.
	Final bool `json:"final,omitempty"`
	// Fresh is the publisher's promise that this out id was never published before (a turn
	// that was not taken over from a crashed owner). Egress no longer acts on it: it looks up
	// the receipt of every part it did not send itself, whatever the delivery count, because a
	// recreated consumer delivers every stored part "for the first time" again. Kept on the
	// wire for compatibility.
	Fresh bool `json:"fresh,omitempty"`
}

func (Outbound) EventType() string { return TypeIMOut }

// SessionKey returns the target session.
func (o Outbound) SessionKey() SessionKey {
	return SessionKey{Platform: o.Platform, Bot: o.Bot, Scope: o.Scene.Type, Scene: o.Scene.ID}
}

// MsgID is the dedupe id (OutID).
func (o Outbound) MsgID() string { return o.OutID }

// OutID returns the out id of part n of turn: "<turn>-<n>".
func OutID(turn string, part int) string { return turn + "-" + itoa(int64(part)) }

// Validate checks the fields egress needs.
func (o Outbound) Validate() error {
	switch {
	case o.OutID == "":
		return required("outId")
	case o.Part < 0:
		return badField("part", "must not be negative")
	case o.Platform == "":
		return required("platform")
	case o.Bot == "":
		return required("bot")
	}
	if err := o.Scene.Validate(); err != nil {
		return within("scene", err)
	}
	if len(o.Content) == 0 {
		return badField("content", "must have at least one segment")
	}
	return o.Content.Validate()
}

// Receipt records that a part was delivered (IM_SENT, type "im.sent"), published on
// IMSentSubject(key) (one subject per chat, issue 41; IMSentPartSubject, one per part, before)
// with Nats-Msg-Id = "sent/" + OutID and HeaderOutID = OutID. It is egress's one delivery
// record: "already delivered?" is a search of the chat's receipts stored since the part was
// (store.FindReceipt). It carries the
// content so the transcript archiver can write the outbound row without joining IM_OUT.
type Receipt struct {
	OutID    string `json:"outId"`
	Turn     string `json:"turn,omitempty"`
	Platform string `json:"platform"`
	Bot      string `json:"bot"`
	Scene    Scene  `json:"scene"`
	// MessageID is the platform's id of the sent message.
	MessageID string `json:"messageId"`
	// Time the platform accepted the message, Unix ms.
	Time    int64    `json:"time"`
	Content Segments `json:"content,omitempty"`
	// Sender is the bot as the transcript shows it (id = bot id, name = its display name).
	Sender Sender `json:"sender"`
}

func (Receipt) EventType() string { return TypeIMSent }

// SessionKey returns the session the receipt belongs to.
func (r Receipt) SessionKey() SessionKey {
	return SessionKey{Platform: r.Platform, Bot: r.Bot, Scope: r.Scene.Type, Scene: r.Scene.ID}
}

// MsgID is the dedupe id: "sent/<outId>".
func (r Receipt) MsgID() string { return "sent/" + r.OutID }

// Validate checks the receipt.
func (r Receipt) Validate() error {
	switch {
	case r.OutID == "":
		return required("outId")
	case r.Platform == "":
		return required("platform")
	case r.Bot == "":
		return required("bot")
	case r.MessageID == "":
		return required("messageId")
	case r.Time <= 0:
		return required("time")
	}
	if err := r.Scene.Validate(); err != nil {
		return within("scene", err)
	}
	if err := r.Sender.Validate(); err != nil {
		return within("sender", err)
	}
	return r.Content.Validate()
}

// ReceiptBatch is one message holding the receipts of several parts (IM_SENT, type
// "im.sent.batch"): egress writes the receipts of the parts it sent while its previous receipt
// write was in flight as one message (a group commit), one message per receipt bucket
// (ReceiptBucket) the parts fall in, on IMSentBatchSubject(bucket), with one HeaderOutID value
// per receipt (in order) and Nats-Msg-Id = MsgID(). A part alone, or the only part of its bucket
// in a write, still gets a plain Receipt on its chat's subject. Each receipt in Receipts is a
// whole Receipt, read as if it had been stored alone (store.FindReceipt, the archiver, the
// console).
type ReceiptBatch struct {
	Receipts []Receipt `json:"receipts"`
}

func (ReceiptBatch) EventType() string { return TypeIMSentBatch }

// MsgID is the dedupe id: "sent/<first outId>+<n>.<h>", n the number of receipts and h the
// FNV-1a hash (hex) of all their out ids: the same for a retried write of the same batch,
// different for another batch that starts with the same part.
func (b ReceiptBatch) MsgID() string {
	if len(b.Receipts) == 0 {
		return ""
	}
	h := fnv.New64a()
	for _, r := range b.Receipts {
		h.Write([]byte(r.OutID))
		h.Write([]byte{0})
	}
	return "sent/" + b.Receipts[0].OutID + "+" + itoa(int64(len(b.Receipts))) + "." + strconv.FormatUint(h.Sum64(), 16)
}

// Validate checks every receipt, and that all of them share one receipt bucket.
func (b ReceiptBatch) Validate() error {
	if len(b.Receipts) == 0 {
		return badField("receipts", "must have at least one receipt")
	}
	bucket, ok := ReceiptBucket(b.Receipts[0].OutID)
	for i, r := range b.Receipts {
		if err := r.Validate(); err != nil {
			return within("receipts["+itoa(int64(i))+"]", err)
		}
		if rb, rok := ReceiptBucket(r.OutID); !ok || !rok || rb != bucket {
			return badField("receipts", "outId %q is not in the receipt bucket of the batch", r.OutID)
		}
	}
	return nil
}

// ReceiptBucketTurns is how many consecutive turn numbers share a receipt bucket. It is part of
// the wire contract: a reader finds a batched receipt on the bucket's subject only, so it must
// never change for receipts already stored.
const ReceiptBucketTurns = 1024

// ReceiptBucket is the receipt bucket of out id outID: for an out id OutID(turn, n) whose turn
// is "t<number>" (a turn worker's turn: the number is the trigger's inbox sequence, so parts
// egress holds at the same time have close numbers), number / ReceiptBucketTurns. Any other out
// id has no bucket (ok false): its receipt is always a plain one on its chat's subject.
func ReceiptBucket(outID string) (bucket uint64, ok bool) {
	i := strings.LastIndexByte(outID, '-')
	if i < 2 || outID[0] != 't' {
		return 0, false
	}
	var n uint64
	for _, c := range outID[1:i] {
		if c < '0' || c > '9' || n > (1<<63)/10 {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n / ReceiptBucketTurns, true
}

func init() {
	register[IMMessage]()
	register[Outbound]()
	register[Receipt]()
	register[ReceiptBatch]()
}
