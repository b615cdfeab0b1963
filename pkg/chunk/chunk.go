// Package chunk cuts replies into parts that fit a platform: length limits that respect
// paragraphs, sentences and code fences, and Markdown images as their own parts.
package chunk

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// Chunk splits a reply into parts of at most limit runes each, for platforms that cap message
// length. It cuts at paragraph boundaries first, then at sentence ends, then at spaces, and only
// as a last resort inside a word. A fenced code block is never cut open: it is kept whole when it
// fits, and otherwise split between lines with the fence closed and reopened (same info string)
// around each piece, so every part renders on its own.
//
// limit <= 0 means no limit. Chunk never returns empty parts; an all-blank reply gives none.
func Chunk(text string, limit int) []string {
	text = strings.TrimSpace(text)
	if text == "" {
		return nil
	}
	if limit <= 0 || utf8.RuneCountInString(text) <= limit {
		return []string{text}
	}
	var parts []string
	var cur strings.Builder
	curLen := 0
	flush := func() {
		if s := strings.TrimSpace(cur.String()); s != "" {
			parts = append(parts, s)
		}
		cur.Reset()
		curLen = 0
	}
	add := func(piece string) {
		n := utf8.RuneCountInString(piece)
		sep := 0
		if curLen > 0 {
			sep = 2
		}
		if curLen+sep+n > limit {
			flush()
			sep = 0
		}
		if sep > 0 {
			cur.WriteString("\n\n")
		}
		cur.WriteString(piece)
		curLen += sep + n
	}
	for _, b := range splitBlocks(text) {
		for _, piece := range fitBlock(b, limit) {
			add(piece)
		}
	}
	flush()
	return parts
}

type block struct {
	text  string
	fence string // opening fence line ("```go") for code blocks, "" for prose
}

// splitBlocks cuts text into prose paragraphs and whole fenced code blocks.
func splitBlocks(text string) []block {
	var out []block
	lines := strings.Split(text, "\n")
	var para []string
	flushPara := func() {
		if s := strings.TrimSpace(strings.Join(para, "\n")); s != "" {
			out = append(out, block{text: s})
		}
		para = para[:0]
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			flushPara()
			marker := trimmed[:3]
			code := []string{l}
			j := i + 1
			for ; j < len(lines); j++ {
				code = append(code, lines[j])
				if strings.HasPrefix(strings.TrimSpace(lines[j]), marker) {
					break
				}
			}
			if j == len(lines) { // unterminated fence: close it so the part renders
				code = append(code, marker)
			}
			out = append(out, block{text: strings.Join(code, "\n"), fence: l})
			i = j
			continue
		}
		if trimmed == "" {
			flushPara()
			continue
		}
		para = append(para, l)
	}
	flushPara()
	return out
}

// fitBlock returns the block as pieces that each fit limit.
func fitBlock(b block, limit int) []string {
	if utf8.RuneCountInString(b.text) <= limit {
		return []string{b.text}
	}
	if b.fence != "" {
		return splitCode(b, limit)
	}
	return splitProse(b.text, limit)
}

func splitCode(b block, limit int) []string {
	lines := strings.Split(b.text, "\n")
	open := strings.TrimSpace(b.fence)
	closeFence := open[:3]
	body := lines[1 : len(lines)-1]
	overhead := utf8.RuneCountInString(open) + utf8.RuneCountInString(closeFence) + 2
	room := limit - overhead
	if room < 1 {
		room = 1
	}
	var out []string
	var cur []string
	curLen := 0
	emit := func() {
		if len(cur) > 0 {
			out = append(out, open+"\n"+strings.Join(cur, "\n")+"\n"+closeFence)
		}
		cur, curLen = nil, 0
	}
	for _, l := range body {
		for _, piece := range hardSplit(l, room) {
			n := utf8.RuneCountInString(piece) + 1
			if curLen+n > room && len(cur) > 0 {
				emit()
			}
			cur = append(cur, piece)
			curLen += n
		}
	}
	emit()
	return out
}

// sentenceEnd matches the end of a sentence in Latin or CJK punctuation.
var sentenceEnd = regexp.MustCompile(`[.!?][)"']?\s+|[。！？；]\s*|\n`)

