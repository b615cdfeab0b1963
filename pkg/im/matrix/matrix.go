// Package matrix is the Matrix adapter, on mautrix-go's client-server API client.
//
// Inbound (ingest role): /sync long polling under the single-connection lease (pkg/im.Hold,
// key im-conn.matrix.<bot>). The since token is kept in KV leases under
// im-sync.matrix.<bot>, written by compare-and-set only after every message of a batch was
// ingested, so a replica that takes the connection over resumes exactly where the dead one
// stopped: a batch that was ingested but not yet confirmed is fetched again and deduplicated
// on IM_IN by its event id (the dedupe id), and nothing after the stored token is skipped.
// A sync whose timeline comes back limited (more happened since the token than one sync
// returns) is completed with /messages from the timeline's prev_batch back to the since token.
// A bot's first start (no stored token) skips the rooms' history and answers only what comes
// after it.
//
// Rooms are scope "group" and direct chats scope "private": a room is direct when the invite
// said is_direct, when it is listed in the bot's m.direct account data, or when it has
// exactly two joined members. The scene id is the room id. m.mentions with the bot's user id
// is a mention; a message without m.mentions (older clients) mentions the bot through a pill
// in formatted_body or the bot's user id or display name in the body. Replies
// (m.relates_to.m.in_reply_to) become reply segments and their fallback quote is dropped.
// Images, audio, video and files (mxc://) are downloaded through the configured homeserver's
// authenticated media endpoint (/_matrix/client/v1/media/download, falling back to
// /_matrix/media/v3/download on servers without it) into the media object store. Exactly the
// configured homeserver (its scheme and host:port) is reached directly, even on loopback;
// every other request (a redirect elsewhere, a web URL a non-conforming client put in a
// message) goes through the SSRF guard.
// Invites to rooms are joined (autoJoin, default on); the bot's own events, edits, notices
// and encrypted events (no end-to-end encryption here) are not ingested.
//
// Outbound (egress role): m.room.message m.text with an HTML body rendered from the reply's
// Markdown (raw HTML in the text is escaped), cut at the chunk limit, the first message a
// rich reply (m.in_reply_to) to the message it answers, in that message's thread (m.thread)
// when it is in one; at segments become pills and m.mentions. Images, audio, video and files are uploaded to the content repository and sent
// as m.image, m.audio, m.video, m.file. Each message has a transaction id derived from the out
// id and its index, so a send retried after a lost answer, on any egress replica, is the same
// event (the homeserver deduplicates transaction ids per access token). 429 M_LIMIT_EXCEEDED
// carries retry_after_ms to egress. Streaming previews are m.replace edits of one message,
// typing notifications run while a turn streams (see RunPreviewer).
package matrix

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/id"

	"github.com/agentbus/agentbus/internal/jsconflict"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/natsutil"
)

// Platform is the platform name in session keys.
const Platform = "matrix"

// DefaultChunkLimit is the longest message sent, in characters. Matrix caps an event at
// 64 KiB; 8000 characters of CJK text (3 bytes each) plus the HTML body stay well under it.
const DefaultChunkLimit = 8000

// Validate checks one bot's configuration.
func Validate(b config.MatrixBot) error {
	switch {
	case b.ID == "":
		return errors.New("matrix: a bot has no id")
	case strings.ContainsAny(b.ID, ":/ "):
		return fmt.Errorf("matrix: bot id %q must not contain ':', '/' or spaces", b.ID)
	case b.AccessToken == "":
		return fmt.Errorf("matrix: bot %s has no accessToken", b.ID)
	}
	if _, _, err := id.UserID(b.UserID).Parse(); err != nil {
		return fmt.Errorf("matrix: bot %s: userId %q: %w", b.ID, b.UserID, err)
	}
	u, err := url.Parse(b.Homeserver)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("matrix: bot %s: homeserver %q is not an http(s) URL", b.ID, b.Homeserver)
	}
	switch b.Preview {
	case "", "off", "partial", "block":
	default:
		return fmt.Errorf("matrix: bot %s: preview %q must be off, partial or block", b.ID, b.Preview)
	}
	return nil
}

func autoJoin(b config.MatrixBot) bool { return b.AutoJoin == nil || *b.AutoJoin }

func chunkLimit(b config.MatrixBot) int {
	if b.ChunkLimit > 0 && b.ChunkLimit <= DefaultChunkLimit {
		return b.ChunkLimit
	}
	return DefaultChunkLimit
}

// newClient returns a mautrix client for b over hc (nil: a 60 s client). mautrix's own
// retries and 429 sleeps are off: callers decide (egress retries with the homeserver's
// retry_after_ms, the sync loop backs off itself).
func newClient(b config.MatrixBot, hc *http.Client) (*mautrix.Client, error) {
	c, err := mautrix.NewClient(strings.TrimSuffix(b.Homeserver, "/"), id.UserID(b.UserID), b.AccessToken)
	if err != nil {
		return nil, fmt.Errorf("matrix: bot %s: %w", b.ID, err)
	}
	if hc == nil {
		hc = &http.Client{Timeout: 60 * time.Second}
	}
	c.Client = hc
	c.DefaultHTTPRetries = 0
	c.IgnoreRateLimit = true
	c.UserAgent = "agentbus-matrix/1.0"
	return c, nil
}

