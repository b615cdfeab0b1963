package transcript

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentbus/agentbus/internal/cputime"
	"github.com/agentbus/agentbus/pkg/events"
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

// BenchmarkArchiver runs the archiver against a paced load like the pipeline's at 500 turns/s:
// every 2 ms one inbound message (IM_IN) and one delivery receipt (IM_SENT), spread over 200
// scenes, with a durable (fsynced) archive. cpu-ns/op is the whole process's CPU per archived
// row (publisher and embedded server included); the publish_only case is the same load with
// no archiver, so the difference is what archiving costs. tx/krow is bbolt write transactions
// per 1000 rows (each one is two fdatasyncs).
func BenchmarkArchiver(b *testing.B) {
	for _, archive := range []bool{false, true} {
		name := "publish_only"
		if archive {
			name = "archive"
		}
		b.Run(name, func(b *testing.B) {
			srv := natstest.New(b, natstest.WithMemoryStorage())
			db, err := Open(filepath.Join(b.TempDir(), "t.db"), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			ctx := context.Background()
			var a *Archiver
			if archive {
				if a, err = RunArchiver(ctx, srv.JS, db, ArchiverOptions{Node: "bench", Logger: quiet}); err != nil {
					b.Fatal(err)
				}
				defer a.Stop()
			}
			pairs := max(b.N/2, 1)
			commits0, writes0 := commitCount(db), pageWrites(db)
			b.ResetTimer()
			cpu := cputime.Process()
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			for i := 0; i < pairs; i++ {
				<-tick.C
				scene := fmt.Sprint("g", i%200)
				in := inbound(fmt.Sprint("in", i), benchBodies[i%len(benchBodies)])
				in.Scene.ID = scene
				publish(b, srv.JS, events.IMInSubject(in.SessionKey()), events.New(in), "")
				r := events.Receipt{OutID: fmt.Sprint("t", i, "-0"), Turn: fmt.Sprint("t", i), Platform: "qq", Bot: "bot1",
					Scene: events.Scene{Type: "group", ID: scene}, MessageID: fmt.Sprint("p", i), Time: int64(1_700_000_000_000 + i),
					Content: events.Segments{events.TextSeg(benchBodies[(i+1)%len(benchBodies)])}, Sender: events.Sender{ID: "bot1"}}
				publish(b, srv.JS, events.IMSentSubject(r.SessionKey()), events.New(r), "")
			}
			if archive {
				deadline := time.Now().Add(time.Minute)
				for total(b, db) < 2*pairs {
					if time.Now().After(deadline) {
						b.Fatalf("archived %d of %d", total(b, db), 2*pairs)
					}
					time.Sleep(time.Millisecond) // a fine step: the timer measures up to the last row
				}
			}
			b.StopTimer()
			if d := cputime.Process() - cpu; d > 0 {
				b.ReportMetric(float64(d.Nanoseconds())/float64(2*pairs), "cpu-ns/row")
			}
			b.ReportMetric(float64(commitCount(db)-commits0)*1000/float64(2*pairs), "tx/krow")
			b.ReportMetric(float64(pageWrites(db)-writes0)/float64(2*pairs), "pagewrites/row")
		})
	}
}

// commitCount is the id of db's last committed write transaction: every commit adds one.
func commitCount(db *DB) int {
	var id int
	_ = db.bolt.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil })
	return id
}

func total(b *testing.B, db *DB) int {
	n := 0
	for i := 0; i < 200; i++ {
		c, err := db.Count(context.Background(), Scene{"qq", "bot1", fmt.Sprint("g", i)})
		if err != nil {
			b.Fatal(err)
		}
		n += c
	}
	return n
}

func pageWrites(db *DB) int64 {
	st := db.bolt.Stats()
	return st.TxStats.GetWrite()
}
