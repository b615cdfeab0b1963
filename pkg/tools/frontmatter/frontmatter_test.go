package frontmatter

import (
	"errors"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	cases := []struct {
		in, fm, body string
		err          error
	}{
		{"---\nname: a\n---\nhello\n", "name: a", "hello\n", nil},
		{"\xef\xbb\xbf---\r\nname: a\r\n---\r\nbody", "name: a", "body", nil},
		{"---\n---\nbody", "", "body", nil},
		{"---\nname: a\n---", "name: a", "", nil},
		{"name: a\n", "", "", ErrNoFrontmatter},
		{"---\nname: a\n", "", "", ErrUnterminated},
	}
	for _, c := range cases {
		fm, body, err := Split([]byte(c.in))
		if !errors.Is(err, c.err) || string(fm) != c.fm || body != c.body {
			t.Errorf("Split(%q) = %q, %q, %v", c.in, fm, body, err)
		}
	}
}

func TestDecodeRejectsUnknownKeys(t *testing.T) {
	var v struct {
		Name string `yaml:"name"`
	}
	err := Decode([]byte("name: a\nnmae: b\n"), &v)
	if err == nil || !strings.Contains(err.Error(), "nmae") {
		t.Fatalf("err = %v", err)
	}
}
