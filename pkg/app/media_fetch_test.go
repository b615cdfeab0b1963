package app_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbus/agentbus/internal/fakeopenai"
)

// TestImageURLThatFailsIsANote (issue 37): an image URL that answers 404 with an HTML error page,
// or 200 with a page that is no image, reaches a vision model as a text note
// ("[image could not be fetched: HTTP 404]"), never as an image block of the page (a real
// provider rejects the whole request); a real PNG by URL still arrives as an image, with the
// type its bytes say.
func TestImageURLThatFailsIsANote(t *testing.T) {
	host := http.NewServeMux()
	host.HandleFunc("/missing.png", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, "<!doctype html><html><body><h1>404 Not Found</h1></body></html>")
	})
	host.HandleFunc("/login.png", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png") // says image, is a page
		fmt.Fprint(w, "<html><body>please log in</body></html>")
	})
	host.HandleFunc("/real.png", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(tinyPNG)
	})
	srv := httptest.NewServer(host)
	t.Cleanup(srv.Close)
	pl := newPipeline(t, fakeopenai.Echo, pipelineOpts{vision: true, agentYAML: "    webFetch: {allowPrivate: true}\n"})

	cases := []struct {
		name, path string
		note       string // in the model's last user message
		image      bool
	}{
		{"404 page", "/missing.png", "[image could not be fetched: HTTP 404]", false},
		{"200 page that is no image", "/login.png", "[image could not be fetched: not an image", false},
		{"real image", "/real.png", "", true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(pl.model.Requests())
			id := fmt.Sprintf("img-url-%d", i)
			pl.postSegments(id, seg("text", "text", "what is this?"), seg("image", "url", srv.URL+tc.path))
			if _, err := pl.cb.waitFor(1, waitMargin, func(r reply) bool { return r.ReplyTo == id }); err != nil {
				t.Fatal(err)
			}
			reqs := pl.model.Requests()[before:]
			if len(reqs) != 1 {
				t.Fatalf("%d model requests, want 1", len(reqs))
			}
			body := reqs[0].Body
			if bytes.Contains(body, []byte("data:text/html")) || bytes.Contains(body, []byte("data:text/plain")) {
				t.Fatalf("a page went to the model as an image: %.400s", body)
			}
			hasImage := bytes.Contains(body, []byte(`"image_url"`))
			if hasImage != tc.image {
				t.Errorf("image block in the request = %v, want %v: %.400s", hasImage, tc.image, body)
			}
			if tc.image && !bytes.Contains(body, []byte("data:image/png;base64,")) {
				t.Errorf("the image is not sent as image/png (sniffed from its bytes): %.400s", body)
			}
			if last := reqs[0].LastUser(); tc.note != "" && !strings.Contains(last, tc.note) {
				t.Errorf("the model reads %q, want the note %q", last, tc.note)
			}
		})
	}
}
