package events

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// The fast codec must be invisible: byte-identical output to encoding/json and identical
// decoded values (or a fallback). These tests compare the two on generated values that set
// every field, so a field the codec misses shows up as a difference.

func TestFastCodecLayouts(t *testing.T) {
	if err := checkFastLayouts(); err != nil {
		t.Fatalf("%v\nupdate fastcodec.go (encoder, decoder and fastLayouts) to the new fields", err)
	}
	if !fastCodec {
		t.Fatal("fast codec is off")
	}
}

// fastCases returns one checker per payload type with a fast codec; every one must be listed.
func fastCases() map[string]func(t *testing.T, rng *rand.Rand) {
	return map[string]func(t *testing.T, rng *rand.Rand){
		TypeIMMessage:          checkFast[IMMessage],
		TypeIMOut:              checkFast[Outbound],
		TypeIMSent:             checkFast[Receipt],
		TypeUserMessage:        checkFast[UserMessage],
		TypeListen:             checkFast[Listen],
		TypeTurnStarted:        checkFast[TurnStarted],
		TypeMessageEnd:         checkFast[MessageEnd],
		TypeToolCallRequested:  checkFast[ToolCallRequested],
		TypeToolResultRecorded: checkFast[ToolResultRecorded],
		TypeOutboundPublished:  checkFast[OutboundPublished],
		TypeTurnCommitted:      checkFast[TurnCommitted],
		TypeTurnFailed:         checkFast[TurnFailed],
		TypeCtxMessages:        checkFast[CtxMessages],
		TypeLiveDelta:          checkFast[LiveDelta],
		TypeToolCall:           checkFast[ToolCall],
		TypeToolResult:         checkFast[ToolResult],
	}
}

func TestFastCodecCoversListedTypes(t *testing.T) {
	cases := fastCases()
	for typ := range fastTypes {
		if cases[typ] == nil {
			t.Errorf("type %s has a fast codec but no case in fastCases", typ)
		}
	}
	for typ := range cases {
		if !fastTypes[typ] {
			t.Errorf("fastCases lists %s, which has no fast codec", typ)
		}
	}
}

func TestFastCodecMatchesEncodingJSON(t *testing.T) {
	for typ, check := range fastCases() {
		t.Run(typ, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(len(typ))))
			for range 300 {
				check(t, rng)
				if t.Failed() {
					return
				}
			}
		})
	}
}

func TestFastCodecBenchEvents(t *testing.T) {
	for _, c := range benchEvents() {
		want, err := json.Marshal(c.ev)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Marshal(c.ev)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, want)
		}
		if _, ok := c.ev.appendFast(nil, *c.ev.EventMeta()); !ok {
			t.Errorf("%s: not encoded by the fast codec", c.name)
		}
	}
}

// checkFast generates a random Event[P], and checks that the fast encoder writes exactly what
// encoding/json writes and that the fast decoder reads it back exactly as encoding/json does.
func checkFast[P Payload](t *testing.T, rng *rand.Rand) {
	t.Helper()
	var ev Event[P]
	fill(reflect.ValueOf(&ev).Elem(), rng, 0)
	want, err := json.Marshal(&ev)
	if err != nil {
		t.Fatalf("encoding/json: %v", err)
	}
	got, ok := ev.appendFast(nil, ev.Meta)
	if !ok {
		t.Fatalf("fast encoder gave up on\n%s", want)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("fast encoder differs:\n got %s\nwant %s", got, want)
	}
	compareDecode[P](t, want, true)
	// The same document with white space and reordered keys goes through the decoder too.
	var generic map[string]any
	if err := json.Unmarshal(want, &generic); err == nil {
		indented, _ := json.MarshalIndent(generic, " ", "\t")
		compareDecode[P](t, indented, false)
	}
}

