package slack

import (
	"context"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/im"
)

// Adapter registers Slack (im.slack.bots) with the composition root.
var Adapter = im.Platform{
	Name: Platform,
	Bots: func(cfg *config.Config) []im.Bot {
		return im.BotsOf(cfg.IM.Slack.Bots, func(b config.SlackBot) im.Bot { return im.Bot{ID: b.ID, Masters: b.Masters, Trusted: b.Trusted} })
	},
	NewInbound: func(ctx context.Context, cfg *config.Config, d im.InboundDeps) (im.Inbound, error) {
		var in im.Inbound
		byID := map[string]*Inbound{}
		for _, b := range cfg.IM.Slack.Bots {
			// url_private files live on Slack's file host; a configured apiBase (a test fake,
			// a proxy) may serve them, so its host is allowed like a OneBot endpoint.
			media, err := d.Media(ctx, b.APIBase)
			if err != nil {
				return in, err
			}
			ib, err := NewInbound(InboundOptions{Bot: b, Sink: d.Sink, Media: media, JS: d.JS, Owner: d.Owner, Log: d.Log})
			if err != nil {
				return in, err
			}
			byID[b.ID] = ib
			in.HTTP = in.HTTP || IsEvents(b)
			in.Run = append(in.Run, func(ctx context.Context) { _ = ib.Run(d.Track(ctx, Platform, b.ID, IsEvents(b))) })
		}
		if in.HTTP {
			Routes(d.Mux, byID)
		}
		return in, nil
	},
	NewSender: func(ctx context.Context, cfg *config.Config, d im.SenderDeps) (im.Sender, error) {
		bots := cfg.IM.Slack.Bots
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
		return im.Previewers(cfg.IM.Slack.Bots, func(ctx context.Context, b config.SlackBot) error {
			return RunPreviewer(ctx, PreviewerOptions{Bot: b, NC: d.NC, JS: d.JS, Owner: d.Owner, Log: d.Log})
		})
	},
}
