package turn

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentbus/agentbus/pkg/compaction"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/llm"
	"github.com/agentbus/agentbus/pkg/store"
)

// The session tree (seed: /tree, /tree N, active_leaf, branch summarization). The tree is in
// the context log: every messages record's parent is the record before it on the active path,
// and a leaf record (store.AppendLeaf) rewinds the path to an earlier record, leaving the
// records after it as a branch that stays in the log. /tree lists the records after the latest
// summary; /tree N rewinds to record N of that list, summarizing the branch it leaves.
//
// /tree N on a branch left earlier makes it active again: the leaf record rewinds to where that
// branch forks off the active path and carries copies of the branch's messages up to N. Points
// inside the latest summary are gone from the context (the summary stands for them), and so is a
// branch that forks off there.

// treeNode is one listed record: a messages record, or a leaf record that carries a branch
// summary or the messages of a branch made active again.
type treeNode struct {
	rec    store.CtxRecord
	parent uint64 // record seq it continues from (0 = the start)
	active bool   // on the active path
}

// messages is what the node contributes to a context that passes through it.
func (n *treeNode) messages() []llm.Message {
	lf := n.rec.Leaf
	if lf == nil {
		return n.rec.Msgs
	}
	var out []llm.Message
	if lf.BranchSummary != "" {
		out = append(out, llm.UserText(store.BranchSummaryPrefix+lf.BranchSummary, lf.Time.UnixMilli()))
	}
	return append(out, lf.Messages...)
}

// tree is a session id's message tree as its log records it.
type tree struct {
	nodes  []treeNode           // after the latest summary's anchor, in log order
	byID   map[uint64]*treeNode // every node, also those inside the summary
	anchor uint64
}

// sessionTree rebuilds the tree of a session id's log.
func (cs commands) sessionTree(ctx context.Context, sid events.SessionID) (*tree, error) {
	a := cs.a
	var all []treeNode
	var path []uint64
	var anchor uint64
	for r, err := range a.w.ctxlog.History(ctx, sid) {
		if err != nil {
			return nil, err
		}
		switch {
		case r.Summary != nil:
			anchor = r.Summary.AnchorSeq
		case r.Leaf != nil:
			k := 0
			for k < len(path) && path[k] <= r.Leaf.LeafSeq {
				k++
			}
			path = path[:k]
			if r.Leaf.BranchSummary != "" || len(r.Leaf.Messages) > 0 {
				all = append(all, treeNode{rec: r, parent: r.Leaf.LeafSeq})
				path = append(path, r.Seq)
			}
		default:
			var parent uint64
			if len(path) > 0 {
				parent = path[len(path)-1]
			}
			all = append(all, treeNode{rec: r, parent: parent})
			path = append(path, r.Seq)
		}
	}
	onPath := map[uint64]bool{}
	for _, s := range path {
		onPath[s] = true
	}
	t := &tree{byID: map[uint64]*treeNode{}, anchor: anchor}
	for i := range all {
		all[i].active = onPath[all[i].rec.Seq]
		if all[i].rec.Seq > anchor {
			t.nodes = append(t.nodes, all[i])
		}
	}
	for i := range all {
		t.byID[all[i].rec.Seq] = &all[i]
	}
	return t, nil
}

// branchTo returns where the branch of node seq forks off the active path and the messages from
// there to seq (inclusive), oldest first; ok is false when it forks inside the latest summary.
func (t *tree) branchTo(seq uint64) (fork uint64, msgs []llm.Message, ok bool) {
	var chain []*treeNode
	cur := seq
	for {
		n := t.byID[cur]
		if n == nil {
			return 0, nil, false // the start of the epoch: no common point to continue from
		}
		if n.active {
			fork = cur
			break
		}
		chain = append(chain, n)
		cur = n.parent
	}
	if fork <= t.anchor {
		return 0, nil, false
	}
	for i := len(chain) - 1; i >= 0; i-- {
		msgs = append(msgs, chain[i].messages()...)
	}
	return fork, msgs, true
}

