package events

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
)

// cardSchemaFile is the JSON Schema of a card segment's data (the im.out schema leaves
// segment data open, as segment types are open).
const cardSchemaFile = "segment.card.schema.json"

// buildCardSchema generates the card schema from Card with the bounds of Card.Validate
// (lengths in characters; a value's 64 bytes are at most 64 characters, and Validate counts
// bytes).
func buildCardSchema(t *testing.T) []byte {
	t.Helper()
	s, err := jsonschema.For[Card](nil)
	if err != nil {
		t.Fatal(err)
	}
	n := func(i int) *int { return &i }
	s.Schema = "https://json-schema.org/draft/2020-12/schema"
	s.Title = "segment card"
	s.Description = "data of a content segment of type \"card\" (im.out), wire v" + itoa(Version) +
		". Generated from pkg/events (Card); see docs/events.md#segments. A card needs a title or a text; value is at most 64 bytes."
	s.Properties["title"].MaxLength = n(CardMaxTitle)
	s.Properties["text"].MaxLength = n(CardMaxText)
	s.Properties["fields"].MaxItems = n(CardMaxFields)
	f := s.Properties["fields"].Items
	f.Properties["name"].MaxLength, f.Properties["name"].MinLength = n(CardMaxFieldName), n(1)
	f.Properties["value"].MaxLength, f.Properties["value"].MinLength = n(CardMaxFieldValue), n(1)
	s.Properties["buttons"].MaxItems = n(CardMaxButtons)
	b := s.Properties["buttons"].Items
	b.Properties["label"].MaxLength, b.Properties["label"].MinLength = n(CardMaxLabel), n(1)
	b.Properties["url"].MaxLength, b.Properties["url"].Pattern = n(CardMaxURL), "^https?://"
	b.Properties["value"].MaxLength, b.Properties["value"].MinLength = n(CardMaxValue), n(1)
	b.OneOf = []*jsonschema.Schema{{Required: []string{"url"}}, {Required: []string{"value"}}}
	s.AnyOf = []*jsonschema.Schema{{Required: []string{"title"}}, {Required: []string{"text"}}}
	allowUnknown(s)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return []byte(strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(buf.String()))
}

func TestCardSchemaUpToDate(t *testing.T) {
	want := buildCardSchema(t)
	path := filepath.Join(schemaDir, cardSchemaFile)
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s is missing or stale (err %v); run: go test ./pkg/events -run TestCardSchemaUpToDate -update", path, err)
	}
}

// TestCardSchemaAgrees: the card of the im.out example passes both the schema and
// Card.Validate, and cards Validate rejects for a bound the schema states are rejected by it.
func TestCardSchemaAgrees(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(schemaDir, cardSchemaFile))
	if err != nil {
		t.Fatal(err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(schemaDir, "examples", "im.out.card.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ev Event[Outbound]
	if err := Unmarshal(data, &ev); err != nil {
		t.Fatal(err)
	}
	seg := ev.Data.Content[0]
	if err := seg.Validate(); err != nil {
		t.Fatalf("example card: %v", err)
	}
	if err := rs.Validate(jsonValue(t, seg.Data)); err != nil {
		t.Fatalf("example card fails the schema: %v", err)
	}
	for name, c := range map[string]Card{
		"no title or text": {Fields: []CardField{{Name: "a", Value: "b"}}},
		"value too long":   {Title: "t", Buttons: []CardButton{{Label: "l", Value: strings.Repeat("v", 65)}}},
		"url and value":    {Title: "t", Buttons: []CardButton{{Label: "l", Value: "v", URL: "https://e.x/"}}},
		"not http":         {Title: "t", Buttons: []CardButton{{Label: "l", URL: "ftp://e.x/"}}},
		"label too long":   {Title: "t", Buttons: []CardButton{{Label: strings.Repeat("l", 76), Value: "v"}}},
	} {
		if c.Validate() == nil {
			t.Errorf("%s: Validate accepts it", name)
		}
		if rs.Validate(jsonValue(t, CardSeg(c).Data)) == nil {
			t.Errorf("%s: the schema accepts it", name)
		}
	}
}

func jsonValue(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}
