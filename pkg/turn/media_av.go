package turn

import (
	"context"
	"encoding/base64"
	"mime"
	"path"
	"strings"

	"github.com/agentbus/agentbus/pkg/llm"
)

// Audio and video for models that take them (seed 多模态支持: audio, record, voice and video
// segments become the model's audio / video parts). The message keeps its text description
// ("[voice message: media://ab.wav (wav, 3s)]", mediaText); for a model whose input lists
// audio or video, the media the description references in the media object store (what ingest
// stored from an upload) is added after it as an llm.Audio / llm.Video block, which the
// provider sends as its own part (OpenAI chat completions: input_audio, wav and mp3 only;
// Gemini: inline data). A reference by URL stays text, as the seed says ("若仅有 url，会退化
// 为文本描述传给模型"): a model cannot be handed an arbitrary link as audio.

// avPrefixes map the description prefixes of mediaText to the input kind they carry.
var avPrefixes = []struct{ prefix, kind string }{
	{"[audio: ", llm.InputAudio},
	{"[voice message: ", llm.InputAudio},
	{"[video: ", llm.InputVideo},
}

// inlineAV adds audio / video blocks for the media:// references of input's descriptions that
// model accepts. Media that cannot be read stays described only.
func (w *Worker) inlineAV(ctx context.Context, model *llm.Model, input []llm.Message) []llm.Message {
	if w.media == nil || !(model.Accepts(llm.InputAudio) || model.Accepts(llm.InputVideo)) {
		return input
	}
	out := make([]llm.Message, len(input))
	for i, m := range input {
		var content []llm.Content
		for _, c := range m.Content {
			content = append(content, c)
			if c.Type != llm.ContentText {
				continue
			}
			for _, p := range avPrefixes {
				rest, ok := strings.CutPrefix(c.Text, p.prefix)
				if !ok || !model.Accepts(p.kind) || !strings.HasPrefix(rest, mediaScheme) {
					continue
				}
				ref, _, _ := strings.Cut(rest, " ")
				ref = strings.TrimSuffix(ref, "]")
				data, mt, err := w.readMedia(ctx, strings.TrimPrefix(ref, mediaScheme))
				if err != nil {
					w.log.Warn(p.kind+" not passed to the model", "ref", ref, "err", err)
					break
				}
				if mt == "" || mt == "application/octet-stream" {
					mt = mime.TypeByExtension(path.Ext(ref))
				}
				if mt == "" {
					mt = p.kind + "/" + strings.TrimPrefix(path.Ext(ref), ".")
				}
				if p.kind == llm.InputAudio {
					content = append(content, llm.Audio(base64.StdEncoding.EncodeToString(data), mt))
				} else {
					content = append(content, llm.Video(base64.StdEncoding.EncodeToString(data), mt))
				}
				break
			}
		}
		m.Content = content
		out[i] = m
	}
	return out
}
