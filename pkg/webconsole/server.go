package webconsole

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/dlq"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/presence"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Replica is one live role replica as the overview lists it.
type Replica struct {
	Role     string
	ID       string
	Host     string
	PID      int
	Version  string
	Started  time.Time
	Updated  time.Time // when it last announced itself
	Sessions int       // sessions a turn worker owns (-1: unknown)
	Adapters []AdapterState
}

// AdapterState is one IM adapter's connection as a replica reports it.
type AdapterState struct {
	Name  string
	State string
	Error string
}

// presenceReplicas reads KV presence, where every role process announces itself.
func presenceReplicas(ctx context.Context, js jetstream.JetStream) ([]Replica, error) {
	recs, err := presence.List(ctx, js)
	if err != nil {
		return nil, err
	}
	out := make([]Replica, 0, len(recs))
	for _, r := range recs {
		rp := Replica{Role: r.Role, ID: r.ID, Host: r.Host, PID: r.PID, Version: r.Version, Started: r.Started, Updated: r.Updated, Sessions: r.Sessions}
		if r.Revision != "" && !strings.Contains(rp.Version, r.Revision) {
			rp.Version += " (" + r.Revision + ")"
		}
		for _, a := range r.Adapters {
			name := a.Platform + "/" + a.Bot
			if a.Part != "" {
				name += " " + a.Part
			}
			rp.Adapters = append(rp.Adapters, AdapterState{Name: name, State: a.State, Error: a.Error})
		}
		out = append(out, rp)
	}
	return out, nil
}

// Options configure a console Handler.
type Options struct {
	// JS is the bus. Required.
	JS jetstream.JetStream
	// Token is the login token (LoadToken). Required.
	Token string
	// Config is the effective configuration /config shows (redacted) and where the fork form
	// takes its model choices from; nil shows none.
	Config *config.Config
	// DeadLetters lists, retries and discards dead letters; nil uses pkg/dlq on JS.
	DeadLetters DeadLetters
	// Replicas lists the live role replicas for the overview; nil reads KV presence
	// (pkg/presence).
	Replicas func(ctx context.Context) ([]Replica, error)
	// Log receives request errors (default slog.Default()).
	Log *slog.Logger
}

// Server is the console's HTTP handler. It holds no state beyond its options: every page reads
// the bus, so any number of consoles serve the same deployment.
type Server struct {
	o     Options
	r     *Reader
	auth  auth
	pages map[string]*template.Template
	mux   *http.ServeMux
	cop   *http.CrossOriginProtection
}

