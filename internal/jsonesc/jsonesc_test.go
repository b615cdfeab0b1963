package jsonesc

import (
	"encoding/json"
	"testing"
)

// Every escape Unescape accepts decodes as encoding/json decodes it; \u and unknown ones are
// left to the caller.
func TestUnescape(t *testing.T) {
	for e := 0; e < 256; e++ {
		c, ok := Unescape(byte(e))
		var want string
		err := json.Unmarshal([]byte(`"\`+string(rune(e))+`"`), &want)
		switch {
		case e == 'u':
			if ok {
				t.Errorf(`\u accepted`)
			}
		case ok != (err == nil):
			t.Errorf(`\%c: ok %v, encoding/json error %v`, e, ok, err)
		case ok && want != string(rune(c)):
			t.Errorf(`\%c: %q, want %q`, e, c, want)
		}
	}
}
