// Package discord is the Discord adapter, on bwmarrin/discordgo.
//
// Inbound (ingest role): one gateway session per bot, with the guild-messages, direct-messages
// and message-content intents, held by exactly one ingest replica at a time through the
// single-connection lease (pkg/im.Hold on "im-conn.discord.<bot>"); another replica opens the
// gateway when the holder dies. MESSAGE_CREATE becomes an IM_IN message: guild channels are
// scope "group" (answered when the bot is mentioned or replied to), DMs scope "private";
// <@id> / <@!id> mentions become at segments (the bot's own mention sets mentionsBot and is
// dropped from the text), message_reference becomes a reply segment, attachments are
// downloaded from their CDN URL into the media object store through the SSRF guard. The
// platform message id (a snowflake, unique across Discord) is the dedupe id.
//
// Outbound (egress role): REST POST /channels/{id}/messages, cut at 2,000 characters,
// the first message threaded with message_reference to the message it answers, media
// segments uploaded as files (multipart) from the media store. A 429 is returned to egress
// with its retry_after (the library's own sleeping retry is switched off), so egress pauses
// the platform. Streaming previews edit one message (PATCH) while the reply streams, and the
// typing indicator is POST /channels/{id}/typing (see RunPreviewer).
//
// Every HTTP request of the library goes through a RoundTripper that points the library's
// fixed https://discord.com root at the bot's apiBase, so tests and proxies can stand in
// for Discord per bot; gatewayUrl overrides the gateway WebSocket URL.
//
// The gateway does not replay messages to a new session, so after every READY the holder
// backfills the channels it knows through GET /channels/{id}/messages?after=<last handled>
// (see backfill.go): a message sent while no replica held the gateway is still ingested, once.
package discord

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/im"
)

// Platform is the platform name in session keys.
const Platform = "discord"

// DefaultAPIBase is Discord's HTTP API root.
const DefaultAPIBase = "https://discord.com"

// DefaultChunkLimit is Discord's message content limit.
const DefaultChunkLimit = 2000

// Intents the gateway session identifies with.
const Intents = discordgo.IntentsGuildMessages | discordgo.IntentsDirectMessages | discordgo.IntentsMessageContent

// Validate checks one bot's configuration.
func Validate(b config.DiscordBot) error {
	switch {
	case b.ID == "":
		return errors.New("discord: a bot has no id")
	case strings.ContainsAny(b.ID, ":/ "):
		return fmt.Errorf("discord: bot id %q must not contain ':', '/' or spaces", b.ID)
	case b.Token == "":
		return fmt.Errorf("discord: bot %s has no token", b.ID)
	}
	for name, u := range map[string]string{"apiBase": b.APIBase, "gatewayUrl": b.GatewayURL} {
		if u == "" {
			continue
		}
		if p, err := url.Parse(u); err != nil || p.Host == "" {
			return fmt.Errorf("discord: bot %s: %s %q is not a URL", b.ID, name, u)
		}
	}
	switch b.Preview {
	case "", "off", "partial", "block":
	default:
		return fmt.Errorf("discord: bot %s: preview %q must be off, partial or block", b.ID, b.Preview)
	}
	return nil
}

func apiBase(b config.DiscordBot) string {
	if b.APIBase == "" {
		return DefaultAPIBase
	}
	return strings.TrimSuffix(b.APIBase, "/")
}

func chunkLimit(b config.DiscordBot) int {
	if b.ChunkLimit > 0 && b.ChunkLimit <= DefaultChunkLimit {
		return b.ChunkLimit
	}
	return DefaultChunkLimit
}

func previewMode(b config.DiscordBot) string {
	if b.Preview == "" {
		return "partial"
	}
	return b.Preview
}

// newSession returns a discordgo session for b whose HTTP requests go to b's apiBase
// (nothing is connected yet). hc's transport is used underneath (nil: http.DefaultTransport).
func newSession(b config.DiscordBot, hc *http.Client) (*discordgo.Session, error) {
	s, err := discordgo.New("Bot " + b.Token)
	if err != nil {
		return nil, fmt.Errorf("discord: bot %s: %w", b.ID, err)
	}
	base, _ := url.Parse(apiBase(b))
	var next http.RoundTripper = http.DefaultTransport
	timeout := 30 * time.Second
	if hc != nil {
		if hc.Transport != nil {
			next = hc.Transport
		}
		if hc.Timeout > 0 {
			timeout = hc.Timeout
		}
	}
	s.Client = &http.Client{Timeout: timeout, Transport: &rebase{base: base, gateway: b.GatewayURL, next: next}}
	s.Identify.Intents = Intents
	s.ShouldRetryOnRateLimit = false // egress honours Retry-After itself, for every replica
	s.MaxRestRetries = 1
	s.LogLevel = discordgo.LogError
	// Handlers run one at a time in gateway order, so messages of a channel reach IM_IN in
	// the order Discord sent them (the library's default runs each in its own goroutine).
	s.SyncEvents = true
	return s, nil
}

// rebase points requests for https://discord.com at base and answers GET /gateway itself
// when a gateway URL is configured.
type rebase struct {
	base    *url.URL
	gateway string
	next    http.RoundTripper
}

var discordRoot, _ = url.Parse(discordgo.EndpointDiscord)

// gatewayPath is the path of GET /gateway under the API root.
var gatewayPath = "/api/v" + discordgo.APIVersion + "/gateway"

func (r *rebase) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != discordRoot.Host {
		return r.next.RoundTrip(req)
	}
	if r.gateway != "" && req.Method == http.MethodGet && strings.TrimSuffix(req.URL.Path, "/") == gatewayPath {
		body, _ := json.Marshal(map[string]string{"url": r.gateway})
		return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: req}, nil
	}
	u := *req.URL
	u.Scheme, u.Host = r.base.Scheme, r.base.Host
	u.Path = strings.TrimSuffix(r.base.Path, "/") + req.URL.Path
	u.RawPath = ""
	out := req.Clone(req.Context())
	out.URL, out.Host = &u, u.Host
	return r.next.RoundTrip(out)
}

// classify turns a library or transport error into an *im.Error egress understands: 429 is
// transient with retry_after, 5xx transient, other 4xx permanent. Discord's error texts
// carry no token (it travels in a header), so they are kept.
func classify(action string, err error) error {
	if err == nil {
		return nil
	}
	var rl *discordgo.RateLimitError
	if errors.As(err, &rl) {
		d := time.Second
		if rl.RateLimit != nil && rl.TooManyRequests != nil && rl.RetryAfter > 0 {
			d = rl.RetryAfter
		}
		return &im.Error{Platform: Platform, Action: action, Status: http.StatusTooManyRequests, Msg: "rate limited", RetryAfter: d}
	}
	var re *discordgo.RESTError
	if errors.As(err, &re) && re.Response != nil {
		e := im.HTTPError(Platform, action, re.Response, re.ResponseBody)
		if re.Message != nil {
			e.Code, e.Msg = re.Message.Code, re.Message.Message
		}
		return e
	}
	return fmt.Errorf("discord %s: %w", action, err)
}