// compareDecode decodes data with both decoders; mustFast says the fast one may not give up.
func compareDecode[P Payload](t *testing.T, data []byte, mustFast bool) {
	t.Helper()
	var slow Event[P]
	slowErr := json.Unmarshal(data, &slow)
	var fast Event[P]
	var zero P
	ok := decodeFast(data, &fast, zero.EventType())
	switch {
	case !ok && mustFast:
		t.Fatalf("fast decoder gave up on\n%s", data)
	case !ok:
		if !reflect.DeepEqual(fast, Event[P]{}) {
			t.Fatalf("fast decoder gave up but left %+v", fast)
		}
	case slowErr != nil:
		t.Fatalf("fast decoder accepted what encoding/json rejects (%v):\n%s", slowErr, data)
	case !reflect.DeepEqual(fast, slow):
		t.Fatalf("fast decoder differs on\n%s\n got %#v\nwant %#v", data, fast, slow)
	}
}

var fillStrings = []string{"", "", "a", "hello world", "<b>&</b>", "line\nbreak\ttab\r", "quote \" backslash \\ slash /",
	"\x00\x01\x1f\x7f", "ünïcödé ✓", "emoji 😀", "sep \u2028 \u2029", "bad \xff utf8", "private", "group", "text", "toolCall",
	"webhook:bench:private:u1#1"}

var fillRaw = []json.RawMessage{nil, json.RawMessage(`{"a":1}`), json.RawMessage(`[1, 2 ,{"b" : "<x>"}]`), json.RawMessage(`null`),
	json.RawMessage(`"s\u2028"`), json.RawMessage(`true`), json.RawMessage(`-1.5e3`), json.RawMessage("\"\u2028\"")}

var fillFloats = []float64{0, 1, -1, 1.5, 1e-7, 1e21, 123456789, 0.000001, 5e-324, math.MaxFloat64, 1e20, 3.0e-5}

// fill sets v to a random value, every field possibly set.
func fill(v reflect.Value, rng *rand.Rand, depth int) {
	if v.Type() == reflect.TypeFor[json.RawMessage]() {
		if r := fillRaw[rng.IntN(len(fillRaw))]; r != nil {
			v.SetBytes(append([]byte(nil), r...))
		}
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fillStrings[rng.IntN(len(fillStrings))])
	case reflect.Bool:
		v.SetBool(rng.IntN(2) == 0)
	case reflect.Int, reflect.Int64:
		v.SetInt([]int64{0, 0, 1, -1, 42, 1767000000000, math.MaxInt64, math.MinInt64}[rng.IntN(8)])
	case reflect.Uint64:
		v.SetUint([]uint64{0, 0, 1, 42, math.MaxUint64}[rng.IntN(5)])
	case reflect.Float64:
		v.SetFloat(fillFloats[rng.IntN(len(fillFloats))])
	case reflect.Pointer:
		if rng.IntN(3) > 0 {
			p := reflect.New(v.Type().Elem())
			fill(p.Elem(), rng, depth+1)
			v.Set(p)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), rng, depth+1)
		}
	case reflect.Slice:
		switch n := rng.IntN(5); {
		case n == 0:
		case n == 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		default:
			s := reflect.MakeSlice(v.Type(), n-1, n-1)
			for i := range n - 1 {
				fill(s.Index(i), rng, depth+1)
			}
			v.Set(s)
		}
	case reflect.Map:
		switch n := rng.IntN(5); {
		case n == 0:
		default:
			m := reflect.MakeMap(v.Type())
			for range n - 1 {
				m.SetMapIndex(reflect.ValueOf(fillStrings[rng.IntN(len(fillStrings))]), reflect.ValueOf(randAny(rng, depth+1)))
			}
			v.Set(m)
		}
	default:
		panic("fill: unhandled kind " + v.Kind().String() + " of " + v.Type().String())
	}
}

