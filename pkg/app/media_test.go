package app_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// tinyPNG is a 1×1 PNG.
var tinyPNG, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")

// postSegments sends a private message with the given content from u1 and fails unless it is
// accepted.
func (pl *pipeline) postSegments(id string, content ...events.Segment) {
	pl.t.Helper()
	b, err := json.Marshal(webhook.Inbound{ID: id, Scene: webhook.Scene{Type: "private", ID: "u1"},
		Sender: webhook.Sender{ID: "u1", Name: "U1"}, Content: content, Time: time.Now().UnixMilli()})
	if err != nil {
		pl.t.Fatal(err)
	}
	if code, body := pl.postRaw(botID, b, webhook.Sign(botSecret, b)); code != http.StatusAccepted {
		pl.t.Fatalf("POST %s: %d %s", id, code, body)
	}
}

func seg(typ string, kv ...any) events.Segment {
	d := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		d[kv[i].(string)] = kv[i+1]
	}
	return events.Segment{Type: typ, Data: d}
}

// Each media kind that triggers a turn reaches the model: images as image blocks (the model
// takes images), a base64 image through the media store, the others as text with their
// reference. Nothing is dropped.
func TestMediaReachesTheModel(t *testing.T) {
	pl := newPipeline(t, fakeopenai.Echo, pipelineOpts{vision: true})
	b64 := base64.StdEncoding.EncodeToString(tinyPNG)
	cases := []struct {
		name    string
		content []events.Segment
		text    []string // in the last user message's text
		image   bool     // an image block in the request
	}{
		{"audio", []events.Segment{seg("audio", "url", "https://example.com/a.mp3", "format", "mp3")}, []string{"[audio: https://example.com/a.mp3 (mp3)]"}, false},
		{"voice (record) inline", []events.Segment{seg("record", "data", base64.StdEncoding.EncodeToString([]byte("#!AMR\nvoice")), "format", "amr")},
			[]string{"[voice message: media://", ".amr (amr, 11 bytes)]"}, false},
		{"video", []events.Segment{seg("text", "text", "look"), seg("video", "url", "https://example.com/v.mp4")}, []string{"look", "[video: https://example.com/v.mp4]"}, false},
		{"face", []events.Segment{seg("face", "id", "14", "text", "微笑")}, []string{"[face 14 微笑]"}, false},
		{"file", []events.Segment{seg("file", "url", "https://example.com/r.pdf", "name", "r.pdf", "size", 1234)}, []string{"[file r.pdf: https://example.com/r.pdf (1234 bytes)]"}, false},
		{"base64 image", []events.Segment{seg("text", "text", "what is this?"), seg("image", "base64", b64, "mimeType", "image/png")}, []string{"what is this?"}, true},
		{"data: URL image", []events.Segment{seg("image", "url", "data:image/png;base64,"+b64)}, nil, true},
	}
	for i, tc := range cases {
		before := len(pl.model.Requests())
		id := fmt.Sprintf("media-%d", i)
		pl.postSegments(id, tc.content...)
		if _, err := pl.cb.waitFor(1, waitMargin, func(r reply) bool { return r.ReplyTo == id }); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		reqs := pl.model.Requests()[before:]
		if len(reqs) != 1 {
			t.Fatalf("%s: %d model requests", tc.name, len(reqs))
		}
		last := reqs[0].LastUser()
		for _, w := range tc.text {
			if !strings.Contains(last, w) {
				t.Errorf("%s: the model's last user message %q lacks %q", tc.name, last, w)
			}
		}
		hasImage := bytes.Contains(reqs[0].Body, []byte(`"image_url"`)) && bytes.Contains(reqs[0].Body, []byte(b64[:24]))
		if hasImage != tc.image {
			t.Errorf("%s: image block in the request = %v, want %v", tc.name, hasImage, tc.image)
		}
	}
	// The inbound events carry references, not the bytes, and the bytes are in the media store.
	raw := pl.lastInbound(events.SessionKey{Platform: "webhook", Bot: botID, Scope: "private", Scene: "u1"})
	if bytes.Contains(raw.Data, []byte(b64[:24])) || !bytes.Contains(raw.Data, []byte("media://")) {
		t.Errorf("the stored message still carries the image bytes or no reference: %s", raw.Data)
	}
	media, err := pl.p.JS.ObjectStore(context.Background(), events.ObjectMedia)
	if err != nil {
		t.Fatal(err)
	}
	var ev events.Event[events.IMMessage]
	if err := json.Unmarshal(raw.Data, &ev); err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(ev.Data.Content[0].MediaRef(), "media://")
	if got, err := media.GetBytes(context.Background(), name); err != nil || !bytes.Equal(got, tinyPNG) {
		t.Errorf("media store object %s: %v (%d bytes)", name, err, len(got))
	}
	// Not base64: a clear 400, nothing published.
	bad, _ := json.Marshal(webhook.Inbound{ID: "bad-b64", Scene: webhook.Scene{Type: "private", ID: "u1"}, Sender: webhook.Sender{ID: "u1"},
		Content: []events.Segment{seg("image", "base64", "***not base64***")}, Time: time.Now().UnixMilli()}) // time: the signed timestamp
	if code, body := pl.postRaw(botID, bad, webhook.Sign(botSecret, bad)); code != http.StatusBadRequest || !strings.Contains(body, "not base64") {
		t.Errorf("bad base64: %d %s", code, body)
	}
}

