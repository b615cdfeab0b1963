package transcript

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var sceneA = Scene{Platform: "qq", BotID: "bot1", SceneID: "g1"}

func openTemp(t testing.TB) *DB {
	t.Helper()
	db, err := Open(filepath.Join(t.TempDir(), "transcripts.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func row(s Scene, id string, dir Direction, body string, tm int64) Row {
	return Row{MessageID: id, Platform: s.Platform, BotID: s.BotID, SceneID: s.SceneID, SceneType: "group",
		SenderID: "u1", SenderName: "Alice", SenderRole: "member", Direction: dir, Body: body, Time: tm}
}

func bodies(rows []Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Body
	}
	return out
}

func TestSearch(t *testing.T) {
	ctx := context.Background()
	db := openTemp(t)
	other := Scene{Platform: "qq", BotID: "bot1", SceneID: "g2"}
	rows := []Row{
		row(sceneA, "m1", Inbound, "Hello World", 1000),
		row(sceneA, "m2", Inbound, "the weather is nice", 2000),
		row(sceneA, "m3", Outbound, "HELLO again", 3000),
		row(sceneA, "m4", Inbound, "", 4000), // media only
		row(sceneA, "m5", Inbound, "今天天气很好 hello", 5000),
		row(sceneA, "m0", Inbound, "late hello", 500), // arrives late with an old time
		row(other, "x1", Inbound, "hello from another scene", 6000),
	}
	rows[3].MediaJSON = `[{"type":"image","data":{"url":"https://x/y.png"}}]`
	if n, err := db.Insert(ctx, rows...); err != nil || n != len(rows) {
		t.Fatalf("insert: n=%d err=%v", n, err)
	}
	tests := []struct {
		name string
		q    Query
		want []string
	}{
		{"keyword newest first", Query{Scene: sceneA, Keyword: "hello"}, []string{"今天天气很好 hello", "HELLO again", "Hello World", "late hello"}},
		{"case insensitive keyword", Query{Scene: sceneA, Keyword: "  WORLD "}, []string{"Hello World"}},
		{"limit", Query{Scene: sceneA, Keyword: "hello", Limit: 2}, []string{"今天天气很好 hello", "HELLO again"}},
		{"cjk", Query{Scene: sceneA, Keyword: "天气"}, []string{"今天天气很好 hello"}},
		{"no match", Query{Scene: sceneA, Keyword: "zebra"}, nil},
		{"empty keyword = latest", Query{Scene: sceneA, Limit: 3}, []string{"今天天气很好 hello", "", "HELLO again"}},
		{"scene isolation", Query{Scene: other, Keyword: "hello"}, []string{"hello from another scene"}},
		{"unknown scene", Query{Scene: Scene{"qq", "bot1", "nope"}, Keyword: "hello"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := db.Search(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(bodies(got)) != fmt.Sprint(tc.want) {
				t.Fatalf("got %q want %q", bodies(got), tc.want)
			}
		})
	}
	got, _ := db.Search(ctx, Query{Scene: sceneA, Keyword: "again"})
	if len(got) != 1 || got[0].Direction != Outbound || got[0].MessageID != "m3" || got[0].SenderName != "Alice" || got[0].ID == 0 {
		t.Fatalf("row fields: %+v", got)
	}
}

func TestSearchManySegments(t *testing.T) {
	ctx := context.Background()
	db := openTemp(t)
	// Enough rows for several segments, inserted in small batches, times interleaved so that
	// segments overlap in time.
	var rows []Row
	for i := 0; i < 3*segmentMaxRows+17; i++ {
		body := fmt.Sprintf("message %d", i)
		if i%100 == 7 {
			body += " needle"
		}
		tm := int64(i * 10)
		if i%50 == 0 {
			tm = int64(i*10 - 2000) // a late arrival
		}
		rows = append(rows, row(sceneA, fmt.Sprint("m", i), Inbound, body, tm))
	}
	for i := 0; i < len(rows); i += 40 {
		if _, err := db.Insert(ctx, rows[i:min(i+40, len(rows))]...); err != nil {
			t.Fatal(err)
		}
	}
	got, err := db.Search(ctx, Query{Scene: sceneA, Keyword: "NEEDLE", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"message 707 needle", "message 607 needle", "message 507 needle", "message 407 needle", "message 307 needle", "message 207 needle", "message 107 needle", "message 7 needle"}
	if fmt.Sprint(bodies(got)) != fmt.Sprint(want) {
		t.Fatalf("got %q", bodies(got))
	}
	got, _ = db.Search(ctx, Query{Scene: sceneA, Keyword: "needle", Limit: 3})
	if fmt.Sprint(bodies(got)) != fmt.Sprint(want[:3]) {
		t.Fatalf("limit 3: got %q", bodies(got))
	}
}

func TestInsertIdempotent(t *testing.T) {
	ctx := context.Background()
	db := openTemp(t)
	r := row(sceneA, "m1", Inbound, "hi", 1)
	for i, want := range []int{1, 0, 0} {
		n, err := db.Insert(ctx, r)
		if err != nil || n != want {
			t.Fatalf("insert #%d: n=%d err=%v want %d", i, n, err, want)
		}
	}
	// The same message id outbound is a different row; a duplicate inside one batch is stored once.
	out := row(sceneA, "m1", Outbound, "hi back", 2)
	if n, err := db.Insert(ctx, out, out, r); err != nil || n != 1 {
		t.Fatalf("batch: n=%d err=%v", n, err)
	}
	if c, _ := db.Count(ctx, sceneA); c != 2 {
		t.Fatalf("count %d", c)
	}
	got, _ := db.Search(ctx, Query{Scene: sceneA, Keyword: "hi"})
	if len(got) != 2 {
		t.Fatalf("search: %q", bodies(got))
	}
}

func TestInsertInvalid(t *testing.T) {
	ctx := context.Background()
	db := openTemp(t)
	good := row(sceneA, "ok", Inbound, "x", 1)
	tests := []struct {
		name   string
		mutate func(*Row)
		reason string
	}{
		{"no message id", func(r *Row) { r.MessageID = "" }, "message_id is empty"},
		{"no platform", func(r *Row) { r.Platform = "" }, "platform is empty"},
		{"no scene", func(r *Row) { r.SceneID = "" }, "scene_id is empty"},
		{"bad direction", func(r *Row) { r.Direction = "sideways" }, `direction "sideways"`},
		{"bad media", func(r *Row) { r.MediaJSON = "{nope" }, "media_json is not valid JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := good
			bad.MessageID = "bad"
			tc.mutate(&bad)
			_, err := db.Insert(ctx, good, bad)
			if !errors.Is(err, ErrInvalidRow) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("err = %v, want ErrInvalidRow with %q", err, tc.reason)
			}
		})
	}
	if c, _ := db.Count(ctx, sceneA); c != 0 {
		t.Fatalf("a failed batch wrote %d rows", c)
	}
	if _, err := db.Search(ctx, Query{Keyword: "x"}); !errors.Is(err, ErrInvalidQuery) {
		t.Fatalf("query without scene: %v", err)
	}
}

func TestPrune(t *testing.T) {
	ctx := context.Background()
	now := time.UnixMilli(1_000_000)
	tests := []struct {
		name    string
		ret     Retention
		deleted int
		left    []string // newest first
	}{
		{"by count", Retention{MaxRowsPerScene: 3}, 7, []string{"b9", "b8", "b7"}},
		{"by age", Retention{MaxAge: 5500 * time.Millisecond}, 5, []string{"b9", "b8", "b7", "b6", "b5"}},
		{"both, count stricter", Retention{MaxRowsPerScene: 2, MaxAge: time.Hour}, 8, []string{"b9", "b8"}},
		{"none", Retention{}, 0, []string{"b9", "b8", "b7", "b6", "b5", "b4", "b3", "b2", "b1", "b0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db := openTemp(t)
			for i := 0; i < 10; i++ {
				// b<i> is 10-i seconds old: b9 is the newest.
				r := row(sceneA, fmt.Sprint("m", i), Inbound, fmt.Sprint("b", i), now.UnixMilli()-int64(10-i)*1000)
				if _, err := db.Insert(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			n, err := db.Prune(ctx, tc.ret, now)
			if err != nil || n != tc.deleted {
				t.Fatalf("prune: n=%d err=%v want %d", n, err, tc.deleted)
			}
			got, _ := db.Search(ctx, Query{Scene: sceneA, Limit: 100})
			if fmt.Sprint(bodies(got)) != fmt.Sprint(tc.left) {
				t.Fatalf("left %q want %q", bodies(got), tc.left)
			}
			got, _ = db.Search(ctx, Query{Scene: sceneA, Keyword: "b", Limit: 100})
			if fmt.Sprint(bodies(got)) != fmt.Sprint(tc.left) {
				t.Fatalf("keyword after prune %q want %q", bodies(got), tc.left)
			}
			if c, _ := db.Count(ctx, sceneA); c != len(tc.left) {
				t.Fatalf("count %d", c)
			}
			// A pruned message id may be stored again.
			if tc.deleted > 0 {
				if n, _ := db.Insert(ctx, row(sceneA, "m0", Inbound, "again", now.UnixMilli())); n != 1 {
					t.Fatalf("re-insert after prune stored %d", n)
				}
			}
		})
	}
}

func TestConcurrentReaders(t *testing.T) {
	ctx := context.Background()
	db := openTemp(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 8)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				rows, err := db.Search(ctx, Query{Scene: sceneA, Keyword: "msg", Limit: 50})
				if err != nil {
					errs <- err
					return
				}
				for i := 1; i < len(rows); i++ {
					if rows[i].Time > rows[i-1].Time {
						errs <- fmt.Errorf("not newest first: %d after %d", rows[i].Time, rows[i-1].Time)
						return
					}
				}
			}
		}()
	}
	for i := 0; i < 200; i++ {
		if _, err := db.Insert(ctx, row(sceneA, fmt.Sprint("m", i), Inbound, fmt.Sprint("msg ", i), int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if rows, _ := db.Search(ctx, Query{Scene: sceneA, Keyword: "msg", Limit: 1000}); len(rows) != 200 {
		t.Fatalf("rows %d", len(rows))
	}
}

// TestCrashChild is the child half of TestReopenAfterCrash: it writes rows, says so, and waits to
// be killed without ever closing the file.
func TestCrashChild(t *testing.T) {
	path := os.Getenv("TRANSCRIPT_CRASH_DB")
	if path == "" {
		t.Skip("child process helper")
	}
	db, err := Open(path, nil)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	for i := 0; i < 50; i++ {
		if _, err := db.Insert(context.Background(), row(sceneA, fmt.Sprint("c", i), Inbound, fmt.Sprint("crash row ", i), int64(i))); err != nil {
			fmt.Println("insert:", err)
			os.Exit(2)
		}
	}
	fmt.Println("ready")
	time.Sleep(time.Minute) // hold the database open until the parent kills this process
	os.Exit(3)
}

func TestReopenAfterCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "transcripts.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TRANSCRIPT_CRASH_DB="+path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l := sc.Text(); l == "ready" || strings.HasPrefix(l, "open:") || strings.HasPrefix(l, "insert:") {
				ready <- l
				break
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-ready:
		if l != "ready" {
			t.Fatal("child:", l)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("child never got ready")
	}

	// While the child holds the lock, a copy of the file (what a backup of a live file gets) is
	// readable, and opening the original waits then fails.
	cp := filepath.Join(t.TempDir(), "copy.db")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if db, err := Open(path, &Options{Timeout: 100 * time.Millisecond}); err == nil {
		db.Close()
		t.Fatal("opened a file another process holds")
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	for _, p := range []string{path, cp} {
		db, err := Open(p, nil)
		if err != nil {
			t.Fatalf("reopen %s: %v", p, err)
		}
		rows, err := db.Search(context.Background(), Query{Scene: sceneA, Keyword: "CRASH", Limit: 100})
		if err != nil || len(rows) != 50 || rows[0].Body != "crash row 49" {
			t.Fatalf("%s after crash: %d rows, err %v", p, len(rows), err)
		}
		if n, _ := db.Insert(context.Background(), row(sceneA, "c1", Inbound, "dup", 1)); n != 0 {
			t.Fatal("idempotency index lost")
		}
		db.Close()
	}
}
