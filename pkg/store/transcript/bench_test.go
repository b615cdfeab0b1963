package transcript

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/agentbus/agentbus/pkg/natsutil/natstest"
	"github.com/agentbus/agentbus/pkg/store/internal/benchutil"
)

var benchBodies = []string{
	"今天晚上一起吃饭吗？我知道一家很好吃的火锅店",
	"ok sounds good, see you at seven then",
	"Has anyone tried the new release? The build seems faster on my machine.",
	"哈哈哈哈哈",
	"[image]",
	"Please remind me tomorrow morning to send the quarterly report to the team.",
}

func benchRows(s Scene, from, n int) []Row {
	rows := make([]Row, n)
	for i := range rows {
		j := from + i
		rows[i] = row(s, fmt.Sprint("m", j), Inbound, fmt.Sprintf("%s #%d", benchBodies[j%len(benchBodies)], j), int64(1_700_000_000_000+j*1000))
	}
	return rows
}

// BenchmarkTranscriptInsert measures durable (fsynced) writes: one row per transaction, and
// batches of 100 rows per transaction (what the archiver does under load).
func BenchmarkTranscriptInsert(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			db, err := Open(filepath.Join(b.TempDir(), "t.db"), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			rows := benchRows(sceneA, 0, b.N*batch)
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := db.Insert(ctx, rows[i*batch:(i+1)*batch]...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

var (
	bigOnce sync.Once
	bigDB   *DB
	bigErr  error
)

// big100k is a scene with 100,000 rows, built once per benchmark process.
func big100k(b *testing.B) *DB {
	bigOnce.Do(func() {
		dir, err := makeTempDir()
		if err != nil {
			bigErr = err
			return
		}
		bigDB, bigErr = Open(filepath.Join(dir, "big.db"), &Options{NoSync: true})
		if bigErr != nil {
			return
		}
		for i := 0; i < 100_000; i += 5000 {
			if _, bigErr = bigDB.Insert(context.Background(), benchRows(sceneA, i, 5000)...); bigErr != nil {
				return
			}
		}
	})
	if bigErr != nil {
		b.Fatal(bigErr)
	}
	return bigDB
}

// BenchmarkTranscriptSearch100k searches one scene of 100k rows: a keyword that matches
// nothing (the worst case: every body is looked at), a common keyword, and the latest 20.
func BenchmarkTranscriptSearch100k(b *testing.B) {
	db := big100k(b)
	ctx := context.Background()
	for _, tc := range []struct {
		name, kw string
		want     int
	}{
		{"no_match", "zebra crossing", 0},
		// A first byte that occurs everywhere defeats the IndexByte skip: the honest worst case.
		{"no_match_common_prefix", "e zebra", 0},
		{"match_newest20", "REPORT", 20},
		{"cjk_match", "火锅", 20},
		{"latest20", "", 20},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				rows, err := db.Search(ctx, Query{Scene: sceneA, Keyword: tc.kw, Limit: 20})
				if err != nil || len(rows) != tc.want {
					b.Fatalf("rows=%d err=%v", len(rows), err)
				}
			}
		})
	}
}

func makeTempDir() (string, error) { return os.MkdirTemp("", "transcript-bench-") }

// BenchmarkBaselineAsyncPublish is the raw JetStream reference for this run's figures (1 KB
// messages into a file stream on an embedded server), printed next to the bbolt ones.
func BenchmarkBaselineAsyncPublish(b *testing.B) {
	srv := natstest.New(b)
	rate, err := benchutil.BaselinePublish(context.Background(), srv.JS, max(b.N, 1000), 1024)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(rate, "baseline-async-pub/s")
}
