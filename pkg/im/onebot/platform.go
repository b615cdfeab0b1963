package onebot

import (
	"context"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/im"
)

// Adapter registers OneBot v11 (im.onebot.bots) with the composition root.
var Adapter = im.Platform{
	Name: Platform,
	Bots: func(cfg *config.Config) []im.Bot {
		return im.BotsOf(cfg.IM.OneBot.Bots, func(b config.OneBotBot) im.Bot { return im.Bot{ID: b.ID, Masters: b.Masters, Trusted: b.Trusted} })
	},
	NewInbound: func(ctx context.Context, cfg *config.Config, d im.InboundDeps) (im.Inbound, error) {
		var in im.Inbound
		bots := cfg.IM.OneBot.Bots
		if len(bots) == 0 {
			return in, nil
		}
		ledger, err := d.Ledger(ctx)
		if err != nil {
			return in, err
		}
		byID := map[string]*Inbound{}
		for _, b := range bots {
			// The implementation serves its images on its own (often loopback) address.
			media, err := d.Media(ctx, b.APIBase)
			if err != nil {
				return in, err
			}
			ib, err := NewInbound(InboundOptions{Bot: b, Sink: d.Sink, Media: media, NC: d.NC, JS: d.JS,
				Owner: d.Owner, Log: d.Log, Ledger: ledger})
			if err != nil {
				return in, err
			}
			byID[b.ID] = ib
			in.HTTP = in.HTTP || NeedsHTTP(b)
			in.Run = append(in.Run, func(ctx context.Context) { _ = ib.Run(d.Track(ctx, Platform, b.ID, NeedsHTTP(b))) })
		}
		if in.HTTP {
			Routes(d.Mux, byID)
		}
		return in, nil
	},
	NewSender: func(ctx context.Context, cfg *config.Config, d im.SenderDeps) (im.Sender, error) {
		bots := cfg.IM.OneBot.Bots
		if len(bots) == 0 {
			return nil, nil
		}
		media, ledger, err := d.Open(ctx)
		if err != nil {
			return nil, err
		}
		return NewSender(bots, d.NC, nil, media, ledger)
	},
}
