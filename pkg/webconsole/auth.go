package webconsole

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// TokenFile is the file in the data directory that holds the generated login token.
const TokenFile = "console.token"

// LoadToken returns the login token: configured when set, else the one in
// dataDir/console.token, which it creates (32 random bytes, hex, mode 0600) on first use. A
// token file that others can read is refused: whoever reads it reads every chat.
func LoadToken(dataDir, configured string) (string, error) {
	if t := strings.TrimSpace(configured); t != "" {
		if len(t) < 16 {
			return "", errors.New("webconsole: console.token must have at least 16 characters")
		}
		return t, nil
	}
	path := filepath.Join(dataDir, TokenFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		st, err := os.Stat(path)
		if err != nil {
			return "", err
		}
		if st.Mode().Perm()&0o077 != 0 {
			return "", fmt.Errorf("webconsole: %s is readable by others (mode %v); chmod 600 it", path, st.Mode().Perm())
		}
		if t := strings.TrimSpace(string(b)); len(t) >= 16 {
			return t, nil
		}
		return "", fmt.Errorf("webconsole: %s holds no token; delete it to generate one", path)
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("webconsole: read %s: %w", path, err)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	t := hex.EncodeToString(raw[:])
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("webconsole: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return LoadToken(dataDir, "") // another process wrote it first
	}
	if err != nil {
		return "", fmt.Errorf("webconsole: create %s: %w", path, err)
	}
	if _, err := f.WriteString(t + "\n"); err != nil {
		f.Close()
		return "", err
	}
	return t, f.Close()
}

// IsLoopback reports whether addr (host:port) binds only to the loopback interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// cookieName is the session cookie. Its value is nonce "." HMAC(token, nonce): any replica that
// knows the token checks it without shared state, and changing the token logs everyone out.
const cookieName = "agentbus_console"

type auth struct{ token []byte }

func (a auth) mac(purpose, nonce string) string {
	m := hmac.New(sha256.New, a.token)
	m.Write([]byte(purpose + ":" + nonce))
	return hex.EncodeToString(m.Sum(nil))
}

// tokenOK compares in constant time.
func (a auth) tokenOK(t string) bool {
	return t != "" && subtle.ConstantTimeCompare([]byte(t), a.token) == 1
}

func (a auth) newCookie() *http.Cookie {
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	nonce := hex.EncodeToString(raw[:])
	return &http.Cookie{Name: cookieName, Value: nonce + "." + a.mac("session", nonce), Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode}
}

// session returns the nonce of a valid session cookie, or "".
func (a auth) session(r *http.Request) string {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return ""
	}
	nonce, mac, ok := strings.Cut(c.Value, ".")
	if !ok || nonce == "" || !hmac.Equal([]byte(mac), []byte(a.mac("session", nonce))) {
		return ""
	}
	return nonce
}

// csrf is the form token of a session: tied to its cookie, so a page from another session (or
// another site) cannot post.
func (a auth) csrf(nonce string) string { return a.mac("csrf", nonce)[:32] }

func (a auth) csrfOK(r *http.Request, nonce string) bool {
	got := r.PostFormValue("csrf")
	return nonce != "" && got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(a.csrf(nonce))) == 1
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if t, ok := strings.CutPrefix(h, "Bearer "); ok {
		return strings.TrimSpace(t)
	}
	return ""
}
