package webconsole

import (
	"net/url"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentbus/agentbus/pkg/config"
)

// Redacted is what /config shows instead of a secret.
const Redacted = "[redacted]"

// RedactedYAML renders the effective configuration with every secret replaced: values of keys
// that name a credential (…key, …secret, …token, password, nkeySeed, creds), every header value,
// the user info of URLs, and, as a second net, any value that contains one of cfg.Secrets()
// (API keys and tokens from the environment included).
func RedactedYAML(cfg *config.Config) (string, error) {
	var n yaml.Node
	if err := n.Encode(cfg); err != nil {
		return "", err
	}
	secrets := cfg.Secrets()
	redactNode(&n, "", false, secrets)
	b, err := yaml.Marshal(&n)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func secretKey(k string) bool {
	k = strings.ToLower(k)
	switch {
	case k == "password", k == "creds", k == "nkeyseed", k == "token", k == "secret":
		return true
	case strings.HasSuffix(k, "apikey"), strings.HasSuffix(k, "secret"), strings.HasSuffix(k, "token"),
		strings.HasSuffix(k, "password"), strings.HasSuffix(k, "privatekey"), strings.HasSuffix(k, "accesskey"):
		return true
	}
	return false
}

func redactNode(n *yaml.Node, key string, all bool, secrets []string) {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			redactNode(c, key, all, secrets)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			redactNode(n.Content[i+1], k, all || secretKey(k) || strings.EqualFold(k, "headers") || strings.EqualFold(k, "env") || strings.EqualFold(k, "extra"), secrets)
		}
	case yaml.ScalarNode:
		if n.Value == "" {
			return
		}
		if all || secretKey(key) {
			n.Value, n.Tag, n.Style = Redacted, "!!str", 0
			return
		}
		for _, s := range secrets {
			if len(s) >= 4 && strings.Contains(n.Value, s) {
				n.Value, n.Tag, n.Style = Redacted, "!!str", 0
				return
			}
		}
		if strings.Contains(n.Value, "://") && strings.Contains(n.Value, "@") {
			parts := strings.Split(n.Value, ",")
			for i, p := range parts {
				if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
					u.User = url.User(Redacted)
					parts[i] = u.String()
				}
			}
			n.Value = strings.Join(parts, ",")
		}
	}
}