// randAny is a JSON-ish value as tools and adapters put into maps (including Go ints).
func randAny(rng *rand.Rand, depth int) any {
	n := rng.IntN(9)
	if depth > 6 {
		n %= 5
	}
	switch n {
	case 0:
		return nil
	case 1:
		return fillStrings[rng.IntN(len(fillStrings))]
	case 2:
		return fillFloats[rng.IntN(len(fillFloats))]
	case 3:
		return rng.IntN(2) == 0
	case 4:
		return rng.IntN(1000) - 500
	case 5:
		return []any{randAny(rng, depth+1), randAny(rng, depth+1)}
	case 6:
		return map[string]any{"k": randAny(rng, depth+1), "<a>": randAny(rng, depth+1)}
	case 7:
		return json.Number("12.5")
	default:
		return []string{"x", "<y>"}
	}
}

// TestFastDecodeFallsBack feeds documents the fast decoder must hand to encoding/json (or
// decode exactly like it).
func TestFastDecodeFallsBack(t *testing.T) {
	base := `{"type":"tool.call","v":1,"id":"e1","time":5,"data":{"callId":"c1","tool":"t","args":{"a":1},"sessionKey":{"platform":"p","bot":"b","scope":"group","scene":"s"},"caller":{"platform":"p","scope":"group"}}}`
	docs := []string{
		base,
		` ` + base + "\n",
		base + `x`,
		`{"type":"tool.call","TYPE":"tool.call","v":1,"id":"e1","time":5,"data":{}}`,
		`{"type":"tool.call","v":1,"id":"e1","time":5,"data":{"callId":"c1","callId":"c2"}}`,
		`{"type":"tool.call","v":1.0,"id":"e1","time":5,"data":{}}`,
		`{"type":"tool.call","v":1,"id":"e1","time":5e3,"data":{}}`,
		`{"type":"tool.call","v":1,"id":"e1","time":-0,"data":{}}`,
		`{"type":"tool.call","v":1,"id":"e1","time":99999999999999999999,"data":{}}`,
		`{"type":"tool.call","v":1,"id":"e\ud83d\ude00\u00e9\n","time":5,"data":{}}`,
		`{"type":"tool.call","v":1,"id":"e\ud83d","time":5,"data":{}}`,
		`{"type":"tool.call","v":1,"id":"e\x","time":5,"data":{}}`,
		"{\"type\":\"tool.call\",\"v\":1,\"id\":\"e\xff\",\"time\":5,\"data\":{}}",
		"{\"type\":\"tool.call\",\"v\":1,\"id\":\"e\x01\",\"time\":5,\"data\":{}}",
		`{"type":"tool.call","v":null,"id":null,"time":5,"data":null}`,
		`{"type":"tool.call","v":1,"id":"e1","time":5,"data":{"args":null,"caller":{"roles":null}}}`,
		`{"type":"tool.call","v":1,"id":"e1","time":5,"data":{"args":{"a":[],"b":{},"c":[1,"x",null,true,{"d":-0.5e-3}],"a":2},"caller":{"roles":[]}}}`,
		`{"type":"tool.call","v":1,"id":"e1","time":5,"data":{"args":{"a":1e999}}}`,
		`{"type":"tool.call","v":1,"id":"e1","time":5,"data":{"args":{"a":01}}}`,
		`{"type":"tool.call","v":1,"id":"e1","time":5,"data":{"args":{"a":1.}}}`,
		`{"type":"tool.call","v":1,"id":"e1","time":5,"data":{"args":{"a":+1}}}`,
		`{"type":"tool.call","v":1,"id":"e1","time":5,"data":{"caller":{"roles":["a",null,"b"]}}}`,
		`{"type":"tool.call","v":1,"id":"e1","time":5,"data":{"idempotent":"yes"}}`,
		`{"type":"tool.call","v":1,"id":"e1","time":5,"data":{"unknown":1}}`,
		`{"type":"tool.call","v":1,"id":"e1","time":5,"data":{"callid":"c"}}`,
		`{"type":"tool.call","v":1,"id":"e1","time":5,"data":[]}`,
		`{"type":"tool.call","v":1,"id":"e1","time":5,"data":{"args":{"\u0061":1,"\"":2}}}`,
		`{"type":"tool.call","v":1,"id":"e1","time":5,"data":{"args":{"a":"\u2028\/"}}}`,
		`{"type":"tool.call","v":1,"id":"e1","time":5,"data":{"args":{"a":{"b":{"c":{"d":[[[[]]]]}}}}}}`,
		`{"type":"tool.call","v":1,"id":"e1","time":5,"data":{"args":{"a":tru}}}`,
		`{"type":"tool.call","v":1,"id":"e1","time":5,"data":{"args":{"a":1,}}}`,
		`{"type":"tool.call","v":1,"id":"e1","time":5,"data":{"args":{"a" 1}}}`,
		`{"type":"tool.call","v":1,"id":"e1","time":5,"data":{"args":{"a":1}`,
		`null`,
		``,
		`{}`,
	}
	for _, doc := range docs {
		compareDecode[ToolCall](t, []byte(doc), false)
	}
	res := `{"type":"tool.result","v":1,"id":"e1","time":5,"data":{"callId":"c","tool":"t","content":[{"type":"text","text":"x"},{"type":"toolCall","arguments":null}],"details":%s}}`
	for _, raw := range []string{`null`, `{"a" : [1, 2]}`, `"x"`, `1e5`, `[]`, `{"a":"\u00e9\xff"}`, `{"a":}`} {
		compareDecode[ToolResult](t, []byte(sprintf(res, raw)), false)
	}
	msg := `{"type":"evt.message_end","v":1,"id":"e1","time":5,"data":{"index":1,"message":{"role":"assistant","content":null,"usage":%s,"stopReason":"toolUse"}}}`
	for _, u := range []string{`null`, `{}`, `{"input":1,"cost":{"total":0.5}}`, `{"input":1.5}`, `{"cost":null}`, `"x"`} {
		compareDecode[MessageEnd](t, []byte(sprintf(msg, u)), false)
	}
}

