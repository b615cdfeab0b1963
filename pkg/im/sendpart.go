package im

import "context"

// PartMessages are the platform messages one outbound part becomes (its text chunks and
// media, planned by the platform's sender), with the calls that deliver them.
type PartMessages interface {
	// Len is the number of platform messages.
	Len() int
	// IsText reports whether message k is text (only text can replace a preview).
	IsText(k int) bool
	// Send sends message k anew and returns its platform message id (message 0 threaded
	// to what the part answers).
	Send(ctx context.Context, k int) (string, error)
	// Edit replaces the preview message preview with text message k and returns the id the
	// delivered message goes by.
	Edit(ctx context.Context, preview string, k int) (string, error)
	// Delete removes the preview message preview (best effort: a preview left behind is
	// cosmetic).
	Delete(ctx context.Context, preview string)
}

// SendPart delivers the messages of outbound part outID: it skips those the ledger has
// (a retried part resumes after what went out already, on any replica), replaces the
// streaming preview with message 0 when that is text (and deletes the preview when it is
// not, or sends anew when the preview is gone: an edit that fails for good), and records
// each message in the ledger. It returns the platform id of message 0. preview is the id
// TakePreview returned ("" none).
func SendPart(ctx context.Context, ledger *Ledger, outID, preview string, p PartMessages) (string, error) {
	first := ""
	n := p.Len()
	for k := range n {
		key := ChunkKey(outID, k)
		if id, ok := ledger.Sent(ctx, key); ok {
			if k == 0 {
				first = id
			}
			continue
		}
		var id string
		var err error
		switch {
		case k == 0 && preview != "" && p.IsText(0):
			id, err = p.Edit(ctx, preview, 0)
			if IsPermanent(err) { // the preview is gone (deleted in the chat): send anew
				id, err = p.Send(ctx, 0)
			}
		default:
			if k == 0 && preview != "" {
				p.Delete(ctx, preview)
			}
			id, err = p.Send(ctx, k)
		}
		if err != nil {
			return "", err
		}
		if err := ledger.Record(ctx, key, id); err != nil && k < n-1 {
			return "", err
		}
		if k == 0 {
			first = id
		}
	}
	return first, nil
}
