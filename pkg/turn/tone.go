package turn

import (
	"strings"
	"unicode"

	"github.com/agentbus/agentbus/pkg/llm"
)

// The seed's ToneDetector (消息情绪感知, ai.agent.toneAwareness, default on): the tone of the
// user's message, read from words, emoji and punctuation, becomes a short hint in the system
// prompt so that the model answers a frustrated user calmly and a hurried one briefly. A
// message with no clear tone adds nothing.

// Tones detectTone reports.
const (
	ToneFrustrated = "frustrated"
	ToneSad        = "sad"
	ToneUrgent     = "urgent"
	ToneHappy      = "happy"
)

// toneWords are the markers of each tone, checked in this order (the first tone with a
// marker wins: frustration matters most to the answer).
var toneWords = []struct {
	tone  string
	words []string
}{
	{ToneFrustrated, []string{"生气", "气死", "烦死", "好烦", "垃圾", "什么鬼", "离谱", "无语", "又不行", "还是不行", "怎么还", "破玩意",
		"wtf", "angry", "annoyed", "annoying", "frustrat", "useless", "ridiculous", "still broken", "still not working", "doesn't work again", "😡", "🤬", "😤"}},
	{ToneSad, []string{"难过", "伤心", "想哭", "郁闷", "失望", "心累", "崩溃", "sad", "upset", "depressed", "heartbroken", "😢", "😭", "😞"}},
	{ToneUrgent, []string{"紧急", "十万火急", "赶紧", "马上", "尽快", "快点", "急急", "asap", "urgent", "immediately", "right now", "hurry", "🚨"}},
	{ToneHappy, []string{"太好了", "哈哈", "开心", "太棒", "好耶", "谢谢你", "awesome", "amazing", "yay", "thank you so much", "🎉", "😄", "😁", "🥳"}},
}

// toneHints are the system prompt lines per tone.
var toneHints = map[string]string{
	ToneFrustrated: "The user sounds frustrated. Acknowledge the problem in a few words, stay calm and factual, and go straight to what fixes it.",
	ToneSad:        "The user sounds sad or upset. Be warm and considerate; no jokes.",
	ToneUrgent:     "The user is in a hurry. Answer first and briefly; details after, if at all.",
	ToneHappy:      "The user is in a good mood. A light, friendly tone fits.",
}

// detectTone returns the tone of text, or "" when it has none clearly. Besides the markers,
// several exclamation or question marks in a row, or a message mostly in capital letters
// (at least 12 letters), read as frustration.
func detectTone(text string) string {
	t := strings.ToLower(text)
	for _, tw := range toneWords {
		for _, w := range tw.words {
			if strings.Contains(t, w) {
				return tw.tone
			}
		}
	}
	if strings.Contains(text, "!!!") || strings.Contains(text, "！！！") || strings.Contains(text, "???") || strings.Contains(text, "？？？") {
		return ToneFrustrated
	}
	upper, letters := 0, 0
	for _, r := range text {
		if r < unicode.MaxASCII && unicode.IsLetter(r) {
			letters++
			if unicode.IsUpper(r) {
				upper++
			}
		}
	}
	if letters >= 12 && upper*10 >= letters*8 {
		return ToneFrustrated
	}
	return ""
}

// toneSection is the system prompt section for the turn's input ("" when tone awareness is
// off or the input has no clear tone).
// on is Options.NoToneHints negated (ai.agent.toneAwareness).
func toneSection(on bool, input []llm.Message) string {
	if !on {
		return ""
	}
	var b strings.Builder
	for _, m := range input {
		if m.Role == llm.RoleUser {
			b.WriteString(m.TextContent())
			b.WriteByte('\n')
		}
	}
	tone := detectTone(b.String())
	if tone == "" {
		return ""
	}
	return "\n## Tone of the user's message\n" + toneHints[tone] + "\n"
}