func sprintf(format, arg string) string {
	return string(bytes.Replace([]byte(format), []byte("%s"), []byte(arg), 1))
}

func TestFastEncodeFallsBack(t *testing.T) {
	k := SessionKey{Platform: "p", Bot: "b", Scope: ScopeGroup, Scene: "s"}
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	for _, args := range []map[string]any{
		{"nan": math.NaN()},
		{"inf": math.Inf(1)},
		{"ch": make(chan int)},
		{"f32": float32(1.5), "u": uint8(3), "n": json.Number("7"), "s": struct{ A int }{1}},
		cyclic,
	} {
		ev := New(ToolCall{CallID: "c", Tool: "t", Args: args, SessionKey: k, Caller: Caller{Platform: "p", Scope: ScopeGroup}})
		want, wantErr := json.Marshal(ev)
		got, gotErr := Marshal(ev)
		if (wantErr == nil) != (gotErr == nil) || !bytes.Equal(got, want) {
			t.Errorf("args %T: Marshal = %s, %v; encoding/json = %s, %v", args, got, gotErr, want, wantErr)
		}
	}
	for _, raw := range []json.RawMessage{json.RawMessage(`{"a":`), json.RawMessage(` { "a" : "<b>" } `), json.RawMessage{}} {
		ev := New(ToolResult{CallID: "c", Tool: "t", Details: raw})
		want, wantErr := json.Marshal(ev)
		got, gotErr := Marshal(ev)
		if (wantErr == nil) != (gotErr == nil) || !bytes.Equal(got, want) {
			t.Errorf("details %q: Marshal = %s, %v; encoding/json = %s, %v", raw, got, gotErr, want, wantErr)
		}
	}
}

