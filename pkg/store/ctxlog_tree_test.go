package store

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// TestLeafMoves: a leaf move hides the branch it leaves (in place of which its summary is
// loaded), new commits continue from the leaf, and a summary after the move anchors on the
// active path. Every step is checked through the writer's warm cache and a cold reader.
func TestLeafMoves(t *testing.T) {
	ctx := context.Background()
	a, b := newCtxLog(t, ContextBounds{})
	id := sid("tree", 1)
	var last uint64
	var seqs []uint64
	for _, u := range []string{"u1", "u2", "u3"} {
		s, err := a.AppendMessages(ctx, id, last, turn(1, u, "a"+u[1:]))
		if err != nil {
			t.Fatal(err)
		}
		last, seqs = s, append(seqs, s)
	}
	check := func(step string, want []string) {
		t.Helper()
		for name, l := range map[string]*ContextLog{"warm": a, "cold": b} {
			got, err := l.LoadContext(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if tx := texts(got.Messages); !slices.Equal(tx, want) {
				t.Fatalf("%s, %s load: %q, want %q", step, name, tx, want)
			}
		}
		b = mustColdLog(t, a)
	}
	check("linear", []string{"u1", "a1", "u2", "a2", "u3", "a3"})

	var err error
	if last, err = a.AppendLeaf(ctx, id, last, Leaf{LeafSeq: seqs[0], BranchFrom: seqs[1], BranchTo: seqs[2], BranchSummary: "tried u2 and u3"}); err != nil {
		t.Fatal(err)
	}
	check("moved to u1", []string{"u1", "a1", BranchSummaryPrefix + "tried u2 and u3"})
	if last, err = a.AppendMessages(ctx, id, last, turn(2, "u4", "a4")); err != nil {
		t.Fatal(err)
	}
	check("new branch", []string{"u1", "a1", BranchSummaryPrefix + "tried u2 and u3", "u4", "a4"})

	if last, err = a.AppendSummary(ctx, id, last, Summary{Text: "early part", AnchorSeq: seqs[0]}); err != nil {
		t.Fatal(err)
	}
	check("summary on the active path", []string{BranchSummaryPrefix + "tried u2 and u3", "u4", "a4"})

	leafSeq := last - 1 // the u4 record, after the summary's anchor
	if last, err = a.AppendLeaf(ctx, id, last, Leaf{LeafSeq: leafSeq, Messages: turn(3, "u2 again", "a2 again")}); err != nil {
		t.Fatal(err)
	}
	check("a branch taken up again", []string{BranchSummaryPrefix + "tried u2 and u3", "u4", "a4", "u2 again", "a2 again"})

	if _, err := a.AppendLeaf(ctx, id, last, Leaf{LeafSeq: seqs[0]}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a leaf inside the summary: %v, want ErrInvalid", err)
	}
	if _, err := a.AppendLeaf(ctx, id, seqs[0], Leaf{LeafSeq: seqs[0]}); !errors.Is(err, ErrStaleWriter) {
		t.Fatalf("a stale leaf move: %v, want ErrStaleWriter", err)
	}
}

// mustColdLog is a fresh repository on a's server: nothing cached.
func mustColdLog(t *testing.T, a *ContextLog) *ContextLog {
	t.Helper()
	l, err := NewContextLog(context.Background(), a.js, a.bounds)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
