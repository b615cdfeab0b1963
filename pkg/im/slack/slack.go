// Package slack is the Slack adapter, on slack-go/slack.
//
// Inbound (ingest role), one of two modes per bot:
//   - "socket" (default): Socket Mode. apps.connections.open with the app-level token gives a
//     WebSocket URL; events arrive in envelopes that are acknowledged only after the message
//     was ingested, so Slack redelivers what a dying replica did not finish. One ingest
//     replica holds the socket at a time (pkg/im.Hold on "im-conn.slack.<bot>").
//   - "events": the Events API. Slack POSTs to /slack/<bot> on the webhook listener; every
//     request's X-Slack-Signature is verified with the signing secret; any replica serves it.
//
// message events (channels, private channels, group DMs: scope "group"; DMs: scope "private")
// become IM_IN messages with the id "<channel>/<ts>" ("<channel>/<ts>/<thread_ts>" for a
// message in a thread), so the message that Socket Mode and a retry both deliver is ingested
// once. <@U…> mentions become at segments (the bot's own one sets mentionsBot and is dropped
// from the text); files are downloaded from url_private with the bot token into the media
// object store, through the SSRF guard (the configured apiBase host allowed).
//
// Outbound (egress role): chat.postMessage, cut at 4,000 characters (what Slack advises per
// message; it truncates at 40,000), threaded with thread_ts (in channels every answer goes
// into the thread of the message it answers; in DMs only when that message was in a thread);
// media uploaded with files.getUploadURLExternal + files.completeUploadExternal into the same
// thread; a 429 goes back to egress with its Retry-After. Streaming previews post one message
// and chat.update it while the reply streams (see RunPreviewer). Slack has no typing
// indicator for bots (assistant.threads.setStatus works only in assistant threads, which this
// adapter does not serve), so there is none.
package slack

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	slackapi "github.com/slack-go/slack"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/im"
)

// Platform is the platform name in session keys.
const Platform = "slack"

// DefaultAPIBase is Slack's Web API root.
const DefaultAPIBase = "https://slack.com/api"

// DefaultChunkLimit is the message length Slack advises.
const DefaultChunkLimit = 4000

// Modes (config im.slack.bots[].mode).
const (
	ModeSocket = "socket"
	ModeEvents = "events"
)

// Validate checks one bot's configuration.
func Validate(b config.SlackBot) error {
	switch {
	case b.ID == "":
		return errors.New("slack: a bot has no id")
	case strings.ContainsAny(b.ID, ":/ "):
		return fmt.Errorf("slack: bot id %q must not contain ':', '/' or spaces", b.ID)
	case b.BotToken == "":
		return fmt.Errorf("slack: bot %s has no botToken", b.ID)
	}
	switch b.Mode {
	case "", ModeSocket:
		if b.AppToken == "" {
			return fmt.Errorf("slack: bot %s: Socket Mode needs appToken (xapp-...)", b.ID)
		}
	case ModeEvents:
		if b.SigningSecret == "" {
			return fmt.Errorf("slack: bot %s: the Events API needs signingSecret", b.ID)
		}
	default:
		return fmt.Errorf("slack: bot %s: mode %q must be socket or events", b.ID, b.Mode)
	}
	if b.APIBase != "" {
		if u, err := url.Parse(b.APIBase); err != nil || u.Host == "" {
			return fmt.Errorf("slack: bot %s: apiBase %q is not a URL", b.ID, b.APIBase)
		}
	}
	switch b.Preview {
	case "", "off", "partial", "block":
	default:
		return fmt.Errorf("slack: bot %s: preview %q must be off, partial or block", b.ID, b.Preview)
	}
	return nil
}

// IsEvents reports whether the bot gets its events over the Events API (HTTP).
func IsEvents(b config.SlackBot) bool { return b.Mode == ModeEvents }

func apiBase(b config.SlackBot) string {
	if b.APIBase == "" {
		return DefaultAPIBase
	}
	return strings.TrimSuffix(b.APIBase, "/")
}

func chunkLimit(b config.SlackBot) int {
	if b.ChunkLimit > 0 && b.ChunkLimit <= DefaultChunkLimit {
		return b.ChunkLimit
	}
	return DefaultChunkLimit
}

func previewMode(b config.SlackBot) string {
	if b.Preview == "" {
		return "partial"
	}
	return b.Preview
}

// newAPI returns the Web API client of b (hc nil: a 30 s client).
func newAPI(b config.SlackBot, hc *http.Client) *slackapi.Client {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	opts := []slackapi.Option{slackapi.OptionAPIURL(apiBase(b) + "/"), slackapi.OptionHTTPClient(hc)}
	if b.AppToken != "" {
		opts = append(opts, slackapi.OptionAppLevelToken(b.AppToken))
	}
	return slackapi.New(b.BotToken, opts...)
}

// transient Slack error codes (ok:false answers worth retrying).
var transientCodes = map[string]bool{"ratelimited": true, "internal_error": true, "fatal_error": true,
	"service_unavailable": true, "request_timeout": true}

// classify turns a library or transport error into an *im.Error egress understands: a 429
// is transient with its Retry-After, 5xx and Slack's internal errors transient, any other
// ok:false answer (channel_not_found, not_in_channel, invalid_auth, ...) permanent. Tokens
// travel in headers, so error texts carry none.
func classify(method string, err error) error {
	if err == nil {
		return nil
	}
	var rl *slackapi.RateLimitedError
	if errors.As(err, &rl) {
		d := rl.RetryAfter
		if d <= 0 {
			d = time.Second
		}
		return &im.Error{Platform: Platform, Action: method, Status: http.StatusTooManyRequests, Msg: "rate limited", RetryAfter: d}
	}
	var se slackapi.SlackErrorResponse
	if errors.As(err, &se) {
		return &im.Error{Platform: Platform, Action: method, Msg: se.Err, Perm: !transientCodes[se.Err]}
	}
	var sc slackapi.StatusCodeError
	if errors.As(err, &sc) {
		return &im.Error{Platform: Platform, Action: method, Status: sc.Code, Msg: sc.Status,
			Perm: sc.Code >= 400 && sc.Code < 500 && sc.Code != http.StatusRequestTimeout}
	}
	return fmt.Errorf("slack %s: %w", method, err)
}

// MessageID is the bus message id of the message ts in channel: "<channel>/<ts>", with
// "/<thread_ts>" appended for a message inside a thread (the thread it answers into).
func MessageID(channel, ts, threadTS string) string {
	id := channel + "/" + ts
	if threadTS != "" && threadTS != ts {
		id += "/" + threadTS
	}
	return id
}

// splitMessageID reverses MessageID: the message's ts and the thread root ("" when the
// message is not in a thread). A bare ts is accepted too.
func splitMessageID(id string) (ts, thread string) {
	parts := strings.Split(id, "/")
	switch len(parts) {
	case 1:
		return parts[0], ""
	case 2:
		return parts[1], ""
	default:
		return parts[1], parts[2]
	}
}
