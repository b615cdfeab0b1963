package transcript

import (
	"bytes"
	"encoding/binary"
	"sort"
)

// A segment is the search index of up to segmentMaxRows rows of one scene:
//
//	[0:4]              n, number of entries (uint32 LE)
//	[4:20]             smallest row key of the entries
//	[20:36]            largest row key of the entries
//	[36:36+16n]        row keys, entry order
//	[..+4n]            end offset of each entry's text in the blob (uint32 LE)
//	[...]              blob: lower-cased bodies, each followed by one NUL
//
// Entries are in insert order; row keys inside one segment need not be sorted (a late message
// with an older time lands in the newest segment), which is why Search compares keys rather than
// trusting segment order.
const (
	keyLen          = 16
	segHeaderLen    = 4 + 2*keyLen
	segmentMaxRows  = 256
	segmentMaxBytes = 32 << 10
)

type segment struct {
	keys [][]byte // each keyLen bytes
	text [][]byte // lower-cased body, no NUL inside
}

type segView []byte

func (s segView) n() int           { return int(binary.LittleEndian.Uint32(s[0:4])) }
func (s segView) minKey() []byte   { return s[4 : 4+keyLen] }
func (s segView) maxKey() []byte   { return s[4+keyLen : segHeaderLen] }
func (s segView) key(i int) []byte { o := segHeaderLen + i*keyLen; return s[o : o+keyLen] }
func (s segView) end(i int) int {
	o := segHeaderLen + s.n()*keyLen + i*4
	return int(binary.LittleEndian.Uint32(s[o : o+4]))
}
func (s segView) blob() []byte { return s[segHeaderLen+s.n()*(keyLen+4):] }

// valid reports whether the bytes look like a segment, so a corrupt value is skipped instead of
// panicking a reader.
func (s segView) valid() bool {
	if len(s) < segHeaderLen {
		return false
	}
	n := s.n()
	if n <= 0 || len(s) < segHeaderLen+n*(keyLen+4) {
		return false
	}
	return s.end(n-1) <= len(s.blob())
}

func (s segView) textBytes() int { return len(s.blob()) }

// decode copies the segment out (writers rebuild segments; readers use segView directly): one
// copy of the whole value (bbolt's is valid only in its transaction), the entries slices of
// it, capped so that nothing is ever appended into it. Every batch of the archiver decodes the
// newest segment of each scene it writes to, so a copy per entry would cost two allocations
// per row already archived there.
func (s segView) decode() segment {
	n := s.n()
	v := segView(bytes.Clone(s))
	seg := segment{keys: make([][]byte, n), text: make([][]byte, n)}
	blob := v.blob()
	start := 0
	for i := 0; i < n; i++ {
		seg.keys[i] = v.key(i)[:keyLen:keyLen]
		e := v.end(i)
		seg.text[i] = blob[start:e:e]
		start = e + 1
	}
	return seg
}

func (g *segment) size() int {
	t := 0
	for _, b := range g.text {
		t += len(b) + 1
	}
	return t
}

func (g *segment) encode() []byte {
	n := len(g.keys)
	out := make([]byte, segHeaderLen+n*(keyLen+4), segHeaderLen+n*(keyLen+4)+g.size())
	binary.LittleEndian.PutUint32(out[0:4], uint32(n))
	var minK, maxK []byte
	for i, k := range g.keys {
		copy(out[segHeaderLen+i*keyLen:], k)
		if minK == nil || bytes.Compare(k, minK) < 0 {
			minK = k
		}
		if maxK == nil || bytes.Compare(k, maxK) > 0 {
			maxK = k
		}
	}
	copy(out[4:], minK)
	copy(out[4+keyLen:], maxK)
	offs := segHeaderLen + n*keyLen
	pos := 0
	for i, t := range g.text {
		pos += len(t)
		binary.LittleEndian.PutUint32(out[offs+i*4:], uint32(pos))
		pos++
		out = append(out, t...)
		out = append(out, 0)
	}
	return out
}

// match appends to dst the row keys of the entries whose text contains kw (a finder for a
// non-empty keyword without NUL).
func (s segView) match(f *finder, dst [][]byte) [][]byte {
	blob := s.blob()
	n := s.n()
	pos := 0
	for pos < len(blob) {
		j := f.index(blob[pos:])
		if j < 0 {
			break
		}
		at := pos + j
		// Entry i is the first whose end offset is beyond the match start.
		i := sort.Search(n, func(i int) bool { return s.end(i) > at })
		if i >= n {
			break
		}
		dst = append(dst, s.key(i))
		pos = s.end(i) + 1
	}
	return dst
}

// finder searches for one keyword by its rarest byte: memchr for that byte (SIMD-fast) and a
// compare at each hit. bytes.Index anchors on the keyword's first byte, which for common
// letters or the lead byte of a CJK character hits every few bytes and falls back to a much
// slower loop; a rare anchor keeps the scan near memory speed.
type finder struct {
	kw  []byte
	off int  // position of the anchor byte in kw
	b   byte // the anchor byte
}

func newFinder(kw []byte) *finder {
	f := &finder{kw: kw}
	best := 1 << 30
	for i, c := range kw {
		if r := byteRank(c); r <= best {
			best, f.off, f.b = r, i, c
		}
	}
	return f
}

// byteRank estimates how common a byte is in chat text (higher = more common).
func byteRank(c byte) int {
	switch {
	case c == ' ':
		return 100
	case c >= 0xE0 && c <= 0xEF: // lead byte of a 3-byte UTF-8 rune (all CJK)
		return 95
	case c >= 0x80 && c <= 0xBF: // continuation byte: spread over 64 values
		return 30
	case c >= 0xC0: // other lead bytes
		return 40
	case c >= 'a' && c <= 'z':
		if r := letterRank[c-'a']; r > 0 {
			return r
		}
		return 50
	case c >= '0' && c <= '9':
		return 35
	}
	return 20 // punctuation and the rest
}

// letterRank follows English letter frequency (etaoin shrdlu ...), scaled into 50..90.
var letterRank = func() [26]int {
	var r [26]int
	for i, c := range "etaoinshrdlcumwfgypbvkjxqz" {
		r[c-'a'] = 90 - i*40/26
	}
	return r
}()

// index returns the first index of f.kw in b, or -1.
func (f *finder) index(b []byte) int {
	if len(f.kw) == 1 {
		return bytes.IndexByte(b, f.b)
	}
	pos := 0
	for {
		if len(b)-pos < len(f.kw) {
			return -1
		}
		j := bytes.IndexByte(b[pos+f.off:len(b)-len(f.kw)+f.off+1], f.b)
		if j < 0 {
			return -1
		}
		start := pos + j
		if bytes.Equal(b[start:start+len(f.kw)], f.kw) {
			return start
		}
		pos = start + 1
	}
}
