// Package vendorkey reads a vendor's API key from the environment for the providers that
// fall back to it, and only when the request goes to that vendor's own endpoint: a key meant
// for one vendor must never reach a relay or another server configured as baseUrl.
package vendorkey

import (
	"net/url"
	"os"
	"strings"
)

// FromEnv returns the first non-empty variable of vars when baseURL is empty or on the host of
// defaultURL, and "" otherwise.
func FromEnv(baseURL, defaultURL string, vars ...string) string {
	if baseURL != "" {
		u, err := url.Parse(baseURL)
		d, _ := url.Parse(defaultURL)
		if err != nil || d == nil || !strings.EqualFold(u.Hostname(), d.Hostname()) {
			return ""
		}
	}
	for _, v := range vars {
		if k := os.Getenv(v); k != "" {
			return k
		}
	}
	return ""
}
