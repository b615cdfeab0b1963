package events

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
)

// The JSON Schemas in docs/events/ are generated from the Go types. Regenerate with
//
//	go test ./pkg/events -run TestSchemasUpToDate -update
var update = flag.Bool("update", false, "rewrite docs/events/*.schema.json")

const schemaDir = "../../docs/events"

// schemaSubjects says where each type is published (the schema's description).
var schemaSubjects = map[string]string{
	TypeIMMessage:          "IM_IN, subject im.in.<platform>.<bot>.<scope>.<scene>",
	TypeIMOut:              "IM_OUT, subject im.out.<platform>.<bot>.<scope>.<scene>",
	TypeIMSent:             "IM_SENT, subject im.sent.<platform>.<bot>.<scope>.<scene>.<out>",
	TypeIMSentBatch:        "IM_SENT, subject im.sent.batch.<bucket>",
	TypeUserMessage:        "SESSION_IN, subject agent.in.<sk>",
	TypeListen:             "SESSION_IN, subject agent.in.<sk>",
	TypeCommand:            "SESSION_IN, subject agent.in.<sk>",
	TypeSteer:              "SESSION_IN, subject agent.in.<sk>",
	TypeFollowUp:           "SESSION_IN, subject agent.in.<sk>",
	TypeSubagentResult:     "SESSION_IN, subject agent.in.<sk>",
	TypeScheduled:          "SESSION_IN, subject agent.in.<sk> (held on schedule.<sk>.<id> until it fires)",
	TypeAbort:              "SESSION_IN, subject agent.in.<sk>",
	TypeTaskResult:         "SESSION_IN, subject agent.in.<sk>",
	TypeTurnStarted:        "AGENT_EVENTS, subject agent.evt.<sk>.turn_started",
	TypeMessageEnd:         "AGENT_EVENTS, subject agent.evt.<sk>.message_end",
	TypeToolCallRequested:  "AGENT_EVENTS, subject agent.evt.<sk>.tool_call_requested",
	TypeToolResultRecorded: "AGENT_EVENTS, subject agent.evt.<sk>.tool_result",
	TypeOutboundPublished:  "AGENT_EVENTS, subject agent.evt.<sk>.outbound_published",
	TypeTurnCommitted:      "AGENT_EVENTS, subject agent.evt.<sk>.turn_committed",
	TypeTurnFailed:         "AGENT_EVENTS, subject agent.evt.<sk>.turn_failed",
	TypeCtxMessages:        "AGENT_CTX, subject agent.ctx.<sk>.<epoch>",
	TypeCtxSummary:         "AGENT_CTX, subject agent.ctx.<sk>.<epoch>",
	TypeCtxLeaf:            "AGENT_CTX, subject agent.ctx.<sk>.<epoch>",
	TypeLiveDelta:          "core NATS (not stored), subject agent.live.<sk>",
	TypeToolCall:           "TOOL_CALLS, subject tool.call.<tool>",
	TypeToolResult:         "TOOL_RESULTS, subject tool.result.<sk>",
	TypeSubagentTask:       "TASKS, subject task.subagent.<id>",
	TypeDeferredTask:       "TASKS, subject task.deferred.<id>",
	TypeDeadLetter:         "DEAD_LETTERS, subject dlq.<role>.<reason>",
}

func schemaFor[P Payload]() func() (*jsonschema.Schema, error) {
	return func() (*jsonschema.Schema, error) {
		return jsonschema.For[Event[P]](&jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
			reflect.TypeFor[json.RawMessage](): {Description: "any JSON value"},
			reflect.TypeFor[[]byte]():          {Type: "string", ContentEncoding: "base64"},
		}})
	}
}

var schemaMakers = map[string]func() (*jsonschema.Schema, error){
	TypeIMMessage: schemaFor[IMMessage](), TypeIMOut: schemaFor[Outbound](), TypeIMSent: schemaFor[Receipt](), TypeIMSentBatch: schemaFor[ReceiptBatch](),
	TypeUserMessage: schemaFor[UserMessage](), TypeListen: schemaFor[Listen](), TypeCommand: schemaFor[Command](),
	TypeSteer: schemaFor[Steer](), TypeFollowUp: schemaFor[FollowUp](), TypeSubagentResult: schemaFor[SubagentResult](),
	TypeScheduled: schemaFor[Scheduled](), TypeAbort: schemaFor[Abort](), TypeTaskResult: schemaFor[TaskResult](),
	TypeTurnStarted: schemaFor[TurnStarted](), TypeMessageEnd: schemaFor[MessageEnd](),
	TypeToolCallRequested: schemaFor[ToolCallRequested](), TypeToolResultRecorded: schemaFor[ToolResultRecorded](),
	TypeOutboundPublished: schemaFor[OutboundPublished](), TypeTurnCommitted: schemaFor[TurnCommitted](),
	TypeTurnFailed: schemaFor[TurnFailed](), TypeCtxMessages: schemaFor[CtxMessages](), TypeCtxSummary: schemaFor[CtxSummary](), TypeCtxLeaf: schemaFor[CtxLeaf](),
	TypeLiveDelta: schemaFor[LiveDelta](), TypeToolCall: schemaFor[ToolCall](), TypeToolResult: schemaFor[ToolResult](),
	TypeSubagentTask: schemaFor[SubagentTask](), TypeDeferredTask: schemaFor[DeferredTask](), TypeDeadLetter: schemaFor[DeadLetter](),
}

