package builtin

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbus/agentbus/pkg/netguard"
	"github.com/agentbus/agentbus/pkg/skills"
	"github.com/agentbus/agentbus/pkg/tools"
)

type askArgs struct {
	Question string   `json:"question" jsonschema:"the question for the user (or the owner, for approvals)"`
	Options  []string `json:"options,omitempty" jsonschema:"suggested answers"`
}

// askUserTool implements the ask_user contract: the result's Details are tools.AskDetails
// ({"ask": "...", "options": [...]}); the pipeline ends the turn, sends the question to the
// chat and the answer arrives as the user's next message.
func askUserTool() tools.Tool {
	return tools.MustNew("ask_user", "Ask the user a question and wait for the answer (also used to get the owner's approval for a command). End your turn after calling it.",
		func(ctx context.Context, c tools.Call, a askArgs) (tools.Result, error) {
			if strings.TrimSpace(a.Question) == "" {
				return tools.ErrorResult("question is required"), nil
			}
			return tools.AskResult(strings.TrimSpace(a.Question), a.Options...), nil
		}, tools.WithKeywords("ask", "confirm", "question", "确认", "询问"), tools.WithSource("builtin"))
}

type skillTools struct {
	store       *skills.Store
	dir         string
	guard       *netguard.Guard
	sizeHint    string
	maxChars    int
	installRole []string
}

type activateArgs struct {
	Name string `json:"name" jsonschema:"the skill's name"`
}

// SkillDetails are the Details of an activate_skill result: the pipeline may add Tools to the
// turn's tool list.
type SkillDetails struct {
	Skill string   `json:"skill"`
	Tools []string `json:"tools,omitempty"`
	Size  string   `json:"size"`
}

func (s skillTools) activate() tools.Tool {
	return tools.MustNew("activate_skill", "Load a skill's instructions (see the skills list in the system prompt) and follow them.",
		func(ctx context.Context, c tools.Call, a activateArgs) (tools.Result, error) {
			sk, err := s.store.Get(strings.TrimSpace(a.Name))
			if err != nil {
				var names []string
				for _, k := range s.store.List() {
					names = append(names, k.Name)
				}
				return tools.ErrorResult("%v; available skills: %s", err, strings.Join(names, ", ")), nil
			}
			// The turn worker resolved the model's harness (modelHarness, modelSizeHint, the
			// id); a caller that sent none gets this worker's inference from the id.
			size := c.Env.ModelSize
			if size != skills.SizeSmall && size != skills.SizeMedium && size != skills.SizeLarge {
				size = skills.ModelSize(c.Env.ModelID, s.sizeHint)
			}
			maxChars := s.maxChars
			if c.Env.SkillChars > 0 {
				maxChars = c.Env.SkillChars
			}
			var b strings.Builder
			fmt.Fprintf(&b, "# Skill: %s\n%s\n\n%s", sk.Name, sk.Description, sk.Instructions(size, maxChars))
			if len(sk.Tools) > 0 {
				fmt.Fprintf(&b, "\n\nTools for this skill: %s", strings.Join(sk.Tools, ", "))
			}
			return tools.Result{Content: tools.TextResult(b.String()).Content,
				Details: details(SkillDetails{Skill: sk.Name, Tools: sk.Tools, Size: size})}, nil
		}, tools.Idempotent(), tools.WithKeywords("skill", "技能"), tools.WithSource("builtin"))
}

type installArgs struct {
	URL       string `json:"url" jsonschema:"http(s) URL of a SKILL.md file"`
	Overwrite bool   `json:"overwrite,omitempty" jsonschema:"replace an installed skill of the same name"`
}

// githubRaw turns a github.com blob URL into its raw file URL.
func githubRaw(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host != "github.com" {
		return raw
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) >= 5 && parts[2] == "blob" {
		return "https://raw.githubusercontent.com/" + parts[0] + "/" + parts[1] + "/" + strings.Join(parts[3:], "/")
	}
	return raw
}

const maxSkillBytes = 256 << 10

func (s skillTools) install() tools.Tool {
	return tools.MustNew("install_skill", "Download a SKILL.md from a URL and install it into the skills directory; then activate it with activate_skill.",
		func(ctx context.Context, c tools.Call, a installArgs) (tools.Result, error) {
			src := githubRaw(strings.TrimSpace(a.URL))
			res, err := s.guard.Fetch(ctx, src, netguard.FetchOptions{MaxBytes: maxSkillBytes, Accept: "text/markdown,text/plain,*/*;q=0.5"})
			if err != nil {
				if errors.Is(err, netguard.ErrBlocked) {
					return tools.ErrorResult("install_skill refused %s: %v", a.URL, err), nil
				}
				return tools.ErrorResult("install_skill: download %s: %v", a.URL, err), nil
			}
			if res.Status != 200 {
				return tools.ErrorResult("install_skill: %s answered HTTP %d", res.URL, res.Status), nil
			}
			if res.Truncated {
				return tools.ErrorResult("install_skill: %s is larger than %d bytes; not a SKILL.md", res.URL, maxSkillBytes), nil
			}
			sk, err := skills.Parse(res.URL, res.Body)
			if err != nil {
				return tools.ErrorResult("install_skill: %v", err), nil
			}
			dir := filepath.Join(s.dir, sk.Name)
			target := filepath.Join(dir, skills.FileName)
			if _, err := os.Stat(target); err == nil && !a.Overwrite {
				return tools.ErrorResult("skill %q is already installed; set overwrite to replace it", sk.Name), nil
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return tools.ErrorResult("install_skill: %v", err), nil
			}
			tmp, err := os.CreateTemp(dir, ".SKILL.md.*")
			if err != nil {
				return tools.ErrorResult("install_skill: %v", err), nil
			}
			_, werr := tmp.Write(res.Body)
			if cerr := tmp.Close(); werr == nil {
				werr = cerr
			}
			if werr == nil {
				werr = os.Rename(tmp.Name(), target)
			}
			if werr != nil {
				os.Remove(tmp.Name())
				return tools.ErrorResult("install_skill: write %s: %v", target, werr), nil
			}
			if _, err := s.store.Refresh(); err != nil {
				// Other skills' problems do not undo this install; just make sure ours loaded.
				if _, gerr := s.store.Get(sk.Name); gerr != nil {
					return tools.ErrorResult("install_skill: installed %s but it did not load: %v", target, err), nil
				}
			}
			msg := fmt.Sprintf("Installed skill %q (%s) from %s. Call activate_skill with name %q to use it.", sk.Name, sk.Description, res.URL, sk.Name)
			return tools.Result{Content: tools.TextResult(msg).Content,
				Details: details(map[string]any{"skill": sk.Name, "path": target, "source": res.URL})}, nil
		}, tools.WithRoles(s.installRole...), tools.WithKeywords("install", "skill", "安装", "技能"), tools.WithSource("builtin"))
}
