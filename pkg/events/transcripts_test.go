package events

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
)

// TestTranscriptSearchSchemasUpToDate keeps docs/events/transcripts.search.*.schema.json in
// step with the request/reply types (regenerate with -update, like the event schemas).
func TestTranscriptSearchSchemasUpToDate(t *testing.T) {
	makers := map[string]func() (*jsonschema.Schema, error){
		"transcripts.search.request": func() (*jsonschema.Schema, error) {
			return jsonschema.For[TranscriptSearchRequest](nil)
		},
		"transcripts.search.response": func() (*jsonschema.Schema, error) {
			return jsonschema.For[TranscriptSearchResponse](nil)
		},
	}
	for name, mk := range makers {
		s, err := mk()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		s.Schema = "https://json-schema.org/draft/2020-12/schema"
		s.Title = name
		s.Description = "agentbus " + name + " — NATS request/reply on " + SubjectTranscriptSearch + ". Generated from pkg/events; see docs/events.md."
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "  ")
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(schemaDir, name+".schema.json")
		if *update {
			if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, buf.Bytes()) {
			t.Errorf("%s is missing or stale (err %v); run: go test ./pkg/events -run TestTranscriptSearchSchemasUpToDate -update", path, err)
		}
	}
}

// TestTranscriptSearchRequestShape pins the wire names both sides rely on.
func TestTranscriptSearchRequestShape(t *testing.T) {
	data, err := json.Marshal(TranscriptSearchRequest{Platform: "webhook", Bot: "b1", Scene: "g1", Keyword: "deploy", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"platform":"webhook","bot":"b1","scene":"g1","keyword":"deploy","limit":10}`; string(data) != want {
		t.Fatalf("got %s\nwant %s", data, want)
	}
	data, _ = json.Marshal(TranscriptSearchResponse{Rows: []TranscriptRow{{MessageID: "m1", Direction: TranscriptInbound}}})
	if !bytes.Contains(data, []byte(`"message_id":"m1"`)) || !bytes.Contains(data, []byte(`"direction":"inbound"`)) {
		t.Fatalf("row names: %s", data)
	}
}
