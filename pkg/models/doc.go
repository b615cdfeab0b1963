// Package models is agentbus's model management (seed "模型自动发现与智能选择", "自动降级",
// "小模型适配"): it fills an llm.Registry with what providers serve and decides which model
// serves a turn.
//
//   - Discovery: Discover lists a provider's models (GET {baseUrl}/models for OpenAI-compatible
//     servers, /api/tags + /api/show for Ollama, Anthropic /v1/models, Google /v1beta/models).
//     Manager restores cached lists at start (FileCache in the data dir, or KVCache on KV
//     models), refreshes in the background and calls Registry.SetModels with the list ranked
//     best first. An explicit ai.providers.<alias>.models list is the allowlist and skips
//     discovery.
//   - Tiers: a 0–100 score per model id from an ordered pattern table (DefaultTiers, the seed's
//     Tier table completed); SelectModel / SelectModels pick the best chat or vision model.
//   - Fallback: a stream wrapper that, when a call fails before any content for a rate limit,
//     overload or unavailability, streams the next candidate and logs "fallback: A→B".
//   - ResolveHarness: the effective per-model harness (built-in size defaults, then
//     ai.agent.modelHarness providerPatterns and models).
//   - Route: ai.agents bindings (provider, model, priority, match.hasMedia) to a model.
//   - Report: the /models text.
//
// See docs/models.md for the tables and the rules chosen where the seed is silent.
package models
