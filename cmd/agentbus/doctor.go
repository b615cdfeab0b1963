package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/app"
	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/im/discord"
	imslack "github.com/agentbus/agentbus/pkg/im/slack"
	"github.com/agentbus/agentbus/pkg/im/telegram"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/models"
	"github.com/agentbus/agentbus/pkg/natsutil"
	"github.com/agentbus/agentbus/pkg/sandbox"
)

// Check levels of `agentbus doctor`.
const (
	checkOK   = "ok"
	checkWarn = "WARN"
	checkFail = "FAIL"
)

// check is one line of the doctor's report: what was checked, what was found, and (when it is
// not ok) what to do.
type check struct {
	level, name, detail, fix string
}

type doctor struct {
	checks []check
	hc     *http.Client
}

func (d *doctor) add(level, name, detail, fix string) {
	d.checks = append(d.checks, check{level, name, detail, fix})
}

func cmdDoctor(ctx context.Context, args []string, w io.Writer) error {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	path := fs.String("config", "", "config file (default ./agentbus.yml when present, else the built-in defaults)")
	bus := addBusFlags(fs)
	timeout := fs.Duration("timeout", 10*time.Second, "how long each network check may take")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `agentbus doctor — check what agentbus needs, one line per check with what to do when it fails:
the configuration, the bus and JetStream (streams, their limits), each provider (key present,
endpoint reachable, a model listed), each IM adapter's endpoint, the bash sandbox (bubblewrap),
the data directory's permissions and free disk. Exit status 1 when a check fails (WARN does not).

The bus is the one --nats / the data directory name (like agentbus status), else nats.url of
the config; a configuration with an embedded server that is not running skips the bus checks.

Usage:
  agentbus doctor [flags]

Flags:
`)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), clientEnvHelp+providerEnvHelp)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	d := &doctor{hc: &http.Client{Timeout: *timeout}}
	cfg := d.checkConfig(*path)
	if cfg != nil {
		d.checkBus(ctx, cfg, bus, *timeout)
		d.checkProviders(ctx, cfg, *timeout)
		d.checkAdapters(ctx, cfg)
		d.checkSandbox(cfg)
		d.checkDataDir(cfg)
		d.checkDisk(cfg)
	}
	failed := 0
	for _, c := range d.checks {
		line := fmt.Sprintf("%-4s  %s: %s", c.level, c.name, c.detail)
		if c.level != checkOK && c.fix != "" {
			line += " — " + c.fix
		}
		fmt.Fprintln(w, line)
		if c.level == checkFail {
			failed++
		}
	}
	if failed > 0 {
		fmt.Fprintf(w, "\n%d of %d checks failed\n", failed, len(d.checks))
		return errSilent
	}
	fmt.Fprintf(w, "\nall %d checks passed\n", len(d.checks))
	return nil
}

func (d *doctor) checkConfig(path string) *config.Config {
	cfg, err := loadConfig(path)
	if err != nil {
		d.add(checkFail, "config", oneLine(err.Error()), "fix the file (docs/configuration.md)")
		return nil
	}
	where := cfg.Path
	if where == "" {
		where = "built-in defaults (no agentbus.yml here)"
	}
	d.add(checkOK, "config", where, "")
	if len(cfg.MissingEnv) > 0 {
		d.add(checkFail, "config env", "the config refers to unset environment variables: "+strings.Join(cfg.MissingEnv, ", "),
			"export them (or use ${VAR:-default})")
	}
	if len(cfg.Reserved) > 0 {
		d.add(checkWarn, "config", oneLine(config.ReservedWarning(cfg.Reserved)), "")
	}
	return cfg
}

