package output

// cardPlatforms are the platforms whose adapters render card segments with buttons
// (webhook: the card goes to the callback as a structured segment). OneBot/QQ, the console
// and unknown platforms get the card as plain text, so their chats are not told about cards.
var cardPlatforms = map[string]bool{
	"telegram": true, "discord": true, "slack": true, "matrix": true, "webhook": true,
}

// RendersCards reports whether platform's adapter renders cards natively.
func RendersCards(platform string) bool { return cardPlatforms[platform] }

// CardPrompt is the system prompt's section body about cards (title "Cards").
const CardPrompt = "To offer choices or show a summary, you may write a card: a fenced block with the info string `card` holding one JSON object, " +
	"e.g.\n```card\n{\"title\": \"Deploy v1.4?\", \"text\": \"Staging is green.\", \"fields\": [{\"name\": \"env\", \"value\": \"prod\", \"inline\": true}], " +
	"\"buttons\": [{\"label\": \"Deploy\", \"value\": \"deploy v1.4\"}, {\"label\": \"Changelog\", \"url\": \"https://example.com/changes\"}]}\n```\n" +
	"A button has a label and either an http(s) url or a value of at most 64 bytes; at most 10 buttons and 25 fields. " +
	"When a user presses a value button you receive a message \"[pressed button: <label>] <value>\" from them."

// PromptFor is the card section body for a chat on platform, or "" where cards are not
// rendered.
func PromptFor(platform string) string {
	if RendersCards(platform) {
		return CardPrompt
	}
	return ""
}
