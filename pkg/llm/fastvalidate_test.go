package llm

import (
	"encoding/json"
	"testing"
)

// TestCheckerAgreesWithLibrary runs every value of every schema through the compiled checker
// and through jsonschema-go's Validate: whenever the checker says valid, the library must
// agree, and for the values the library accepts that the checker is meant to cover (want
// fast), the checker must say valid too, or it would not save anything.
func TestCheckerAgreesWithLibrary(t *testing.T) {
	tests := []struct {
		name     string
		schema   string
		compiles bool
		values   []string // JSON values
	}{
		{"object", `{"type":"object","properties":{"city":{"type":"string","minLength":2,"maxLength":5},"unit":{"type":"string","enum":["celsius","fahrenheit"]},"n":{"type":"integer","minimum":1,"exclusiveMaximum":10},"x":{"type":"number","maximum":2.5,"exclusiveMinimum":-1},"ok":{"type":"boolean"},"tags":{"type":"array","items":{"type":"string"},"minItems":1,"maxItems":2},"any":true,"none":false,"c":{"const":"k"},"nul":{"type":["string","null"]}},"required":["city"],"additionalProperties":false,"description":"d"}`, true,
			[]string{`{"city":"Berlin"}`, `{"city":"Bö"}`, `{"city":"B"}`, `{"city":"Berlin!"}`, `{}`, `{"city":1}`,
				`{"city":"Rom","unit":"celsius"}`, `{"city":"Rom","unit":"kelvin"}`, `{"city":"Rom","n":1}`, `{"city":"Rom","n":0}`,
				`{"city":"Rom","n":10}`, `{"city":"Rom","n":9.5}`, `{"city":"Rom","x":2.5}`, `{"city":"Rom","x":2.6}`, `{"city":"Rom","x":-1}`,
				`{"city":"Rom","x":3}`, `{"city":"Rom","ok":true}`, `{"city":"Rom","ok":"true"}`, `{"city":"Rom","tags":[]}`,
				`{"city":"Rom","tags":["a"]}`, `{"city":"Rom","tags":["a","b","c"]}`, `{"city":"Rom","tags":[1]}`,
				`{"city":"Rom","any":{"q":[1]}}`, `{"city":"Rom","none":1}`, `{"city":"Rom","c":"k"}`, `{"city":"Rom","c":"j"}`,
				`{"city":"Rom","nul":null}`, `{"city":"Rom","nul":"s"}`, `{"city":"Rom","nul":2}`, `{"city":"Rom","extra":1}`}},
		{"open object", `{"type":"object","properties":{"a":{"type":"number"}},"additionalProperties":{"type":"integer"}}`, true,
			[]string{`{"a":1.5}`, `{"b":2}`, `{"b":2.5}`, `{"a":"x"}`}},
		{"nested", `{"type":"object","properties":{"o":{"type":"object","properties":{"p":{"type":"array","items":{"type":"object","required":["q"]}}}}}}`, true,
			[]string{`{"o":{"p":[{"q":1}]}}`, `{"o":{"p":[{}]}}`, `{"o":[]}`}},
		{"no type", `{"properties":{"a":{"minimum":3}}}`, true, []string{`{"a":"s"}`, `{"a":4}`, `{"a":2}`}},
		{"pattern is the library's", `{"type":"object","properties":{"a":{"type":"string","pattern":"^x"}}}`, false, nil},
		{"ref is the library's", `{"type":"object","properties":{"a":{"$ref":"#/$defs/a"}},"$defs":{"a":{"type":"string"}}}`, false, nil},
		{"anyOf is the library's", `{"type":"object","properties":{"a":{"anyOf":[{"type":"string"}]}}}`, false, nil},
		{"tuple items are the library's", `{"type":"object","properties":{"a":{"items":[{"type":"string"}]}}}`, false, nil},
		{"object enum is the library's", `{"type":"object","properties":{"a":{"enum":[{"x":1}]}}}`, false, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := compileChecker([]byte(tc.schema))
			if (c != nil) != tc.compiles {
				t.Fatalf("compiles = %v, want %v", c != nil, tc.compiles)
			}
			_, rs, err := resolveSchema([]byte(tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			for _, js := range tc.values {
				var v any
				if err := json.Unmarshal([]byte(js), &v); err != nil {
					t.Fatal(err)
				}
				fast := c.valid(v, 0)
				lib := rs.Validate(v) == nil
				if fast != lib {
					t.Errorf("%s: checker says valid=%v, library valid=%v", js, fast, lib)
				}
			}
		})
	}
}

// TestValidateArgumentsCheckerRefusesLikeLibrary: with the checker in front, an invalid call
// is still refused with the library's message.
func TestValidateArgumentsCheckerRefusesLikeLibrary(t *testing.T) {
	tool := &Tool{Name: "weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city"]}`)}
	if _, err := ValidateArguments(tool, args(`{"city":"Berlin","unit":"celsius"}`)); err != nil {
		t.Fatalf("valid call refused: %v", err)
	}
	_, err := ValidateArguments(tool, args(`{"city":"Berlin","unit":"kelvin"}`))
	var ve *ValidationError
	if !asValidationError(err, &ve) || len(ve.Issues) != 1 || ve.Issues[0].Path != "unit" {
		t.Fatalf("err = %v, want a validation error at unit", err)
	}
}

func asValidationError(err error, ve **ValidationError) bool {
	v, ok := err.(*ValidationError)
	*ve = v
	return ok
}
