package execpolicy

import (
	"strings"
	"testing"
)

// FuzzCheck: whatever the command line, Check never panics, always gives
// a reason, and a line it allows under any policy does not reach, by the
// independent oracle's reading (oracle_test.go), a hard-blocked program,
// rm -r of a protected directory, a signal to every process or (outside
// full mode) a /dev/tcp or /dev/udp redirect.
//
//	go test -run '^$' -fuzz FuzzCheck -fuzztime 60s ./pkg/execpolicy
func FuzzCheck(f *testing.F) {
	for _, l := range corpusLines()[:400] {
		f.Add(l, uint8(len(l)))
	}
	for _, s := range []string{"ls -la", "cat a | grep b", "sort -o out in", "find . -name x -delete", "echo ${!a[@]}",
		"set -e; ls", "shopt -s nullglob; ls *", "kill -9 123", "rm -r build", "xxd -r a b", "file -C -m x"} {
		f.Add(s, uint8(0))
	}
	pols := allPolicies(f)
	never := func(string) bool { return false }
	f.Fuzz(func(t *testing.T, line string, sel uint8) {
		if len(line) > 2048 || strings.ContainsAny(line, "\x00") {
			return
		}
		pc := pols[int(sel)%len(pols)]
		v := pc.p.Check(line, pc.ap)
		if v.Reason == "" {
			t.Fatalf("%s: %q: empty reason", pc.name, line)
		}
		if v.Decision != Allow {
			return
		}
		// Without the canary the oracle judges only the hard rules, which
		// hold for every program whatever its language.
		if why := runOracle(line).violation(pc.p.mode == ModeFull, "", never); why != "" {
			t.Fatalf("ESCAPE %s\n  line: %q\n  verdict: %s\n  oracle: %s", pc.name, line, v.Reason, why)
		}
	})
}
