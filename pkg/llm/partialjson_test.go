package llm

import (
	"encoding/json"
	"github.com/agentbus/agentbus/internal/cputime"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParsePartialJSON(t *testing.T) {
	tests := []struct {
		in   string
		want string // JSON of the expected object
	}{
		{``, `{}`},
		{`   `, `{}`},
		{`garbage`, `{}`},
		{`[1,2]`, `{}`},
		{`"str"`, `{}`},
		{`{`, `{}`},
		{`{"`, `{}`},
		{`{"pa`, `{}`},
		{`{"path"`, `{}`},
		{`{"path":`, `{}`},
		{`{"path": `, `{}`},
		{`{"path": "`, `{"path":""}`},
		{`{"path": "/tmp/fi`, `{"path":"/tmp/fi"}`},
		{`{"path": "/tmp/file"`, `{"path":"/tmp/file"}`},
		{`{"path": "/tmp/file",`, `{"path":"/tmp/file"}`},
		{`{"path": "/tmp/file", "n`, `{"path":"/tmp/file"}`},
		{`{"path": "/tmp/file", "n": 1`, `{"path":"/tmp/file","n":1}`},
		{`{"path": "/tmp/file", "n": 12.`, `{"path":"/tmp/file","n":12}`},
		{`{"n": 1e`, `{"n":1}`},
		{`{"n": 1e-`, `{"n":1}`},
		{`{"n": -`, `{}`},
		{`{"n": -3`, `{"n":-3}`},
		{`{"b": t`, `{"b":true}`},
		{`{"b": fal`, `{"b":false}`},
		{`{"b": n`, `{"b":null}`},
		{`{"b": true}`, `{"b":true}`},
		{`{"a": [`, `{"a":[]}`},
		{`{"a": [1, 2`, `{"a":[1,2]}`},
		{`{"a": [1, 2,`, `{"a":[1,2]}`},
		{`{"a": [1, "x`, `{"a":[1,"x"]}`},
		{`{"a": {"b": {"c": "d`, `{"a":{"b":{"c":"d"}}}`},
		{`{"a": {"b": {"c"`, `{"a":{"b":{}}}`},
		{`{"s": "line\`, `{"s":"line"}`},
		{`{"s": "line\n`, `{"s":"line\n"}`},
		{`{"s": "caf\u00`, `{"s":"caf"}`},
		{`{"s": "caf\u00e9`, `{"s":"café"}`},
		{`{"s": "\ud83d\ude00"}`, `{"s":"😀"}`},
		{`{"s": "q\"uote\"d"}`, `{"s":"q\"uote\"d"}`},
		{`{"a": 1} trailing`, `{"a":1}`},
		{`{"a": 1, "b": x, "c": 3}`, `{"a":1}`},
		{`{"a": tx}`, `{}`},
		{`{"a": 01}`, `{}`},
		{`{"a":1,,"b":2}`, `{"a":1,"b":2}`},
		{`  {"command":"ls -la","timeout":30}`, `{"command":"ls -la","timeout":30}`},
	}
	for _, tt := range tests {
		got := ParsePartialJSON(tt.in)
		var want map[string]any
		if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
			t.Fatalf("bad want %s: %v", tt.want, err)
		}
		if !reflect.DeepEqual(got, want) {
			g, _ := json.Marshal(got)
			t.Errorf("ParsePartialJSON(%q) = %s, want %s", tt.in, g, tt.want)
		}
	}
}

// Every prefix of a document parses to something, and the whole document parses exactly like
// encoding/json.
func TestParsePartialJSONPrefixes(t *testing.T) {
	doc := `{"command": "echo \"hi\" && ls", "opts": {"n": -1.5e3, "flags": [true, false, null, "x\u00e9"]}, "empty": {}, "list": []}`
	for i := 0; i <= len(doc); i++ {
		if got := ParsePartialJSON(doc[:i]); got == nil {
			t.Fatalf("prefix %d: nil", i)
		}
	}
	var want map[string]any
	if err := json.Unmarshal([]byte(doc), &want); err != nil {
		t.Fatal(err)
	}
	if got := ParsePartialJSON(doc); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v want %v", got, want)
	}
}

// ParsePartialJSONInto, given one map for every prefix in turn (as a provider streaming a
// tool call uses it), gives what ParsePartialJSON gives for each, stale keys removed.
func TestParsePartialJSONInto(t *testing.T) {
	for _, doc := range []string{
		`{"command": "echo \"hi\" && ls", "opts": {"n": -1.5e3, "flags": [true, false, null, "x\u00e9"]}, "empty": {}, "list": []}`,
		`{"city":"Berlin","unit":"celsius"}`,
		`{"a": 1, "b": x, "c": 3}`,
	} {
		dst := map[string]any{"stale": true}
		for i := 0; i <= len(doc); i++ {
			got := ParsePartialJSONInto(dst, doc[:i])
			if want := ParsePartialJSON(doc[:i]); !reflect.DeepEqual(got, want) {
				t.Fatalf("prefix %q: got %v, want %v", doc[:i], got, want)
			}
			if reflect.ValueOf(got).UnsafePointer() != reflect.ValueOf(dst).UnsafePointer() {
				t.Fatalf("prefix %q: a new map, not dst", doc[:i])
			}
		}
	}
	if got := ParsePartialJSONInto(nil, `{"a":1}`); !reflect.DeepEqual(got, map[string]any{"a": 1.0}) {
		t.Fatalf("nil dst: %v", got)
	}
	if got := ParsePartialJSONInto(map[string]any{"a": 1.0}, `garbage`); len(got) != 0 {
		t.Fatalf("garbage: %v", got)
	}
}

func TestParsePartialJSONDeepNesting(t *testing.T) {
	s := strings.Repeat(`{"a":`, 100000)
	if got := ParsePartialJSON(s); got == nil {
		t.Fatal("nil")
	}
	s = `{"a":` + strings.Repeat(`[`, 100000)
	if got := ParsePartialJSON(s); got == nil {
		t.Fatal("nil")
	}
}

func FuzzParsePartialJSON(f *testing.F) {
	for _, s := range []string{
		`{"a":1}`, `{"a":"b\u00e9\n","c":[1,2,{"d":null}]}`, `{"x": tru`, `{"s":"\ud83d\ude00"}`,
		`{"n":-0.5e+10}`, `{`, ``, `[]`, `{"a":{"b":[`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := ParsePartialJSON(s)
		if got == nil {
			t.Fatal("nil result")
		}
		// The result must always be re-encodable.
		if _, err := json.Marshal(got); err != nil {
			t.Fatalf("result of %q does not marshal: %v", s, err)
		}
		// Complete valid UTF-8 objects parse exactly like encoding/json.
		if !utf8.ValidString(s) || !json.Valid([]byte(s)) {
			return
		}
		var want map[string]any
		if err := json.Unmarshal([]byte(s), &want); err != nil || want == nil {
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("ParsePartialJSON(%q) = %#v, encoding/json = %#v", s, got, want)
		}
		// Every prefix parses without trouble (bounded: the check is quadratic).
		for i := range min(len(s), 512) {
			if ParsePartialJSON(s[:i]) == nil {
				t.Fatalf("prefix %d nil", i)
			}
		}
	})
}

