package webconsole_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/agentbus/agentbus/internal/testwait"
)

// chromiumPath is Debian's chromium (.ci/run installs it).
const chromiumPath = "/usr/bin/chromium"

// browser starts a headless Chromium with a fresh profile and returns a tab context. The test
// is skipped, saying why, only when Chromium is not installed.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("browser tests need Chromium at %s (Debian: apt-get install chromium): %v", chromiumPath, err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("lang", "en-US"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	// The first action starts the browser, which lives as long as the context of that call.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// shots is where screenshots go: $AGENTBUS_SCREENSHOTS (docs/console.md: the committed ones
// are made with AGENTBUS_SCREENSHOTS=../../docs/console), else a temporary directory.
func shots(t *testing.T) string {
	if d := os.Getenv("AGENTBUS_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if len(buf) < 8 || string(buf[1:4]) != "PNG" {
		t.Fatalf("screenshot %s is not a PNG", name)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

// poll waits until the JavaScript expression is true in the page. It evaluates it again and
// again rather than with chromedp.Poll, because a click's navigation replaces the page (and
// its JavaScript context) under a running poll.
func poll(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	testwait.Eventually(t, waitMargin, func() error {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		if err == nil && ok {
			return nil
		}
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + (document.body ? document.body.innerText : "")`))
		return fmt.Errorf("waiting for %s (error %v); page text:\n%.3000s", what, err, text)
	})
}

func text(t *testing.T, ctx context.Context, expr string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return s
}

// The console in a real browser against a running pipeline: log in with the token, open a
// session and read a tool call and its result in the turn's chain, watch a new turn arrive
// live (its reply dead-lettered), fork the conversation against the second model and see both
// answers side by side, retry the dead letter. It writes screenshots of the main pages.
func TestBrowser(t *testing.T) {
	ctx := browser(t)
	dir := shots(t)
	pl := newPipeline(t, script1, script2, "")
	pl.waitTool(t, "user_profile")
	pl.post(t, "m1", "alice", "remember that I live in Paris")
	pl.cb.wait(t, 1)
	pl.post(t, "m2", "alice", "what should I pack for the weekend?")
	pl.cb.wait(t, 2)
	pl.post(t, "m3", "bob", "hello there")
	pl.cb.wait(t, 3)
	sk := key("alice").String()

	// Without the token every page the browser opens is the login form, and none shows a
	// session's content (the server answers 401; TestEveryPageAndAPIAnswers401WithoutToken
	// checks the codes of every route).
	for _, page := range []string{"/", "/sessions", "/sessions/" + url.PathEscape(sk), "/deadletters", "/config"} {
		if err := chromedp.Do(ctx, chromedp.Navigate(pl.url+page)); err != nil {
			t.Fatal(err)
		}
		poll(t, ctx, "the login form at "+page, `document.querySelector("section.login input[name=token]") !== null && !document.body.innerText.includes("Paris") && !document.body.innerText.includes("alice")`)
	}

	// Log in: the token URL sets the cookie and drops the token from the address.
	if err := chromedp.Do(ctx, chromedp.Navigate(pl.url+"/?token="+testToken)); err != nil {
		t.Fatal(err)
	}
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(loc, "token") || !strings.HasSuffix(loc, "/") {
		t.Fatalf("after login the address is %s", loc)
	}
	poll(t, ctx, "the overview", `document.querySelector("h1") && document.querySelector("h1").innerText == "Overview" && document.getElementById("turns-today").innerText != "0"`)
	poll(t, ctx, "the role replicas", `document.querySelectorAll("#replicas tr").length >= 5 && document.getElementById("replicas").innerText.includes("turn-worker")`)
	screenshot(t, ctx, dir, "overview")

	if err := chromedp.Do(ctx, chromedp.Navigate(pl.url+"/sessions")); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the session list", `document.querySelectorAll("#sessions tr").length == 3`)
	screenshot(t, ctx, dir, "sessions")

	// Open alice's session from the list.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`a[href="/sessions/%s"]`, url.PathEscape(sk))))); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "alice's turns", `document.querySelectorAll("article.turn").length == 2`)
	if got := text(t, ctx, `document.querySelector("li.toolcall .toolname").innerText`); got != "user_profile" {
		t.Errorf("tool call in the chain: %q", got)
	}
	if got := text(t, ctx, `document.querySelector("li.toolcall pre.args").innerText`); !strings.Contains(got, `"Paris"`) {
		t.Errorf("tool call arguments: %q", got)
	}
	if got := text(t, ctx, `document.querySelector("li.toolcall pre.result").innerText`); !strings.Contains(got, "Paris") {
		t.Errorf("tool result: %q", got)
	}
	chain := text(t, ctx, `Array.from(document.querySelector("article.turn ol.chain").children).map(li => li.className).join(" ")`)
	if chain != "inbound modelcall toolcall modelcall reply" {
		t.Errorf("the first turn's chain is %q, want inbound → model call → tool call → model call → reply", chain)
	}
	poll(t, ctx, "the live stream", `document.getElementById("live").classList.contains("on")`)
	screenshot(t, ctx, dir, "session")

	// A new turn arrives live, without a reload; the platform rejects its reply.
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.__notReloaded = true`)); err != nil {
		t.Fatal(err)
	}
	pl.cb.reject.Store(true)
	pl.post(t, "m4", "alice", "is it going to rain?")
	poll(t, ctx, "the new turn, live", `document.querySelectorAll("article.turn").length == 3 && document.body.innerText.includes("m1: is it going to rain?")`)
	poll(t, ctx, "its reply dead-lettered", `Array.from(document.querySelectorAll("article.turn")).pop().querySelector(".reply .s-dead-lettered") != null`)
	if notReloaded, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__notReloaded === true`)); err != nil || !notReloaded {
		t.Errorf("the page was reloaded (%v)", err)
	}
	screenshot(t, ctx, dir, "session-live-deadletter")

	// Fork from the first turn against the second model.
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS(`form#fork select`), "fake2/m2"),
		chromedp.Click(chromedp.CSS(`article.turn .forkrow button`)),
	); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the fork page", `location.pathname.startsWith("/sessions/fork:")`)
	poll(t, ctx, "both answers side by side", `document.querySelectorAll("#compare td.forkans").length == 3 &&
		Array.from(document.querySelectorAll("#compare td.forkans")).every(td => td.innerText.includes("m2 answers:"))`)
	// The live stream swaps the turn list; the comparison is rendered with the page: reload it once all three turns are in.
	cmp := text(t, ctx, `document.getElementById("compare").innerText`)
	for _, want := range []string{"saved. the tool said", "m1: what should I pack", "m2 answers: remember that I live in Paris", "m2 answers: is it going to rain?"} {
		if !strings.Contains(cmp, want) {
			t.Errorf("comparison lacks %q:\n%s", want, cmp)
		}
	}
	screenshot(t, ctx, dir, "fork")
	if got := len(pl.cb.wait(t, 3)); got != 3 {
		t.Errorf("%d replies reached the platform; the fork must post none", got)
	}

	// Retry the dead letter once the platform takes replies again.
	pl.cb.reject.Store(false)
	if err := chromedp.Do(ctx, chromedp.Navigate(pl.url+"/deadletters")); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the dead letter", `document.querySelectorAll("article.deadletter").length == 1`)
	screenshot(t, ctx, dir, "deadletters")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`article.deadletter button.retry`))); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the empty dead-letter list", `document.getElementById("no-deadletters") != null`)
	if got := pl.cb.wait(t, 4); got[3] != "m1: is it going to rain?" {
		t.Errorf("the retried reply: %q", got)
	}

	if err := chromedp.Do(ctx, chromedp.Navigate(pl.url+"/config")); err != nil {
		t.Fatal(err)
	}
	cfgText := text(t, ctx, `document.querySelector("pre.config").innerText`)
	for _, secret := range []string{apiKey1, apiKey2, botSecret, testToken} {
		if strings.Contains(cfgText, secret) {
			t.Errorf("/config shows %q", secret)
		}
	}
	screenshot(t, ctx, dir, "config")

	// Chinese, and a phone's width.
	if err := chromedp.Do(ctx, chromedp.Navigate(pl.url+"/?lang=zh")); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the Chinese overview", `document.querySelector("h1").innerText == "概览"`)
	screenshot(t, ctx, dir, "overview-zh")
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Navigate(pl.url+"/sessions/"+url.PathEscape(sk))); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the session at phone width", `document.querySelectorAll("article.turn").length == 3`)
	overflow, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`))
	if err != nil {
		t.Fatal(err)
	}
	if overflow {
		t.Errorf("the session page is wider than a phone's screen")
	}
	screenshot(t, ctx, dir, "session-phone-zh")
}
