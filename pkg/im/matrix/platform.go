package matrix

import (
	"context"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/im"
)

// Adapter registers Matrix (im.matrix.bots) with the composition root.
var Adapter = im.Platform{
	Name: Platform,
	Bots: func(cfg *config.Config) []im.Bot {
		return im.BotsOf(cfg.IM.Matrix.Bots, func(b config.MatrixBot) im.Bot { return im.Bot{ID: b.ID, Masters: b.Masters, Trusted: b.Trusted} })
	},
	NewInbound: func(ctx context.Context, cfg *config.Config, d im.InboundDeps) (im.Inbound, error) {
		var in im.Inbound
		for _, b := range cfg.IM.Matrix.Bots {
			// mxc:// media is downloaded from the configured homeserver, which may be on the
			// same host: the adapter reaches exactly that scheme and host:port directly and
			// everything else through the media helper's SSRF guard, which allows no extra host.
			media, err := d.Media(ctx)
			if err != nil {
				return in, err
			}
			ib, err := NewInbound(InboundOptions{Bot: b, Sink: d.Sink, Media: media, JS: d.JS, Owner: d.Owner, Log: d.Log})
			if err != nil {
				return in, err
			}
			in.Run = append(in.Run, func(ctx context.Context) { _ = ib.Run(d.Track(ctx, Platform, b.ID, false)) })
		}
		return in, nil
	},
	NewSender: func(ctx context.Context, cfg *config.Config, d im.SenderDeps) (im.Sender, error) {
		bots := cfg.IM.Matrix.Bots
		if len(bots) == 0 {
			return nil, nil
		}
		media, ledger, err := d.Open(ctx)
		if err != nil {
			return nil, err
		}
		return NewSender(bots, nil, media, ledger, d.NC)
	},
	NewPreviewers: func(cfg *config.Config, d im.PreviewDeps) []im.Runner {
		return im.Previewers(cfg.IM.Matrix.Bots, func(ctx context.Context, b config.MatrixBot) error {
			return RunPreviewer(ctx, PreviewerOptions{Bot: b, NC: d.NC, JS: d.JS, Owner: d.Owner, Log: d.Log})
		})
	},
}
