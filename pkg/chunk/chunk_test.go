package chunk

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestChunk(t *testing.T) {
	long := strings.Repeat("word ", 60) // 300 runes
	code := "```go\n" + strings.Repeat("fmt.Println(\"x\")\n", 20) + "```"
	tests := []struct {
		name  string
		text  string
		limit int
		check func(t *testing.T, parts []string)
	}{
		{"short stays whole", "hello", 100, wantParts("hello")},
		{"blank gives nothing", "  \n ", 100, wantParts()},
		{"no limit", long, 0, func(t *testing.T, p []string) { wantLen(t, p, 1) }},
		{"paragraphs packed", "aaa\n\nbbb\n\nccc", 8, wantParts("aaa\n\nbbb", "ccc")},
		{"sentences", "One two. Three four. Five six.", 12, wantParts("One two.", "Three four.", "Five six.")},
		{"cjk sentences", "你好。今天天气不错。我们出去吧。", 8, wantParts("你好。", "今天天气不错。", "我们出去吧。")},
		{"long word hard split", strings.Repeat("x", 25), 10, wantParts("xxxxxxxxxx", "xxxxxxxxxx", "xxxxx")},
		{"code fence kept whole when it fits", "intro\n\n" + code + "\n\noutro", 400, func(t *testing.T, p []string) {
			wantLen(t, p, 1)
		}},
		{"code fence split keeps fences balanced", "intro\n\n" + code, 80, func(t *testing.T, p []string) {
			for _, part := range p {
				if n := strings.Count(part, "```"); n%2 != 0 {
					t.Errorf("unbalanced fences in %q", part)
				}
			}
			if len(p) < 3 {
				t.Errorf("got %d parts, want the code split", len(p))
			}
		}},
		{"unterminated fence closed when split", "```\n" + strings.Repeat("line\n", 20), 30, func(t *testing.T, p []string) {
			for _, part := range p {
				if !strings.HasSuffix(part, "```") {
					t.Errorf("part not closed: %q", part)
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parts := Chunk(tt.text, tt.limit)
			for _, p := range parts {
				if tt.limit > 0 && utf8.RuneCountInString(p) > tt.limit {
					t.Errorf("part over limit %d: %q", tt.limit, p)
				}
				if strings.TrimSpace(p) == "" {
					t.Errorf("empty part")
				}
			}
			tt.check(t, parts)
		})
	}
}

func wantParts(want ...string) func(*testing.T, []string) {
	return func(t *testing.T, got []string) {
		t.Helper()
		if strings.Join(got, "|") != strings.Join(want, "|") || len(got) != len(want) {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func wantLen(t *testing.T, p []string, n int) {
	t.Helper()
	if len(p) != n {
		t.Errorf("got %d parts, want %d: %q", len(p), n, p)
	}
}

func TestSplitImages(t *testing.T) {
	got := SplitImages("Here: ![a cat](https://x/cat.png) and ![dog](https://x/d.png \"t\")done")
	want := []Part{{Text: "Here:"}, {ImageURL: "https://x/cat.png", Alt: "a cat"}, {Text: "and"}, {ImageURL: "https://x/d.png", Alt: "dog"}, {Text: "done"}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("part %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestSplitMedia(t *testing.T) {
	cases := []struct {
		in   string
		want string // parts as kind:url:alt or "text:…"
	}{
		{"hi ![cat](https://x/c.png) there", "text:hi | image:https://x/c.png:cat | text:there"},
		{"[audio](https://x/a.mp3)", "audio:https://x/a.mp3:"},
		{"[Voice: hello](https://x/v.amr)", "voice:https://x/v.amr:hello"},
		{"[video: clip](https://x/v.mp4 \"title\")", "video:https://x/v.mp4:clip"},
		{"see [file: r.pdf](https://x/r.pdf)", "text:see | file:https://x/r.pdf:r.pdf"},
		{"[song](media://ab.mp3) and [doc](media://cd.bin) [pic](media://ef.png)", "audio:media://ab.mp3:song | text:and | file:media://cd.bin:doc | image:media://ef.png:pic"},
		{"a [link](https://x/page) stays", "text:a [link](https://x/page) stays"},
		{"", ""},
	}
	for _, c := range cases {
		var got []string
		for _, p := range SplitMedia(c.in) {
			if p.Kind == "" {
				got = append(got, "text:"+p.Text)
				continue
			}
			got = append(got, p.Kind+":"+p.URL+":"+p.Alt)
		}
		if s := strings.Join(got, " | "); s != c.want {
			t.Errorf("SplitMedia(%q) = %s, want %s", c.in, s, c.want)
		}
	}
}
