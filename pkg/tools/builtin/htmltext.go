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
	var b strings.Builder
	skip := 0 // depth inside skipped elements
	pre := 0  // depth inside <pre>
	inTitle := false
	var href string
	var linkText strings.Builder
	inLink := false
	spaceBeforeLink := false
	pendingSpace := false
	newline := func(n int) {
		s := b.String()
		trail := len(s) - len(strings.TrimRight(s, "\n"))
		if len(s) == 0 {
			return
		}
		// Remove trailing spaces before the newline.
		if t := strings.TrimRight(s, " "); len(t) != len(s) {
			b.Reset()
			b.WriteString(t)
		}
		for ; trail < n; trail++ {
			b.WriteByte('\n')
		}
		pendingSpace = false
	}
	write := func(s string) {
		if inLink {
			linkText.WriteString(s)
			return
		}
		b.WriteString(s)
	}
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			out := strings.TrimSpace(b.String())
			return strings.TrimSpace(title), out
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
						b.WriteString(strings.Repeat("#", int(name[1]-'0')) + " ")
					case "li":
						b.WriteString("- ")
					case "hr":
						b.WriteString("---")
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
					if spaceBeforeLink && t != "" && b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") && !strings.HasSuffix(b.String(), " ") {
						b.WriteByte(' ')
					}
					switch {
					case t != "" && link != "":
						b.WriteString("[" + t + "](" + link + ")")
					case t != "":
						b.WriteString(t)
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
			cur := b.String()
			if inLink {
				cur = linkText.String()
			}
			if (lead || pendingSpace) && len(cur) > 0 && !strings.HasSuffix(cur, "\n") && !strings.HasSuffix(cur, " ") {
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
