package app

import (
	"github.com/agentbus/agentbus/pkg/im"
	"github.com/agentbus/agentbus/pkg/im/console"
	"github.com/agentbus/agentbus/pkg/im/discord"
	"github.com/agentbus/agentbus/pkg/im/matrix"
	"github.com/agentbus/agentbus/pkg/im/onebot"
	"github.com/agentbus/agentbus/pkg/im/slack"
	"github.com/agentbus/agentbus/pkg/im/telegram"
	"github.com/agentbus/agentbus/pkg/im/webhook"
)

// Platforms are the IM platforms this build knows: a new platform is its folder under pkg/im
// (with its Adapter value) plus one line here.
var Platforms = im.NewRegistry(
	webhook.Adapter,
	console.Adapter,
	onebot.Adapter,
	telegram.Adapter,
	discord.Adapter,
	slack.Adapter,
	matrix.Adapter,
)
