package transcript

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestFinderMatchesBytesIndex checks the rare-byte finder against bytes.Index.
func TestFinderMatchesBytesIndex(t *testing.T) {
	alphabet := []byte("ab e\x00z天气")
	rng := rand.New(rand.NewPCG(1, 2))
	rnd := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return b
	}
	for _, kw := range [][]byte{[]byte("a"), []byte("ab"), []byte("e z"), []byte("zz"), []byte("天气"), []byte("b天"), []byte("aaaa")} {
		f := newFinder(kw)
		for i := 0; i < 2000; i++ {
			hay := rnd(rng.IntN(40))
			if got, want := f.index(hay), bytes.Index(hay, kw); got != want {
				t.Fatalf("index(%q, %q) = %d, want %d", hay, kw, got, want)
			}
		}
	}
}
