package execpolicy

import (
	"strings"
	"testing"
)

// ordinaryLines are ordinary command lines of the kind the model writes.
var ordinaryLines = []string{
	"ls -la",
	"cat README.md | grep -n 'func ' | head -20",
	"find . -name '*.go' -not -path './vendor/*' | wc -l",
	"git status && git log --oneline -5",
	`for f in *.txt; do wc -l "$f"; done`,
	`grep -rn "TODO" src/ --include='*.ts' | sort | uniq -c | sort -rn | head`,
	"curl -sS -o page.html https://example.com/ && wc -c page.html",
	`a=(one two three); echo "${a[@]}" ${#a[@]} ${a[1]}`,
	`for (( i = 0; i < 3; i++ )); do echo "step $i"; done`,
	"npm ls --depth=0 2>/dev/null | head -30",
	"bash -c 'ls -l | head -5; date -u'",
	"timeout 10 python3 --version; node --version",
}

// BenchmarkCheckOrdinary is the cost of one Check on an ordinary line, with the
// file policy off (the path checks are pkg/filepolicy's cost).
//
//	go test -run '^$' -bench BenchmarkCheck -benchmem ./pkg/execpolicy
func BenchmarkCheckOrdinary(b *testing.B) {
	p, err := New(Options{Mode: ModeAllowlist, Preset: "development", Approval: ApprovalAsk})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("ordinary", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			p.Check(ordinaryLines[i%len(ordinaryLines)], nil)
		}
	})
	long := strings.Repeat("echo hello world | grep -c o; ", 70) // ~2 KiB
	b.Run("2KiB", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p.Check(long, nil)
		}
	})
}