var sinkArgs map[string]any

// BenchmarkParsePartialJSON measures one re-parse per streamed delta of a typical tool call
// (the average over all prefixes of the arguments, as a provider does while streaming).
func BenchmarkParsePartialJSON(b *testing.B) {
	doc := `{"command": "grep -rn \"TODO\" ./pkg | head -n 20", "timeout": 30, "cwd": "/work/main"}`
	var prefixes []string
	for i := 8; i <= len(doc); i += 8 {
		prefixes = append(prefixes, doc[:i])
	}
	prefixes = append(prefixes, doc)
	b.Run("per-delta", func(b *testing.B) {
		b.ReportAllocs()
		cpu := cputime.Process()
		for i := 0; b.Loop(); i++ {
			sinkArgs = ParsePartialJSON(prefixes[i%len(prefixes)])
		}
		cputime.Report(b, cpu)
	})
	b.Run("complete", func(b *testing.B) {
		b.ReportAllocs()
		cpu := cputime.Process()
		for b.Loop() {
			sinkArgs = ParsePartialJSON(doc)
		}
		cputime.Report(b, cpu)
	})
	b.Run("encoding-json-complete", func(b *testing.B) {
		b.ReportAllocs()
		cpu := cputime.Process()
		for b.Loop() {
			var m map[string]any
			_ = json.Unmarshal([]byte(doc), &m)
			sinkArgs = m
		}
		cputime.Report(b, cpu)
	})
}

// BenchmarkParsePartialJSONLarge re-parses a 64 KiB write_file call (content with newlines and
// quotes, as source code has), the worst case of re-parsing on every delta.
func BenchmarkParsePartialJSONLarge(b *testing.B) {
	line := `	fmt.Println("hello, world") // a line of Go` + "\n"
	content := strings.Repeat(line, 64*1024/len(line))
	raw, _ := json.Marshal(map[string]any{"path": "main.go", "content": content})
	doc := string(raw)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	cpu := cputime.Process()
	for b.Loop() {
		sinkArgs = ParsePartialJSON(doc[:len(doc)-10])
	}
	cputime.Report(b, cpu)
}

