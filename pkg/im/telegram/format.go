package telegram

import (
	"html"
	"regexp"
	"strings"
)

// HTML renders a reply's Markdown as Telegram HTML (parse_mode HTML). Every character of the
// text is escaped first and only balanced tags are added afterwards, so no user or model
// text can make the parse fail: fenced code blocks become <pre><code>, `inline code`
// <code>, **bold** <b>, *italic* / _italic_ <i>, ~~strike~~ <s> and [text](http...) links
// <a href>. Markup that does not pair up stays as the literal characters it was.
func HTML(md string) string {
	var b strings.Builder
	lines := strings.Split(md, "\n")
	inFence := false
	lang := ""
	var code []string
	for i, line := range lines {
		trim := strings.TrimSpace(line)
		if strings.HasPrefix(trim, "```") {
			if !inFence {
				inFence, lang, code = true, strings.TrimSpace(strings.TrimPrefix(trim, "```")), nil
				continue
			}
			inFence = false
			writeCode(&b, lang, code)
			if i < len(lines)-1 {
				b.WriteByte('\n')
			}
			continue
		}
		if inFence {
			code = append(code, line)
			continue
		}
		b.WriteString(inline(line))
		if i < len(lines)-1 {
			b.WriteByte('\n')
		}
	}
	if inFence { // an unclosed fence: still a code block, closed here
		writeCode(&b, lang, code)
	}
	return b.String()
}

func writeCode(b *strings.Builder, lang string, code []string) {
	if lang != "" && langOK.MatchString(lang) {
		b.WriteString(`<pre><code class="language-` + lang + `">`)
	} else {
		b.WriteString("<pre><code>")
	}
	b.WriteString(html.EscapeString(strings.Join(code, "\n")))
	b.WriteString("</code></pre>")
}

var (
	langOK     = regexp.MustCompile(`^[A-Za-z0-9_+-]{1,20}$`)
	inlineCode = regexp.MustCompile("`([^`\n]+)`")
	link       = regexp.MustCompile(`\[([^\]\n<>]+)\]\((https?://[^\s)<>"]+)\)`)
	bold       = regexp.MustCompile(`\*\*([^*\n<>]+)\*\*`)
	italic     = regexp.MustCompile(`(^|[\s(])[*_]([^*_\s<>][^*_\n<>]*?)[*_]($|[\s).,!?:;])`)
	strike     = regexp.MustCompile(`~~([^~\n<>]+)~~`)
)

// inline renders one line outside code fences. Code spans are cut out first so that markup
// inside them stays literal.
func inline(line string) string {
	var b strings.Builder
	for {
		loc := inlineCode.FindStringSubmatchIndex(line)
		if loc == nil {
			b.WriteString(emphasis(line))
			return b.String()
		}
		b.WriteString(emphasis(line[:loc[0]]))
		b.WriteString("<code>" + html.EscapeString(line[loc[2]:loc[3]]) + "</code>")
		line = line[loc[1]:]
	}
}

// emphasis renders escaped text. Every literal '<' and '>' is escaped before any tag is
// added, so a '<' in the string is always one of ours: the match groups exclude '<' and '>',
// which keeps each new tag pair from enclosing part of another, and links are cut out first
// so no emphasis crosses a link's edge. The result is always balanced.
func emphasis(s string) string {
	s = html.EscapeString(s)
	var b strings.Builder
	for {
		loc := link.FindStringSubmatchIndex(s)
		if loc == nil {
			b.WriteString(styles(s))
			return b.String()
		}
		b.WriteString(styles(s[:loc[0]]))
		// The URL was escaped with the rest; in an attribute, escaped is what HTML wants.
		b.WriteString(`<a href="` + s[loc[4]:loc[5]] + `">` + styles(s[loc[2]:loc[3]]) + "</a>")
		s = s[loc[1]:]
	}
}

func styles(s string) string {
	s = bold.ReplaceAllString(s, "<b>$1</b>")
	s = strike.ReplaceAllString(s, "<s>$1</s>")
	return italic.ReplaceAllString(s, "$1<i>$2</i>$3")
}