// The bot's own mention is not part of what the model reads: neither the at segment nor the
// same mention typed as text.
func TestBotMentionRemoved(t *testing.T) {
	pl := newPipeline(t, fakeopenai.Echo, pipelineOpts{})
	m := group("g-1", "g1", "ann", "", false)
	b, _ := json.Marshal(webhook.Inbound{ID: m.id, Scene: webhook.Scene{Type: "group", ID: "g1"}, Sender: webhook.Sender{ID: "ann", Name: "Ann"},
		Content: []events.Segment{events.AtSeg(botID, "zhin"), events.TextSeg(" @zhin what time is it? ask @bob")}, Time: time.Now().UnixMilli()})
	if code, body := pl.postRaw(botID, b, webhook.Sign(botSecret, b)); code != http.StatusAccepted {
		t.Fatalf("POST: %d %s", code, body)
	}
	pl.repliesIn("g1", 1)
	last := pl.requests(1)[0].LastUser()
	if strings.Contains(last, "@zhin") || strings.Contains(last, "@"+botID) || !strings.Contains(last, "what time is it? ask @bob") {
		t.Errorf("the model reads %q", last)
	}
}

// The model's media links become segments of their kind in the reply.
func TestMediaLinksBecomeSegments(t *testing.T) {
	answer := "Here you go:\n![a cat](https://example.com/cat.png)\n[audio](https://example.com/meow.mp3)\n" +
		"[video: the clip](https://example.com/clip.mp4)\n[file: report.pdf](https://example.com/report.pdf)\n" +
		"[voice](https://example.com/v.amr)\nand [the docs](https://example.com/docs) stay a link."
	pl := newPipeline(t, func(r *fakeopenai.Request) fakeopenai.Reply { return fakeopenai.Reply{Text: answer} }, pipelineOpts{})
	pl.post(private("m1", "u1", "send me things"))
	got, err := pl.cb.waitFor(7, waitMargin, func(r reply) bool { return r.ReplyTo == "m1" })
	if err != nil {
		t.Fatalf("%v: %s", err, fmtReplies(pl.cb.all()))
	}
	want := []struct{ typ, url, key, val string }{
		{"text", "", "text", "Here you go:"},
		{"image", "https://example.com/cat.png", "alt", "a cat"},
		{"audio", "https://example.com/meow.mp3", "", ""},
		{"video", "https://example.com/clip.mp4", "caption", "the clip"},
		{"file", "https://example.com/report.pdf", "name", "report.pdf"},
		{"voice", "https://example.com/v.amr", "", ""},
		{"text", "", "text", "and [the docs](https://example.com/docs) stay a link."},
	}
	for i, w := range want {
		if len(got[i].Content) != 1 {
			t.Fatalf("part %d: %d segments", i, len(got[i].Content))
		}
		s := got[i].Content[0]
		if s.Type != w.typ || w.url != "" && s.MediaRef() != w.url || w.key != "" && s.Str(w.key) != w.val {
			t.Errorf("part %d = %s %v, want %s %s %s=%q", i, s.Type, s.Data, w.typ, w.url, w.key, w.val)
		}
	}
}