// classify turns a mautrix or transport error into an *im.Error egress understands: 429
// M_LIMIT_EXCEEDED carries retry_after_ms (or Retry-After), 408 and 5xx are transient, every
// other 4xx (M_FORBIDDEN, M_UNKNOWN_TOKEN, M_NOT_FOUND, ...) permanent. A network error
// stays transient. Error texts never hold the access token (it travels in a header).
func classify(action string, err error) error {
	if err == nil {
		return nil
	}
	var he mautrix.HTTPError
	if errors.As(err, &he) && he.Response != nil {
		e := &im.Error{Platform: Platform, Action: action, Status: he.Response.StatusCode}
		if re := he.RespError; re != nil {
			e.Msg = re.ErrCode + ": " + re.Err
			if ms, ok := re.ExtraData["retry_after_ms"].(float64); ok && ms > 0 {
				e.RetryAfter = time.Duration(ms) * time.Millisecond
			}
		} else {
			e.Msg = snippet(he.ResponseBody, 200)
		}
		if e.RetryAfter == 0 {
			e.RetryAfter = im.ParseRetryAfter(he.Response.Header.Get("Retry-After"), time.Now())
		}
		s := he.Response.StatusCode
		e.Perm = s >= 400 && s < 500 && s != http.StatusRequestTimeout && s != http.StatusTooManyRequests
		return e
	}
	return fmt.Errorf("matrix: %s: %w", action, err)
}

func snippet(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// errCode is the Matrix errcode of err ("" when it has none).
func errCode(err error) string {
	var he mautrix.HTTPError
	if errors.As(err, &he) && he.RespError != nil {
		return he.RespError.ErrCode
	}
	return ""
}

func httpStatus(err error) int {
	var he mautrix.HTTPError
	if errors.As(err, &he) && he.Response != nil {
		return he.Response.StatusCode
	}
	return 0
}

// txnID is the transaction id of message k of out id outID (kind tells sends and edits
// apart): the same on every retry and every egress replica, so the homeserver answers a
// repeated send with the event it already created.
func txnID(kind, outID string, k int) string {
	sum := sha256.Sum256([]byte(kind + "\x00" + outID + "\x00" + fmt.Sprint(k)))
	return "ab" + base64.RawURLEncoding.EncodeToString(sum[:18])
}

// SyncKey is the leases-bucket key of a bot's since token: "im-sync.matrix.<bot>" (no TTL:
// only the connection's holder writes it, by compare-and-set).
func SyncKey(bot string) string {
	return "im-sync." + Platform + "." + events.EncodeToken(bot)
}

type syncRecord struct {
	Since string `json:"since"`
	// Saved is when it was written (Unix ms), for operators reading the bucket.
	Saved int64 `json:"saved"`
}

// sinceStore keeps one bot's since token in KV leases.
type sinceStore struct {
	kv  jetstream.KeyValue
	key string
	rev uint64
}

func openSince(ctx context.Context, js jetstream.JetStream, bot string) (*sinceStore, error) {
	if js == nil {
		return &sinceStore{}, nil
	}
	kv, err := natsutil.KeyValue(ctx, js, events.BucketLeases)
	if err != nil {
		return nil, fmt.Errorf("matrix: open KV %s: %w", events.BucketLeases, err)
	}
	return &sinceStore{kv: kv, key: SyncKey(bot)}, nil
}

// load reads the stored token ("" = none) and remembers its revision for save.
func (s *sinceStore) load(ctx context.Context) (string, error) {
	if s.kv == nil {
		return "", nil
	}
	e, err := s.kv.Get(ctx, s.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		s.rev = 0
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("matrix: read %s: %w", s.key, err)
	}
	s.rev = e.Revision()
	var r syncRecord
	if json.Unmarshal(e.Value(), &r) != nil {
		return "", nil // unreadable: start afresh (the next save replaces it)
	}
	return r.Since, nil
}

// save writes since by compare-and-set on the revision load or the last save saw.
func (s *sinceStore) save(ctx context.Context, since string) error {
	if s.kv == nil {
		return nil
	}
	b, _ := json.Marshal(syncRecord{Since: since, Saved: time.Now().UnixMilli()})
	var rev uint64
	var err error
	if s.rev == 0 {
		rev, err = s.kv.Create(ctx, s.key, b)
	} else {
		rev, err = s.kv.Update(ctx, s.key, b, s.rev)
	}
	if err != nil {
		if jsconflict.Is(err) {
			return ErrTokenMoved
		}
		return fmt.Errorf("matrix: write %s: %w", s.key, err)
	}
	s.rev = rev
	return nil
}
