package execpolicy

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/agentbus/agentbus/pkg/filepolicy"
)

// Exit codes of [CLI].
const (
	ExitAllow = 0
	ExitDeny  = 1
	ExitAsk   = 2
	ExitUsage = 64
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// CLI implements `agentbus exec-policy check [flags] -- '<command line>'`.
// args are the arguments after "exec-policy". It prints "allow", "deny" or
// "ask", a tab and the reason, then the normalized commands (with -v),
// and returns 0 for allow, 1 for deny, 2 for ask and 64 for usage errors.
func CLI(args []string, stdout, stderr io.Writer) int {
	usageTo := func(w io.Writer) {
		fmt.Fprintln(w, `usage: agentbus exec-policy check [--mode deny|allowlist|full] [--preset readonly|network|development|custom]
                                 [--allow CMD]... [--approval deny|ask|allow] [--workspace DIR]
                                 [--approve-rule REGEX]... [--approve-always] [-v] -- '<command line>'
exit status: 0 allow, 1 deny, 2 ask, 64 usage error`)
	}
	usage := func() { usageTo(stderr) }
	if len(args) == 0 || args[0] != "check" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			usageTo(stdout) // asked for: not an error
			return 0
		}
		fmt.Fprintln(stderr, "exec-policy: unknown or missing subcommand (want check)")
		usage()
		return ExitUsage
	}
	fs := flag.NewFlagSet("exec-policy check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // printed below: to stdout for --help, to stderr for a mistake
	mode := fs.String("mode", "allowlist", "execSecurity: deny | allowlist | full")
	preset := fs.String("preset", "custom", "execPreset: readonly | network | development | custom")
	approval := fs.String("approval", "deny", "execApprovalMode: deny | ask | allow")
	workspace := fs.String("workspace", "", "apply the file policy with this workspace directory")
	always := fs.Bool("approve-always", false, "simulate /approve always bash")
	verbose := fs.Bool("v", false, "also print the normalized commands")
	var allow, rules listFlag
	fs.Var(&allow, "allow", "extra allowlisted command (repeatable; execAllowlist)")
	fs.Var(&rules, "approve-rule", "simulate /approve rule REGEX (repeatable)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) { // --help: the synopsis, then every flag
			usageTo(stdout)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		usage()
		return ExitUsage
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprintln(stderr, "exec-policy check: missing command line (put it after --)")
		usage()
		return ExitUsage
	}
	cmdline := strings.Join(rest, " ")
	opts := Options{Mode: Mode(*mode), Preset: *preset, Allow: allow, Approval: ApprovalMode(*approval)}
	if *workspace != "" {
		fp, err := filepolicy.New(filepolicy.Options{Workspace: *workspace})
		if err != nil {
			fmt.Fprintln(stderr, "exec-policy check:", err)
			return ExitUsage
		}
		opts.Files = fp
	}
	p, err := New(opts)
	if err != nil {
		fmt.Fprintln(stderr, "exec-policy check:", err)
		return ExitUsage
	}
	ap := &Approvals{AlwaysBash: *always}
	for _, r := range rules {
		if _, err := ap.AddRule(r, "cli", timeNow()); err != nil {
			fmt.Fprintln(stderr, "exec-policy check:", err)
			return ExitUsage
		}
	}
	v := p.Check(cmdline, ap)
	fmt.Fprintf(stdout, "%s\t%s\n", v.Decision, v.Reason)
	if *verbose {
		for _, c := range v.Commands {
			fmt.Fprintf(stdout, "  command: %s\n", c)
		}
		for _, c := range v.Pending {
			fmt.Fprintf(stdout, "  pending: %s\n", c)
		}
	}
	switch v.Decision {
	case Allow:
		return ExitAllow
	case Ask:
		return ExitAsk
	}
	return ExitDeny
}