// checkBus connects like status does, else to nats.url; then JetStream, every stream and bucket
// of the wire contract, and their limits.
func (d *doctor) checkBus(ctx context.Context, cfg *config.Config, bus busFlags, timeout time.Duration) {
	var nc *nats.Conn
	var err error
	local := *bus.url != "" || fileExists(filepath.Join(*bus.dataDir, natsutil.CredentialsFile)) || fileExists(filepath.Join(*bus.dataDir, app.URLFile))
	switch {
	case local || cfg.NATS.Embedded || strings.TrimSpace(cfg.NATS.URL) == "":
		if !local && cfg.NATS.Embedded {
			d.add(checkWarn, "bus", "embedded server not running (no "+filepath.Join(*bus.dataDir, app.URLFile)+")",
				"start agentbus up, or pass --data DIR of a running one, to check the bus too")
			return
		}
		nc, err = bus.dial("agentbus doctor")
	default:
		cctx, cancel := context.WithTimeout(ctx, timeout)
		nc, err = natsutil.Connect(cctx, cfg.NATS, nats.Name("agentbus doctor"), nats.MaxReconnects(0))
		cancel()
	}
	if err != nil {
		d.add(checkFail, "bus", oneLine(err.Error()), "start the NATS server, or fix nats.url / credentials (--nats URL for another)")
		return
	}
	defer nc.Close()
	d.add(checkOK, "bus", "connected to "+redact(nc.ConnectedUrlRedacted())+" (nats-server "+nc.ConnectedServerVersion()+")", "")
	js, err := jetstream.New(nc)
	if err != nil {
		d.add(checkFail, "jetstream", err.Error(), "")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ai, err := js.AccountInfo(ctx)
	if err != nil {
		d.add(checkFail, "jetstream", oneLine(err.Error()), "enable JetStream on the server (jetstream {} in its config, or -js)")
		return
	}
	d.add(checkOK, "jetstream", fmt.Sprintf("%d streams, %s stored", ai.Streams, bytesText(ai.Store)), "")
	if lim := ai.Limits.MaxStore; lim > 0 && float64(ai.Store) > 0.9*float64(lim) {
		d.add(checkFail, "jetstream storage", fmt.Sprintf("%s of the account's %s used", bytesText(ai.Store), bytesText(uint64(lim))),
			"raise the account's max_file_store, or shorten retention (nats.*MaxAgeMs)")
	}
	spec := natsutil.SpecFromConfig(cfg.NATS)
	var missing, full []string
	for _, want := range spec.Streams() {
		s, err := js.Stream(ctx, want.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			missing = append(missing, want.Name)
			continue
		}
		if err != nil {
			d.add(checkFail, "stream "+want.Name, oneLine(err.Error()), "")
			continue
		}
		info := s.CachedInfo()
		c, st := info.Config, info.State
		if c.MaxBytes > 0 && float64(st.Bytes) > 0.9*float64(c.MaxBytes) {
			full = append(full, fmt.Sprintf("%s %s of max_bytes %s", want.Name, bytesText(st.Bytes), bytesText(uint64(c.MaxBytes))))
		}
		if c.MaxMsgs > 0 && float64(st.Msgs) > 0.9*float64(c.MaxMsgs) {
			full = append(full, fmt.Sprintf("%s %d of max_msgs %d", want.Name, st.Msgs, c.MaxMsgs))
		}
		if c.Retention == jetstream.WorkQueuePolicy && want.Retention != c.Retention {
			full = append(full, want.Name+" retention differs from the spec")
		}
	}
	for _, kv := range spec.KeyValues() {
		if _, err := js.KeyValue(ctx, kv.Bucket); errors.Is(err, jetstream.ErrBucketNotFound) {
			missing = append(missing, "KV "+kv.Bucket)
		}
	}
	switch {
	case len(missing) > 0:
		d.add(checkFail, "streams", "missing: "+strings.Join(missing, ", "), "run agentbus provision (or start a role with nats.provision: update)")
	case len(full) > 0:
		d.add(checkFail, "stream limits", strings.Join(full, "; "), "raise the limit or shorten retention; a full stream discards or refuses messages")
	default:
		d.add(checkOK, "streams", fmt.Sprintf("all %d streams and %d buckets present, within their limits", len(spec.Streams()), len(spec.KeyValues())), "")
	}
}

// checkProviders checks each configured provider: a key where one is needed, the endpoint
// answering its model listing, and at least one model listed.
func (d *doctor) checkProviders(ctx context.Context, cfg *config.Config, timeout time.Duration) {
	if len(cfg.AI.Providers) == 0 {
		d.add(checkWarn, "providers", "none configured: agentbus up uses a local Ollama, a key from the environment, or the demo model",
			"configure ai.providers (docs/providers.md)")
		return
	}
	aliases := make([]string, 0, len(cfg.AI.Providers))
	for a := range cfg.AI.Providers {
		aliases = append(aliases, a)
	}
	sort.Strings(aliases)
	for _, alias := range aliases {
		p := cfg.AI.Providers[alias]
		name := "provider " + alias
		switch p.API {
		case llm.APIOpenAICompletions, llm.APIOpenAIResponses, llm.APIAnthropicMessages, llm.APIGoogleGenerative, llm.APIOllamaChat:
		default:
			d.add(checkOK, name, "api "+p.API+": nothing to check over the network", "")
			continue
		}
		if p.API == "" {
			continue
		}
		key := p.APIKey
		if key == "" {
			key = models.EnvKey(alias, llm.ProviderSettings{API: p.API, BaseURL: p.BaseURL})
		}
		if key == "" && p.API != llm.APIOllamaChat {
			level, fix := checkFail, fmt.Sprintf("set ai.providers.%s.apiKey (e.g. ${%s}) or export %s", alias, envName(alias), envName(alias))
			if isLoopback(p.BaseURL) && (p.API == llm.APIOpenAICompletions || p.API == llm.APIOpenAIResponses) {
				level = checkWarn // a local OpenAI-compatible server (vLLM, LM Studio) often takes no key
			}
			d.add(level, name+" key", "no API key", fix)
		} else if p.API != llm.APIOllamaChat {
			d.add(checkOK, name+" key", "present", "")
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		ms, err := models.Discover(cctx, alias, p, models.DiscoverOptions{APIKey: key, HTTPClient: d.hc})
		cancel()
		switch {
		case err != nil:
			d.add(checkFail, name+" endpoint", oneLine(err.Error()), "check baseUrl/host, the network, and the key")
		case len(ms) == 0:
			d.add(checkFail, name+" models", "the endpoint lists no model", "pull or enable a model on that endpoint")
		default:
			ids := make([]string, 0, 3)
			for i := 0; i < len(ms) && i < 3; i++ {
				ids = append(ids, ms[i].ID)
			}
			more := ""
			if len(ms) > 3 {
				more = ", …"
			}
			d.add(checkOK, name+" endpoint", fmt.Sprintf("%d models listed (%s%s)", len(ms), strings.Join(ids, ", "), more), "")
		}
	}
}

func envName(alias string) string {
	b := []byte(strings.ToUpper(alias))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b) + "_API_KEY"
}

func isLoopback(u string) bool {
	pu, err := neturl.Parse(u)
	if err != nil {
		return false
	}
	h := pu.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// checkAdapters checks that each IM bot's platform endpoint (and each webhook bot's callback)
// answers HTTP at all; credentials are the adapter's to check when it connects (status, /readyz).
func (d *doctor) checkAdapters(ctx context.Context, cfg *config.Config) {
	type target struct{ name, url string }
	var ts []target
	for _, b := range cfg.IM.Webhook.Bots {
		if b.Callback != "" {
			ts = append(ts, target{"webhook/" + b.ID + " callback", b.Callback})
		}
	}
	for _, b := range cfg.IM.OneBot.Bots {
		if b.APIBase != "" {
			ts = append(ts, target{"onebot/" + b.ID, b.APIBase})
		}
	}
	for _, b := range cfg.IM.Telegram.Bots {
		ts = append(ts, target{"telegram/" + b.ID, or(b.APIBase, telegram.DefaultAPIBase)})
	}
	for _, b := range cfg.IM.Discord.Bots {
		ts = append(ts, target{"discord/" + b.ID, or(b.APIBase, discord.DefaultAPIBase)})
	}
	for _, b := range cfg.IM.Slack.Bots {
		ts = append(ts, target{"slack/" + b.ID, or(b.APIBase, imslack.DefaultAPIBase)})
	}
	for _, b := range cfg.IM.Matrix.Bots {
		ts = append(ts, target{"matrix/" + b.ID, b.Homeserver})
	}
	if len(ts) == 0 {
		d.add(checkOK, "adapters", "none configured besides the console (agentbus chat)", "")
		return
	}
	for _, t := range ts {
		u := t.url
		switch {
		case strings.HasPrefix(u, "ws://"):
			u = "http://" + strings.TrimPrefix(u, "ws://")
		case strings.HasPrefix(u, "wss://"):
			u = "https://" + strings.TrimPrefix(u, "wss://")
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			d.add(checkFail, "adapter "+t.name, "bad URL "+redact(t.url)+": "+err.Error(), "fix the URL in im:")
			continue
		}
		resp, err := d.hc.Do(req)
		if err != nil {
			d.add(checkFail, "adapter "+t.name, "cannot reach "+redact(t.url)+": "+oneLine(unwrapURL(err).Error()),
				"check the URL, DNS, firewall or proxy (HTTPS_PROXY)")
			continue
		}
		_ = resp.Body.Close()
		d.add(checkOK, "adapter "+t.name, redact(t.url)+" answers (HTTP "+fmt.Sprint(resp.StatusCode)+")", "")
	}
}

func unwrapURL(err error) error {
	var ue *neturl.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (d *doctor) checkSandbox(cfg *config.Config) {
	i := sandbox.Probe()
	if i.Available {
		d.add(checkOK, "sandbox", "bubblewrap usable ("+i.Tool+")", "")
		return
	}
	level := checkWarn
	if cfg.AI.Agent.ExecSecurity == "full" {
		level = checkFail // full exec is refused without isolation
	}
	d.add(level, "sandbox", "bash commands are not isolated: "+i.Reason,
		"install bubblewrap (apt install bubblewrap) and allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1)")
}

// checkDataDir: the data directory (and the embedded server's store) must be writable, and the
// bus credentials kept there readable by their owner only.
func (d *doctor) checkDataDir(cfg *config.Config) {
	dirs := []struct{ name, path string }{{"data dir", cfg.DataDir}}
	if cfg.NATS.Embedded && cfg.NATS.StoreDir != "" {
		dirs = append(dirs, struct{ name, path string }{"nats store dir", cfg.NATS.StoreDir})
	}
	for _, dd := range dirs {
		st, err := os.Stat(dd.path)
		target := dd.path
		if errors.Is(err, fs.ErrNotExist) {
			target = existingParent(dd.path) // agentbus up creates it there
		} else if err != nil {
			d.add(checkFail, dd.name, dd.path+" is not usable: "+unwrapPath(err).Error(), "point dataDir at a directory the agentbus user can write")
			continue
		} else if !st.IsDir() {
			d.add(checkFail, dd.name, dd.path+" is not a directory", "point dataDir elsewhere")
			continue
		}
		f, err := os.CreateTemp(target, ".agentbus-doctor-*")
		if err != nil {
			d.add(checkFail, dd.name, dd.path+" is not writable: "+oneLine(unwrapPath(err).Error()),
				fmt.Sprintf("chown/chmod it for the user running agentbus (uid %d), or set dataDir", os.Getuid()))
			continue
		}
		_ = f.Close()
		_ = os.Remove(f.Name())
		if target != dd.path {
			d.add(checkOK, dd.name, dd.path+" does not exist yet; "+target+" is writable, agentbus up creates it", "")
			continue
		}
		creds := filepath.Join(dd.path, natsutil.CredentialsFile)
		if ci, err := os.Stat(creds); err == nil && ci.Mode().Perm()&0o077 != 0 {
			d.add(checkWarn, dd.name, fmt.Sprintf("%s is writable, but its bus credentials %s may be read by others (%s)", dd.path, creds, ci.Mode().Perm()),
				"chmod 600 "+creds)
			continue
		}
		d.add(checkOK, dd.name, dd.path+" writable", "")
	}
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func existingParent(p string) string {
	p = filepath.Clean(p)
	for {
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(p)
		if parent == p {
			return p
		}
		p = parent
	}
}

// Free disk thresholds: below either, the check fails (JetStream stops storing when its disk is full).
const (
	minFreeBytes   = 1 << 30
	minFreePercent = 5
)

func (d *doctor) checkDisk(cfg *config.Config) {
	free, total, err := diskFree(existingParent(cfg.DataDir))
	if err != nil {
		d.add(checkWarn, "disk", "cannot tell the free space: "+err.Error(), "")
		return
	}
	pct := 100 * float64(free) / float64(max(total, 1))
	detail := fmt.Sprintf("%s free of %s (%.0f%%) under %s", bytesText(free), bytesText(total), pct, existingParent(cfg.DataDir))
	if free < minFreeBytes || pct < minFreePercent {
		d.add(checkFail, "disk", detail, "free space, or move dataDir / nats.storeDir to a larger disk")
		return
	}
	d.add(checkOK, "disk", detail, "")
}

func bytesText(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
