package llm

import (
	"regexp"
	"strings"
)

// Redacted replaces every secret Redact removes.
const Redacted = "[REDACTED]"

// credentialShapes are tokens that are credentials whatever they belong to: an Authorization
// header value (Bearer, Basic, Token), a key header or parameter (x-api-key, x-goog-api-key,
// api-key, api_key, key=, access_token=, token=), and the well-known key formats (OpenAI and
// Anthropic sk-…, Google AIza…, GitHub gh?_…, Slack xox?-…, AWS AKIA…, JWTs).
var credentialShapes = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\b(bearer|basic|token)(\s+|%20)[A-Za-z0-9._~+/=\-]{6,}`),
	regexp.MustCompile(`(?i)\b((?:x-)?(?:goog-)?api[-_]?key|authorization|access[-_]?token|refresh[-_]?token|client[-_]?secret|password|secret|token)("?\s*[:=]\s*"?)[^\s",;&}]{4,}`),
	regexp.MustCompile(`(?i)([?&](?:key|api_key|apikey|access_token|token)=)[^&\s"']+`),
	regexp.MustCompile(`\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{8,}`),
	regexp.MustCompile(`\bAIza[0-9A-Za-z_\-]{20,}`),
	regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{20,}`),
	regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9\-]{10,}`),
	regexp.MustCompile(`\bAKIA[0-9A-Z]{16}\b`),
	regexp.MustCompile(`\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}`),
}

// minSecret is the shortest configured secret redacted verbatim: shorter strings would hit
// ordinary words.
const minSecret = 6

// Redact returns s with every one of secrets (longest first, each at least 6 bytes) and every
// credential-shaped token replaced by Redacted. A key/header name before a value is kept
// ("x-api-key: [REDACTED]"), so the text still says what was wrong.
func Redact(s string, secrets ...string) string {
	if s == "" {
		return s
	}
	var keep []string
	for _, sec := range secrets {
		if sec = strings.TrimSpace(sec); len(sec) >= minSecret && strings.Contains(s, sec) {
			keep = append(keep, sec)
		}
	}
	// Longest first, so a secret that contains another is removed whole.
	for i := 1; i < len(keep); i++ {
		for j := i; j > 0 && len(keep[j]) > len(keep[j-1]); j-- {
			keep[j], keep[j-1] = keep[j-1], keep[j]
		}
	}
	for _, sec := range keep {
		s = strings.ReplaceAll(s, sec, Redacted)
	}
	for i, re := range credentialShapes {
		switch i {
		case 0, 1, 2: // keep the scheme / name / parameter, drop the value
			s = re.ReplaceAllStringFunc(s, func(m string) string {
				sub := re.FindStringSubmatch(m)
				value := m[len(sub[1]):] // pattern 2: one group, the parameter
				if i != 2 {
					value = m[len(sub[1])+len(sub[2]):] // name, separator, value
				}
				switch strings.ToLower(value) {
				case "bearer", "basic", "token", strings.ToLower(Redacted):
					return m // the scheme before a value pattern 0 handles, or done already
				}
				if strings.HasPrefix(value, Redacted) {
					return m
				}
				return m[:len(m)-len(value)] + Redacted
			})
		default:
			s = re.ReplaceAllString(s, Redacted)
		}
	}
	return s
}

// redactMessage redacts the error text of a terminal message with the secrets the call knew:
// the API key, every header value (options' and model's) and opts.Secrets.
func redactMessage(m *Message, model *Model, opts *StreamOptions) {
	if m == nil || m.ErrorMessage == "" {
		return
	}
	secrets := make([]string, 0, 1+len(opts.Headers)+len(model.Headers)+len(opts.Secrets))
	secrets = append(secrets, opts.APIKey)
	for _, v := range opts.Headers {
		secrets = append(secrets, v)
	}
	for _, v := range model.Headers {
		secrets = append(secrets, v)
	}
	secrets = append(secrets, opts.Secrets...)
	m.ErrorMessage = Redact(m.ErrorMessage, secrets...)
}
