package output

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

// FuzzParseRender: whatever the model writes, Parse does not fail, every element it returns
// is a valid outbound segment, and RenderSatori of them is well-formed XML.
func FuzzParseRender(f *testing.F) {
	for _, s := range []string{"hi", deployBlock, "x ![a](b) [file: c](d)", "```card\n{\"title\":\"<&>\"}\n```", "```card\n{\n```", "\xff<\x00>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		els := Parse(s)
		for _, el := range els {
			if _, ok := el.(TextElement); ok {
				continue
			}
			if err := Segment(el).Validate(); err != nil {
				t.Fatalf("Parse(%q): element %#v is no valid segment: %v", s, el, err)
			}
		}
		out := RenderSatori(els)
		dec := xml.NewDecoder(strings.NewReader("<root>" + out + "</root>"))
		for {
			_, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("RenderSatori(Parse(%q)) = %q: %v", s, out, err)
			}
		}
	})
}
