package telegram

import (
	"context"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/im"
)

// Adapter registers Telegram (im.telegram.bots) with the composition root.
var Adapter = im.Platform{
	Name: Platform,
	Bots: func(cfg *config.Config) []im.Bot {
		return im.BotsOf(cfg.IM.Telegram.Bots, func(b config.TelegramBot) im.Bot { return im.Bot{ID: b.ID, Masters: b.Masters, Trusted: b.Trusted} })
	},
	NewInbound: func(ctx context.Context, cfg *config.Config, d im.InboundDeps) (im.Inbound, error) {
		var in im.Inbound
		bots := cfg.IM.Telegram.Bots
		if len(bots) == 0 {
			return in, nil
		}
		media, err := d.Media(ctx)
		if err != nil {
			return in, err
		}
		byID := map[string]*Inbound{}
		for _, b := range bots {
			media := media
			if b.APIBase != "" {
				// The file API lives on the configured Bot API server; allow it like a
				// OneBot endpoint (a self-hosted server may be on the same host).
				if media, err = d.Media(ctx, b.APIBase); err != nil {
					return in, err
				}
			}
			ib, err := NewInbound(InboundOptions{Bot: b, Sink: d.Sink, Media: media, JS: d.JS, Owner: d.Owner, Log: d.Log})
			if err != nil {
				return in, err
			}
			byID[b.ID] = ib
			in.HTTP = in.HTTP || IsWebhook(b)
			in.Run = append(in.Run, func(ctx context.Context) { _ = ib.Run(d.Track(ctx, Platform, b.ID, IsWebhook(b))) })
		}
		if in.HTTP {
			Routes(d.Mux, byID)
		}
		return in, nil
	},
	NewSender: func(ctx context.Context, cfg *config.Config, d im.SenderDeps) (im.Sender, error) {
		bots := cfg.IM.Telegram.Bots
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
		return im.Previewers(cfg.IM.Telegram.Bots, func(ctx context.Context, b config.TelegramBot) error {
			return RunPreviewer(ctx, PreviewerOptions{Bot: b, NC: d.NC, JS: d.JS, Owner: d.Owner, Log: d.Log})
		})
	},
}
