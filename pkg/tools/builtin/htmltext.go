package builtin

import (
	"io"
	"net/url"
	"strings"

	"golang.org/x/net/html"
)

// skipElems hold no readable text.
var skipElems = map[string]bool{"script": true, "style": true, "noscript": true, "template": true, "svg": true,
	"iframe": true, "object": true, "embed": true, "canvas": true, "head": true, "select": true, "button": true}

// blockElems start on a new line.
var blockElems = map[string]bool{"p": true, "div": true, "section": true, "article": true, "main": true, "header": true,
	"footer": true, "nav": true, "aside": true, "ul": true, "ol": true, "table": true, "tr": true, "blockquote": true,
	"form": true, "fieldset": true, "figure": true, "figcaption": true, "dl": true, "dt": true, "dd": true, "hr": true,
	"h1": true, "h2": true, "h3": true, "h4": true, "h5": true, "h6": true, "pre": true, "li": true, "address": true, "details": true, "summary": true}

// HTMLToText turns an HTML document into readable plain text with light Markdown: headings
// become "#" lines, list items "- ", links "[text](url)" (absolute http(s) only, resolved
// against base), <pre> keeps its whitespace; scripts, styles and other non-content elements
// are dropped, and whitespace is collapsed. It uses the x/net/html tokenizer, so malformed
// markup never fails: it just yields less structure.
func HTMLToText(r io.Reader, base *url.URL) (title, text string) {
	z := html.NewTokenizer(r)
	var b textBuf
	skip := 0 // depth inside skipped elements
	pre := 0  // depth inside <pre>
	inTitle := false
	var href string
	var linkText strings.Builder
	inLink := false
	spaceBeforeLink := false
	pendingSpace := false
	newline := func(n int) {
		if b.Len() == 0 {
			return
		}
		b.trimRight(' ')
		trail := b.trailing('\n')
		for ; trail < n; trail++ {
			b.writeByte('\n')
		}
		pendingSpace = false
	}
	write := func(s string) {
		if inLink {
			linkText.WriteString(s)
			return
		}
		b.writeString(s)
	}
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			return strings.TrimSpace(title), strings.TrimSpace(string(b.buf))
		case html.StartTagToken, html.SelfClosingTagToken, html.EndTagToken:
			nameB, hasAttr := z.TagName()
			name := string(nameB)
			if name == "title" {
				inTitle = tt == html.StartTagToken
				continue
			}
			if skipElems[name] {
				if tt == html.StartTagToken {
					skip++
				} else if tt == html.EndTagToken && skip > 0 {
					skip--
				}
				continue
			}
			if skip > 0 {
				continue
			}
			end := tt == html.EndTagToken
			switch {
			case name == "br" && !end:
				newline(1)
			case name == "pre":
				newline(2)
				if end {
					pre = max(pre-1, 0)
				} else {
					pre++
				}
			case blockElems[name]:
				if name == "li" || name == "tr" || name == "dt" || name == "dd" {
					newline(1)
				} else {
					newline(2)
				}
				if !end {
					switch name {
					case "h1", "h2", "h3", "h4", "h5", "h6":
						b.writeString(strings.Repeat("#", int(name[1]-'0')) + " ")
					case "li":
						b.writeString("- ")
					case "hr":
						b.writeString("---")
						newline(2)
					}
				}
			case name == "td" || name == "th":
				if !end {
					write(" | ")
				}
			case name == "a":
				if !end {
					href = ""
					for hasAttr {
						var k, v []byte
						k, v, hasAttr = z.TagAttr()
						if string(k) == "href" {
							href = string(v)
						}
					}
					inLink, spaceBeforeLink, pendingSpace = true, pendingSpace, false
					linkText.Reset()
				} else if inLink {
					inLink = false
					t := strings.TrimSpace(collapse(linkText.String()))
					link := absLink(base, href)
					if spaceBeforeLink && t != "" && b.Len() > 0 && !b.endsWith('\n') && !b.endsWith(' ') {
						b.writeByte(' ')
					}
					switch {
					case t != "" && link != "":
						b.writeString("[" + t + "](" + link + ")")
					case t != "":
						b.writeString(t)
					}
				}
			case name == "img" && !end:
				for hasAttr {
					var k, v []byte
					k, v, hasAttr = z.TagAttr()
					if string(k) == "alt" && strings.TrimSpace(string(v)) != "" {
						write("[image: " + strings.TrimSpace(string(v)) + "]")
					}
				}
			}
		case html.TextToken:
			if inTitle {
				title += string(z.Text())
				continue
			}
			if skip > 0 {
				continue
			}
			t := string(z.Text())
			if pre > 0 {
				write(t)
				continue
			}
			lead := len(t) > 0 && isSpace(t[0])
			trail := len(t) > 0 && isSpace(t[len(t)-1])
			c := collapse(t)
			if c == "" {
				if lead || trail {
					pendingSpace = true
				}
				continue
			}
			var empty, endsBlank bool
			if inLink {
				cur := linkText.String()
				empty, endsBlank = cur == "", strings.HasSuffix(cur, "\n") || strings.HasSuffix(cur, " ")
			} else {
				empty, endsBlank = b.Len() == 0, b.endsWith('\n') || b.endsWith(' ')
			}
			if (lead || pendingSpace) && !empty && !endsBlank {
				write(" ")
			}
			write(c)
			pendingSpace = trail
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' }

func collapse(s string) string { return strings.Join(strings.Fields(s), " ") }

func absLink(base *url.URL, href string) string {
	href = strings.TrimSpace(href)
	if href == "" || strings.HasPrefix(href, "#") {
		return ""
	}
	u, err := url.Parse(href)
	if err != nil {
		return ""
	}
	if base != nil {
		u = base.ResolveReference(u)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return ""
	}
	return u.String()
}

// textBuf is the converter's output: a byte slice that can look at and trim its own tail
// without copying (a strings.Builder would need String() for that, quadratic on big pages).
type textBuf struct{ buf []byte }

func (t *textBuf) Len() int             { return len(t.buf) }
func (t *textBuf) writeString(s string) { t.buf = append(t.buf, s...) }
func (t *textBuf) writeByte(c byte)     { t.buf = append(t.buf, c) }
func (t *textBuf) endsWith(c byte) bool { return len(t.buf) > 0 && t.buf[len(t.buf)-1] == c }
func (t *textBuf) trimRight(c byte) {
	for t.endsWith(c) {
		t.buf = t.buf[:len(t.buf)-1]
	}
}
func (t *textBuf) trailing(c byte) (n int) {
	for i := len(t.buf) - 1; i >= 0 && t.buf[i] == c; i-- {
		n++
	}
	return n
}