func splitProse(text string, limit int) []string {
	var sentences []string
	last := 0
	for _, loc := range sentenceEnd.FindAllStringIndex(text, -1) {
		sentences = append(sentences, text[last:loc[1]])
		last = loc[1]
	}
	if last < len(text) {
		sentences = append(sentences, text[last:])
	}
	var out []string
	var cur strings.Builder
	curLen := 0
	for _, s := range sentences {
		n := utf8.RuneCountInString(s)
		if curLen+n > limit && curLen > 0 {
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
			curLen = 0
		}
		if n > limit {
			for _, p := range wordSplit(s, limit) {
				out = append(out, p)
			}
			continue
		}
		cur.WriteString(s)
		curLen += n
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// wordSplit cuts at spaces where it can, and inside words where it must.
func wordSplit(s string, limit int) []string {
	var out []string
	var cur strings.Builder
	curLen := 0
	for _, w := range strings.Fields(s) {
		n := utf8.RuneCountInString(w)
		if curLen > 0 && curLen+1+n > limit {
			out = append(out, cur.String())
			cur.Reset()
			curLen = 0
		}
		if n > limit {
			pieces := hardSplit(w, limit)
			out = append(out, pieces[:len(pieces)-1]...)
			w = pieces[len(pieces)-1]
			n = utf8.RuneCountInString(w)
		}
		if curLen > 0 {
			cur.WriteByte(' ')
			curLen++
		}
		cur.WriteString(w)
		curLen += n
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

func hardSplit(s string, limit int) []string {
	if utf8.RuneCountInString(s) <= limit {
		return []string{s}
	}
	var out []string
	r := []rune(s)
	for len(r) > limit {
		out = append(out, string(r[:limit]))
		r = r[limit:]
	}
	return append(out, string(r))
}

// imageRef matches a Markdown image: ![alt](url) or ![alt](url "title").
var imageRef = regexp.MustCompile(`!\[([^\]]*)\]\((\S+?)(?:\s+"[^"]*")?\)`)

// Part is one piece of a reply in order: text, or a media item by URL.
type Part struct {
	Text     string
	ImageURL string // images (also in URL, Kind "image")
	Alt      string // image alt text, media caption or file name
	// Kind is the segment type of a media part (SplitMedia): image, audio, voice, record, video
	// or file; "" for text.
	Kind string
	URL  string
}

// mediaLink matches a Markdown image or link: ![alt](url), [label](url), each with an optional
// "title".
var mediaLink = regexp.MustCompile(`(!?)\[([^\]]*)\]\((\S+?)(?:\s+"[^"]*")?\)`)

// mediaScheme is a reference into the media object store.
const mediaScheme = "media://"

// mediaKind is the kind of a Markdown link that stands for a media item, or "": a link
// labelled "audio", "voice", "record", "video" or "file" (optionally "file: report.pdf", the
// text after ":" is the caption or file name), or any link into the media store (media://...,
// kind by extension). Other links stay text.
func mediaKind(label, url string) (kind, alt string) {
	word, rest, _ := strings.Cut(strings.TrimSpace(label), ":")
	switch w := strings.ToLower(strings.TrimSpace(word)); w {
	case "audio", "voice", "record", "video", "file", "image":
		return w, strings.TrimSpace(rest)
	}
	if !strings.HasPrefix(url, mediaScheme) {
		return "", ""
	}
	ext := strings.ToLower(url[strings.LastIndexByte(url, '.')+1:])
	switch ext {
	case "png", "jpg", "jpeg", "gif", "webp", "bmp":
		return "image", label
	case "mp3", "wav", "ogg", "oga", "m4a", "aac", "flac", "amr", "silk", "opus":
		return "audio", label
	case "mp4", "webm", "mov", "mkv", "avi":
		return "video", label
	}
	return "file", label
}

// SplitMedia turns Markdown images (![alt](url)) and media links ([audio](url), [video](url),
// [file: name](url), links into the media store) into media parts, keeping the text around
// them in order. Blank text between them is dropped.
func SplitMedia(text string) []Part {
	var out []Part
	last := 0
	var links [][]int
	if strings.Contains(text, "](") { // every link has it; most replies have none, and the regexp costs
		links = mediaLink.FindAllStringSubmatchIndex(text, -1)
	}
	for _, m := range links {
		bang, label, url := text[m[2]:m[3]] == "!", text[m[4]:m[5]], text[m[6]:m[7]]
		kind, alt := "image", label
		if !bang {
			if kind, alt = mediaKind(label, url); kind == "" {
				continue // an ordinary link
			}
		}
		if t := strings.TrimSpace(text[last:m[0]]); t != "" {
			out = append(out, Part{Text: t})
		}
		p := Part{Kind: kind, URL: url, Alt: alt}
		if kind == "image" {
			p.ImageURL = url
		}
		out = append(out, p)
		last = m[1]
	}
	if t := strings.TrimSpace(text[last:]); t != "" {
		out = append(out, Part{Text: t})
	}
	return out
}

// SplitImages turns Markdown images into image parts, keeping the text around them in order.
// Blank text between images is dropped.
func SplitImages(text string) []Part {
	var out []Part
	last := 0
	for _, m := range imageRef.FindAllStringSubmatchIndex(text, -1) {
		if t := strings.TrimSpace(text[last:m[0]]); t != "" {
			out = append(out, Part{Text: t})
		}
		out = append(out, Part{ImageURL: text[m[4]:m[5]], Alt: text[m[2]:m[3]]})
		last = m[1]
	}
	if t := strings.TrimSpace(text[last:]); t != "" {
		out = append(out, Part{Text: t})
	}
	return out
}