// New builds the console. ctx bounds binding the streams only.
func New(ctx context.Context, o Options) (*Server, error) {
	if o.JS == nil {
		return nil, errors.New("webconsole: Options.JS is required")
	}
	if len(o.Token) < 16 {
		return nil, errors.New("webconsole: Options.Token must have at least 16 characters")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	r, err := NewReader(ctx, o.JS)
	if err != nil {
		return nil, err
	}
	if o.DeadLetters == nil {
		st, err := dlq.Open(ctx, o.JS)
		if err != nil {
			return nil, fmt.Errorf("webconsole: %w", err)
		}
		o.DeadLetters = storeDeadLetters{s: st}
	}
	if o.Replicas == nil {
		o.Replicas = func(ctx context.Context) ([]Replica, error) { return presenceReplicas(ctx, o.JS) }
	}
	s := &Server{o: o, r: r, auth: auth{token: []byte(o.Token)}, mux: http.NewServeMux(), cop: http.NewCrossOriginProtection()}
	if err := s.parse(); err != nil {
		return nil, err
	}
	s.routes()
	return s, nil
}

// Reader returns the server's bus reader.
func (s *Server) Reader() *Reader { return s.r }

func fmtWhen(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func fmtUSD(f float64) string { return "$" + strconv.FormatFloat(f, 'f', 6, 64) }

func fmtMs(ms int64) string {
	if ms >= 10000 {
		return strconv.FormatFloat(float64(ms)/1000, 'f', 1, 64) + " s"
	}
	return strconv.FormatInt(ms, 10) + " ms"
}

var funcs = template.FuncMap{
	"when":   fmtWhen,
	"clock":  func(t time.Time) string { return t.Local().Format("15:04:05") },
	"usd":    fmtUSD,
	"ms":     fmtMs,
	"path":   url.PathEscape,
	"query":  url.QueryEscape,
	"uptime": func(t time.Time) string { return time.Since(t).Round(time.Second).String() },
	"add":    func(a, b int) int { return a + b },
	"mul":    func(a, b int) int { return a * b },
}

func (s *Server) parse() error {
	s.pages = map[string]*template.Template{}
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/parts.html")
	if err != nil {
		return fmt.Errorf("webconsole: parse layout: %w", err)
	}
	for _, p := range []string{"overview", "sessions", "session", "deadletters", "config", "login"} {
		t, err := template.Must(layout.Clone()).ParseFS(templateFS, "templates/"+p+".html")
		if err != nil {
			return fmt.Errorf("webconsole: parse %s: %w", p, err)
		}
		s.pages[p] = t
	}
	return nil
}

func (s *Server) routes() {
	static, _ := fs.Sub(staticFS, "static")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	page := func(pattern string, h func(w http.ResponseWriter, r *http.Request, d *pageData)) {
		s.mux.Handle(pattern, s.authed(func(w http.ResponseWriter, r *http.Request, d *pageData) { h(w, r, d) }))
	}
	page("GET /{$}", s.overview)
	page("GET /sessions", s.sessions)
	page("GET /sessions/{key}", s.session)
	page("GET /sessions/{key}/turns", s.sessionTurns)
	page("GET /sessions/{key}/events", s.sessionEvents)
	page("POST /sessions/{key}/fork", s.fork)
	page("GET /deadletters", s.deadLetters)
	page("POST /deadletters/{id}/{op}", s.deadLetterOp)
	page("GET /config", s.config)
	page("GET /api/overview", s.apiOverview)
	page("GET /api/sessions", s.apiSessions)
	page("GET /api/sessions/{key}", s.apiSession)
	page("GET /api/deadletters", s.apiDeadLetters)
	page("GET /api/config", s.apiConfig)
	page("/", func(w http.ResponseWriter, r *http.Request, d *pageData) { http.NotFound(w, r) })
}

// ServeHTTP serves the console.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	s.mux.ServeHTTP(w, r)
}

// pageData is what every template gets.
type pageData struct {
	L       map[string]string
	Lang    string
	Other   string
	Nav     string
	CSRF    string
	Path    string
	Title   string
	Error   string
	Body    any
	Models  []string
	Version string
}

// authed lets a request through with a valid session cookie, a Bearer token or ?token=. A
// valid ?token= sets the session cookie, and a page request is redirected to its URL without
// the token (so it stays out of history and logs). Everything else answers 401.
func (s *Server) authed(h func(w http.ResponseWriter, r *http.Request, d *pageData)) http.Handler {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lang := language(r)
		if q := r.URL.Query().Get("lang"); q == lang {
			http.SetCookie(w, &http.Cookie{Name: "lang", Value: lang, Path: "/", SameSite: http.SameSiteStrictMode, MaxAge: 365 * 24 * 3600})
		}
		d := &pageData{L: messages[lang], Lang: lang, Other: otherLanguage(lang), Path: r.URL.Path}
		nonce := s.auth.session(r)
		viaBearer := false
		switch {
		case nonce != "":
		case s.auth.tokenOK(bearer(r)):
			viaBearer = true
		case s.auth.tokenOK(r.URL.Query().Get("token")):
			c := s.auth.newCookie()
			http.SetCookie(w, c)
			nonce, _, _ = strings.Cut(c.Value, ".")
			if r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, "/api/") && !strings.HasSuffix(r.URL.Path, "/events") {
				u := *r.URL
				q := u.Query()
				q.Del("token")
				u.RawQuery = q.Encode()
				http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
				return
			}
		default:
			s.unauthorized(w, r, d)
			return
		}
		if r.Method == http.MethodPost && !viaBearer && !s.auth.csrfOK(r, nonce) {
			http.Error(w, "invalid or missing CSRF token: reload the page and try again", http.StatusForbidden)
			return
		}
		if nonce != "" {
			d.CSRF = s.auth.csrf(nonce)
		}
		h(w, r, d)
	})
	return s.cop.Handler(inner)
}