// treeCommand answers /tree and /tree N.
func (cs commands) treeCommand(c events.Command, from events.Sender, pt *pendingTurn) (string, error) {
	a := cs.a
	reply := cs.treeReply(c, from, pt)
	if err := a.ctx.Err(); err != nil {
		return "", err // going away: the next owner answers
	}
	return reply, nil
}

func (cs commands) treeReply(c events.Command, from events.Sender, pt *pendingTurn) string {
	a := cs.a
	sess, err := a.w.sessions.Current(a.ctx, a.sk)
	if err != nil {
		return "⚠️ " + err.Error()
	}
	sid, err := sess.ID()
	if err != nil {
		return "⚠️ " + err.Error()
	}
	tr, err := cs.sessionTree(a.ctx, sid)
	if err != nil {
		return "⚠️ " + err.Error()
	}
	nodes := tr.nodes
	arg := strings.TrimSpace(c.Raw)
	if arg == "" {
		return formatTree(nodes)
	}
	if !from.HasRole(events.RoleMaster) && !from.HasRole(events.RoleTrusted) {
		return "/tree N is for the bot's masters and trusted users only."
	}
	n, err := strconv.Atoi(arg)
	if err != nil || n < 1 || n > len(nodes) {
		return fmt.Sprintf("/tree N takes a point number from 1 to %d (see /tree).", len(nodes))
	}
	target := nodes[n-1]
	leaf, restore := target.rec.Seq, []llm.Message(nil)
	if !target.active {
		fork, msgs, ok := tr.branchTo(target.rec.Seq)
		if !ok {
			return fmt.Sprintf("Point %d is on a branch that forks off before the latest summary; it cannot be made active again.", n)
		}
		leaf, restore = fork, msgs
	} else if last := lastActive(nodes); last == target.rec.Seq {
		return fmt.Sprintf("Point %d is already the active leaf.", n)
	}
	model, err := a.w.pickModel(pt.msg, nil, sess.ModelOverride)
	if err != nil {
		return "⚠️ " + err.Error()
	}
	ctx, cancel := context.WithTimeout(a.ctx, a.w.opts.TurnTimeout)
	defer cancel()
	moved, err := cs.moveLeaf(ctx, sid, model, leaf, restore)
	if err != nil {
		return "⚠️ The active leaf did not move: " + err.Error()
	}
	if _, err := a.updateSession(a.ctx, func(s *store.Session) { s.ActiveLeaf = strconv.FormatUint(target.rec.Seq, 10) }); err != nil {
		a.log.Warn("session record's active leaf not updated", "err", err)
	}
	note := "The branch you left had nothing to summarize."
	switch {
	case moved.summarized:
		note = fmt.Sprintf("The branch you left (%s) is summarized in its place.", count(moved.left, "message"))
	case moved.left > 0:
		note = fmt.Sprintf("The branch you left (%s) could not be summarized: %s", count(moved.left, "message"), moved.why)
	}
	return fmt.Sprintf("Moved to point %d: the conversation continues after “%s”. %s", n, snippet(target.rec.First, 60), note)
}

func lastActive(nodes []treeNode) uint64 {
	for i := len(nodes) - 1; i >= 0; i-- {
		if nodes[i].active {
			return nodes[i].rec.Seq
		}
	}
	return 0
}