// TestUnmarshalIntoUsedEvent: decoding into a used event keeps encoding/json's merge rules.
func TestUnmarshalIntoUsedEvent(t *testing.T) {
	data, err := Marshal(New(ToolCall{CallID: "c", Tool: "t", Args: map[string]any{"a": 1.0}, SessionKey: SessionKey{Platform: "p", Bot: "b", Scope: ScopeGroup, Scene: "s"},
		Caller: Caller{Platform: "p", Scope: ScopeGroup}}))
	if err != nil {
		t.Fatal(err)
	}
	var ev Event[ToolCall]
	ev.Data.Args = map[string]any{"old": true}
	if err := Unmarshal(data, &ev); err != nil {
		t.Fatal(err)
	}
	if want := (map[string]any{"old": true, "a": 1.0}); !reflect.DeepEqual(ev.Data.Args, want) {
		t.Errorf("args %v, want the merge %v", ev.Data.Args, want)
	}
}

// FuzzFastDecode: whatever the fast decoder accepts, encoding/json decodes to the same value.
func FuzzFastDecode(f *testing.F) {
	for _, c := range benchEvents() {
		data, _ := Marshal(c.ev)
		f.Add(data)
	}
	f.Add([]byte(`{"type":"tool.call","v":1,"id":"e1","time":5,"data":{"args":{"a":[1,{"b":null}]}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		compareDecode[IMMessage](t, data, false)
		compareDecode[UserMessage](t, data, false)
		compareDecode[ToolCall](t, data, false)
		compareDecode[ToolResult](t, data, false)
		compareDecode[MessageEnd](t, data, false)
		compareDecode[TurnStarted](t, data, false)
		compareDecode[TurnCommitted](t, data, false)
		compareDecode[CtxMessages](t, data, false)
		compareDecode[Outbound](t, data, false)
		compareDecode[Receipt](t, data, false)
		if ev, err := Decode(data); err == nil {
			if _, err := Marshal(ev); err != nil {
				t.Fatalf("decoded event does not marshal: %v", err)
			}
		}
	})
}

func TestValidSessionID(t *testing.T) {
	for _, s := range []string{"a:b:group:c", "a:b:group:c#1", "a:b:group:c:d#x", "a:b:group:c#01", "a:b:guild:c#1", ":b:group:c",
		"a::group:c", "a:b:group:", "a:b:group:#2", "a:b:group", "", "#", "a:b:private:c##3", "a:b:channel:#"} {
		if _, err := ParseSessionID(s); (err == nil) != validSessionID(s) {
			t.Errorf("%q: ParseSessionID error %v, validSessionID %v", s, err, validSessionID(s))
		}
	}
}

func TestTraceIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := NewTraceID()
		if !validTraceID(id) || seen[id] {
			t.Fatalf("trace id %q invalid or repeated", id)
		}
		seen[id] = true
		tp := traceparent(id)
		if TraceIDFromTraceparent(tp) != id || len(tp) != 55 || tp[:3] != "00-" || tp[52:] != "-00" || tp[36:52] == "0000000000000000" {
			t.Fatalf("traceparent %q", tp)
		}
	}
}

// TestNewMsgHeadersIndependent: the header values share a backing array, yet adding to one
// header leaves the others alone.
func TestNewMsgHeadersIndependent(t *testing.T) {
	for _, c := range benchEvents() {
		m, err := NewMsg(c.subj, c.ev)
		if err != nil {
			t.Fatal(err)
		}
		before := map[string][]string{}
		for k, v := range m.Header {
			before[k] = append([]string(nil), v...)
		}
		m.Header.Add(HeaderType, "extra")
		for k, v := range before {
			if k == HeaderType {
				continue
			}
			if !reflect.DeepEqual(m.Header[k], v) {
				t.Fatalf("%s: header %s changed to %v after adding to %s", c.name, k, m.Header[k], HeaderType)
			}
		}
		if got := m.Header.Get(HeaderMsgID); got != MsgID(c.ev) || got == "" {
			t.Errorf("%s: Nats-Msg-Id %q", c.name, got)
		}
	}
}
