package onebot

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

func TestParseCQ(t *testing.T) {
	tests := []struct {
		in   string
		want string // type:key=value|...
	}{
		{"hello", "text:text=hello"},
		{"[CQ:at,qq=10001] hi", "at:qq=10001|text:text= hi"},
		{"[CQ:reply,id=-123][CQ:image,file=a.png,url=http://127.0.0.1/a?x=1&amp;y=2]look", "reply:id=-123|image:file=a.png,url=http://127.0.0.1/a?x=1&y=2|text:text=look"},
		{"a &#91;not code&#93; b", "text:text=a [not code] b"},
		{"broken [CQ:at,qq=1", "text:text=broken [CQ:at,qq=1"},
		{"[CQ:face,id=14]", "face:id=14"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var parts []string
			for _, s := range parseCQ(tt.in) {
				var kv []string
				for _, k := range []string{"text", "qq", "id", "file", "url"} {
					if v, ok := s.Data[k]; ok {
						kv = append(kv, k+"="+v.(string))
					}
				}
				parts = append(parts, s.Type+":"+strings.Join(kv, ","))
			}
			if got := strings.Join(parts, "|"); got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	in, err := NewInbound(InboundOptions{Bot: config.OneBotBot{ID: "qq1", SelfID: "10001", Mode: ModeHTTP, APIBase: "http://127.0.0.1:3000"},
		Sink: im.SinkFunc(func(context.Context, *events.IMMessage) error { return nil })})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		event   string
		scene   events.Scene
		roles   []string
		mention bool
		content string // PlainText
		types   string
		bad     bool
	}{
		{name: "private array", event: `{"post_type":"message","message_type":"private","message_id":1,"user_id":42,"message":[{"type":"text","data":{"text":"hi"}}],"sender":{"nickname":"Al"}}`,
			scene: events.Scene{Type: "private", ID: "42"}, content: "hi", types: "text"},
		{name: "group owner mentions bot", event: `{"post_type":"message","message_type":"group","message_id":2,"group_id":5,"user_id":43,"message":[{"type":"at","data":{"qq":"10001"}},{"type":"text","data":{"text":" yo"}}],"sender":{"role":"owner","card":"Boss"}}`,
			scene: events.Scene{Type: "group", ID: "5"}, roles: []string{"group_owner"}, mention: true, content: "@10001  yo", types: "at,text"},
		{name: "group admin, string message, other mention", event: `{"post_type":"message","message_type":"group","message_id":3,"group_id":5,"user_id":44,"message":"[CQ:at,qq=999] hey","sender":{"role":"admin"}}`,
			scene: events.Scene{Type: "group", ID: "5"}, roles: []string{"group_admin"}, content: "@999  hey", types: "at,text"},
		{name: "reply, face, record, video, file", event: `{"post_type":"message","message_type":"private","message_id":4,"user_id":42,"message":[{"type":"reply","data":{"id":"3"}},{"type":"face","data":{"id":"14"}},{"type":"record","data":{"file":"v.amr"}},{"type":"video","data":{"file":"v.mp4"}},{"type":"file","data":{"file":"doc.pdf","name":"doc.pdf"}}]}`,
			scene: events.Scene{Type: "private", ID: "42"}, types: "reply,face,record,video,file"},
		{name: "numeric message id stays exact", event: `{"post_type":"message","message_type":"private","message_id":-2147483647,"user_id":42,"message":"x"}`,
			scene: events.Scene{Type: "private", ID: "42"}, content: "x", types: "text"},
		{name: "unknown message type", event: `{"post_type":"message","message_type":"guild","message_id":5,"user_id":1,"message":"x"}`, bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ev event
			d := json.NewDecoder(strings.NewReader(tt.event))
			d.UseNumber()
			if err := d.Decode(&ev); err != nil {
				t.Fatal(err)
			}
			m, err := in.normalize(context.Background(), &ev)
			if err == nil {
				err = m.Validate()
			}
			if tt.bad {
				if err == nil {
					t.Fatalf("accepted: %+v", m)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Scene != tt.scene || m.MentionsBot != tt.mention || strings.Join(m.Sender.Roles, ",") != strings.Join(tt.roles, ",") {
				t.Fatalf("scene %+v mention %v roles %v", m.Scene, m.MentionsBot, m.Sender.Roles)
			}
			if tt.content != "" && m.Content.PlainText() != tt.content {
				t.Fatalf("text %q, want %q", m.Content.PlainText(), tt.content)
			}
			var types []string
			for _, s := range m.Content {
				types = append(types, s.Type)
			}
			if strings.Join(types, ",") != tt.types {
				t.Fatalf("types %v, want %s", types, tt.types)
			}
		})
	}
	var ev event
	_ = json.Unmarshal([]byte(`{"post_type":"message","message_type":"private","message_id":-2147483647,"user_id":42,"message":"x"}`), &ev)
	if m, _ := in.normalize(context.Background(), &ev); m.MessageID != "-2147483647" {
		t.Fatalf("message id %q", m.MessageID)
	}
}

func TestResultClassification(t *testing.T) {
	tests := []struct {
		r    response
		ok   bool
		perm bool
	}{
		{response{Status: "ok"}, true, false},
		{response{Status: "async"}, true, false},
		{response{Status: "failed", Retcode: 1400, Msg: "bad"}, false, true},
		{response{Status: "failed", Retcode: 1404}, false, true},
		{response{Status: "failed", Retcode: 1200, Wording: "send failed"}, false, false},
		{response{Status: "failed", Retcode: 100}, false, true},
	}
	for _, tt := range tests {
		_, err := result("send_msg", tt.r)
		if (err == nil) != tt.ok || im.IsPermanent(err) != tt.perm {
			t.Errorf("%+v: err %v, permanent %v", tt.r, err, im.IsPermanent(err))
		}
	}
}

// TestAnswerOrEvent: a frame is an API answer when its top level has an echo and no
// post_type, even when its data holds events (the history actions' answers do).
func TestAnswerOrEvent(t *testing.T) {
	tests := []struct {
		name   string
		frame  string
		answer bool
	}{
		{"answer", `{"status":"ok","retcode":0,"data":{"message_id":1},"echo":"ab-1"}`, true},
		{"history answer holding events", `{"status":"ok","retcode":0,"data":{"messages":[{"post_type":"message","message_id":5}]},"echo":"ab-1"}`, true},
		{"event", `{"post_type":"message","message_type":"private","message_id":5,"user_id":1,"message":"hi"}`, false},
		{"event whose text says echo", `{"post_type":"message","message_type":"private","message_id":5,"user_id":1,"message":"\"echo\""}`, false},
		{"event with an echo field", `{"post_type":"meta_event","echo":"ab-1"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &wsConn{wait: map[string]chan response{"ab-1": make(chan response, 1)}}
			if got := w.answer([]byte(tt.frame)); got != tt.answer {
				t.Fatalf("answer = %v, want %v", got, tt.answer)
			}
		})
	}
}

func TestFillEvent(t *testing.T) {
	tests := []struct {
		name, raw, scope, id string
		want                 map[string]string
	}{
		{"bare group entry", `{"message_id":7,"user_id":3,"time":1,"message":"hi"}`, "group", "7001",
			map[string]string{"post_type": "message", "message_type": "group", "group_id": "7001"}},
		{"full private entry kept", `{"post_type":"message","message_type":"private","message_id":7,"user_id":3}`, "private", "3",
			map[string]string{"post_type": "message", "message_type": "private", "user_id": "3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got map[string]any
			if err := json.Unmarshal(fillEvent(json.RawMessage(tt.raw), tt.scope, tt.id), &got); err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.want {
				if s := strings.TrimSuffix(strings.TrimPrefix(mustJSON(got[k]), `"`), `"`); s != v {
					t.Errorf("%s = %s, want %s", k, s, v)
				}
			}
		})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