// checkAccumulator feeds doc in the given chunk sizes and compares every step with
// ParsePartialJSON of the same prefix; earlier results must not change afterwards.
func checkAccumulator(t *testing.T, doc string, sizes func(i int) int) {
	t.Helper()
	var acc PartialJSON
	type snap struct {
		m    map[string]any
		json string
	}
	var snaps []snap
	for off, i := 0, 0; off < len(doc); i++ {
		n := max(1, sizes(i))
		end := min(len(doc), off+n)
		got := acc.Append(doc[off:end])
		want := ParsePartialJSON(doc[:end])
		if !reflect.DeepEqual(got, want) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			t.Fatalf("after %q:\n got %s\nwant %s", doc[:end], g, w)
		}
		j, _ := json.Marshal(got)
		snaps = append(snaps, snap{got, string(j)})
		off = end
	}
	for _, s := range snaps {
		if j, _ := json.Marshal(s.m); string(j) != s.json {
			t.Fatalf("an earlier result changed: %s -> %s", s.json, j)
		}
	}
	if acc.String() != doc {
		t.Fatalf("String() = %q", acc.String())
	}
}

func TestPartialJSONAccumulator(t *testing.T) {
	docs := []string{
		`{"path": "main.go", "content": "package main\n\nfunc main() {\n\tprintln(\"hi \\\\ there\")\n}\n", "mode": 420}`,
		`{"a": ["x\u00e9y", {"b": "c\ud83d\ude00d\u20ac"}, "tail \"q\""], "n": -1.5e3, "t": true}`,
		`{"nested": {"deep": {"text": "` + strings.Repeat(`line \"quoted\" \\ back\n`, 50) + `"}}}`,
		`{"s": "lone \ud83d then \ude00 and \uZZ bad \x escape"}`,
		` {"k":"v"} trailing`,
		`not json at all`,
	}
	for _, doc := range docs {
		for _, size := range []int{1, 2, 3, 5, 7, 16, 1000} {
			checkAccumulator(t, doc, func(int) int { return size })
		}
		checkAccumulator(t, doc, func(i int) int { return i%9 + 1 })
	}
	var acc PartialJSON
	if m := acc.Result(); m == nil || len(m) != 0 {
		t.Fatal(m)
	}
	acc.Append(`{"a":1}`)
	acc.Reset()
	if m := acc.Append(`{"b":`); len(m) != 0 {
		t.Fatalf("reset: %v", m)
	}
}

func FuzzPartialJSONAccumulator(f *testing.F) {
	f.Add(`{"content": "a\nb\"c\\d\u00e9\ud83d\ude00"}`, uint64(3))
	f.Add(`{"a": [1, "two", {"three": "3"}]}`, uint64(7))
	f.Fuzz(func(t *testing.T, doc string, seed uint64) {
		if len(doc) > 2048 {
			return
		}
		checkAccumulator(t, doc, func(i int) int { return int((seed>>(uint(i)%60))&7) + 1 })
	})
}

// BenchmarkPartialJSONAccumulator streams the 64 KiB write_file call in 24-byte deltas: the
// whole call per op, with PartialJSON and with ParsePartialJSON on every prefix.
func BenchmarkPartialJSONAccumulator(b *testing.B) {
	line := `	fmt.Println("hello, world") // a line of Go` + "\n"
	content := strings.Repeat(line, 64*1024/len(line))
	raw, _ := json.Marshal(map[string]any{"path": "main.go", "content": content})
	doc := string(raw)
	b.Run("PartialJSON", func(b *testing.B) {
		b.ReportAllocs()
		cpu := cputime.Process()
		for b.Loop() {
			var acc PartialJSON
			for off := 0; off < len(doc); off += 24 {
				sinkArgs = acc.Append(doc[off:min(len(doc), off+24)])
			}
		}
		cputime.Report(b, cpu)
	})
	b.Run("ParsePartialJSON-every-prefix", func(b *testing.B) {
		b.ReportAllocs()
		cpu := cputime.Process()
		for b.Loop() {
			for off := 0; off < len(doc); off += 24 {
				sinkArgs = ParsePartialJSON(doc[:min(len(doc), off+24)])
			}
		}
		cputime.Report(b, cpu)
	})
}