func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request, d *pageData) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="agentbus console"`)
	if strings.HasPrefix(r.URL.Path, "/api/") || strings.HasSuffix(r.URL.Path, "/events") || r.Method != http.MethodGet {
		http.Error(w, "401 unauthorized: open the URL with ?token= that the console printed, or send Authorization: Bearer <token>", http.StatusUnauthorized)
		return
	}
	d.Title = d.L["loginTitle"]
	s.render(w, http.StatusUnauthorized, "login", d)
}

func (s *Server) render(w http.ResponseWriter, code int, page string, d *pageData) {
	var b strings.Builder
	if err := s.pages[page].ExecuteTemplate(&b, "layout", d); err != nil {
		s.o.Log.Error("webconsole: render", "page", page, "err", err)
		http.Error(w, "render: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(b.String()))
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, events.ErrInvalid), errors.Is(err, ErrFork):
		code = http.StatusBadRequest
	case errors.Is(err, dlq.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, dlq.ErrNotRetryable), errors.Is(err, dlq.ErrBadID):
		code = http.StatusBadRequest
	case errors.Is(err, context.Canceled):
		return
	}
	if code == http.StatusInternalServerError {
		s.o.Log.Error("webconsole", "path", r.URL.Path, "err", err)
	}
	http.Error(w, err.Error(), code)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// ---- pages ----

type overviewBody struct {
	*Overview
	Replicas    []Replica
	ReplicasErr string
}

func (s *Server) overviewData(ctx context.Context) (*overviewBody, error) {
	o, err := s.r.Overview(ctx, time.Now())
	if err != nil {
		return nil, err
	}
	b := &overviewBody{Overview: o}
	rs, err := s.o.Replicas(ctx)
	if err != nil {
		// The rest of the overview is still worth showing; the page says what failed.
		b.ReplicasErr = err.Error()
	}
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].Role != rs[j].Role {
			return rs[i].Role < rs[j].Role
		}
		return rs[i].ID < rs[j].ID
	})
	b.Replicas = rs
	return b, nil
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request, d *pageData) {
	b, err := s.overviewData(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d.Nav, d.Title, d.Body = "overview", d.L["overview"], b
	s.render(w, http.StatusOK, "overview", d)
}

func (s *Server) apiOverview(w http.ResponseWriter, r *http.Request, d *pageData) {
	b, err := s.overviewData(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, b)
}

const pageSize = 25

func (s *Server) sessionPage(r *http.Request) (*SessionPage, error) {
	page, _ := strconv.Atoi(r.URL.Query().Get("page"))
	return s.r.Sessions(r.Context(), r.URL.Query().Get("q"), r.URL.Query().Get("text") != "", page, pageSize)
}

func (s *Server) sessions(w http.ResponseWriter, r *http.Request, d *pageData) {
	sp, err := s.sessionPage(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d.Nav, d.Title, d.Body = "sessions", d.L["sessions"], sp
	s.render(w, http.StatusOK, "sessions", d)
}

func (s *Server) apiSessions(w http.ResponseWriter, r *http.Request, d *pageData) {
	sp, err := s.sessionPage(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, sp)
}

type sessionBody struct {
	*Conversation
	Compare *Comparison
	KeyStr  string
}

func (s *Server) sessionData(r *http.Request) (*sessionBody, error) {
	sk, err := events.ParseSessionKey(r.PathValue("key"))
	if err != nil {
		return nil, err
	}
	c, err := s.r.Conversation(r.Context(), sk)
	if err != nil {
		return nil, err
	}
	b := &sessionBody{Conversation: c, KeyStr: sk.String()}
	if c.Fork != nil {
		if b.Compare, err = s.r.Compare(r.Context(), c); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func (s *Server) session(w http.ResponseWriter, r *http.Request, d *pageData) {
	b, err := s.sessionData(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d.Nav, d.Title, d.Body, d.Models = "sessions", b.KeyStr, b, s.models()
	s.render(w, http.StatusOK, "session", d)
}

// sessionTurns is the turn list alone: what the page swaps in when the live stream says the
// session changed.
func (s *Server) sessionTurns(w http.ResponseWriter, r *http.Request, d *pageData) {
	b, err := s.sessionData(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d.Body, d.Models = b, s.models()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := s.pages["session"].ExecuteTemplate(w, "turns", d); err != nil {
		s.o.Log.Error("webconsole: render turns", "err", err)
	}
}

func (s *Server) apiSession(w http.ResponseWriter, r *http.Request, d *pageData) {
	b, err := s.sessionData(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, b)
}

// models are the fork form's choices: the ai.agents bindings and every configured
// provider/model pair.
func (s *Server) models() []string {
	cfg := s.o.Config
	if cfg == nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	add := func(m string) {
		if m != "" && !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	for _, a := range cfg.AI.Agents {
		if a.Provider != "" && a.Model != "" {
			add(a.Provider + "/" + a.Model)
		}
	}
	for alias, p := range cfg.AI.Providers {
		for _, m := range p.Models {
			add(alias + "/" + m.ID)
		}
	}
	sort.Strings(out)
	return out
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request, d *pageData) {
	sk, err := events.ParseSessionKey(r.PathValue("key"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	fk, err := s.r.Fork(r.Context(), ForkRequest{From: sk, Turn: r.PostFormValue("turn"),
		Model: r.PostFormValue("model"), SystemPrompt: r.PostFormValue("systemPrompt")})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	http.Redirect(w, r, "/sessions/"+url.PathEscape(fk.String()), http.StatusSeeOther)
}

func (s *Server) deadLetters(w http.ResponseWriter, r *http.Request, d *pageData) {
	list, err := s.o.DeadLetters.List(r.Context(), 500)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d.Nav, d.Title, d.Body = "deadletters", d.L["deadletters"], list
	d.Error = r.URL.Query().Get("msg")
	s.render(w, http.StatusOK, "deadletters", d)
}

func (s *Server) apiDeadLetters(w http.ResponseWriter, r *http.Request, d *pageData) {
	list, err := s.o.DeadLetters.List(r.Context(), 500)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, list)
}

func (s *Server) deadLetterOp(w http.ResponseWriter, r *http.Request, d *pageData) {
	id := r.PathValue("id")
	var err error
	switch r.PathValue("op") {
	case "retry":
		err = s.o.DeadLetters.Retry(r.Context(), id)
	case "discard":
		err = s.o.DeadLetters.Discard(r.Context(), id)
	default:
		http.NotFound(w, r)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	http.Redirect(w, r, "/deadletters", http.StatusSeeOther)
}

func (s *Server) configText() (string, error) {
	if s.o.Config == nil {
		return "", nil
	}
	return RedactedYAML(s.o.Config)
}

func (s *Server) config(w http.ResponseWriter, r *http.Request, d *pageData) {
	txt, err := s.configText()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d.Nav, d.Title, d.Body = "config", d.L["config"], txt
	s.render(w, http.StatusOK, "config", d)
}

func (s *Server) apiConfig(w http.ResponseWriter, r *http.Request, d *pageData) {
	txt, err := s.configText()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/yaml; charset=utf-8")
	_, _ = w.Write([]byte(txt))
}
