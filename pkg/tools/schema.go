package tools

import (
	"encoding/json"

	"github.com/google/jsonschema-go/jsonschema"
)

// schemaFor infers a JSON Schema object from T.
// TODO: switch to llm.SchemaFor[T] once pkg/llm exports it, so every package infers alike.
func schemaFor[T any]() (json.RawMessage, error) {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		return nil, err
	}
	return json.Marshal(s)
}
