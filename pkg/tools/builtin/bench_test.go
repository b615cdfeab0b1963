package builtin

import (
	"strings"
	"testing"
)

func BenchmarkHTMLToText(b *testing.B) {
	page := "<html><head><title>T</title><script>var x=1;</script></head><body>" +
		strings.Repeat(`<div class="c"><h2>Heading</h2><p>Some <b>bold</b> text with a <a href="/x">link</a>.</p><ul><li>one</li><li>two</li></ul></div>`, 200) +
		"</body></html>"
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	for b.Loop() {
		_, _ = HTMLToText(strings.NewReader(page), nil)
	}
}

func BenchmarkMatchGlob(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = MatchGlob("src/**/test/*.ts", "src/a/b/c/d/test/file.ts")
	}
}
