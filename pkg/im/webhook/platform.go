// Package webhook is the signed-webhook platform: bots under im.webhook.bots receive replies
// as signed POSTs to their callback (Sender) and send messages as signed POSTs to
// /webhook/{bot}, which the ingest role serves (pkg/ingest.WebhookHandler: it shares ingest's
// HTTP bounds, rate limits and dead letters, so the handler stays there). The wire format and
// the signatures are pkg/webhook's, which hooks use too.
package webhook

import (
	"context"

	"github.com/agentbus/agentbus/pkg/config"
	"github.com/agentbus/agentbus/pkg/events"
	"github.com/agentbus/agentbus/pkg/im"
)

// Platform is the platform name of the webhook bots.
const Platform = "webhook"

// Adapter registers the webhook platform with the composition root. Its inbound half is
// ingest's WebhookHandler (see the package doc), so NewInbound is nil.
var Adapter = im.Platform{
	Name: Platform,
	Bots: func(cfg *config.Config) []im.Bot {
		return im.BotsOf(cfg.IM.Webhook.Bots, func(b config.WebhookBot) im.Bot { return im.Bot{ID: b.ID, Masters: b.Masters, Trusted: b.Trusted} })
	},
	NewSender: func(ctx context.Context, cfg *config.Config, d im.SenderDeps) (im.Sender, error) {
		// Always registered: an outbound for a webhook bot that is not configured is then an
		// unknown bot, not a platform without a sender.
		client := d.HTTPClient
		if client == nil {
			client = DefaultHTTPClient(d.Concurrency)
		}
		s := NewSender(client, cfg.IM.Webhook.Bots)
		if d.JS != nil {
			if media, err := d.JS.ObjectStore(ctx, events.ObjectMedia); err == nil {
				s.WithMedia(media)
			}
		}
		return s, nil
	},
}
