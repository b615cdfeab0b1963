package events

// The transcript search: a NATS request/reply (not a stream) that every egress holding a
// transcript archive serves, and the chat_history tool asks. It is part of the wire contract
// like the events; docs/events/transcripts.search.*.schema.json are generated from these types.

// SubjectTranscriptSearch is the request/reply subject of the transcript search. It is served
// by a NATS micro service "agentbus-transcripts" (endpoint "search", queue group
// "transcripts"), so any one egress answers.
const SubjectTranscriptSearch = "transcripts.search"

// TranscriptSearchRequest is the JSON request on SubjectTranscriptSearch:
//
//	{"platform":"webhook","bot":"b1","scene":"g1","keyword":"deploy","limit":10}
//
// Platform, Bot and Scene (the scene id) are required: a search never crosses scenes. Keyword
// is a case-insensitive substring of the message text ("" = the latest rows). Limit defaults to
// 10 and is capped at 1000; a negative limit is a bad request. Unknown fields are a bad request.
type TranscriptSearchRequest struct {
	Platform string `json:"platform"`
	Bot      string `json:"bot"`
	Scene    string `json:"scene"`
	Keyword  string `json:"keyword,omitempty"`
	Limit    int    `json:"limit,omitempty"`
}

// TranscriptSearchResponse is the JSON reply: the matching rows, newest first, both directions.
//
// On failure the reply carries the NATS micro error headers (Nats-Service-Error,
// Nats-Service-Error-Code: 400 for a bad request, 500 otherwise) and a body {"rows":[],
// "error":"..."}.
type TranscriptSearchResponse struct {
	Rows  []TranscriptRow `json:"rows"`
	Error string          `json:"error,omitempty"`
}

// TranscriptDirection says whether a transcript row was received or sent by the bot.
type TranscriptDirection string

// The two directions of a transcript row.
const (
	TranscriptInbound  TranscriptDirection = "inbound"
	TranscriptOutbound TranscriptDirection = "outbound"
)

// TranscriptRow is one im_transcripts row (seed ADR D4); JSON names are the seed's column
// names. pkg/store/transcript stores rows of this shape.
type TranscriptRow struct {
	// ID is assigned by the archive (per scene, increasing) and ignored on input.
	ID         uint64              `json:"id"`
	MessageID  string              `json:"message_id"`
	Platform   string              `json:"platform"`
	BotID      string              `json:"bot_id"`
	SceneID    string              `json:"scene_id"`
	SceneType  string              `json:"scene_type"` // private | group | channel
	SenderID   string              `json:"sender_id"`
	SenderName string              `json:"sender_name"`
	SenderRole string              `json:"sender_role"`
	Direction  TranscriptDirection `json:"direction"`
	// Body is the plain text of the message ("" for a media-only message).
	Body string `json:"body"`
	// MediaJSON is the JSON of the message's segments (MessageElement[]), or "".
	MediaJSON string `json:"media_json,omitempty"`
	// Time is Unix milliseconds.
	Time int64 `json:"time"`
}