// buildSchema generates the schema for typ and adjusts it to the wire rules: type is a
// constant, v is 1..Version, and unknown properties are allowed everywhere (readers ignore
// fields they do not know, so that adding an optional field keeps v).
func buildSchema(t *testing.T, typ string) []byte {
	t.Helper()
	s, err := schemaMakers[typ]()
	if err != nil {
		t.Fatalf("schema %s: %v", typ, err)
	}
	s.Schema = "https://json-schema.org/draft/2020-12/schema"
	s.Title = typ
	s.Description = "agentbus event " + typ + " v" + itoa(Version) + " — " + schemaSubjects[typ] + ". Generated from pkg/events; see docs/events.md."
	var c any = typ
	s.Properties["type"].Const = &c
	lo, hi := 1.0, float64(Version)
	s.Properties["v"].Minimum, s.Properties["v"].Maximum = &lo, &hi
	allowUnknown(s)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keep "<sk>" readable in descriptions
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	// Schema's own MarshalJSON escapes HTML characters regardless; undo that for readability.
	return []byte(strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(buf.String()))
}

func allowUnknown(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Not != nil {
		s.AdditionalProperties = nil // "false" is encoded as {not: {}}
	}
	for _, p := range s.Properties {
		allowUnknown(p)
	}
	allowUnknown(s.Items)
	allowUnknown(s.AdditionalProperties)
	for _, d := range s.Defs {
		allowUnknown(d)
	}
}

func TestSchemasUpToDate(t *testing.T) {
	types := Types()
	sort.Strings(types)
	for _, typ := range types {
		if _, ok := schemaMakers[typ]; !ok {
			t.Errorf("type %s has no schema maker", typ)
			continue
		}
		if schemaSubjects[typ] == "" {
			t.Errorf("type %s has no subject description", typ)
		}
		want := buildSchema(t, typ)
		path := filepath.Join(schemaDir, typ+".schema.json")
		if *update {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is missing or stale (err %v); run: go test ./pkg/events -run TestSchemasUpToDate -update", path, err)
		}
	}
}

// TestExamplesValid checks every example in docs/events/examples against both the Go decoder and
// the published JSON Schema, so the documentation cannot drift from the code.
func TestExamplesValid(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(schemaDir, "examples", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	covered := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := Decode(data)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		typ := ev.EventMeta().Type
		if !strings.HasPrefix(filepath.Base(f), typ) {
			t.Errorf("%s holds a %s event; name examples after their type", f, typ)
		}
		covered[typ] = true
		raw, err := os.ReadFile(filepath.Join(schemaDir, typ+".schema.json"))
		if err != nil {
			t.Fatal(err)
		}
		var s jsonschema.Schema
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatalf("%s schema: %v", typ, err)
		}
		rs, err := s.Resolve(nil)
		if err != nil {
			t.Fatalf("%s schema resolve: %v", typ, err)
		}
		var inst any
		_ = json.Unmarshal(data, &inst)
		if err := rs.Validate(inst); err != nil {
			t.Errorf("%s fails its schema: %v", f, err)
		}
	}
	for _, typ := range []string{TypeIMMessage, TypeUserMessage, TypeListen, TypeCommand, TypeSteer, TypeFollowUp, TypeAbort, TypeScheduled, TypeSubagentResult} {
		if !covered[typ] {
			t.Errorf("no example for %s (third parties publish it)", typ)
		}
	}
}

// TestSchemaRejects makes sure the published schemas are not vacuous.
func TestSchemaRejects(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(schemaDir, TypeIMMessage+".schema.json"))
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
	for name, doc := range map[string]string{
		"no sender":  `{"type":"im.message","v":1,"id":"x","time":1,"data":{"platform":"qq","bot":"b","messageId":"m","scene":{"type":"group","id":"g"},"content":[]}}`,
		"wrong type": `{"type":"im.out","v":1,"id":"x","time":1,"data":{}}`,
		"future v":   `{"type":"im.message","v":2,"id":"x","time":1,"data":{}}`,
	} {
		var inst any
		_ = json.Unmarshal([]byte(doc), &inst)
		if rs.Validate(inst) == nil {
			t.Errorf("%s: schema accepted %s", name, doc)
		}
	}
}