// formatTree lists the points: number, the first line of the user message and the reply, a
// star on the active branch, and where a branch starts.
func formatTree(nodes []treeNode) string {
	if len(nodes) == 0 {
		return "The conversation tree is empty (or all of it is summarized)."
	}
	idx := map[uint64]int{}
	var b strings.Builder
	b.WriteString("Conversation tree (* = active branch; /tree N continues from point N):\n")
	var prev uint64
	for i, n := range nodes {
		idx[n.rec.Seq] = i + 1
		mark := " "
		if n.active {
			mark = "*"
		}
		from := ""
		if n.parent != prev {
			if p, ok := idx[n.parent]; ok {
				from = fmt.Sprintf(" ↳ from %d:", p)
			} else {
				from = " ↳ from the start:"
			}
		}
		if lf := n.rec.Leaf; lf != nil {
			var what []string
			if lf.BranchSummary != "" {
				what = append(what, "[summary of the branch left] "+snippet(lf.BranchSummary, 60))
			}
			if len(lf.Messages) > 0 {
				what = append(what, fmt.Sprintf("[%s of a branch taken up again, up to “%s”]", count(len(lf.Messages), "message"), snippet(lastText(lf.Messages), 40)))
			}
			fmt.Fprintf(&b, "%s%d.%s %s\n", mark, i+1, from, strings.Join(what, " "))
		} else {
			fmt.Fprintf(&b, "%s%d.%s %s → %s\n", mark, i+1, from, snippet(n.rec.First, 50), snippet(n.rec.Last, 50))
		}
		prev = n.rec.Seq
	}
	return strings.TrimRight(b.String(), "\n")
}

func snippet(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if t := compaction.TruncateUTF8(s, n); t != s {
		return t + "…"
	}
	return s
}

// leafMove describes a committed move.
type leafMove struct {
	seq        uint64
	left       int // messages of the branch left
	summarized bool
	why        string // why the branch was not summarized
}

// moveLeaf rewinds the active path to record target, then continues with restore (the messages
// of a branch left earlier, when the move returns to it): the part of the active path after
// target is summarized (when it holds anything and the model answers; otherwise the move goes
// on without a summary) and one fenced leaf record is committed. Serialized with compactions.
func (cs commands) moveLeaf(ctx context.Context, sid events.SessionID, model *llm.Model, target uint64, restore []llm.Message) (leafMove, error) {
	a := cs.a
	a.compactMu.Lock()
	defer a.compactMu.Unlock()
	loaded, err := a.cx.loadContext(ctx, sid)
	if err != nil {
		return leafMove{}, err
	}
	k := 0
	for k < len(loaded.Seqs) && loaded.Seqs[k] <= target {
		k++
	}
	branch := loaded.Messages[k:]
	lf := store.Leaf{LeafSeq: target, Messages: restore}
	if len(branch) > 0 {
		lf.BranchFrom, lf.BranchTo = loaded.Seqs[k], loaded.Seqs[len(loaded.Seqs)-1]
	}
	out := leafMove{left: len(branch)}
	if len(branch) > 0 {
		sm := a.w.summaryModel(model)
		res, err := compaction.Summarize(ctx, compaction.Request{
			Model: sm, Stream: a.w.streamFunc(), Messages: branch,
			Instructions: "The conversation goes back to an earlier point and this branch is left behind. Summarize what was asked, tried and found in it, so that nothing learned is lost.",
			Options:      llmOptions(a.w.opts.Models.APIKey(sm.Provider), sid.String()),
		})
		if err != nil {
			out.why = err.Error()
		} else {
			lf.BranchSummary, lf.Model, out.summarized = res.Text, sm.Provider+"/"+sm.ID, true
		}
	}
	a.commit.Lock()
	defer a.commit.Unlock()
	key := sid.String()
	last, ok := a.ctxLast[key]
	if !ok || last < loaded.LastSeq {
		last = loaded.LastSeq
	}
	seq, err := a.w.ctxlog.AppendLeaf(ctx, sid, last, lf, store.WithMsgID(fmt.Sprintf("leaf:%s:%d:%d", sid, target, loaded.LastSeq)))
	if err != nil {
		return leafMove{}, err
	}
	if !ok {
		a.w.ctxlog.Keep(sid)
		a.kept = append(a.kept, sid)
	}
	a.ctxLast[key] = seq
	out.seq = seq
	a.log.Info("active leaf moved", "leaf", target, "branch_messages", out.left, "summarized", out.summarized, "seq", seq)
	return out, nil
}

func llmOptions(key, session string) *llm.StreamOptions {
	return &llm.StreamOptions{APIKey: key, SessionID: session}
}

// lastText is the text of the last message of msgs that has any.
func lastText(msgs []llm.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if t := msgs[i].TextContent(); t != "" {
			return t
		}
	}
	return ""
}
